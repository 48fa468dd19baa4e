// SPDX-License-Identifier: MIT
// expect: DimsPerLane, when given, must equal ceil\(Dim / 32\)
#include <tilekernels/aura/flash_pass2.hpp>
tilekernels::aura::FlashPass2Config<80, tilekernels::DType::f32, tilekernels::DType::bf16, 2> config;
