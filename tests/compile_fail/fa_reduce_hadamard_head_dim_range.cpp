// SPDX-License-Identifier: MIT
// expect: HeadDim must be 64, 128, 256 or 512
#include <tilekernels/aura/fa_reduce_hadamard.hpp>
tilekernels::aura::FaReduceHadamardConfig<1024> config;
