// SPDX-License-Identifier: MIT
// expect: split codes \(HiDims > 0\) need Bits 2 or 3
#include <tilekernels/aura/encode.hpp>
tilekernels::aura::EncodeConfig<128, 4, tilekernels::DType::bf16, 64> config;
