// SPDX-License-Identifier: MIT
// expect: In must be DType::f32, DType::f16 or DType::bf16
#include <tilekernels/aura/cache_write.hpp>
tilekernels::aura::CacheWriteConfig<tilekernels::aura::PagedCacheConfig<128, 16, 4, 4>, tilekernels::DType::u32> config;
