// SPDX-License-Identifier: MIT
// expect: BT must be 16, 32 or 64
#include <tilekernels/gdn/recompute_wu.hpp>
tilekernels::gdn::RecomputeWUConfig<48, 128, 128> config;
