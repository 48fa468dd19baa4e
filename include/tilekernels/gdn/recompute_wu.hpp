// Gated DeltaNet: recompute_w_u_fwd, the WY representation of a chunk.
//
// For each batch b, value head h and chunk of BT consecutive tokens:
//   u = A bf16(v * beta)               [BT, V]
//   w = A bf16((k * beta) * exp(g))    [BT, K]
// with A the chunk's solved (I + A)^-1 block, f32 accumulation, and the
// operand rounding to bf16 where flash-linear-attention rounds it. GQA: the
// key head of value head h is h / (H / Hg).
//
// Layout (numpy shapes, row-major, last index innermost):
//   k    [B, T, Hg, K]  bf16        v    [B, T, H, V]  bf16
//   beta [B, T, H]      f32         g    [B, T, H]     f32 (chunk-local cumulative gate, natural log)
//   A    [B, T, H, BT]  f32 (or bf16, Config::a_dtype, as FLA's pipeline passes it)
//                                  (row t holds the BT coefficients of its chunk)
//   w    [B, T, H, K]   bf16 out    u    [B, T, H, V]  bf16 out
// T need not be a multiple of BT: in the last chunk, rows past T are neither
// read nor written, and the columns of A past the chunk's last row are
// ignored (they may hold anything).
//
// Paths: `portable` runs on any Vulkan 1.2 device (A kept in f32).
// `cooperative_matrix_nv` runs the products on tensor cores in fp16 with f32
// accumulators; power-of-two row scalings keep every fp16 value below 2^15,
// so bf16 inputs beyond the fp16 range (65504) neither overflow nor lose
// precision, and A is rounded to fp16 (11 bits) -- or, with
// RecomputeWUOptions::split_a, carried as hi + lo fp16 parts (about 22 bits).
//
// `cooperative_matrix_bf16` runs them on bf16 tensor cores
// (VK_KHR_cooperative_matrix + VK_KHR_shader_bfloat16): the operands are the
// bf16 values FLA multiplies, so nothing is scaled; A in f32 is carried as
// bf16 + bf16 residual (about 16 bits). Built only when the shader compiler
// knows GL_KHR_cooperative_matrix and GL_EXT_bfloat16 (TK_GLSLANG in CMake).
// Its roundings to bf16 (operands and results) are three float operations
// (tk_round_bf16_split, shaders/common/convert.glsl): to nearest even, as
// FLA, for magnitudes up to 5.19e33; +-Inf and larger values there become
// NaN, where the other paths keep them.
//
// Tensor-core kernels (RecomputeWUOptions::tc_kernel):
// 3 the bf16 path, two kernels, both persistent (they walk the (batch,
//   chunk, head) tiles, loading the next tile while they multiply this
//   one): shaders/gdn/recompute_wu_bf16_uw.comp, u and w of a tile in one
//   512-invocation workgroup, where it applies (A in bf16, BT = 64, K and V
//   <= 128; RecomputeWUOptions::bf16_joint); else
//   shaders/gdn/recompute_wu_bf16.comp, pairs of 512-invocation workgroups
//   (256 where shared memory is short, or by
//   RecomputeWUOptions::bf16_invocations), one for u and one for w;
// 2 shaders/gdn/recompute_wu_tc.comp (the fp16 path's default): one
//   workgroup for u and one for w per (batch, chunk, head), every load issued up front, two barriers
//   before the products, per-subgroup output through shared memory;
//   RecomputeWUOptions::coop_workgroup 128, 256 or 512 invocations (512 by
//   default: the fastest measured);
// 1 shaders/gdn/recompute_wu_nv.comp, the first version (u and w in one
//   workgroup, 128-column passes, five barriers each, 128 or 256
//   invocations): kept for comparison, and as the fallback where version 2
//   does not fit 48 KiB (split A with BT = 64 and K or V > 128).
// Measured on an H100 at B=1, T=8192, Hg=16, H=32, K=V=128, A in f32:
// portable 621 us, kernel 1 1197 us, kernel 2 271 us, bf16 kernel 144 us;
// A in bf16 (as FLA passes it), B=1 T=8192 / B=8 T=2048: joint kernel 99 /
// 193 us, pairs kernel 115 / 222, FLA's Triton 108.5 / 198.7
// (bench/NOTES-gdn-scoreboard.md).
//
// Path choice (tc_kernel 0, the default): the bf16 path where the device and
// the build have it, else the fp16 one (VK_NV_cooperative_matrix, subgroups
// of 32, enough shared memory and invocations) where they have that;
// RecomputeWUOptions::force_portable, tensor_cores = false or TILEKERNELS_PATH=portable force the portable path.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "tilekernels/core.hpp"
#include "tilekernels/spirv/features.hpp"
#include "tilekernels/spirv/gdn/recompute_wu.hpp"
#if TILEKERNELS_GLSLC_HAS_GL_NV_COOPERATIVE_MATRIX
#include "tilekernels/spirv/gdn/recompute_wu_nv.hpp"
#include "tilekernels/spirv/gdn/recompute_wu_tc.hpp"
#endif
#if TILEKERNELS_GLSLC_HAS_GL_KHR_COOPERATIVE_MATRIX && TILEKERNELS_GLSLC_HAS_GL_EXT_BFLOAT16
#define TILEKERNELS_GDN_RECOMPUTE_WU_BF16 1
#include "tilekernels/spirv/gdn/recompute_wu_bf16.hpp"
#include "tilekernels/spirv/gdn/recompute_wu_bf16_uw.hpp"
#else
#define TILEKERNELS_GDN_RECOMPUTE_WU_BF16 0
#endif

namespace tilekernels::gdn {

template <std::uint32_t BT = 64, std::uint32_t K = 128, std::uint32_t V = 128, DType AType = DType::f32>
struct RecomputeWUConfig {
  static_assert(AType == DType::f32 || AType == DType::bf16,
                "RecomputeWUConfig: A must be DType::f32 (the solved blocks as computed) or DType::bf16 (as FLA's "
                "chunked pipeline stores them)");
  static_assert(BT == 16 || BT == 32 || BT == 64,
                "RecomputeWUConfig: BT must be 16, 32 or 64 (whole 16-row tensor-core tiles, at most 4 per chunk)");
  static_assert(K % 16 == 0 && V % 16 == 0,
                "RecomputeWUConfig: K and V must be multiples of 16 (whole 16-column tensor-core tiles and "
                "16-byte row loads)");
  static_assert(K >= 16 && K <= 256, "RecomputeWUConfig: K must be in [16, 256] (the passes over columns are unrolled "
                                     "at specialisation; larger heads would need more registers than a pass keeps)");
  static_assert(V >= 16 && V <= 256, "RecomputeWUConfig: V must be in [16, 256] (the passes over columns are unrolled "
                                     "at specialisation; larger heads would need more registers than a pass keeps)");

  static constexpr std::uint32_t bt = BT, k = K, v = V;
  static constexpr DType a_dtype = AType;

  // Portable path: the A block in f32 plus a 64-column slab of bf16 operands.
  static constexpr std::uint32_t portable_shared_bytes = BT * BT * 4 + BT * 32 * 4;
  static_assert(portable_shared_bytes <= 32768,
                "RecomputeWUConfig: the portable path must fit the portable 32 KiB of shared memory");

  // Tensor-core kernel 1 (shaders/gdn/recompute_wu_nv.comp): per pass of 128
  // columns, fp16 operand rows and A (hi, and lo when split), then the same
  // memory reused for the f32 accumulators; plus two shift tables.
  static constexpr std::uint32_t coop_vec4(bool split) {
    const std::uint32_t staged = BT * (128 / 8 + 1) + BT * (BT / 8 + 1) * (split ? 2 : 1);
    const std::uint32_t accumulators = BT * (128 / 4 + 1);
    return std::max(staged, accumulators);
  }
  static constexpr std::uint32_t coop_shared_bytes(bool split) { return coop_vec4(split) * 16 + 2 * BT * 4; }
  static_assert(coop_shared_bytes(true) <= 49152,
                "RecomputeWUConfig: the tensor-core path must fit 48 KiB of shared memory");

  // Tensor-core kernel 2 (shaders/gdn/recompute_wu_tc.comp): fp16 operand rows
  // [BT][max(K, V) / 8 + 1] and A (hi, and lo when split) [BT][BT / 8 + 1]
  // uvec4s, later reused as per-subgroup f32 scratch (16 x 20 floats each);
  // plus two shift tables. A subgroup keeps at most 8 accumulator tiles, so
  // BT = 64 with K or V > 128 takes 8 subgroups whatever was asked.
  static constexpr std::uint32_t tc_op_stride = std::max(K, V) / 8 + 1;
  static constexpr std::uint32_t tc_workgroup(std::uint32_t requested) {
    const std::uint32_t wg = BT == 64 && std::max(K, V) > 128 && requested < 256 ? 256 : requested;
    return std::min(wg, BT * 16);  // at least one operand row per 16 lanes
  }
  static constexpr std::uint32_t tc_vec4(bool split, std::uint32_t workgroup) {
    const std::uint32_t staged = BT * tc_op_stride + BT * (BT / 8 + 1) * (split ? 2 : 1);
    const std::uint32_t scratch = tc_workgroup(workgroup) / 32 * 16 * 5;
    return std::max(staged, scratch);
  }
  static constexpr std::uint32_t tc_shared_bytes(bool split, std::uint32_t workgroup) {
    return tc_vec4(split, workgroup) * 16 + 2 * BT * 4;
  }
  static_assert(tc_shared_bytes(false, 512) <= 49152,
                "RecomputeWUConfig: tensor-core kernel 2 must fit 48 KiB of shared memory without split A");

  // bf16 kernel (shaders/gdn/recompute_wu_bf16.comp), `workgroup` (256 or
  // 512) invocations: bf16 operand rows [BT][max(K, V) / 8 + 1] and A
  // [BT][BT / 8 + 1] uvec4s (twice for A in f32), then each subgroup's
  // output scratch (16 x 3 uvec4). Where 512 invocations exceed 48 KiB the
  // kernel takes 256; configurations beyond 48 KiB even then (BT = 64, A
  // f32, K or V > 160) take the fp16 path.
  static constexpr std::uint32_t bf16_vec4_for(std::uint32_t workgroup) {
    return BT * tc_op_stride + BT * (BT / 8 + 1) * (AType == DType::f32 ? 2u : 1u) + workgroup / 32 * 16 * 3;
  }

  // bf16 kernel with u and w in one workgroup
  // (shaders/gdn/recompute_wu_bf16_uw.comp): A in bf16, BT = 64, K and V <=
  // 128, 512 invocations; v rows [64][V / 8 + 1], k rows [64][K / 8 + 1]
  // and A rows [64][9] uvec4s (44032 bytes at K = V = 128).
  static constexpr bool bf16_joint_shape = AType == DType::bf16 && BT == 64 && K <= 128 && V <= 128;
  static constexpr std::uint32_t bf16_joint_bytes = 16 * BT * ((K / 8 + 1) + (V / 8 + 1) + (BT / 8 + 1));
};

enum class RecomputeWUPath { portable, cooperative_matrix_nv, cooperative_matrix_bf16 };

inline const char* path_name(RecomputeWUPath p) {
  return p == RecomputeWUPath::portable                ? "portable"
         : p == RecomputeWUPath::cooperative_matrix_nv ? "cooperative_matrix_nv"
                                                       : "cooperative_matrix_bf16";
}

struct RecomputeWUOptions {
  bool force_portable = false;  // take the portable path even where the tensor-core one exists
  bool split_a = false;         // tensor-core path: A as hi + lo fp16 parts (two MMAs)
  std::uint32_t coop_workgroup = 512;  // tensor-core path: invocations per workgroup, 128, 256 or 512 (kernel 1: 128 or 256)
  bool tensor_cores = true;     // take the tensor-core path where available (see the header comment)
  // tensor-core kernel: 0 automatic (3 where available, else 2), 3 (bf16,
  // recompute_wu_bf16; 2 where unavailable), 2 (recompute_wu_tc) or 1
  // (recompute_wu_nv, the first version)
  std::uint32_t tc_kernel = 0;
  // bf16 kernels: persistent workgroups in the grid (even, >= 2; fewer when
  // there are fewer tiles). 0: one per multiprocessor where the device
  // reports them (DeviceInfo; rounded up to even for the pairs kernel),
  // else 264.
  std::uint32_t bf16_workgroups = 0;
  // bf16 kernel: invocations per workgroup, 0 automatic (512 where its
  // shared memory fits 48 KiB, else 256), 256 or 512.
  std::uint32_t bf16_invocations = 0;
  // bf16 path: u and w of a tile in one 512-invocation workgroup
  // (recompute_wu_bf16_uw) where it applies: A in bf16, BT = 64, K and V <=
  // 128, bf16_invocations 0 or 512, 44 KB of shared memory at K = V = 128.
  // false: the pairs kernel (recompute_wu_bf16) always.
  bool bf16_joint = true;
};

template <class Config>
class RecomputeWU {
 public:
  static constexpr const char* name = "gdn.recompute_wu";

  struct Args {
    TensorRef k, v, beta, g, A, w, u;
  };

  explicit RecomputeWU(Context& ctx, RecomputeWUOptions options = {}) : ctx_(&ctx), options_(options) {
    if (options_.coop_workgroup != 128 && options_.coop_workgroup != 256 && options_.coop_workgroup != 512)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": coop_workgroup must be 128, 256 or 512, got " +
                                                   std::to_string(options_.coop_workgroup));
    if (options_.bf16_workgroups == 1 || options_.bf16_workgroups % 2 != 0)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": bf16_workgroups must be 0 or even and >= 2, got " +
                                                   std::to_string(options_.bf16_workgroups));
    if (options_.bf16_invocations != 0 && options_.bf16_invocations != 256 && options_.bf16_invocations != 512)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": bf16_invocations must be 0, 256 or 512, got " +
                                                   std::to_string(options_.bf16_invocations));
    if (options_.tc_kernel > 3)
      throw Error(ErrorCode::invalid_argument,
                  std::string(name) + ": tc_kernel must be 0, 1, 2 or 3, got " + std::to_string(options_.tc_kernel));
  }

  // Whether this device and build run the bf16 kernel for this Config.
  bool bf16_available() const {
#if TILEKERNELS_GDN_RECOMPUTE_WU_BF16
    return ctx_->info().cooperative_matrix_bf16 && subgroup_32() && bf16_fits(bf16_invocations());
#else
    return false;
#endif
  }

  // The bf16 kernel's invocations per workgroup with these options.
  std::uint32_t bf16_invocations() const {
    if (options_.bf16_invocations != 0) return options_.bf16_invocations;
    return bf16_fits(512) ? 512 : 256;
  }

  // Workgroups in the bf16 kernel's persistent grid (before the cap at one
  // per tile, or two for the pairs kernel): on the H100 one per SM (132)
  // ran the pairs kernel at 120 / 232-233 us against 121-122 / 234 for 264
  // (bench/NOTES-gdn-scoreboard.md); the joint kernel holds one per SM.
  std::uint32_t bf16_grid() const noexcept {
    if (options_.bf16_workgroups) return options_.bf16_workgroups;
    if (bf16_joint()) return ctx_->info().persistent_grid(264);
    return std::max(2u, (ctx_->info().persistent_grid(264) + 1) / 2 * 2);  // u and w pairs
  }

  // Whether the bf16 path runs u and w of a tile in one workgroup (the
  // joint kernel) with these options on this device.
  bool bf16_joint() const {
    if (!options_.bf16_joint || !Config::bf16_joint_shape || options_.bf16_invocations == 256) return false;
    const auto& info = ctx_->info();
    return Config::bf16_joint_bytes <= info.max_shared_memory && 512 <= info.max_workgroup_invocations;
  }

  // Whether the bf16 kernel at `workgroup` invocations fits 48 KiB of
  // shared memory and this device.
  bool bf16_fits(std::uint32_t workgroup) const {
    const std::uint32_t bytes = Config::bf16_vec4_for(workgroup) * 16;
    return bytes <= 49152 && bytes <= ctx_->info().max_shared_memory &&
           workgroup <= ctx_->info().max_workgroup_invocations;
  }

  // The tensor-core kernel record() uses on a tensor-core path: 3 where
  // asked for (or automatic) and available; else 2 unless asked for 1, or 2
  // does not fit this device's shared memory (then 1).
  std::uint32_t tc_kernel() const {
    if ((options_.tc_kernel == 0 || options_.tc_kernel == 3) && bf16_available()) return 3;
    if (options_.tc_kernel != 1 && Config::tc_shared_bytes(options_.split_a, options_.coop_workgroup) <= 49152 &&
        Config::tc_shared_bytes(options_.split_a, options_.coop_workgroup) <= ctx_->info().max_shared_memory &&
        Config::tc_workgroup(options_.coop_workgroup) <= ctx_->info().max_workgroup_invocations)
      return 2;
    return 1;
  }

  // The path record() takes on this context with these options.
  RecomputeWUPath path() const {
    const bool allowed = options_.tensor_cores && !options_.force_portable && !ctx_->force_portable();
    if (allowed && tc_kernel() == 3) return RecomputeWUPath::cooperative_matrix_bf16;
#if TILEKERNELS_GLSLC_HAS_GL_NV_COOPERATIVE_MATRIX
    const auto& info = ctx_->info();
    if (allowed && info.cooperative_matrix_nv && subgroup_32() &&
        info.max_workgroup_invocations >= std::min(options_.coop_workgroup, 256u) && Config::coop_shared_bytes(options_.split_a) <= info.max_shared_memory)
      return RecomputeWUPath::cooperative_matrix_nv;
#endif
    return RecomputeWUPath::portable;
  }

  // Throws tilekernels::Error naming the first argument that is wrong.
  void check(const Args& a) const {
    detail::expect_rank(name, "k", a.k, 4);
    detail::expect_rank(name, "v", a.v, 4);
    const auto B = a.k.shape[0], T = a.k.shape[1], Hg = a.k.shape[2], H = a.v.shape[2];
    const std::int64_t K = Config::k, V = Config::v, BT = Config::bt;
    detail::expect_tensor(*ctx_, name, "k", a.k, DType::bf16, {B, T, Hg, K});
    detail::expect_tensor(*ctx_, name, "v", a.v, DType::bf16, {B, T, H, V});
    if (H % Hg != 0)
      throw Error(ErrorCode::shape_mismatch, detail::where(name, "v") + "value heads H = " + std::to_string(H) +
                                                 " must be a multiple of the key heads Hg = " + std::to_string(Hg) +
                                                 " of k");
    detail::expect_tensor(*ctx_, name, "beta", a.beta, DType::f32, {B, T, H});
    detail::expect_tensor(*ctx_, name, "g", a.g, DType::f32, {B, T, H});
    detail::expect_tensor(*ctx_, name, "A", a.A, Config::a_dtype, {B, T, H, BT});
    detail::expect_tensor(*ctx_, name, "w", a.w, DType::bf16, {B, T, H, K});
    detail::expect_tensor(*ctx_, name, "u", a.u, DType::bf16, {B, T, H, V});
    // The shaders index elements with 32-bit integers.
    const auto index_limit = [&](const char* tensor, const TensorRef& t) {
      if (t.elements() >= (std::int64_t(1) << 32))
        throw Error(ErrorCode::unsupported,
                    detail::where(name, tensor) + "more than 2^32 elements: too many for 32-bit indexing");
    };
    index_limit("k", a.k);
    index_limit("v", a.v);
    index_limit("A", a.A);
    index_limit("w", a.w);
    index_limit("u", a.u);
  }

  void record(vk::CommandBuffer cmd, const Args& a) const {
    check(a);
    const auto B = a.k.shape[0], T = a.k.shape[1], Hg = a.k.shape[2], H = a.v.shape[2];
    const std::int64_t chunks = (T + Config::bt - 1) / Config::bt;
    const Push push{0, static_cast<std::uint32_t>(B), static_cast<std::uint32_t>(T), static_cast<std::uint32_t>(Hg),
                    static_cast<std::uint32_t>(H), static_cast<std::uint32_t>(chunks)};
    const std::uint64_t groups = static_cast<std::uint64_t>(B * chunks * H);
    const auto a_code = static_cast<std::uint32_t>(Config::a_dtype);
#if TILEKERNELS_GDN_RECOMPUTE_WU_BF16
    if (path() == RecomputeWUPath::cooperative_matrix_bf16 && bf16_joint()) {
      const PipelineKey key{spirv::gdn_recompute_wu_bf16_uw.data(), spirv::gdn_recompute_wu_bf16_uw.size(),
                            {Config::k, Config::v}, 7, sizeof(Push),
                            ctx_->info().subgroup_size_control ? 32u : 0u};
      Push walk = push;
      walk.pairs = static_cast<std::uint32_t>(std::min<std::uint64_t>(groups, bf16_grid()));
      walk.ratio = static_cast<std::uint32_t>(H / Hg);
      detail::record_dispatch(*ctx_, cmd, ctx_->pipeline(key), {a.k, a.v, a.beta, a.g, a.A, a.w, a.u}, walk,
                              walk.pairs);
      return;
    }
    if (path() == RecomputeWUPath::cooperative_matrix_bf16) {
      const std::uint32_t wg = bf16_invocations();
      const PipelineKey bf16_key{spirv::gdn_recompute_wu_bf16.data(),
                                 spirv::gdn_recompute_wu_bf16.size(),
                                 {Config::bt, Config::k, Config::v, a_code, wg, Config::tc_op_stride,
                                  Config::bf16_vec4_for(wg)},
                                 7,
                                 sizeof(Push),
                                 ctx_->info().subgroup_size_control ? 32u : 0u};
      // Persistent workgroups: each pair walks the tiles with a stride of
      // `pairs`, prefetching the next tile while it multiplies this one.
      Push walk = push;
      walk.pairs = static_cast<std::uint32_t>(std::min<std::uint64_t>(groups, bf16_grid() / 2));
      walk.ratio = static_cast<std::uint32_t>(H / Hg);
      detail::record_dispatch(*ctx_, cmd, ctx_->pipeline(bf16_key), {a.k, a.v, a.beta, a.g, a.A, a.w, a.u}, walk,
                              2 * std::uint64_t(walk.pairs));
      return;
    }
#endif
    PipelineKey key{spirv::gdn_recompute_wu.data(), spirv::gdn_recompute_wu.size(),
                    {Config::bt, Config::k, Config::v, a_code}, 7, sizeof(Push), 0};
#if TILEKERNELS_GLSLC_HAS_GL_NV_COOPERATIVE_MATRIX
    if (path() == RecomputeWUPath::cooperative_matrix_nv && tc_kernel() == 2) {
      const std::uint32_t wg = Config::tc_workgroup(options_.coop_workgroup);
      key = PipelineKey{spirv::gdn_recompute_wu_tc.data(),
                        spirv::gdn_recompute_wu_tc.size(),
                        {Config::bt, Config::k, Config::v, options_.split_a ? 1u : 0u,
                         Config::tc_vec4(options_.split_a, options_.coop_workgroup), wg, a_code, Config::tc_op_stride},
                        7,
                        sizeof(Push),
                        ctx_->info().subgroup_size_control ? 32u : 0u};
      const Pipeline& pipeline = ctx_->pipeline(key);
      detail::record_dispatch(*ctx_, cmd, pipeline, {a.k, a.v, a.beta, a.g, a.A, a.w, a.u}, push, 2 * groups);
      return;
    }
    if (path() == RecomputeWUPath::cooperative_matrix_nv) {
      key = PipelineKey{spirv::gdn_recompute_wu_nv.data(),
                        spirv::gdn_recompute_wu_nv.size(),
                        {Config::bt, Config::k, Config::v, options_.split_a ? 1u : 0u,
                         Config::coop_vec4(options_.split_a), std::min(options_.coop_workgroup, 256u), a_code},
                        7,
                        sizeof(Push),
                        ctx_->info().subgroup_size_control ? 32u : 0u};
    }
#endif
    const Pipeline& pipeline = ctx_->pipeline(key);
    detail::record_dispatch(*ctx_, cmd, pipeline, {a.k, a.v, a.beta, a.g, a.A, a.w, a.u}, push, groups);
  }

  // Records into a fresh command buffer, submits and waits.
  void run(const Args& a) const {
    check(a);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, a); });
  }

  // Bytes moved when every tensor is read or written once (the memory floor).
  static std::uint64_t bytes(std::int64_t B, std::int64_t T, std::int64_t Hg, std::int64_t H) {
    const auto bt = static_cast<std::uint64_t>(B * T);
    const std::uint64_t a_bytes = dtype_size(Config::a_dtype);
    return bt * (Hg * Config::k * 2 + H * (Config::v * 2 + 4 + 4 + Config::bt * a_bytes + Config::k * 2 + Config::v * 2));
  }
  // Flops of the two products (full BT x BT blocks, as computed).
  static std::uint64_t flops(std::int64_t B, std::int64_t T, std::int64_t H) {
    return static_cast<std::uint64_t>(B * T * H) * 2ull * Config::bt * (Config::k + Config::v);
  }

 private:
  bool subgroup_32() const { return ctx_->info().allows_subgroup_size(32); }

  struct Push {
    std::uint32_t group_offset, batch, T, Hg, H, chunks;
    std::uint32_t pairs = 0;  // bf16 kernels: workgroup pairs (joint kernel: workgroups) in the grid
    std::uint32_t ratio = 0;  // bf16 kernel: H / Hg
  };
  Context* ctx_;
  RecomputeWUOptions options_;
};

}  // namespace tilekernels::gdn
