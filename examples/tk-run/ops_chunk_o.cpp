// tk-run op gdn.chunk_o.
#include <tilekernels/gdn/chunk_o.hpp>

#include <cmath>

#include "op.hpp"

namespace {

using namespace tkrun;
using tilekernels::DType;
using tilekernels::Tensor;

void run_chunk_o(tilekernels::Context& ctx, Invocation& inv) {
  const std::int64_t bt = inv.int_param("bt");
  const std::string path = inv.param("path");
  if (path != "auto" && path != "portable")
    throw UsageError("parameter 'path' must be auto or portable, got '" + path + "'");
  const Shape q_shape = inv.input_shape("q"), v_shape = inv.input_shape("v");
  if (q_shape.size() != 4) throw UsageError("input 'q': expected shape [B, T, Hg, K], got " + tilekernels::shape_string(q_shape));
  if (v_shape.size() != 4 || v_shape[0] != q_shape[0] || v_shape[1] != q_shape[1])
    throw UsageError("input 'v': expected shape [" + std::to_string(q_shape[0]) + ", " + std::to_string(q_shape[1]) +
                     ", H, V], got " + tilekernels::shape_string(v_shape));
  const std::int64_t B = q_shape[0], T = q_shape[1], Hg = q_shape[2], K = q_shape[3], H = v_shape[2], V = v_shape[3];
  if (Hg <= 0 || H % Hg != 0)
    throw UsageError("input 'v': its heads H = " + std::to_string(H) + " must be a multiple of q's heads Hg = " +
                     std::to_string(Hg));
  if (bt <= 0) throw UsageError("parameter 'bt' must be 16, 32 or 64, got " + std::to_string(bt));
  const std::int64_t NT = (T + bt - 1) / bt;
  const std::string scale_text = inv.param("scale");
  const double scale = scale_text == "auto" ? 1.0 / std::sqrt(static_cast<double>(K)) : inv.float_param("scale");
  const auto q = Tensor::from_floats(ctx, DType::bf16, q_shape, inv.floats("q", q_shape));
  const auto k = Tensor::from_floats(ctx, DType::bf16, q_shape, inv.floats("k", q_shape));
  const auto v = Tensor::from_floats(ctx, DType::bf16, v_shape, inv.floats("v", v_shape));
  const auto h = Tensor::from_floats(ctx, DType::bf16, {B, NT, H, V, K}, inv.floats("h", {B, NT, H, V, K}));
  const auto g = Tensor::from_floats(ctx, DType::f32, {B, T, H}, inv.floats("g", {B, T, H}));
  Tensor o(ctx, DType::bf16, {B, T, H, V});
  tilekernels::gdn::ChunkOOptions options;
  options.force_portable = path == "portable";
  with_value<16, 32, 64>("bt", bt, [&](auto bt_c) {
    with_value<64, 128, 256>("K (last dimension of q)", K, [&](auto k_c) {
      with_value<64, 128, 256>("V (last dimension of v)", V, [&](auto v_c) {
        using Config = tilekernels::gdn::ChunkOConfig<decltype(bt_c)::value, decltype(k_c)::value, decltype(v_c)::value>;
        tilekernels::gdn::ChunkO<Config>(ctx, options).run({q, k, v, h, g, o, static_cast<float>(scale)});
      });
    });
  });
  inv.put("o", {B, T, H, V}, o.download_floats());
}

const Registrar chunk_o{Op{
    "gdn.chunk_o",
    "Gated DeltaNet chunk output: o = scale*((q h^T) exp(g_i) + bf16(tril_incl(q k^T exp(g_i-g_j))) v) (FLA chunk_fwd_o)",
    {{"bt", "64", "chunk length BT: 16, 32 or 64"},
     {"scale", "auto", "output scale; auto: 1/sqrt(K)"},
     {"path", "auto", "auto (NV cooperative matrix where the device has it) or portable"}},
    {{"q", "bf16", "[B, T, Hg, K]  (K in 64, 128, 256)"},
     {"k", "bf16", "[B, T, Hg, K]"},
     {"v", "bf16", "[B, T, H, V]  (v_new; V in 64, 128, 256; H a multiple of Hg)"},
     {"h", "bf16", "[B, ceil(T/bt), H, V, K]  (state per chunk, V rows of K)"},
     {"g", "f32", "[B, T, H]  (chunk-local cumulative log gate, natural log)"}},
    {{"o", "bf16", "[B, T, H, V]"}},
    run_chunk_o}};

}  // namespace
