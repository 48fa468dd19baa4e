// SPDX-License-Identifier: MIT
// expect: ChunkOConfig: BT must be 16, 32 or 64
#include <tilekernels/gdn/chunk_o.hpp>
tilekernels::gdn::ChunkOConfig<48, 128, 128> config;
