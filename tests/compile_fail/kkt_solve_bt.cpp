// SPDX-License-Identifier: MIT
// expect: KKTSolveConfig: BT must be 16, 32 or 64
#include <tilekernels/gdn/kkt_solve.hpp>
tilekernels::gdn::KKTSolveConfig<8, 128> config;
