// SPDX-License-Identifier: MIT
// tk-run op gdn.chunk_forward: the whole chunked Gated DeltaNet forward
// (gdn::ChunkForward), with FLA's chunk_gated_delta_rule arguments.
#include <tilekernels/gdn/chunk_forward.hpp>

#include <cmath>
#include <optional>
#include <vector>

#include "gdn_varlen.hpp"
#include "op.hpp"

namespace {

using namespace tkrun;
using tilekernels::DType;
using tilekernels::Tensor;
namespace gdn = tilekernels::gdn;

void run_chunk_forward(tilekernels::Context& ctx, Invocation& inv) {
  // Every parameter and shape first, before anything is allocated.
  const std::int64_t bt = inv.int_param("bt");
  if (bt != 16 && bt != 32 && bt != 64) throw UsageError("parameter 'bt' must be one of 16, 32, 64, got " + std::to_string(bt));
  const gdn::GdnOptions options = gdn_options(inv);
  const Shape q_shape = inv.input_shape("q"), v_shape = inv.input_shape("v");
  if (q_shape.size() != 4)
    throw UsageError("input 'q': expected shape [B, T, Hg, K], got " + tilekernels::shape_string(q_shape));
  if (v_shape.size() != 4)
    throw UsageError("input 'v': expected shape [B, T, H, V], got " + tilekernels::shape_string(v_shape));
  const std::int64_t B = q_shape[0], T = q_shape[1], H = v_shape[2], K = q_shape[3], V = v_shape[3];
  check_head_size("q", "K", K);
  check_head_size("v", "V", V);
  const double scale = gdn_scale(inv, K);
  const std::vector<std::int32_t> cu_host = cu_seqlens_input(inv);
  if (!cu_host.empty()) tilekernels::gdn::Chunking(B, T, cu_host, static_cast<std::uint32_t>(bt)).check(ctx, "gdn.chunk_forward", std::nullopt);
  const std::int64_t N = cu_host.empty() ? B : std::int64_t(cu_host.size()) - 1;
  const Shape state_shape = options.state_layout == gdn::StateLayout::kv ? Shape{N, H, K, V} : Shape{N, H, V, K};
  const Shape o_shape{B, T, H, V};

  const Tensor q = inv.tensor(ctx, "q", DType::bf16), k = inv.tensor(ctx, "k", DType::bf16);
  const Tensor v = inv.tensor(ctx, "v", DType::bf16);
  const Tensor g = inv.tensor(ctx, "g", DType::f32), beta = inv.tensor(ctx, "beta", DType::f32);
  std::optional<Tensor> h0, a_log, dt_bias, cu;
  if (!cu_host.empty()) cu.emplace(inv.tensor(ctx, "cu_seqlens", DType::i32));
  if (inv.has_input("initial_state")) h0.emplace(inv.tensor(ctx, "initial_state", DType::f32));
  if (inv.has_input("A_log")) a_log.emplace(inv.tensor(ctx, "A_log", DType::f32));
  if (inv.has_input("dt_bias")) dt_bias.emplace(inv.tensor(ctx, "dt_bias", DType::f32));
  Tensor o = inv.alloc(ctx, DType::bf16, o_shape, "output 'o'");
  std::optional<Tensor> ht;
  if (inv.wants("final_state")) ht.emplace(inv.alloc(ctx, DType::f32, state_shape, "output 'final_state'"));

  with_value<16, 32, 64>("bt", bt, [&](auto bt_c) {
    with_value<64, 128, 256>("K (last dimension of q)", K, [&](auto k_c) {
      with_value<64, 128, 256>("V (last dimension of v)", V, [&](auto v_c) {
        using Kernel = gdn::ChunkForward<
            gdn::ChunkForwardConfig<decltype(bt_c)::value, decltype(k_c)::value, decltype(v_c)::value>>;
        typename Kernel::Args a;
        a.q = q, a.k = k, a.v = v, a.g = g, a.beta = beta, a.o = o;
        if (h0) a.initial_state = h0->ref();
        if (ht) a.final_state = ht->ref();
        if (a_log) a.A_log = a_log->ref();
        if (dt_bias) a.dt_bias = dt_bias->ref();
        if (cu) a.cu_seqlens = cu->ref();
        a.cu_seqlens_host = cu_host;
        a.options = options;
        a.scale = static_cast<float>(scale);
        const Kernel kernel(ctx, gdn::GdnEnvelope{options});
        kernel.check_problem(a);
        // The workspace through tk-run's size checks (the kernel would allocate it unchecked).
        Tensor work = inv.alloc(ctx, DType::u32,
                                {static_cast<std::int64_t>(Kernel::workspace_bytes(kernel.problem(a)) / 4 + 1)},
                                "the workspace for inputs 'q' and 'v'");
        a.workspace = tilekernels::Workspace{work.ref()};
        kernel.run(a);
      });
    });
  });
  inv.put("o", o_shape, o.download_floats());
  if (ht) inv.put("final_state", state_shape, ht->download_floats());
}

const Registrar chunk_forward{Op{
    "gdn.chunk_forward",
    "Gated DeltaNet chunked forward, every stage in one recording: o and the final state (FLA chunk_gated_delta_rule)",
    {{"bt", "64", "chunk length BT: 16, 32 or 64"},
     {"scale", "auto", "query scale; auto: 1/sqrt(K)"},
     {"qk_l2norm", "0", "1: L2-normalise q and k rows first (use_qk_l2norm_in_kernel)"},
     {"gate_in_kernel", "0", "1: g is the raw gate, decay = -exp(A_log) softplus(g + dt_bias) (use_gate_in_kernel)"},
     {"beta_sigmoid", "0", "1: beta holds logits, sigmoid applied (use_beta_sigmoid_in_kernel)"},
     {"allow_neg_eigval", "0", "1: beta doubled after the sigmoid (needs beta_sigmoid=1)"},
     {"state_layout", "kv", "initial/final state layout: kv ([N, H, K, V]) or vk ([N, H, V, K])"}},
    {{"q", "bf16", "[B, T, Hg, K]  (K in 64, 128, 256)"},
     {"k", "bf16", "[B, T, Hg, K]"},
     {"v", "bf16", "[B, T, H, V]  (V in 64, 128, 256; H a multiple of Hg)"},
     {"g", "f32", "[B, T, H]  (per-token log decay, natural log; the raw gate with gate_in_kernel=1)"},
     {"beta", "f32", "[B, T, H]  (logits with beta_sigmoid=1)"},
     {"initial_state", "f32", "[N, H, K, V]  ([N, H, V, K] with state_layout=vk)", true},
     {"cu_seqlens", "i32", "[N + 1]  (B = 1: offsets of the concatenated sequences)", true},
     {"A_log", "f32", "[H]  (gate_in_kernel=1)", true},
     {"dt_bias", "f32", "[H]  (gate_in_kernel=1)", true}},
    {{"o", "bf16", "[B, T, H, V]"}, {"final_state", "f32", "[N, H, K, V]  ([N, H, V, K] with state_layout=vk)", true}},
    run_chunk_forward}};

}  // namespace
