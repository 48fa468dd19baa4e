// SPDX-License-Identifier: MIT
// expect: centred keys need a coded K
#include <tilekernels/aura/paged_cache.hpp>
tilekernels::aura::PagedCacheConfig<128, 16, 16, 4>::centred config;
