// SPDX-License-Identifier: MIT
// expect: HadamardEncode: split codes are encoded by Encode
#include <tilekernels/aura/encode.hpp>
tilekernels::aura::HadamardEncode<tilekernels::aura::EncodeConfig<128, 3, tilekernels::DType::bf16, 64>>* kernel =
    nullptr;
auto size = sizeof(*kernel);
