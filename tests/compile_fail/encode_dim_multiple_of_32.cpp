// SPDX-License-Identifier: MIT
// expect: EncodeConfig: Dim must be a multiple of 32
#include <tilekernels/aura/encode.hpp>
tilekernels::aura::EncodeConfig<80, 4> config;
