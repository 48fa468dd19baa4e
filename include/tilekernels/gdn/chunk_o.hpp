// Gated DeltaNet chunk_fwd_o: the output of chunked gated linear attention.
//
// For each batch b, head i_h (q/k head kh = i_h / (H / Hg)) and chunk of BT
// rows t0..t0+BT-1 (the last one may be partial: T need not be a multiple
// of BT):
//   A = bf16( tril_incl( (q k^T) * exp(g_i - g_j) ) )           [BT, BT]
//   o = scale * ( (q h^T) * exp(g_i) + A v_new )                  [BT, V]
// with f32 accumulation. The causal mask includes the diagonal, and A is
// rounded to bf16 after the mask and before its product with v_new, as FLA's
// Triton kernel does. Rows past T are neither read nor written.
//
// Layout (row-major, last index innermost):
//   q, k  [B, T, Hg, K]       bf16
//   v     [B, T, H, V]        bf16   (v_new)
//   h     [B, NT, H, V, K]    bf16   (state per chunk and head, V rows of K; NT = ceil(T / BT))
//   g     [B, T, H]           f32    (chunk-local cumulative gate, natural log)
//   o     [B, T, H, V]        bf16
//
// Paths: the tensor-core path (VK_NV_cooperative_matrix, fp16 operands, f32
// accumulators) is taken when the device has it, the shader was compiled
// and nothing forces the portable path (ChunkOOptions::force_portable,
// ContextOptions::path or TILEKERNELS_PATH=portable). Operands are converted
// bf16 -> fp16 exactly when 2^-17 <= |x| <= 65504; a workgroup that meets a
// finite input or bf16(A) element beyond 65504 recomputes its tile with a
// scalar f32 algorithm (the portable path's rounding points), so nothing
// overflows silently (see chunk_o_nv.comp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "tilekernels/core.hpp"
#include "tilekernels/spirv/features.hpp"
#include "tilekernels/spirv/gdn/chunk_o.hpp"
#if TILEKERNELS_GLSLC_HAS_GL_NV_COOPERATIVE_MATRIX
#include "tilekernels/spirv/gdn/chunk_o_nv.hpp"
#endif

namespace tilekernels::gdn {

namespace detail {
using namespace tilekernels::detail;
// Shared memory of chunk_o_nv.comp (mirrors its layout): the K stage, or v
// and one 16x16 f32 scratch tile per subgroup; the fp16 A block; g; a flag.
constexpr std::uint32_t chunk_o_nv_shared_bytes(std::uint32_t bt, std::uint32_t bv, std::uint32_t wc, std::uint32_t kc) {
  const std::uint32_t sq = kc / 2 + 4, sv = bv / 2 + 4, sa = bt / 2 + 4;
  const std::uint32_t stage = (2 * bt + bv) * sq, tail = bt * sv + (bt / 16) * wc * 256;
  return 4 * ((stage > tail ? stage : tail) + bt * sa + bt + 1);
}
}  // namespace detail

template <std::uint32_t BT_ = 64, std::uint32_t K_ = 128, std::uint32_t V_ = 128>
struct ChunkOConfig {
  static_assert(BT_ == 16 || BT_ == 32 || BT_ == 64,
                "ChunkOConfig: BT must be 16, 32 or 64 (a chunk is 1 to 4 row blocks of 16 on the tensor-core path)");
  static_assert(K_ == 64 || K_ == 128 || K_ == 256,
                "ChunkOConfig: K must be 64, 128 or 256 (the head sizes both paths are built and tested for)");
  static_assert(V_ == 64 || V_ == 128 || V_ == 256,
                "ChunkOConfig: V must be 64, 128 or 256 (the head sizes both paths are built and tested for)");

  static constexpr std::uint32_t BT = BT_;
  static constexpr std::uint32_t K = K_;
  static constexpr std::uint32_t V = V_;

  // Portable path: one workgroup of 256 invocations per (chunk, head, 64
  // columns of V), shared memory (2 BT + 64) * 17 + BT * (BT + 1) + BT floats.
  static constexpr std::uint32_t portable_bv = 64;
  static constexpr std::uint32_t portable_workgroup = 256;
  static constexpr std::uint32_t portable_shared_bytes = 4 * ((2 * BT + 64) * 17 + BT * (BT + 1) + BT);
  static_assert(portable_shared_bytes <= 32 * 1024, "ChunkOConfig: the portable path must fit 32 KiB of shared memory");

  // Tensor-core path defaults: V tile, subgroups along V, K per stage, v_new
  // read with the first stage. Measured on an H100 at (B, T, Hg, H) =
  // (1, 8192, 16, 32), K = V = 128 (bench/bench_chunk_o.cpp): 16 subgroups
  // (wc = 4) with 64-wide K stages was the fastest of the tilings tried
  // (315 us, against 340 us for wc = 2 and 368 us for 32-wide stages).
  static constexpr std::uint32_t nv_bv = V < 128 ? V : 128;
  static constexpr std::uint32_t nv_wc = BT == 64 && nv_bv == 128 ? 4 : 2;
  static constexpr std::uint32_t nv_kc = 64;
  static constexpr std::uint32_t nv_v_early = 1;

  // Shared memory of the tensor-core shader.
  static constexpr std::uint32_t nv_shared_bytes(std::uint32_t bv, std::uint32_t wc, std::uint32_t kc) {
    return detail::chunk_o_nv_shared_bytes(BT, bv, wc, kc);
  }
  static_assert(detail::chunk_o_nv_shared_bytes(BT, nv_bv, nv_wc, nv_kc) <= 48 * 1024,
                "ChunkOConfig: the tensor-core tiles must fit 48 KiB of shared memory");
};

enum class ChunkOPath { portable, nv_cooperative_matrix };

constexpr const char* to_string(ChunkOPath p) noexcept {
  return p == ChunkOPath::portable ? "portable" : "nv_cooperative_matrix";
}

struct ChunkOOptions {
  bool force_portable = false;  // take the portable path even where tensor cores exist
  // Tensor-core tiling overrides, 0 for the Config's defaults (tuning aid):
  // bv columns of V per workgroup (16 * wc * n, dividing V), wc subgroups
  // along V, kc columns of K per shared-memory stage (32 or 64); v_early:
  // 1 reads v_new with the first stage, 0 with the last (-1: default).
  std::uint32_t nv_bv = 0, nv_wc = 0, nv_kc = 0;
  int nv_v_early = -1;
};

template <class Config>
class ChunkO {
 public:
  static constexpr const char* name = "gdn.chunk_o";

  struct Args {
    TensorRef q, k, v, h, g, o;
    float scale = 1.0f;
  };

  explicit ChunkO(Context& ctx, ChunkOOptions options = {}) : ctx_(&ctx), options_(options) {
    nv_bv_ = options.nv_bv ? options.nv_bv : Config::nv_bv;
    nv_wc_ = options.nv_wc ? options.nv_wc : Config::nv_wc;
    nv_kc_ = options.nv_kc ? options.nv_kc : Config::nv_kc;
    nv_v_early_ = options.nv_v_early < 0 ? Config::nv_v_early : static_cast<std::uint32_t>(options.nv_v_early != 0);
    if (nv_wc_ == 0 || nv_bv_ % (16 * nv_wc_) != 0 || Config::V % nv_bv_ != 0 || (nv_kc_ != 32 && nv_kc_ != 64) ||
        Config::K % nv_kc_ != 0 || Config::nv_shared_bytes(nv_bv_, nv_wc_, nv_kc_) > 48 * 1024 ||
        (Config::BT / 16) * nv_wc_ * 32 > 1024)
      throw Error(ErrorCode::invalid_argument,
                  std::string(name) + ": tensor-core tiling nv_bv=" + std::to_string(nv_bv_) + " nv_wc=" +
                      std::to_string(nv_wc_) + " nv_kc=" + std::to_string(nv_kc_) +
                      ": nv_bv must be a multiple of 16 * nv_wc dividing V, nv_kc 32 or 64 dividing K, "
                      "within 48 KiB of shared memory and 1024 invocations");
    path_ = choose_path();
  }

  // The path record() takes on this context.
  ChunkOPath path() const noexcept { return path_; }

  // Throws tilekernels::Error naming the first argument that is wrong.
  void check(const Args& a) const {
    detail::expect_rank(name, "q", a.q, 4);
    detail::expect_rank(name, "v", a.v, 4);
    const auto B = a.q.shape[0], T = a.q.shape[1], Hg = a.q.shape[2], H = a.v.shape[2];
    const std::int64_t K = Config::K, V = Config::V, NT = (T + Config::BT - 1) / Config::BT;
    detail::expect_tensor(*ctx_, name, "q", a.q, DType::bf16, {B, T, Hg, K});
    detail::expect_tensor(*ctx_, name, "k", a.k, DType::bf16, {B, T, Hg, K});
    if (H % Hg != 0)
      throw Error(ErrorCode::shape_mismatch, detail::where(name, "v") + "H = " + std::to_string(H) +
                                                 " heads is not a multiple of Hg = " + std::to_string(Hg) +
                                                 " (the heads of q and k)");
    detail::expect_tensor(*ctx_, name, "v", a.v, DType::bf16, {B, T, H, V});
    detail::expect_tensor(*ctx_, name, "h", a.h, DType::bf16, {B, NT, H, V, K});
    detail::expect_tensor(*ctx_, name, "g", a.g, DType::f32, {B, T, H});
    detail::expect_tensor(*ctx_, name, "o", a.o, DType::bf16, {B, T, H, V});
    // The shaders index elements with 32-bit integers.
    const std::int64_t limit = std::int64_t(1) << 32;
    for (const auto* t : {&a.q, &a.v, &a.h})
      if (t->elements() >= limit)
        throw Error(ErrorCode::unsupported, detail::where(name, t == &a.q ? "q" : t == &a.v ? "v" : "h") +
                                                "too many elements for 32-bit indexing");
  }

  void record(vk::CommandBuffer cmd, const Args& a) const {
    check(a);
    const auto B = a.q.shape[0], T = a.q.shape[1], Hg = a.q.shape[2], H = a.v.shape[2];
    const auto NT = (T + Config::BT - 1) / Config::BT;
    const std::uint32_t bv = path_ == ChunkOPath::portable ? Config::portable_bv : nv_bv_;
    const std::uint64_t groups = static_cast<std::uint64_t>(B * NT * H) * (Config::V / bv);
    const Push push{0,
                    static_cast<std::uint32_t>(T),
                    static_cast<std::uint32_t>(H),
                    static_cast<std::uint32_t>(Hg),
                    static_cast<std::uint32_t>(NT),
                    static_cast<std::uint32_t>(groups),
                    a.scale,
                    0};
    detail::record_dispatch(*ctx_, cmd, pipeline(), {a.q, a.k, a.v, a.h, a.g, a.o}, push, groups);
  }

  // Records into a fresh command buffer, submits and waits.
  void run(const Args& a) const {
    check(a);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, a); });
  }

 private:
  struct Push {
    std::uint32_t group_offset, T, H, Hg, NT, total_groups;
    float scale;
    std::uint32_t pad;
  };

  std::uint32_t nv_workgroup() const { return (Config::BT / 16) * nv_wc_ * 32; }

  ChunkOPath choose_path() const {
#if TILEKERNELS_GLSLC_HAS_GL_NV_COOPERATIVE_MATRIX
    const auto& info = ctx_->info();
    const bool size32 = info.subgroup_size == 32 ||
                        (info.subgroup_size_control && info.min_subgroup_size <= 32 && info.max_subgroup_size >= 32);
    if (info.cooperative_matrix_nv && !ctx_->force_portable() && !options_.force_portable && size32 &&
        info.max_shared_memory >= Config::nv_shared_bytes(nv_bv_, nv_wc_, nv_kc_) &&
        info.max_workgroup_invocations >= nv_workgroup())
      return ChunkOPath::nv_cooperative_matrix;
#endif
    return ChunkOPath::portable;
  }

  const Pipeline& pipeline() const {
#if TILEKERNELS_GLSLC_HAS_GL_NV_COOPERATIVE_MATRIX
    if (path_ == ChunkOPath::nv_cooperative_matrix) {
      const auto& info = ctx_->info();
      const std::uint32_t wg = nv_workgroup();
      const std::uint32_t sg = info.subgroup_size == 32 ? 0 : 32;
      return ctx_->pipeline({spirv::gdn_chunk_o_nv, std::size(spirv::gdn_chunk_o_nv),
                             {wg, Config::BT, Config::K, Config::V, nv_bv_, wg, nv_wc_, nv_kc_, nv_v_early_}, 6, sizeof(Push),
                             sg});
    }
#endif
    constexpr std::uint32_t wg = Config::portable_workgroup;
    return ctx_->pipeline({spirv::gdn_chunk_o, std::size(spirv::gdn_chunk_o),
                           {wg, Config::BT, Config::K, Config::V, Config::portable_bv, wg}, 6, sizeof(Push), 0});
  }

  Context* ctx_;
  ChunkOOptions options_;
  std::uint32_t nv_bv_ = 0, nv_wc_ = 0, nv_kc_ = 0, nv_v_early_ = 1;
  ChunkOPath path_ = ChunkOPath::portable;
};

}  // namespace tilekernels::gdn
