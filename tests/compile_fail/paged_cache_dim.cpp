// SPDX-License-Identifier: MIT
// expect: Dim must be 64, 80, 96, 128 or 256
#include <tilekernels/aura/paged_cache.hpp>
tilekernels::aura::PagedCacheConfig<48, 16, 4, 4> config;
