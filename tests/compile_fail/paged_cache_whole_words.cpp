// SPDX-License-Identifier: MIT
// expect: Dim \* KBits must be a multiple of 32
#include <tilekernels/aura/paged_cache.hpp>
tilekernels::aura::PagedCacheConfig<80, 16, 3, 4, tilekernels::aura::Rotation::dense> config;
