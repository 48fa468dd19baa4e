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
// ContextOptions::path or TILEKERNELS_PATH=portable). It has three kernel
// versions (ChunkOOptions::nv_version; default ChunkOConfig::nv_version = 3,
// the fastest measured). Operands are converted
// bf16 -> fp16 exactly when 2^-17 <= |x| <= 65504; a workgroup that meets a
// finite input or bf16(A) element beyond 65504 recomputes its tile with a
// scalar f32 algorithm (the portable path's rounding points), so nothing
// overflows silently (see chunk_o_nv.comp).
//
// Where the device has bf16 tensor cores (VK_KHR_cooperative_matrix with
// VK_KHR_shader_bfloat16) and the build compiled shaders/gdn/chunk_o_bf16.comp
// (a glslang that knows GL_EXT_bfloat16: TK_GLSLANG in CMake), the default
// is the bf16 path: q, k, h and v enter the products as they are, with no
// range handling, in persistent workgroups that load each step while the
// previous one computes (V <= 128; larger V takes the fp16 path). Asking
// for a tensor-core version (ChunkOOptions::nv_version) or bf16 = false
// selects the fp16 path. Its roundings to bf16 (A and o) are three float
// operations (tk_round_bf16_split, shaders/common/convert.glsl): to nearest
// even, as FLA, for magnitudes up to 5.19e33; +-Inf and larger values there
// become NaN, where the other paths keep them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "tilekernels/core.hpp"
#include "tilekernels/spirv/features.hpp"
#include "tilekernels/spirv/gdn/chunk_o.hpp"
#if TILEKERNELS_GLSLC_HAS_GL_NV_COOPERATIVE_MATRIX
#include "tilekernels/spirv/gdn/chunk_o_nv.hpp"
#include "tilekernels/spirv/gdn/chunk_o_nv2.hpp"
#include "tilekernels/spirv/gdn/chunk_o_nv3.hpp"
#endif
#if TILEKERNELS_GLSLC_HAS_GL_KHR_COOPERATIVE_MATRIX && TILEKERNELS_GLSLC_HAS_GL_EXT_BFLOAT16
#define TILEKERNELS_GDN_CHUNK_O_BF16 1
#include "tilekernels/spirv/gdn/chunk_o_bf16.hpp"
#else
#define TILEKERNELS_GDN_CHUNK_O_BF16 0
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
// Shared memory of chunk_o_nv2.comp (mirrors its layout, in 16-byte units):
// nbuf K stages, or v, A and two 16x16 f32 scratch tiles per subgroup; g; a flag.
constexpr std::uint32_t chunk_o_nv2_shared_bytes(std::uint32_t bt, std::uint32_t bv, std::uint32_t wc, std::uint32_t kc,
                                                 std::uint32_t nbuf) {
  const std::uint32_t sq = kc / 8 + 1, sv = bv / 8 + 1, sa = bt / 8 + 1, nw = bt / 16 * wc;
  const std::uint32_t stages = nbuf * (2 * bt + bv) * sq, tail = bt * sv + bt * sa + nw * 32 * 5;
  return 16 * (stages > tail ? stages : tail) + 4 * bt + 4;
}
// Shared memory of chunk_o_nv3.comp: one K stage, or v, A and one scratch
// tile per subgroup; g; a flag.
constexpr std::uint32_t chunk_o_nv3_shared_bytes(std::uint32_t bt, std::uint32_t bv, std::uint32_t wc,
                                                 std::uint32_t kc) {
  const std::uint32_t sq = kc / 8 + 1, sv = bv / 8 + 1, sa = bt / 8 + 1, nw = bt / 16 * wc;
  const std::uint32_t stage = (2 * bt + bv) * sq, tail = bt * sv + bt * sa + nw * 16 * 5;
  return 16 * (stage > tail ? stage : tail) + 4 * bt + 4;
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

  // Tensor-core kernel version taken by default: 1 = chunk_o_nv.comp, 2 =
  // chunk_o_nv2.comp (16-byte shared stores, q k^T blocks dealt evenly over
  // the subgroups, the gate applied at the output), 3 = chunk_o_nv3.comp
  // (version 2 with every load of a tile issued at once, in workgroups of
  // nv3_upw tiles that load the next tile while computing this one).
  // Measured on an H100 at (B, T, Hg, H) = (1, 8192, 16, 32) and
  // (8, 2048, 16, 32), K = V = 128 (bench/NOTES-gdn.md): version 3 with one
  // tile per workgroup 287 / 555 us, version 2 301 / 586 us, version 1
  // 321 / 618 us; version 3 with 2 or more tiles per workgroup was slower
  // (333 us and up: the registers of the next tile cost occupancy).
  static constexpr int nv_version = 3;
  // Version 2 defaults: all of V (up to 128 columns) per workgroup, 2
  // subgroups along V (256 invocations at BT = 64), 64-wide K stages in one
  // buffer (the fastest version-2 tiling measured).
  static constexpr std::uint32_t nv2_bv = V < 128 ? V : 128;
  static constexpr std::uint32_t nv2_wc = 2;
  static constexpr std::uint32_t nv2_kc = 64;
  static constexpr std::uint32_t nv2_nbuf = 1;
  static constexpr std::uint32_t nv2_shared_bytes(std::uint32_t bv, std::uint32_t wc, std::uint32_t kc,
                                                  std::uint32_t nbuf) {
    return detail::chunk_o_nv2_shared_bytes(BT, bv, wc, kc, nbuf);
  }
  static_assert(detail::chunk_o_nv2_shared_bytes(BT, nv2_bv, nv2_wc, nv2_kc, nv2_nbuf) <= 48 * 1024,
                "ChunkOConfig: the version-2 tensor-core tiles must fit 48 KiB of shared memory");
  // Version 3 defaults: all of V (up to 128 columns), 4 subgroups along V
  // (512 invocations at BT = 64), 64-wide K stages, one tile per workgroup.
  static constexpr std::uint32_t nv3_bv = V < 128 ? V : 128;
  static constexpr std::uint32_t nv3_wc = 4;
  static constexpr std::uint32_t nv3_kc = 64;
  static constexpr std::uint32_t nv3_upw = 1;
  static constexpr std::uint32_t nv3_shared_bytes(std::uint32_t bv, std::uint32_t wc, std::uint32_t kc) {
    return detail::chunk_o_nv3_shared_bytes(BT, bv, wc, kc);
  }
  static_assert(detail::chunk_o_nv3_shared_bytes(BT, nv3_bv, nv3_wc, nv3_kc) <= 48 * 1024,
                "ChunkOConfig: the version-3 tensor-core tiles must fit 48 KiB of shared memory");

  // bf16 kernel (shaders/gdn/chunk_o_bf16.comp, mirrors its layout, uvec4
  // units): the larger of a K step's q, k, h slices (64 columns) and the v
  // step's v, P and 16 per-subgroup output scratch tiles, then the two index
  // tiles; plus g and exp(g). Only for V <= 128.
  static constexpr std::uint32_t bf16_vec4 =
      std::max((2 * BT + V) * 9, BT * (V / 8 + 1) + BT * (BT / 8 + 1) + 16 * 16 * 2) + 128;
  static constexpr std::uint32_t bf16_shared_bytes = bf16_vec4 * 16 + 2 * 64 * 4;
  static constexpr bool bf16_fits = V <= 128 && bf16_shared_bytes <= 48 * 1024;
};

enum class ChunkOPath { portable, nv_cooperative_matrix, bf16_cooperative_matrix };

constexpr const char* to_string(ChunkOPath p) noexcept {
  return p == ChunkOPath::portable                ? "portable"
         : p == ChunkOPath::nv_cooperative_matrix ? "nv_cooperative_matrix"
                                                  : "bf16_cooperative_matrix";
}

struct ChunkOOptions {
  bool force_portable = false;  // take the portable path even where tensor cores exist
  // Tensor-core tiling overrides, 0 for the Config's defaults (tuning aid):
  // bv columns of V per workgroup (16 * wc * n, dividing V), wc subgroups
  // along V, kc columns of K per shared-memory stage (32 or 64); v_early:
  // 1 reads v_new with the first stage, 0 with the last (-1: default).
  std::uint32_t nv_bv = 0, nv_wc = 0, nv_kc = 0;
  int nv_v_early = -1;
  // Tensor-core kernel: 0 for the Config's default (nv_version), 1 or 2. For
  // version 2, nv_bv / nv_wc / nv_kc (16, 32 or 64) override the Config's
  // nv2_* defaults, nv_v_early is ignored, and nv_nbuf (1 or 2, 0: default)
  // is the number of shared-memory K stage buffers.
  int nv_version = 0;
  std::uint32_t nv_nbuf = 0;
  // Version 3: tiles per workgroup (0: the Config's nv3_upw); nv_bv, nv_wc,
  // nv_kc override the nv3_* defaults as for version 2.
  std::uint32_t nv_upw = 0;
  // The bf16 path where available (and nv_version is 0); its persistent
  // workgroups (512 invocations each; at most one per tile). 0: one per
  // multiprocessor where the device reports them (DeviceInfo), else 264.
  bool bf16 = true;
  std::uint32_t bf16_workgroups = 0;
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
    nv_version_ = options.nv_version ? options.nv_version : Config::nv_version;
    if (nv_version_ < 1 || nv_version_ > 3)
      throw Error(ErrorCode::invalid_argument,
                  std::string(name) + ": nv_version=" + std::to_string(nv_version_) + ": must be 0, 1, 2 or 3");
    const bool v2 = nv_version_ >= 2;
    const bool v3 = nv_version_ == 3;
    nv_bv_ = options.nv_bv ? options.nv_bv : v3 ? Config::nv3_bv : v2 ? Config::nv2_bv : Config::nv_bv;
    nv_wc_ = options.nv_wc ? options.nv_wc : v3 ? Config::nv3_wc : v2 ? Config::nv2_wc : Config::nv_wc;
    nv_kc_ = options.nv_kc ? options.nv_kc : v3 ? Config::nv3_kc : v2 ? Config::nv2_kc : Config::nv_kc;
    nv_nbuf_ = options.nv_nbuf ? options.nv_nbuf : Config::nv2_nbuf;
    nv_upw_ = options.nv_upw ? options.nv_upw : Config::nv3_upw;
    nv_v_early_ = options.nv_v_early < 0 ? Config::nv_v_early : static_cast<std::uint32_t>(options.nv_v_early != 0);
    const bool kc_ok = v2 ? (nv_kc_ == 16 || nv_kc_ == 32 || nv_kc_ == 64) : (nv_kc_ == 32 || nv_kc_ == 64);
    if (nv_wc_ == 0 || nv_bv_ % (16 * nv_wc_) != 0 || Config::V % nv_bv_ != 0 || !kc_ok || Config::K % nv_kc_ != 0 ||
        (nv_version_ == 2 && nv_nbuf_ != 1 && nv_nbuf_ != 2) || nv_shared_bytes() > 48 * 1024 ||
        (Config::BT / 16) * nv_wc_ * 32 > 1024)
      throw Error(ErrorCode::invalid_argument,
                  std::string(name) + ": tensor-core tiling (version " + std::to_string(nv_version_) +
                      ") nv_bv=" + std::to_string(nv_bv_) + " nv_wc=" + std::to_string(nv_wc_) +
                      " nv_kc=" + std::to_string(nv_kc_) + " nv_nbuf=" + std::to_string(nv_nbuf_) +
                      ": nv_bv must be a multiple of 16 * nv_wc dividing V, nv_kc 32 or 64 (version 2: also 16) "
                      "dividing K, nv_nbuf 1 or 2, within 48 KiB of shared memory and 1024 invocations");
    path_ = choose_path();
  }

  // Workgroups in the bf16 path's persistent grid (before the cap at one
  // per tile): on the H100 one per SM (132) ran 286-287 us against 291 for
  // 264 at B=8, T=2048, H=32 (bench/NOTES-gdn-scoreboard.md).
  std::uint32_t bf16_grid() const noexcept {
    return options_.bf16_workgroups ? options_.bf16_workgroups : ctx_->info().persistent_grid(264);
  }

  // The path record() takes on this context.
  ChunkOPath path() const noexcept { return path_; }
  // The tensor-core kernel version (1, 2 or 3) the tensor-core path would take.
  int nv_version() const noexcept { return nv_version_; }

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
    const std::uint64_t tiles = static_cast<std::uint64_t>(B * NT * H) * (Config::V / bv);
    // Version 3 dispatches persistent workgroups of nv_upw tiles each;
    // total_groups then counts tiles.
    const bool persistent = path_ == ChunkOPath::nv_cooperative_matrix && nv_version_ == 3;
    std::uint64_t groups = persistent ? (tiles + nv_upw_ - 1) / nv_upw_ : tiles;
    if (path_ == ChunkOPath::bf16_cooperative_matrix) groups = std::min<std::uint64_t>(tiles, bf16_grid());
    const Push push{0,
                    static_cast<std::uint32_t>(T),
                    static_cast<std::uint32_t>(H),
                    static_cast<std::uint32_t>(Hg),
                    static_cast<std::uint32_t>(NT),
                    static_cast<std::uint32_t>(tiles),
                    a.scale,
                    static_cast<std::uint32_t>(groups),
                    static_cast<std::uint32_t>(H / Hg),
                    static_cast<std::uint32_t>(B)};
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
    std::uint32_t stride;  // bf16 kernel: workgroups in the grid
    std::uint32_t ratio = 0, batch = 0;  // bf16 kernel: H / Hg, B
  };

  std::uint32_t nv_workgroup() const { return (Config::BT / 16) * nv_wc_ * 32; }
  std::uint32_t nv_shared_bytes() const {
    return nv_version_ == 3   ? Config::nv3_shared_bytes(nv_bv_, nv_wc_, nv_kc_)
           : nv_version_ == 2 ? Config::nv2_shared_bytes(nv_bv_, nv_wc_, nv_kc_, nv_nbuf_)
                              : Config::nv_shared_bytes(nv_bv_, nv_wc_, nv_kc_);
  }

  ChunkOPath choose_path() const {
    [[maybe_unused]] const auto& info = ctx_->info();
    [[maybe_unused]] const bool size32 = info.allows_subgroup_size(32);
#if TILEKERNELS_GDN_CHUNK_O_BF16
    if (Config::bf16_fits && options_.bf16 && options_.nv_version == 0 && info.cooperative_matrix_bf16 &&
        !ctx_->force_portable() && !options_.force_portable && size32 &&
        info.max_shared_memory >= Config::bf16_shared_bytes && info.max_workgroup_invocations >= 512)
      return ChunkOPath::bf16_cooperative_matrix;
#endif
#if TILEKERNELS_GLSLC_HAS_GL_NV_COOPERATIVE_MATRIX
    if (info.cooperative_matrix_nv && !ctx_->force_portable() && !options_.force_portable && size32 &&
        info.max_shared_memory >= nv_shared_bytes() &&
        info.max_workgroup_invocations >= nv_workgroup())
      return ChunkOPath::nv_cooperative_matrix;
#endif
    return ChunkOPath::portable;
  }

  const Pipeline& pipeline() const {
#if TILEKERNELS_GDN_CHUNK_O_BF16
    if (path_ == ChunkOPath::bf16_cooperative_matrix)
      return ctx_->pipeline({spirv::gdn_chunk_o_bf16.data(), spirv::gdn_chunk_o_bf16.size(),
                             {Config::BT, Config::K, Config::V, Config::bf16_vec4}, 6, sizeof(Push),
                             ctx_->info().subgroup_size == 32 ? 0u : 32u});
#endif
#if TILEKERNELS_GLSLC_HAS_GL_NV_COOPERATIVE_MATRIX
    if (path_ == ChunkOPath::nv_cooperative_matrix) {
      const auto& info = ctx_->info();
      const std::uint32_t wg = nv_workgroup();
      const std::uint32_t sg = info.subgroup_size == 32 ? 0 : 32;
      if (nv_version_ == 3)
        return ctx_->pipeline({spirv::gdn_chunk_o_nv3.data(), spirv::gdn_chunk_o_nv3.size(),
                               {wg, Config::BT, Config::K, Config::V, nv_bv_, wg, nv_wc_, nv_kc_, nv_upw_}, 6,
                               sizeof(Push), sg});
      if (nv_version_ == 2)
        return ctx_->pipeline({spirv::gdn_chunk_o_nv2.data(), spirv::gdn_chunk_o_nv2.size(),
                               {wg, Config::BT, Config::K, Config::V, nv_bv_, wg, nv_wc_, nv_kc_, nv_nbuf_},
                               6,
                               sizeof(Push), sg});
      return ctx_->pipeline({spirv::gdn_chunk_o_nv.data(), spirv::gdn_chunk_o_nv.size(),
                             {wg, Config::BT, Config::K, Config::V, nv_bv_, wg, nv_wc_, nv_kc_, nv_v_early_}, 6, sizeof(Push),
                             sg});
    }
#endif
    constexpr std::uint32_t wg = Config::portable_workgroup;
    return ctx_->pipeline({spirv::gdn_chunk_o.data(), spirv::gdn_chunk_o.size(),
                           {wg, Config::BT, Config::K, Config::V, Config::portable_bv, wg}, 6, sizeof(Push), 0});
  }

  Context* ctx_;
  ChunkOOptions options_;
  int nv_version_ = 1;
  std::uint32_t nv_bv_ = 0, nv_wc_ = 0, nv_kc_ = 0, nv_v_early_ = 1, nv_nbuf_ = 2, nv_upw_ = 16;
  ChunkOPath path_ = ChunkOPath::portable;
};

}  // namespace tilekernels::gdn
