// SPDX-License-Identifier: MIT
// expect: RecurrentStepConfig: K must be 64, 128 or 256
#include <tilekernels/gdn/recurrent_step.hpp>
tilekernels::gdn::RecurrentStepConfig<96, 128> config;
