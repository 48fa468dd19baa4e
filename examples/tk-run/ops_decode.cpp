// SPDX-License-Identifier: MIT
// tk-run op aura.decode.
#include <tilekernels/aura/decode.hpp>

#include "op.hpp"

namespace {

using namespace tkrun;
using tilekernels::DType;
using tilekernels::Tensor;

void run_decode(tilekernels::Context& ctx, Invocation& inv) {
  const DType out_dtype = float_dtype_param(inv, "out_dtype");
  const std::int64_t dim = inv.int_param("dim"), bits = inv.int_param("bits");
  with_value<32, 64, 96, 128, 160, 192, 256, 384, 512>("dim", dim, [&](auto d) {
    with_value<2, 3, 4, 6, 8>("bits", bits, [&](auto b) {
      with_float_dtype(out_dtype, [&](auto t) {
        using Config = tilekernels::aura::DecodeConfig<decltype(d)::value, decltype(b)::value, decltype(t)::value>;
        const Tensor packed = inv.tensor(ctx, "packed", DType::u32);
        const Tensor norms = inv.tensor(ctx, "norms", DType::f32);
        const Tensor rotation = inv.tensor(ctx, "rotation", DType::f32);
        const Tensor codebook = inv.tensor(ctx, "codebook", DType::f32);
        const std::int64_t rows = packed.shape().at(0);  // inputs have at least one dimension
        Tensor out = inv.alloc(ctx, out_dtype, {rows, dim}, "output 'output'");
        tilekernels::aura::Decode<Config>(ctx).run({packed, norms, rotation, codebook, out});
        inv.put("output", {rows, dim}, out.download_floats());
      });
    });
  });
}

const Registrar decode{Op{
    "aura.decode",
    "decode: output[r] = norms[r] * R^T codebook[codes of row r]",
    {{"dim", "128", "row length: 32, 64, 96, 128, 160, 192, 256, 384 or 512"},
     {"bits", "4", "bits per code: 2, 3, 4, 6 or 8"},
     {"out_dtype", "f32", "output dtype (f32, f16, bf16); written to the file widened to f32"}},
    {{"packed", "u32", "[rows, dim * bits / 32]"},
     {"norms", "f32", "[rows]"},
     {"rotation", "f32", "[dim, dim]"},
     {"codebook", "f32", "[2^bits]"}},
    {{"output", "out_dtype", "[rows, dim]"}},
    run_decode}};

}  // namespace
