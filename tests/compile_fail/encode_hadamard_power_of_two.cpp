// SPDX-License-Identifier: MIT
// expect: HadamardEncode: Dim must be a power of two
#include <tilekernels/aura/encode.hpp>
void f(tilekernels::Context& ctx) { tilekernels::aura::HadamardEncode<tilekernels::aura::EncodeConfig<96, 4>> kernel(ctx); }
