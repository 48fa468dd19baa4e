// SPDX-License-Identifier: MIT
// expect: the cache format's keys must be centred
#include <tilekernels/aura/key_centre.hpp>
using Plain = tilekernels::aura::PagedCacheConfig<128, 16, 4, 4>;
using Kernel = tilekernels::aura::KeyCentre<tilekernels::aura::CacheWriteConfig<Plain>>;
static_assert(sizeof(Kernel) > 0);
