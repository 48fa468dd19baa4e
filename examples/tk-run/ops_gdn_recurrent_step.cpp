// SPDX-License-Identifier: MIT
// tk-run op gdn.recurrent_step: the Gated DeltaNet decode step.
#include <tilekernels/gdn/recurrent_step.hpp>

#include <optional>

#include "gdn_varlen.hpp"
#include "op.hpp"

namespace {

using namespace tkrun;
using tilekernels::DType;
using tilekernels::Tensor;

void run_recurrent_step(tilekernels::Context& ctx, Invocation& inv) {
  namespace gdn = tilekernels::gdn;
  // Every parameter and shape first, before anything is allocated, with the
  // same rules and words as gdn.chunk_forward (gdn_varlen.hpp).
  const DType dtype = float_dtype_param(inv, "dtype");
  const std::string path = inv.param("path");
  if (path != "auto" && path != "portable")
    throw UsageError("parameter 'path' must be auto or portable, got '" + printable(path, 60) + "'");
  const gdn::GdnOptions options = gdn_options(inv);
  const Shape q_shape = inv.input_shape("q"), v_shape = inv.input_shape("v");
  if (q_shape.size() != 4) throw UsageError("input 'q': expected shape [B, T, Hg, K], got " + tilekernels::shape_string(q_shape));
  if (v_shape.size() != 4 || v_shape[0] != q_shape[0] || v_shape[1] != q_shape[1])
    throw UsageError("input 'v': expected shape [" + std::to_string(q_shape[0]) + ", " + std::to_string(q_shape[1]) +
                     ", H, V], got " + tilekernels::shape_string(v_shape));
  const std::int64_t B = q_shape[0], T = q_shape[1], Hg = q_shape[2], K = q_shape[3], H = v_shape[2], V = v_shape[3];
  check_head_size("q", "K", K);
  check_head_size("v", "V", V);
  if (H % Hg != 0)
    throw UsageError("input 'v': its heads H = " + std::to_string(H) + " must be a multiple of q's heads Hg = " +
                     std::to_string(Hg));
  const double checked_scale = gdn_scale(inv, K);
  const std::optional<float> scale =
      inv.param("scale") == "auto" ? std::nullopt : std::optional<float>(static_cast<float>(checked_scale));
  const std::vector<std::int32_t> cu_host = cu_seqlens_input(inv);
  const std::int64_t N = cu_host.empty() ? B : std::int64_t(cu_host.size()) - 1;
  const bool kv = options.state_layout == gdn::StateLayout::kv;
  const Shape state_shape = kv ? Shape{N, H, K, V} : Shape{N, H, V, K};
  const Shape ts_shape = kv ? Shape{B, T, H, K, V} : Shape{B, T, H, V, K};

  const auto q = inv.upload(ctx, dtype, q_shape, inv.floats("q", q_shape), "input 'q'");
  const auto k = inv.upload(ctx, dtype, q_shape, inv.floats("k", q_shape), "input 'k'");
  const auto v = inv.upload(ctx, dtype, v_shape, inv.floats("v", v_shape), "input 'v'");
  const auto g = inv.upload(ctx, DType::f32, {B, T, H}, inv.floats("g", {B, T, H}), "input 'g'");
  const auto beta = inv.upload(ctx, DType::f32, {B, T, H}, inv.floats("beta", {B, T, H}), "input 'beta'");
  const auto state =
      inv.upload(ctx, DType::f32, state_shape, inv.floats("initial_state", state_shape), "input 'initial_state'");
  std::optional<Tensor> a_log, dt_bias, cu, token_states;
  if (inv.has_input("A_log")) a_log.emplace(inv.upload(ctx, DType::f32, {H}, inv.floats("A_log", {H}), "input 'A_log'"));
  if (inv.has_input("dt_bias"))
    dt_bias.emplace(inv.upload(ctx, DType::f32, {H}, inv.floats("dt_bias", {H}), "input 'dt_bias'"));
  if (!cu_host.empty()) {
    cu.emplace(inv.alloc(ctx, DType::i32, Shape{N + 1}, "input 'cu_seqlens'"));
    cu->upload(std::span<const std::int32_t>(cu_host));
  }
  if (inv.wants("token_states")) token_states.emplace(inv.alloc(ctx, DType::f32, ts_shape, "output 'token_states'"));
  Tensor o = inv.alloc(ctx, dtype, v_shape, "output 'o'");

  with_value<64, 128, 256>("K (last dimension of q)", K, [&](auto k_c) {
    with_value<64, 128, 256>("V (last dimension of v)", V, [&](auto v_c) {
      using Kernel = gdn::RecurrentStep<gdn::RecurrentStepConfig<decltype(k_c)::value, decltype(v_c)::value>>;
      Kernel step(ctx, {.qk_dtype = dtype, .v_dtype = dtype});
      typename Kernel::Args a;
      a.q = q, a.k = k, a.v = v, a.g = g, a.beta = beta, a.state = state, a.o = o;
      if (token_states) a.token_states = token_states->ref();
      if (a_log) a.A_log = a_log->ref();
      if (dt_bias) a.dt_bias = dt_bias->ref();
      if (cu) a.cu_seqlens = cu->ref();
      a.cu_seqlens_host = cu_host;
      a.options = options;
      a.scale = scale;
      auto plan = step.plan(a);
      if (path == "portable") {
        plan.variant = &Kernel::variants.back();
        step.prepare(plan);
      }
      ctx.submit_and_wait([&](vk::CommandBuffer cmd) { step.record(cmd, a, plan); });
    });
  });
  inv.put("o", v_shape, o.download_floats());
  if (inv.wants("final_state")) inv.put("final_state", state_shape, state.download_floats());
  if (token_states) inv.put("token_states", ts_shape, token_states->download_floats());
}

const Registrar recurrent_step{Op{
    "gdn.recurrent_step",
    "Gated DeltaNet decode step, f32 state updated per token: S = exp(g) S; v' = beta (v - S^T k); S += k v'^T; "
    "o = S^T (scale q) (FLA fused_recurrent_gated_delta_rule)",
    {{"dtype", "bf16", "storage of q, k, v and o: bf16, f16 or f32"},
     {"qk_l2norm", "0", "1: q, k /= sqrt(|x|^2 + 1e-6) in the kernel"},
     {"gate_in_kernel", "0", "1: g is raw, decay = -exp(A_log) softplus(g + dt_bias) (needs A_log; A_log and dt_bias only with it)"},
     {"beta_sigmoid", "0", "1: beta holds logits"},
     {"allow_neg_eigval", "0", "1 (with beta_sigmoid): beta = 2 sigmoid(beta)"},
     {"state_layout", "kv", "kv: states [.., K, V]; vk: [.., V, K]"},
     {"scale", "auto", "factor on q, a positive number; auto: 1/sqrt(K)"},
     {"path", "auto", "auto (subgroup variant where the device allows) or portable"}},
    {{"q", "dtype", "[B, T, Hg, K]  (K in 64, 128, 256)"},
     {"k", "dtype", "[B, T, Hg, K]"},
     {"v", "dtype", "[B, T, H, V]  (V in 64, 128, 256; H a multiple of Hg)"},
     {"g", "f32", "[B, T, H]  (log decay per token, natural log; raw gate with gate_in_kernel)"},
     {"beta", "f32", "[B, T, H]"},
     {"initial_state", "f32", "[N, H, K, V]  ([N, H, V, K] with state_layout=vk; N = B, or cu_seqlens' length - 1)"},
     {"cu_seqlens", "i32", "[N + 1]  (B = 1: sequence n is tokens cu[n] .. cu[n+1]-1)", true},
     {"A_log", "f32", "[H]  (gate_in_kernel)", true},
     {"dt_bias", "f32", "[H]  (gate_in_kernel, optional)", true}},
    {{"o", "dtype", "[B, T, H, V]"},
     {"final_state", "f32", "[N, H, K, V]  (like initial_state): the state after each sequence's last token", true},
     {"token_states", "f32", "[B, T, H, K, V]  (or [.., V, K]): the state after each token", true}},
    run_recurrent_step}};

}  // namespace
