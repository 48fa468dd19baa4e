// SPDX-License-Identifier: MIT
// expect: ChunkForwardConfig: BT must be 16, 32 or 64
#include <tilekernels/gdn/chunk_forward.hpp>
tilekernels::gdn::ChunkForwardConfig<48, 128, 128> config;
