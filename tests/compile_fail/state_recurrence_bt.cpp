// SPDX-License-Identifier: MIT
// expect: StateRecurrenceConfig: BT must be 16, 32 or 64
#include <tilekernels/gdn/state_recurrence.hpp>
tilekernels::gdn::StateRecurrenceConfig<128, 128, 128> config;
