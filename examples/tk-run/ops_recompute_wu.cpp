// SPDX-License-Identifier: MIT
// tk-run op gdn.recompute_wu.
#include <tilekernels/gdn/recompute_wu.hpp>

#include "gdn_varlen.hpp"
#include "op.hpp"

namespace {

using namespace tkrun;
using tilekernels::DType;
using tilekernels::Tensor;

void run_recompute_wu(tilekernels::Context& ctx, Invocation& inv) {
  // Every parameter and shape first, before anything is allocated.
  const std::int64_t bt = inv.int_param("bt");
  if (bt != 16 && bt != 32 && bt != 64) throw UsageError("parameter 'bt' must be one of 16, 32, 64, got " + std::to_string(bt));
  const DType a_dtype = float_dtype_param(inv, "a_dtype");
  if (a_dtype == DType::f16) throw UsageError("parameter 'a_dtype' must be f32 or bf16, got f16");
  const Shape k_shape = inv.input_shape("k"), v_shape = inv.input_shape("v");
  if (k_shape.size() != 4 || v_shape.size() != 4)
    throw UsageError("inputs 'k' and 'v' must have 4 dimensions ([B, T, Hg, K] and [B, T, H, V])");
  const std::int64_t K = k_shape[3], V = v_shape[3];
  check_head_size("k", "K", K);
  check_head_size("v", "V", V);
  const std::vector<std::int32_t> cu = cu_seqlens_input(inv);
  Shape w_shape = v_shape, u_shape = v_shape;
  w_shape[1] = u_shape[1] = k_shape[1];
  w_shape[3] = K;

  const Tensor k = inv.tensor(ctx, "k", DType::bf16), v = inv.tensor(ctx, "v", DType::bf16);
  const Tensor beta = inv.tensor(ctx, "beta", DType::f32), g = inv.tensor(ctx, "g", DType::f32);
  const Tensor A = inv.tensor(ctx, "A", a_dtype);
  Tensor w = inv.alloc(ctx, DType::bf16, w_shape, "output 'w'"), u = inv.alloc(ctx, DType::bf16, u_shape, "output 'u'");
  with_value<16, 32, 64>("bt", bt, [&](auto bt_c) {
    with_value<64, 128, 256>("K (last dimension of k)", K, [&](auto k_c) {
      with_value<64, 128, 256>("V (last dimension of v)", V, [&](auto v_c) {
        const auto run = [&](auto a_c) {
          using Config = tilekernels::gdn::RecomputeWUConfig<decltype(bt_c)::value, decltype(k_c)::value,
                                                             decltype(v_c)::value, decltype(a_c)::value>;
          run_with_index<Config::bt>(ctx, inv, tilekernels::gdn::RecomputeWU<Config>(ctx),
                                     {k, v, beta, g, A, w, u, {}, {}, cu}, k.shape()[0], k.shape()[1]);
        };
        if (a_dtype == DType::bf16)
          run(std::integral_constant<DType, DType::bf16>{});
        else if (a_dtype == DType::f32)
          run(std::integral_constant<DType, DType::f32>{});
        else
          throw UsageError("parameter 'a_dtype' must be f32 or bf16, got f16");
      });
    });
  });
  inv.put("w", w_shape, w.download_floats());
  inv.put("u", u_shape, u.download_floats());
}

const Registrar recompute_wu{Op{
    "gdn.recompute_wu",
    "Gated DeltaNet WY representation per chunk: u = A bf16(v*beta), w = A bf16(k*beta*exp(g)) (FLA recompute_w_u_fwd)",
    {{"bt", "64", "chunk length BT: 16, 32 or 64"},
     {"a_dtype", "f32", "dtype A is stored in: f32, or bf16 as FLA's pipeline passes it (inputs rounded to it)"}},
    {{"k", "bf16", "[B, T, Hg, K]  (K in 64, 128, 256)"},
     {"v", "bf16", "[B, T, H, V]  (V in 64, 128, 256; H a multiple of Hg)"},
     {"beta", "f32", "[B, T, H]"},
     {"g", "f32", "[B, T, H]  (chunk-local cumulative log gate)"},
     {"A", "a_dtype", "[B, T, H, bt]  (solved (I+A)^-1 blocks)"},
     {"cu_seqlens", "i32", "[N + 1]  (B = 1: sequence n is tokens cu[n] .. cu[n+1]-1; chunks restart at each)", true}},
    {{"w", "bf16", "[B, T, H, K]"}, {"u", "bf16", "[B, T, H, V]"}},
    run_recompute_wu}};

}  // namespace
