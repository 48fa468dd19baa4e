// SPDX-License-Identifier: MIT
// expect: ChunkOConfig: K must be 64, 128 or 256
#include <tilekernels/gdn/chunk_o.hpp>
tilekernels::gdn::ChunkOConfig<64, 96, 128> config;
