// SPDX-License-Identifier: MIT
// expect: StateRecurrenceConfig: K must be 64, 128 or 256
#include <tilekernels/gdn/state_recurrence.hpp>
tilekernels::gdn::StateRecurrenceConfig<64, 512, 128> config;
