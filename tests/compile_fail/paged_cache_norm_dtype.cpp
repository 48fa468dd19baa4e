// SPDX-License-Identifier: MIT
// expect: Norm must be DType::f32 or DType::f16
#include <tilekernels/aura/paged_cache.hpp>
tilekernels::aura::PagedCacheConfig<128, 16, 4, 4, tilekernels::aura::Rotation::hadamard, tilekernels::DType::bf16> config;
