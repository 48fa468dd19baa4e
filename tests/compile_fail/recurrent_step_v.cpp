// SPDX-License-Identifier: MIT
// expect: RecurrentStepConfig: V must be 64, 128 or 256
#include <tilekernels/gdn/recurrent_step.hpp>
tilekernels::gdn::RecurrentStepConfig<128, 32> config;
