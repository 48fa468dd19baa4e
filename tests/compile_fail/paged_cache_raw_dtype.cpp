// SPDX-License-Identifier: MIT
// expect: Raw must be DType::bf16 or DType::f16
#include <tilekernels/aura/paged_cache.hpp>
tilekernels::aura::PagedCacheConfig<128, 16, 16, 16, tilekernels::aura::Rotation::hadamard, tilekernels::DType::f32, tilekernels::DType::f32> config;
