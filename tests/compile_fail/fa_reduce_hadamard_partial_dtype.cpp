// SPDX-License-Identifier: MIT
// expect: Partial must be DType::f32, DType::f16 or DType::bf16
#include <tilekernels/aura/fa_reduce_hadamard.hpp>
tilekernels::aura::FaReduceHadamardConfig<128, tilekernels::DType::u32> config;
