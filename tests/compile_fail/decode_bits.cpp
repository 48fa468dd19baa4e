// SPDX-License-Identifier: MIT
// expect: DecodeConfig: Bits must be 2, 3, 4, 6 or 8
#include <tilekernels/aura/decode.hpp>
tilekernels::aura::DecodeConfig<128, 1> config;
