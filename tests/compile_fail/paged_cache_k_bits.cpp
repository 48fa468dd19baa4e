// SPDX-License-Identifier: MIT
// expect: KBits must be 2, 3, 4, 6, 8 or 16 \(raw\)
#include <tilekernels/aura/paged_cache.hpp>
tilekernels::aura::PagedCacheConfig<128, 16, 5, 4> config;
