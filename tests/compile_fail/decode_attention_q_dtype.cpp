// SPDX-License-Identifier: MIT
// expect: Q must be DType::f32, DType::f16 or DType::bf16
#include <tilekernels/aura/decode_attention.hpp>
tilekernels::aura::DecodeAttentionConfig<tilekernels::aura::PagedCacheConfig<128, 16, 4, 4>, tilekernels::DType::u32> config;
