// SPDX-License-Identifier: MIT
// expect: Dim must be in \[4, 1024\]
#include <tilekernels/aura/flash_pass2.hpp>
tilekernels::aura::FlashPass2Config<2048> config;
