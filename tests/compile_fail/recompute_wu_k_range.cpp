// SPDX-License-Identifier: MIT
// expect: K must be in \[16, 256\]
#include <tilekernels/gdn/recompute_wu.hpp>
tilekernels::gdn::RecomputeWUConfig<64, 512, 128> config;
