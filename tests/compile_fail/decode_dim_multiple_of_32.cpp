// SPDX-License-Identifier: MIT
// expect: DecodeConfig: Dim must be a multiple of 32
#include <tilekernels/aura/decode.hpp>
tilekernels::aura::DecodeConfig<48, 4> config;
