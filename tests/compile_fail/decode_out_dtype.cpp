// SPDX-License-Identifier: MIT
// expect: DecodeConfig: Out must be DType::f32, DType::f16 or DType::bf16
#include <tilekernels/aura/decode.hpp>
tilekernels::aura::DecodeConfig<128, 4, tilekernels::DType::i32> config;
