// SPDX-License-Identifier: MIT
// expect: PageTokens must be a multiple of 16 in \[16, 256\]
#include <tilekernels/aura/paged_cache.hpp>
tilekernels::aura::PagedCacheConfig<128, 24, 4, 4> config;
