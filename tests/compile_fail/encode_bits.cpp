// SPDX-License-Identifier: MIT
// expect: EncodeConfig: Bits must be 2, 3, 4, 6 or 8
#include <tilekernels/aura/encode.hpp>
tilekernels::aura::EncodeConfig<128, 5> config;
