// SPDX-License-Identifier: MIT
// expect: ChunkForwardConfig: K must be 64, 128 or 256
#include <tilekernels/gdn/chunk_forward.hpp>
tilekernels::gdn::ChunkForwardConfig<64, 96, 128> config;
