// SPDX-License-Identifier: MIT
// AURA fused encode: TurboQuant-style compression of K/V rows.
//
// Per input row x (one K or V vector of Dim values):
//   n = ||x||,  u = x / n (0 for a zero row),
//   rotated[d] = sum_j R[d, j] u[j]                (Encode: dense R)
//             or (H (s * u))[d] / sqrt(Dim)         (HadamardEncode: R of rotation.hpp)
//   code[d] = #{ i : rotated[d] > boundaries[i] }    (strictly exceeded: a value equal to a
//                                                    boundary goes to the lower cell)
//   norm_out = n / ||codebook[code]||  (n itself where that norm is below 1e-30)
// Codes are packed at bit offset d * Bits of the row's little-endian u32
// stream (3- and 6-bit codes straddle words). All math is f32 whatever the
// input dtype; codes can differ from the double reference only where a
// rotated value lies within f32 rounding (~1e-6) of a boundary (GPUs may
// also flush subnormal values to zero, i.e. onto the middle boundary 0).
//
// Layout (row-major):
//   input      [rows, Dim]          In (f32, f16 or bf16)
//   rotation   [Dim, Dim]           f32   (Encode)      signs [Dim] f32 +-1 (HadamardEncode; the
//                                                       default kernel reads only their sign bits)
//   boundaries [2^Bits - 1]         f32, ascending (the kernel binary-searches them)
//   codebook   [2^Bits]             f32
//   packed     [rows, Dim*Bits/32]  u32
//   norms      [rows]               f32
// Edge cases: a zero row gets norm 0 and the codes of the value 0 (decodes
// to zeros). A row with NaN gets a NaN norm and code 0 for every coordinate;
// a row with +-Inf (and no NaN) gets norm +Inf and code 0 (NaN products).
// A row whose squares overflow or underflow f32 (|x| beyond ~1e19 or below
// ~1e-15) has its norm computed again on the row scaled by a power of two,
// and is divided by it in range (shaders/common/row_norm.glsl): its norm is
// finite wherever ||x|| fits f32 and its codes are the row's. Other rows
// are never affected.
//
// Encode's variants (Encode::variants), fastest first:
// - few_rows_c{8,16,32}[_atomic64] (encode_few_rows.comp): calls of up to
//   64 rows that pass a workspace. The rotation is spread over Dim / C
//   workgroups per 8 rows (C output coordinates each: the smallest block
//   these Bits allow that keeps the grid within 128 workgroups), which
//   combine their parts of the norm correction through the workspace: one
//   64-bit atomic per row where the device has them, else parts, an
//   arrival counter and a read-back by the last workgroup;
// - tensor_core_fp16 (encode_fp16.comp): VK_KHR_cooperative_matrix on the
//   device's fp16 tile (shaders/common/mma.glsl), 8 subgroups of any size,
//   fp16 x fp16 with f32 accumulators, Dim <= 256. Each row is scaled by a
//   power of two into the fp16 range (bf16/f16 values stay exact; f32 values are
//   carried as hi + lo fp16 parts, 22 bits) and R, scaled by a power of two
//   from max |R|, as fp16 parts of one scale (EncodeOptions::rotation_parts):
//   2 by default, each entry to within 2^-20 of itself, so a rotated value
//   of a unit row moves by at most ~1e-6 from the f32 kernel's (the f32
//   product's own rounding is of the same order) and only values that
//   close to a boundary can get the other of its two cells -- equally far
//   from both centroids for Lloyd-Max boundaries, so the distortion is the
//   same; 3 for R exactly (every entry within 2^-14 of max |R|; smaller
//   ones to ~2^-39 of max |R|): each product exact, only the f32
//   accumulation rounds, as in the f32 kernel, and values on a boundary go
//   to the lower cell as there. Entries of R below ~2^-40 max |R| (e.g.
//   subnormals) count as 0. Non-finite rows as above;
// - tiled (encode.comp): the portable f32 kernel, everywhere else.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "tilekernels/aura/encode_abi.h"
#include "tilekernels/core.hpp"
#include "tilekernels/spirv/aura/encode.hpp"
#include "tilekernels/spirv/aura/encode_few_rows.hpp"
#include "tilekernels/spirv/aura/encode_few_rows_atomic64.hpp"
#include "tilekernels/spirv/aura/encode_few_rows_c16.hpp"
#include "tilekernels/spirv/aura/encode_few_rows_c16_atomic64.hpp"
#include "tilekernels/spirv/aura/encode_few_rows_c8.hpp"
#include "tilekernels/spirv/aura/encode_few_rows_c8_atomic64.hpp"
#include "tilekernels/spirv/aura/encode_fp16.hpp"

namespace tilekernels::aura {

// Split codes (HiDims > 0: the paged cache's split keys, paged_cache.hpp):
// the first HiDims rotated coordinates take Bits + 1 bits, with their own
// boundaries and codebook (Args::hi_boundaries, hi_codebook: the Lloyd-Max
// tables of that width), and a row's first HiDims * (Bits + 1) / 32
// words; the rest follow at Bits. One norm correction over both parts.
// The tiled variant encodes them (HadamardEncode does not: pass the
// Hadamard matrix, rotation.hpp, as Encode's rotation).
template <std::uint32_t Dim, std::uint32_t Bits, DType In = DType::bf16, std::uint32_t HiDims = 0>
struct EncodeConfig {
  static_assert(Dim % 32 == 0, "EncodeConfig: Dim must be a multiple of 32 (whole 32-value blocks and whole packed words)");
  static_assert(Dim >= 32 && Dim <= 512, "EncodeConfig: Dim must be in [32, 512] (shared memory is sized from Dim)");
  static_assert(Bits == 2 || Bits == 3 || Bits == 4 || Bits == 6 || Bits == 8,
                "EncodeConfig: Bits must be 2, 3, 4, 6 or 8");
  static_assert(In == DType::f32 || In == DType::f16 || In == DType::bf16,
                "EncodeConfig: In must be DType::f32, DType::f16 or DType::bf16");

  static_assert(HiDims == 0 || ((Bits == 2 || Bits == 3) && HiDims % 32 == 0 && HiDims < Dim),
                "EncodeConfig: split codes (HiDims > 0) need Bits 2 or 3 and HiDims a multiple of 32 below Dim");

  static constexpr std::uint32_t dim = Dim;
  static constexpr std::uint32_t bits = Bits;
  static constexpr DType in_dtype = In;
  static constexpr std::uint32_t levels = 1u << Bits;
  static constexpr std::uint32_t hi_dims = HiDims;
  static constexpr std::uint32_t hi_levels = HiDims ? 2u << Bits : 0;  // the codebook above the split
  static constexpr std::uint32_t packed_words = (HiDims * (Bits + 1) + (Dim - HiDims) * Bits) / 32;  // per row
  static_assert(packed_words * 32 == HiDims * (Bits + 1) + (Dim - HiDims) * Bits,
                "EncodeConfig: a row must pack into whole u32 words");

  // tiled: LANES * ROW_GROUPS invocations, each owning 8 coordinates of TM
  // rows; the product runs over chunks of k_chunk columns.
  static constexpr std::uint32_t lanes = Dim / 8;
  static constexpr std::uint32_t row_groups = std::min<std::uint32_t>(std::bit_floor(256 / lanes), 32);
  static constexpr std::uint32_t tiled_invocations = lanes * row_groups;
  static constexpr std::uint32_t max_rows_per_invocation = std::min<std::uint32_t>(8, lanes);
  // Columns per staged chunk: wide chunks (fewer load round trips, what
  // few-row calls are bound by) where the rotation chunk still fits.
  static constexpr std::uint32_t k_chunk(std::uint32_t tm) { return tm <= 2 && Dim <= 128 ? 32 : Dim <= 256 ? 16 : 8; }
  static constexpr std::uint32_t tiled_shared_bytes(std::uint32_t tm) {
    return TK_ENCODE_TILED_SHARED_BYTES(Dim, Bits, hi_levels, row_groups, tm, k_chunk(tm));
  }
  static_assert(tiled_shared_bytes(1) <= 32768 && tiled_shared_bytes(2) <= 32768 &&
                    tiled_shared_bytes(max_rows_per_invocation) <= 32768,
                "EncodeConfig: the tiled kernel must fit the portable 32 KiB of shared memory");

  // few_rows: one workgroup of 256 invocations per (8 rows, C output
  // coordinates), 256 / C invocations per coordinate, each with whole
  // 16-byte pieces of the rotation row (Dim a multiple of 1024 / C); a
  // block's codes fill whole words (C * Bits a multiple of 32).
  static constexpr std::uint32_t few_rows_max = 64;        // calls of more rows take the other variants
  static constexpr std::uint32_t few_rows_per_group = 8;   // literal in the shader
  static constexpr std::uint32_t few_rows_invocations = 256;
  static constexpr bool few_rows_block_allowed(std::uint32_t c) {
    return (c == 32 || c == 16 || c == 8) && c * Bits % 32 == 0 && Dim % (1024 / c) == 0;
  }
  static constexpr std::uint32_t few_rows_max_blocks =
      Dim / (few_rows_block_allowed(8) ? 8 : few_rows_block_allowed(16) ? 16 : 32);
  static constexpr std::uint32_t few_rows_shared_bytes = TK_ENCODE_FEW_ROWS_SHARED_BYTES(Dim, Bits);
  static_assert(few_rows_shared_bytes <= 32768,
                "EncodeConfig: the few-rows kernel must fit the portable 32 KiB of shared memory");

  // Register Hadamard kernel (HadamardEncode): v values per invocation (8..64,
  // a power of two, <= Dim), Dim / v invocations per row, `rows` rows per
  // workgroup.
  static constexpr std::uint32_t hadamard_values = 32;
  static constexpr std::uint32_t hadamard_sg_shared_bytes(std::uint32_t v, std::uint32_t rows) {
    const std::uint32_t wg = rows * (Dim / v);
    return 4 * (wg * (v > 32 ? v / 4 : 8) + wg + Dim + 2 * levels) + TK_AURA_CELL_TABLE_BYTES;
  }
  static_assert(hadamard_sg_shared_bytes(hadamard_values, 256 * hadamard_values / Dim) <= 32768,
                "EncodeConfig: the register Hadamard kernel must fit the portable 32 KiB of shared memory");

  // tensor_core_fp16: 8 subgroups of the device's size, blocks of `rows`
  // rows (as many as the device's shared memory allows); subgroup grid of
  // row groups x column groups, each subgroup rps x cps 16x16 accumulator
  // tiles; `buffers` staging buffers for the rotation
  // parts. Not for Dim > 256 (the staged block would not leave room for 16
  // rows).
  struct Fp16Geometry {
    std::uint32_t rows = 0, rps = 0, cps = 0, buffers = 0, shared_bytes = 0;
  };
  static constexpr std::uint32_t fp16_subgroups = 8;
  static constexpr std::uint32_t fp16_shared_limit = 49152;  // what NVIDIA's Vulkan drivers give a workgroup
  static constexpr Fp16Geometry fp16_geometry_for(std::uint32_t bm, std::uint32_t nbuf) {
    Fp16Geometry g;
    constexpr std::uint32_t nsg = fp16_subgroups;
    // Blocks whose pieces of 8 values stay in registers (8 per invocation)
    // at subgroups of 32 or more; smaller subgroups load them twice.
    if (Dim > 256 || bm * Dim > 64 * nsg * 32) return g;
    const std::uint32_t rt = bm / 16, ct = Dim / 16;
    std::uint32_t best = 0;
    for (std::uint32_t rg : {1u, 2u, 4u, 8u, 16u}) {
      if (rt % rg != 0 || nsg % rg != 0 || ct % (nsg / rg) != 0) continue;
      const std::uint32_t rps = rt / rg, cps = ct / (nsg / rg);
      if (rps > 2 || cps > 8 || rps * cps > 8) continue;
      if (best == 0 || rps + cps < best) {
        best = rps + cps;
        g.rps = rps;
        g.cps = cps;
      }
    }
    if (best == 0) return g;
    g.rows = bm;
    g.buffers = nbuf;
    g.shared_bytes = TK_ENCODE_FP16_SHARED_BYTES(Dim, Bits, In == DType::f32 ? 2u : 1u, nsg, bm, g.rps, nbuf);
    return g;
  }
  // The first of (128 rows, 2 buffers), (128, 1), (64, 2), ... that fits
  // `shared` bytes (the device's limit) and 48 KiB; with `least`, the one
  // that needs the least shared memory.
  static constexpr Fp16Geometry fp16_geometry(std::uint32_t shared = fp16_shared_limit, bool least = false) {
    Fp16Geometry best;
    for (std::uint32_t bm : {128u, 64u, 32u, 16u})
      for (std::uint32_t nbuf : {2u, 1u}) {
        const auto g = fp16_geometry_for(bm, nbuf);
        if (g.rows == 0 || g.shared_bytes > std::min(shared, fp16_shared_limit)) continue;
        if (!least) return g;
        if (best.rows == 0 || g.shared_bytes < best.shared_bytes) best = g;
      }
    return best;
  }
  static constexpr Fp16Geometry fp16_least = fp16_geometry(fp16_shared_limit, true);  // what the variant needs
  static constexpr bool fp16_supported = fp16_least.rows != 0;
};

namespace detail {
using namespace tilekernels::detail;

template <class Config>
void expect_encode_tensors(const Context& ctx, const char* name, const TensorRef& input, const TensorRef& boundaries,
                           const TensorRef& codebook, const TensorRef& packed, const TensorRef& norms) {
  expect_rank(name, "input", input, 2);
  const auto rows = input.shape[0];
  expect_tensor(ctx, name, "input", input, Config::in_dtype, {rows, Config::dim});
  expect_tensor(ctx, name, "boundaries", boundaries, DType::f32, {Config::levels - 1});
  expect_tensor(ctx, name, "codebook", codebook, DType::f32, {Config::levels});
  expect_tensor(ctx, name, "packed", packed, DType::u32, {rows, Config::packed_words});
  expect_tensor(ctx, name, "norms", norms, DType::f32, {rows});
  if (static_cast<std::uint64_t>(rows) * Config::dim >= (1ull << 32))
    throw Error(ErrorCode::unsupported, std::string(name) + ": input has too many elements for 32-bit indexing");
}

}  // namespace detail

// What a user chooses for Encode.
struct EncodeOptions {
  // tensor_core_fp16: fp16 parts of the rotation, 2 (each R entry to within
  // 2^-20 of itself) or 3 (each R entry exact: the codes as exact as the
  // f32 kernel's, ties included; one product more per tile).
  std::uint32_t rotation_parts = 2;
};

// The pipelines depend on the shape only through the rows (few_rows for up
// to 64 with a workspace, the tiled kernel's rows per invocation): every
// call is inside.
struct EncodeEnvelope {};

// Dense-rotation encode.
template <class Config>
class Encode : public KernelBase<Encode<Config>, EncodeEnvelope> {
  using Base = KernelBase<Encode<Config>, EncodeEnvelope>;
  using Base::ctx_;
  using Base::pipelines_;

 public:
  using Base::plan;
  static constexpr const char* name = "aura.encode";
  TK_DECLARE_SPEC(TK_ENCODE_SPEC)
  TK_DECLARE_PUSH(TK_ENCODE_PUSH)

  struct Args {
    TensorRef input, rotation, boundaries, codebook, packed, norms;
    std::optional<Workspace> workspace = std::nullopt;  // few_rows, for calls of up to 64 rows (workspace_bytes)
    // Split codes only: [2^(Bits+1) - 1] and [2^(Bits+1)] f32.
    std::optional<TensorRef> hi_boundaries = std::nullopt, hi_codebook = std::nullopt;
  };
  struct Problem {
    std::int64_t rows = 0;
    bool workspace = false;  // a workspace of workspace_bytes(rows) is there (plan() sets it)
  };

 private:
  // few_rows with blocks of C coordinates: for calls of up to 64 rows with a
  // workspace, where C suits these Bits and Dim and the grid stays within
  // 128 workgroups (C = 32 always may); the table lists C = 8, 16, 32 in
  // that order, so the automatic choice is the smallest block that fits.
  template <std::uint32_t C>
  static Status few_rows_applies(const DeviceInfo&, const Problem& p) {
    if (Config::hi_dims) return Status::failure(ErrorCode::unsupported, "split codes are encoded by the tiled variant");
    if (p.rows > Config::few_rows_max) return Status::failure(ErrorCode::unsupported, "for calls of up to 64 rows");
    if (!p.workspace) return Status::failure(ErrorCode::unsupported, "needs a workspace");
    if (!Config::few_rows_block_allowed(C))
      return Status::failure(ErrorCode::unsupported, "blocks of " + std::to_string(C) + " do not suit these Bits and Dim");
    const auto row_blocks = static_cast<std::uint64_t>((p.rows + Config::few_rows_per_group - 1) / Config::few_rows_per_group);
    if (C != 32 && row_blocks * (Config::dim / C) > 128)
      return Status::failure(ErrorCode::unsupported, "more than 128 workgroups");
    return Status::success();
  }
  // The block of a few_rows variant (its place in the table).
  static std::uint32_t few_rows_block(const Variant<Problem>& v) {
    const auto i = static_cast<std::size_t>(&v - variants.data());
    return i % 3 == 0 ? 8 : i % 3 == 1 ? 16 : 32;
  }
  static constexpr DeviceNeeds atomic64{.int64_atomics = true};
  static constexpr auto few_rows_bytes = Config::few_rows_shared_bytes;
  static constexpr auto few_rows_wg = Config::few_rows_invocations;
  static constexpr auto fp16_least = Config::fp16_least;
  typename Config::Fp16Geometry fp16_geometry() const { return Config::fp16_geometry(ctx_->info().max_shared_memory); }

 public:
  static constexpr std::array<Variant<Problem>, 8> variants{{
      {"few_rows_c8_atomic64", Path::portable, spirv::aura_encode_few_rows_c8_atomic64, atomic64, few_rows_wg,
       few_rows_bytes, &few_rows_applies<8>},
      {"few_rows_c16_atomic64", Path::portable, spirv::aura_encode_few_rows_c16_atomic64, atomic64, few_rows_wg,
       few_rows_bytes, &few_rows_applies<16>},
      {"few_rows_c32_atomic64", Path::portable, spirv::aura_encode_few_rows_atomic64, atomic64, few_rows_wg,
       few_rows_bytes, &few_rows_applies<32>},
      {"few_rows_c8",
       Path::portable,
       spirv::aura_encode_few_rows_c8,
       {},
       few_rows_wg,
       few_rows_bytes,
       &few_rows_applies<8>},
      {"few_rows_c16",
       Path::portable,
       spirv::aura_encode_few_rows_c16,
       {},
       few_rows_wg,
       few_rows_bytes,
       &few_rows_applies<16>},
      {"few_rows_c32",
       Path::portable,
       spirv::aura_encode_few_rows,
       {},
       few_rows_wg,
       few_rows_bytes,
       &few_rows_applies<32>},
      // Config::fp16_subgroups subgroups, counted at 32 invocations each (Variant::invocations).
      {"tensor_core_fp16",
       Path::tensor_core_fp16,
       spirv::aura_encode_fp16,
       {.cooperative_matrix_fp16 = true},
       Config::fp16_subgroups * 32,
       fp16_least.shared_bytes,
       [](const DeviceInfo&, const Problem&) {
         if (Config::hi_dims)
           return Status::failure(ErrorCode::unsupported, "split codes are encoded by the tiled variant");
         return Config::fp16_supported ? Status::success()
                                       : Status::failure(ErrorCode::unsupported, "for Dim <= 256 only");
       }},
      {"tiled",
       Path::portable,
       spirv::aura_encode,
       {},
       Config::tiled_invocations,
       Config::tiled_shared_bytes(Config::max_rows_per_invocation)},
  }};

  // What record() runs. `workgroups`: tensor_core_fp16's grid (each walks
  // blocks of rows, setting up the rotation's scale and the tables once);
  // 0: 528.
  struct Plan {
    const Variant<Problem>* variant = nullptr;
    std::uint32_t workgroups = 0;
    std::uint32_t tm = 0;  // tiled: rows per invocation (rows_per_invocation)
  };

  explicit Encode(Context& ctx, EncodeOptions options = {}, EncodeEnvelope envelope = {})
      : Base(ctx, envelope), options_(options) {
    if (options_.rotation_parts != 2 && options_.rotation_parts != 3)
      throw Error(ErrorCode::invalid_argument,
                  std::string(name) + ": rotation_parts must be 2 or 3, got " + std::to_string(options_.rotation_parts));
    // Every row count up to the few-rows limit with and without a
    // workspace, then the larger calls at each rows-per-invocation step.
    for (std::int64_t rows = 1; rows <= Config::few_rows_max; ++rows)
      for (const bool workspace : {false, true}) prepare(plan(Problem{rows}, workspace ? workspace_bytes({rows}) : 0));
    for (std::uint32_t tm = 1; tm <= Config::max_rows_per_invocation; tm *= 2)
      prepare(plan(Problem{std::int64_t(tm) * Config::row_groups * 256, false}, 0));
  }

  // Workspace bytes that let a call of `rows` rows take few_rows (0 for
  // larger calls): per row block a counter and parts of the norm
  // correction, per row a 64-bit word. Every dispatch leaves the counters
  // and words zero; the bytes for `rows` serve every call with fewer.
  static std::uint64_t workspace_bytes(const Problem& p) {
    return p.rows <= Config::few_rows_max ? layout(p.rows).regions.bytes() : 0;
  }

  Problem problem(const Args& a) const {
    return {a.input.shape.at(0), a.workspace && a.workspace->memory.size >= workspace_bytes({a.input.shape.at(0)})};
  }

  void check(const Problem& p) const {
    if (p.rows <= 0) throw Error(ErrorCode::invalid_argument, std::string(name) + ": rows must be > 0");
    if (static_cast<std::uint64_t>(p.rows) * Config::dim >= (1ull << 32))
      throw Error(ErrorCode::unsupported, std::string(name) + ": input has too many elements for 32-bit indexing");
    select_variant(*ctx_, name, variants, p);
  }

  void check(const Args& a) const {
    detail::expect_encode_tensors<Config>(*ctx_, name, a.input, a.boundaries, a.codebook, a.packed, a.norms);
    detail::expect_tensor(*ctx_, name, "rotation", a.rotation, DType::f32, {Config::dim, Config::dim});
    detail::expect_optional_table(*ctx_, name, "hi_boundaries", a.hi_boundaries,
                                  Config::hi_levels ? Config::hi_levels - 1 : 0, "split codes");
    detail::expect_optional_table(*ctx_, name, "hi_codebook", a.hi_codebook, Config::hi_levels, "split codes");
    if (a.workspace) detail::expect_workspace(*ctx_, name, *a.workspace, workspace_bytes({a.input.shape[0]}));
    check(problem(a));
  }

  // What record() runs for `p` with a workspace of `workspace` bytes.
  Plan plan(const Problem& p, std::uint64_t workspace) const {
    Problem q = p;
    q.workspace = workspace > 0 && workspace >= workspace_bytes(p);
    check(q);
    const Variant<Problem>& v = select_variant(*ctx_, name, variants, q);
    return {&v, 0, v.name == "tiled" ? rows_per_invocation(p.rows) : 0};
  }

  // Records plan(problem(a), the workspace's size); the workspace must hold
  // workspace_bytes(problem(a)) (calls of up to 64 rows take few_rows with
  // it; record(cmd, a, plan(problem(a), 0)) runs the plan that needs none).
  void record(vk::CommandBuffer cmd, const Args& a) const {
    const std::uint64_t given = a.workspace ? a.workspace->memory.size : 0;
    detail::expect_workspace_bytes(name, given, workspace_bytes(problem(a)));
    record(cmd, a, plan(problem(a), given));
  }

  // Records `plan` (from plan(), or a variant of `variants` eligible here,
  // prepared).
  void record(vk::CommandBuffer cmd, const Args& a, const Plan& plan) const {
    check(a);
    const Variant<Problem>& v = *plan.variant;
    const auto rows = a.input.shape[0];
    Push push;
    push.rows = static_cast<std::uint32_t>(rows);
    std::vector<TensorRef> bindings{a.input, a.rotation, a.boundaries, a.codebook, a.packed, a.norms};
    std::uint64_t groups = 0;
    if (v.path == Path::tensor_core_fp16) {
      const std::uint64_t block_rows = fp16_geometry().rows;  // eligible: the least geometry fits
      const std::uint64_t blocks = (static_cast<std::uint64_t>(rows) + block_rows - 1) / block_rows;
      groups = std::min<std::uint64_t>(blocks, plan.workgroups ? plan.workgroups : 528);
      push.groups = static_cast<std::uint32_t>(groups);
    } else if (v.name == "tiled") {
      if (plan.tm == 0 || plan.tm > Config::max_rows_per_invocation || !std::has_single_bit(plan.tm))
        throw Error(ErrorCode::invalid_argument,
                    std::string(name) + ": plan: the tiled variant takes tm a power of two up to " +
                        std::to_string(Config::max_rows_per_invocation) + ", got " + std::to_string(plan.tm));
      const std::uint32_t rows_per_group = plan.tm * Config::row_groups;
      groups = static_cast<std::uint64_t>((rows + rows_per_group - 1) / rows_per_group);
      bindings.push_back(a.hi_boundaries.value_or(a.boundaries));
      bindings.push_back(a.hi_codebook.value_or(a.codebook));
    } else {  // few_rows
      if (!a.workspace) throw Error(ErrorCode::invalid_argument, std::string(name) + ": workspace: few_rows needs one");
      const Layout w = layout(rows);
      const bool atomic = v.needs.int64_atomics;
      const std::uint64_t parts_at = w.regions.scratch_at(a.workspace->memory.size);
      const TensorRef parts = detail::workspace_region(*a.workspace, parts_at, w.parts_bytes);
      const TensorRef counters = detail::workspace_region(*a.workspace, 0, w.counters_bytes);
      const TensorRef row_sums = detail::workspace_region(*a.workspace, w.row_sums_at, w.row_sums_bytes);
      bindings.push_back(atomic ? row_sums : parts);
      bindings.push_back(counters);
      if (!a.workspace->zeroed) detail::record_fill(*ctx_, cmd, atomic ? row_sums : counters);
      const std::uint64_t row_blocks = (static_cast<std::uint64_t>(rows) + Config::few_rows_per_group - 1) /
                                       Config::few_rows_per_group;
      groups = row_blocks * (Config::dim / few_rows_block(v));
    }
    detail::record_dispatch(*ctx_, cmd, pipelines_.get(name, key(plan)), bindings, push, groups);
  }

  // Builds the pipeline of a plan chosen by hand (a variant the automatic
  // choice would not take). Not thread-safe: call it before recording from
  // several threads.
  void prepare(const Plan& plan) { pipelines_.add(*ctx_, key(plan)); }

  // Convenience for tests and tools: allocates the workspace the call can
  // use, records into a fresh command buffer, submits and waits.
  void run(const Args& a) const {
    check(a);
    Args with = a;
    std::optional<Tensor> scratch;
    if (const auto bytes = workspace_bytes(problem(a)); bytes && !a.workspace) {
      scratch.emplace(*ctx_, DType::u32, Shape{static_cast<std::int64_t>(bytes / 4)});
      with.workspace = Workspace{scratch->ref()};
    }
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, with); });
  }

  // Rows per invocation of the tiled kernel: the most (best reuse of the
  // staged rotation) that still leaves about 256 workgroups to fill the device.
  static std::uint32_t rows_per_invocation(std::int64_t rows) {
    std::uint32_t tm = Config::max_rows_per_invocation;
    while (tm > 1 && (rows + tm * Config::row_groups - 1) / (tm * Config::row_groups) < 256) tm /= 2;
    return tm;
  }

 private:
  // few_rows workspace: at the front, the parts that must be zero: per row
  // block an arrival counter (counter kernels), per row a 64-bit
  // count-and-sum word (atomic64 kernels); in the scratch at the back of the
  // range passed (workspace.hpp), per (row, coordinate block) a part of the
  // squared reconstruction norm.
  struct Layout {
    detail::ZeroScratchLayout regions;
    std::uint64_t counters_bytes = 0, row_sums_at = 0, row_sums_bytes = 0, parts_bytes = 0;
  };
  static Layout layout(std::int64_t rows) {
    const auto row_blocks = static_cast<std::uint64_t>((rows + Config::few_rows_per_group - 1) / Config::few_rows_per_group);
    const std::uint64_t padded_rows = row_blocks * Config::few_rows_per_group;
    Layout l;
    l.counters_bytes = row_blocks * 4;
    l.regions.add_zero(l.counters_bytes);
    l.row_sums_bytes = padded_rows * 8;
    l.row_sums_at = l.regions.add_zero(l.row_sums_bytes);
    l.parts_bytes = padded_rows * Config::few_rows_max_blocks * 4;
    l.regions.add_scratch(l.parts_bytes);
    return l;
  }

  PipelineKey key(const Plan& plan) const {
    const Variant<Problem>& v = *plan.variant;
    Spec spec;
    spec.DIM = Config::dim;
    spec.BITS = Config::bits;
    spec.IN_DTYPE = static_cast<std::uint32_t>(Config::in_dtype);
    if (v.path == Path::tensor_core_fp16) {
      spec.workgroup = detail::matrix_workgroup(ctx_->info(), Config::fp16_subgroups);
      const auto fp16 = fp16_geometry();
      spec.BM = fp16.rows;
      spec.RPS = fp16.rps;
      spec.CPS = fp16.cps;
      spec.PARTS = options_.rotation_parts;
      spec.NBUF = fp16.buffers;
      spec.PREFETCH = 1;  // where the block's pieces stay in registers (the shader checks)
      detail::set_matrix_spec(spec, ctx_->info(), v);
    } else if (v.name == "tiled") {
      spec.workgroup = Config::tiled_invocations;
      spec.ROW_GROUPS = Config::row_groups;
      spec.TM = plan.tm;
      spec.KC = Config::k_chunk(plan.tm);
      spec.HI_DIMS = Config::hi_dims;
    } else {
      spec.workgroup = Config::few_rows_invocations;
    }
    return detail::pipeline_key<Push>(*ctx_, v, spec, v.path == Path::tensor_core_fp16 ? 6 : 8);
  }

  EncodeOptions options_;
};

static_assert(Kernel<Encode<EncodeConfig<128, 4>>>, "aura.encode must have the kernel interface (core/kernel.hpp)");

}  // namespace tilekernels::aura

// HadamardEncode (the same encode with a randomised Hadamard rotation).
#include "tilekernels/aura/encode_hadamard.hpp"
