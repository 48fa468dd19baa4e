// SPDX-License-Identifier: MIT
// expect: K and V must be multiples of 16
#include <tilekernels/gdn/recompute_wu.hpp>
tilekernels::gdn::RecomputeWUConfig<64, 128, 72> config;
