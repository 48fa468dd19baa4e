// SPDX-License-Identifier: MIT
// expect: V must be in \[16, 256\]
#include <tilekernels/gdn/recompute_wu.hpp>
tilekernels::gdn::RecomputeWUConfig<64, 128, 320> config;
