// SPDX-License-Identifier: MIT
// tk-run op aura.flash_pass2.
#include <tilekernels/aura.hpp>

#include "op.hpp"

namespace {

using namespace tkrun;
using tilekernels::DType;
using tilekernels::Tensor;

void run_flash_pass2(tilekernels::Context& ctx, Invocation& inv) {
  const DType partial = float_dtype_param(inv, "partial_dtype");
  const DType out_dtype = float_dtype_param(inv, "out_dtype");
  const std::int64_t dim = inv.int_param("dim");
  if (dim != 64 && dim != 80 && dim != 96 && dim != 128 && dim != 256 && dim != 512)
    throw UsageError("parameter 'dim' must be 64, 80, 96, 128, 256 or 512, got " + std::to_string(dim));
  const Shape o_shape = inv.input_shape("o_partials");
  if (o_shape.size() != 3 || o_shape[2] != dim)
    throw UsageError("input 'o_partials': expected shape [q_heads, num_blocks, " + std::to_string(dim) + "], got " +
                     tilekernels::shape_string(o_shape));
  const std::int64_t q = o_shape[0], nb = o_shape[1];
  const auto o = inv.upload(ctx, partial, o_shape, inv.floats("o_partials", o_shape), "input 'o_partials'");
  const auto m = inv.upload(ctx, partial, {q, nb}, inv.floats("m_partials", {q, nb}), "input 'm_partials'");
  const auto l = inv.upload(ctx, partial, {q, nb}, inv.floats("l_partials", {q, nb}), "input 'l_partials'");
  Tensor out = inv.alloc(ctx, out_dtype, {q, dim}, "output 'output'");
  Tensor lse = inv.alloc(ctx, DType::f32, {q}, "output 'lse'");
  with_value<64, 80, 96, 128, 256, 512>("dim", dim, [&](auto d) {
    with_float_dtype(partial, [&](auto p) {
      with_float_dtype(out_dtype, [&](auto od) {
        using Config = tilekernels::aura::FlashPass2Config<decltype(d)::value, decltype(p)::value, decltype(od)::value>;
        tilekernels::aura::FlashPass2<Config>(ctx).run({o, m, l, out, lse.ref()});
      });
    });
  });
  inv.put("output", {q, dim}, out.download_floats());
  inv.put("lse", {q}, lse.download_floats());
}

const Registrar flash_pass2{Op{
    "aura.flash_pass2",
    "split-K merge of partial attention (o, m, l) per query head; output = sum e^(m-M) o / sum e^(m-M) l",
    {{"dim", "128", "head dimension: 64, 80, 96, 128, 256 or 512"},
     {"partial_dtype", "f32", "dtype the partials are stored in (f32, f16, bf16); inputs are rounded to it"},
     {"out_dtype", "bf16", "output dtype (f32, f16, bf16); written to the file widened to f32"}},
    {{"o_partials", "partial_dtype", "[q_heads, num_blocks, dim]"},
     {"m_partials", "partial_dtype", "[q_heads, num_blocks]"},
     {"l_partials", "partial_dtype", "[q_heads, num_blocks]"}},
    {{"output", "out_dtype", "[q_heads, dim]"}, {"lse", "f32", "[q_heads]", true}},
    run_flash_pass2}};

}  // namespace
