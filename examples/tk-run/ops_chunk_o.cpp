// SPDX-License-Identifier: MIT
// tk-run op gdn.chunk_o.
#include <tilekernels/gdn/chunk_o.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "gdn_varlen.hpp"
#include "op.hpp"

namespace {

using namespace tkrun;
using tilekernels::DType;
using tilekernels::Tensor;

void run_chunk_o(tilekernels::Context& ctx, Invocation& inv) {
  // Every parameter and shape first, before anything is allocated.
  const std::int64_t bt = inv.int_param("bt");
  if (bt != 16 && bt != 32 && bt != 64) throw UsageError("parameter 'bt' must be one of 16, 32, 64, got " + std::to_string(bt));
  const Shape q_shape = inv.input_shape("q"), v_shape = inv.input_shape("v");
  if (q_shape.size() != 4 || v_shape.size() != 4)
    throw UsageError("inputs 'q' and 'v' must have 4 dimensions ([B, T, Hg, K] and [B, T, H, V])");
  const std::int64_t K = q_shape[3], V = v_shape[3];
  check_head_size("q", "K", K);
  check_head_size("v", "V", V);
  const double scale = gdn_scale(inv, K);
  const std::vector<std::int32_t> cu = cu_seqlens_input(inv);
  if (!cu.empty()) {  // before h's shape, which depends on them
    if (q_shape[0] != 1) throw UsageError("input 'cu_seqlens' needs B = 1, got B = " + std::to_string(q_shape[0]));
    if (const std::string why = tilekernels::gdn::Chunking::partition_problem(cu, q_shape[1]); !why.empty())
      throw UsageError("input 'cu_seqlens': " + why);
  }
  Shape o_shape = v_shape;
  o_shape[1] = q_shape[1];

  const Tensor q = inv.tensor(ctx, "q", DType::bf16), k = inv.tensor(ctx, "k", DType::bf16);
  const Tensor v = inv.tensor(ctx, "v", DType::bf16);
  // With cu_seqlens the kernel takes h for every chunk slot of the call
  // (gdn/chunking.hpp: as many as any lengths of T tokens can need); the
  // input's chunks come first, the rest is never read.
  // The input holds the batch's own chunks, as many as its lengths need.
  const Shape h_shape = inv.input_shape("h");
  Shape h_slots = h_shape;
  if (!cu.empty() && h_shape.size() == 5) {
    const tilekernels::gdn::Chunking ch(1, q_shape[1], cu, static_cast<std::uint32_t>(bt));
    std::int64_t own = 0;
    ch.for_each_sequence([&](std::int64_t, std::int64_t, std::int64_t len, std::int64_t) { own += (len + bt - 1) / bt; });
    Shape want = h_shape;
    want[1] = own;
    if (h_shape != want)
      throw tilekernels::Error(tilekernels::ErrorCode::shape_mismatch, "gdn.chunk_o: h: expected shape " +
                                                                           tilekernels::shape_string(want) + ", got " +
                                                                           tilekernels::shape_string(h_shape));
    h_slots[1] = std::max(own, ch.chunks());
  }
  std::vector<float> h_values = inv.floats("h", h_shape);
  h_values.resize(static_cast<std::size_t>(checked_elements(h_slots, "input 'h'")), 0.0f);
  const Tensor h = inv.upload(ctx, DType::bf16, h_slots, h_values, "input 'h'");
  const Tensor g = inv.tensor(ctx, "g", DType::f32);
  Tensor o = inv.alloc(ctx, DType::bf16, o_shape, "output 'o'");
  with_value<16, 32, 64>("bt", bt, [&](auto bt_c) {
    with_value<64, 128, 256>("K (last dimension of q)", K, [&](auto k_c) {
      with_value<64, 128, 256>("V (last dimension of v)", V, [&](auto v_c) {
        using Config = tilekernels::gdn::ChunkOConfig<decltype(bt_c)::value, decltype(k_c)::value, decltype(v_c)::value>;
        run_with_index<Config::BT>(ctx, inv, tilekernels::gdn::ChunkO<Config>(ctx),
                                   {q, k, v, h, g, o, static_cast<float>(scale), {}, {}, cu}, q.shape()[0],
                                   q.shape()[1]);
      });
    });
  });
  inv.put("o", o_shape, o.download_floats());
}

const Registrar chunk_o{Op{
    "gdn.chunk_o",
    "Gated DeltaNet chunk output: o = scale*((q h^T) exp(g_i) + bf16(tril_incl(q k^T exp(g_i-g_j))) v) (FLA chunk_fwd_o)",
    {{"bt", "64", "chunk length BT: 16, 32 or 64"},
     {"scale", "auto", "output scale; auto: 1/sqrt(K)"}},
    {{"q", "bf16", "[B, T, Hg, K]  (K in 64, 128, 256)"},
     {"k", "bf16", "[B, T, Hg, K]"},
     {"v", "bf16", "[B, T, H, V]  (v_new; V in 64, 128, 256; H a multiple of Hg)"},
     {"h", "bf16", "[B, ceil(T/bt), H, V, K]  (state per chunk, V rows of K; with cu_seqlens [1, chunks of all sequences, H, V, K])"},
     {"g", "f32", "[B, T, H]  (chunk-local cumulative log gate, natural log)"},
     {"cu_seqlens", "i32", "[N + 1]  (B = 1: sequence n is tokens cu[n] .. cu[n+1]-1; chunks restart at each)", true}},
    {{"o", "bf16", "[B, T, H, V]"}},
    run_chunk_o}};

}  // namespace
