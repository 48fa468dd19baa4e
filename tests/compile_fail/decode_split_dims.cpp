// SPDX-License-Identifier: MIT
// expect: split codes \(HiDims > 0\) need Bits 2 or 3 and HiDims a multiple of 32
#include <tilekernels/aura/decode.hpp>
tilekernels::aura::DecodeConfig<128, 3, tilekernels::DType::f32, 48> config;
