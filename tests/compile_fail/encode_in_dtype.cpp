// SPDX-License-Identifier: MIT
// expect: EncodeConfig: In must be DType::f32, DType::f16 or DType::bf16
#include <tilekernels/aura/encode.hpp>
tilekernels::aura::EncodeConfig<128, 4, tilekernels::DType::u32> config;
