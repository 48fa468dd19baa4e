// SPDX-License-Identifier: MIT
// expect: KKTSolveConfig: K must be 64, 128 or 256
#include <tilekernels/gdn/kkt_solve.hpp>
tilekernels::gdn::KKTSolveConfig<64, 100> config;
