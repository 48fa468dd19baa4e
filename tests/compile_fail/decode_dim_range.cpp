// SPDX-License-Identifier: MIT
// expect: DecodeConfig: Dim must be in \[32, 512\]
#include <tilekernels/aura/decode.hpp>
tilekernels::aura::DecodeConfig<544, 4> config;
