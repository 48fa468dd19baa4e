// SPDX-License-Identifier: MIT
// expect: Dim must be a multiple of 4
#include <tilekernels/aura/flash_pass2.hpp>
tilekernels::aura::FlashPass2Config<82> config;
