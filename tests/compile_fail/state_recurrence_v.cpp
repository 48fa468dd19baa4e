// SPDX-License-Identifier: MIT
// expect: StateRecurrenceConfig: V must be 64, 128 or 256
#include <tilekernels/gdn/state_recurrence.hpp>
tilekernels::gdn::StateRecurrenceConfig<64, 128, 48> config;
