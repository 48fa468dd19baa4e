// SPDX-License-Identifier: MIT
// expect: split keys \(KHiDims > 0\) need KBits 2 or 3
#include <tilekernels/aura/paged_cache.hpp>
tilekernels::aura::PagedCacheConfig<128, 16, 4, 4>::split_keys<64> config;
