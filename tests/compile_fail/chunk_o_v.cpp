// SPDX-License-Identifier: MIT
// expect: ChunkOConfig: V must be 64, 128 or 256
#include <tilekernels/gdn/chunk_o.hpp>
tilekernels::gdn::ChunkOConfig<64, 128, 512> config;
