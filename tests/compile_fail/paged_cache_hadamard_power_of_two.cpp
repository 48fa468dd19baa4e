// SPDX-License-Identifier: MIT
// expect: a Hadamard rotation needs Dim a power of two
#include <tilekernels/aura/paged_cache.hpp>
tilekernels::aura::PagedCacheConfig<96, 16, 4, 4> config;
