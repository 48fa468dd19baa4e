// SPDX-License-Identifier: MIT
// tk-run op aura.fa_reduce_hadamard.
#include <tilekernels/aura/fa_reduce_hadamard.hpp>

#include "op.hpp"

namespace {

using namespace tkrun;
using tilekernels::DType;
using tilekernels::Tensor;

void run_fa_reduce_hadamard(tilekernels::Context& ctx, Invocation& inv) {
  const DType partial = float_dtype_param(inv, "partial_dtype");
  const DType out_dtype = float_dtype_param(inv, "out_dtype");
  const std::int64_t head_dim = inv.int_param("head_dim");
  const std::int64_t nwg = inv.int_param("nwg");
  if (nwg < 1 || nwg > 32) throw UsageError("parameter 'nwg' must be in [1, 32], got " + std::to_string(nwg));
  with_value<64, 128, 256, 512>("head_dim", head_dim, [&](auto d) {
    const Shape o_shape = inv.input_shape("o_partials");
    if (o_shape.size() != 3 || o_shape[1] != nwg || o_shape[2] != head_dim)
      throw UsageError("input 'o_partials': expected shape [rows, " + std::to_string(nwg) + ", " +
                       std::to_string(head_dim) + "], got " + tilekernels::shape_string(o_shape));
    const std::int64_t rows = o_shape[0];
    const auto o = inv.upload(ctx, partial, o_shape, inv.floats("o_partials", o_shape), "input 'o_partials'");
    const auto m = inv.upload(ctx, partial, {rows, nwg}, inv.floats("m_partials", {rows, nwg}), "input 'm_partials'");
    const auto l = inv.upload(ctx, partial, {rows, nwg}, inv.floats("l_partials", {rows, nwg}), "input 'l_partials'");
    const auto signs = inv.upload(ctx, DType::f32, {head_dim}, inv.floats("signs", {head_dim}), "input 'signs'");
    Tensor out = inv.alloc(ctx, out_dtype, {rows, head_dim}, "output 'output'");
    with_float_dtype(partial, [&](auto p) {
      with_float_dtype(out_dtype, [&](auto od) {
        using Config =
            tilekernels::aura::FaReduceHadamardConfig<decltype(d)::value, decltype(p)::value, decltype(od)::value>;
        tilekernels::aura::FaReduceHadamard<Config>(ctx).run({o, m, l, signs, out});
      });
    });
    inv.put("output", {rows, head_dim}, out.download_floats());
  });
}

const Registrar fa_reduce_hadamard{Op{
    "aura.fa_reduce_hadamard",
    "split-K merge of partial attention (o, m, l) per row, then the randomised Hadamard undo: "
    "output = signs * (H x) / sqrt(head_dim)",
    {{"head_dim", "256", "head dimension: 64, 128, 256 or 512"},
     {"nwg", "8", "partials per row, 1..32"},
     {"partial_dtype", "f32", "dtype the partials are stored in (f32, f16, bf16); inputs are rounded to it"},
     {"out_dtype", "f32", "output dtype (f32, f16, bf16); written to the file widened to f32"}},
    {{"o_partials", "partial_dtype", "[rows, nwg, head_dim]"},
     {"m_partials", "partial_dtype", "[rows, nwg]"},
     {"l_partials", "partial_dtype", "[rows, nwg]"},
     {"signs", "f32", "[head_dim]"}},
    {{"output", "out_dtype", "[rows, head_dim]"}},
    run_fa_reduce_hadamard}};

}  // namespace
