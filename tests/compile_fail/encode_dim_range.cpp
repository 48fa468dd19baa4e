// SPDX-License-Identifier: MIT
// expect: EncodeConfig: Dim must be in \[32, 512\]
#include <tilekernels/aura/encode.hpp>
tilekernels::aura::EncodeConfig<1024, 4> config;
