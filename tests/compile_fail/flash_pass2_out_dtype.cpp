// SPDX-License-Identifier: MIT
// expect: Out must be DType::f32, DType::f16 or DType::bf16
#include <tilekernels/aura/flash_pass2.hpp>
tilekernels::aura::FlashPass2Config<128, tilekernels::DType::f32, tilekernels::DType::i32> config;
