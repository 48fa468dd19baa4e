// SPDX-License-Identifier: MIT
// expect: Out must be DType::f32, DType::f16 or DType::bf16
#include <tilekernels/aura/decode_attention.hpp>
tilekernels::aura::DecodeAttentionConfig<tilekernels::aura::PagedCacheConfig<128, 16, 4, 4>, tilekernels::DType::bf16, tilekernels::DType::i32> config;
