// tk-run op gdn.recompute_wu.
#include <tilekernels/gdn/recompute_wu.hpp>

#include "op.hpp"

namespace {

using namespace tkrun;
using tilekernels::DType;
using tilekernels::Tensor;

void run_recompute_wu(tilekernels::Context& ctx, Invocation& inv) {
  const std::int64_t bt = inv.int_param("bt");
  const std::string path = inv.param("path");
  const DType a_dtype = float_dtype_param(inv, "a_dtype");
  if (a_dtype != DType::f32 && a_dtype != DType::bf16)
    throw UsageError("parameter 'a_dtype' must be f32 or bf16, got f16");
  if (path != "auto" && path != "portable" && path != "tensor_cores")
    throw UsageError("parameter 'path' must be auto, portable or tensor_cores, got '" + path + "'");
  const Shape k_shape = inv.input_shape("k"), v_shape = inv.input_shape("v");
  if (k_shape.size() != 4) throw UsageError("input 'k': expected shape [B, T, Hg, K], got " + tilekernels::shape_string(k_shape));
  if (v_shape.size() != 4 || v_shape[0] != k_shape[0] || v_shape[1] != k_shape[1])
    throw UsageError("input 'v': expected shape [" + std::to_string(k_shape[0]) + ", " + std::to_string(k_shape[1]) +
                     ", H, V], got " + tilekernels::shape_string(v_shape));
  const std::int64_t B = k_shape[0], T = k_shape[1], Hg = k_shape[2], K = k_shape[3], H = v_shape[2], V = v_shape[3];
  if (Hg <= 0 || H % Hg != 0)
    throw UsageError("input 'v': its heads H = " + std::to_string(H) + " must be a multiple of k's heads Hg = " +
                     std::to_string(Hg));
  const auto k = Tensor::from_floats(ctx, DType::bf16, k_shape, inv.floats("k", k_shape));
  const auto v = Tensor::from_floats(ctx, DType::bf16, v_shape, inv.floats("v", v_shape));
  const auto beta = Tensor::from_floats(ctx, DType::f32, {B, T, H}, inv.floats("beta", {B, T, H}));
  const auto g = Tensor::from_floats(ctx, DType::f32, {B, T, H}, inv.floats("g", {B, T, H}));
  const auto A = Tensor::from_floats(ctx, a_dtype, {B, T, H, bt}, inv.floats("A", {B, T, H, bt}));
  Tensor w(ctx, DType::bf16, {B, T, H, K}), u(ctx, DType::bf16, {B, T, H, V});
  tilekernels::gdn::RecomputeWUOptions options;
  options.force_portable = path == "portable";
  options.tensor_cores = path != "portable";
  with_value<16, 32, 64>("bt", bt, [&](auto bt_c) {
    with_value<64, 128, 256>("K (last dimension of k)", K, [&](auto k_c) {
      with_value<64, 128, 256>("V (last dimension of v)", V, [&](auto v_c) {
        const auto run = [&](auto a_c) {
          using Config = tilekernels::gdn::RecomputeWUConfig<decltype(bt_c)::value, decltype(k_c)::value,
                                                             decltype(v_c)::value, decltype(a_c)::value>;
          tilekernels::gdn::RecomputeWU<Config>(ctx, options).run({k, v, beta, g, A, w, u});
        };
        if (a_dtype == DType::bf16)
          run(std::integral_constant<DType, DType::bf16>{});
        else
          run(std::integral_constant<DType, DType::f32>{});
      });
    });
  });
  inv.put("w", {B, T, H, K}, w.download_floats());
  inv.put("u", {B, T, H, V}, u.download_floats());
}

const Registrar recompute_wu{Op{
    "gdn.recompute_wu",
    "Gated DeltaNet WY representation per chunk: u = A bf16(v*beta), w = A bf16(k*beta*exp(g)) (FLA recompute_w_u_fwd)",
    {{"bt", "64", "chunk length BT: 16, 32 or 64"},
     {"path", "auto", "auto, portable, or tensor_cores (the NV cooperative-matrix path is the default where the device has it)"},
     {"a_dtype", "f32", "dtype A is stored in: f32, or bf16 as FLA's pipeline passes it (inputs rounded to it)"}},
    {{"k", "bf16", "[B, T, Hg, K]  (K in 64, 128, 256)"},
     {"v", "bf16", "[B, T, H, V]  (V in 64, 128, 256; H a multiple of Hg)"},
     {"beta", "f32", "[B, T, H]"},
     {"g", "f32", "[B, T, H]  (chunk-local cumulative log gate)"},
     {"A", "a_dtype", "[B, T, H, bt]  (solved (I+A)^-1 blocks)"}},
    {{"w", "bf16", "[B, T, H, K]"}, {"u", "bf16", "[B, T, H, V]"}},
    run_recompute_wu}};

}  // namespace
