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
// a row with +-Inf (and no NaN), or whose squared norm overflows f32
// (|x| >~ 1e19), gets norm +Inf and code 0 (NaN products); rows whose squared
// norm underflows (|x| <~ 1e-19) are treated as zero rows. Other rows are
// never affected.
//
// Encode's kernels (EncodePath; Encode::path(rows) says which a call takes):
// - few_rows (encode_small.comp): calls of up to EncodeOptions::small_rows
//   rows; the rotation is spread over Dim/8 to Dim/32 workgroups per 8
//   rows, which combine their parts of the norm correction through a small
//   workspace the Encode object owns (a 64-bit word per row, or a counter
//   per row block, that every dispatch leaves at zero). So two recordings
//   of one Encode object must not execute concurrently: put a compute barrier between them, as between any
//   dependent dispatches, or use one object per concurrent stream;
// - cooperative_matrix_nv (encode_tc.comp): NVIDIA tensor cores, fp16 x fp16
//   with f32 accumulators, where the device has VK_NV_cooperative_matrix with
//   32-wide subgroups and the build compiled the shader, for Dim <= 256. Each
//   row is scaled by a power of two into the fp16 range (bf16/f16 values
//   stay exact; f32 values are carried as hi + lo fp16 parts, 22 bits) and R,
//   scaled by a power of two from max |R|, as fp16 parts of one scale
//   (EncodeOptions::rotation_parts): 2 by default, each entry to within
//   2^-20 of itself, so a rotated value of a unit row moves by at most ~1e-6
//   from the f32 kernel's (the f32 product's own rounding is of the same
//   order) and only values that close to a boundary can get the other of
//   its two cells -- equally far from both centroids for Lloyd-Max
//   boundaries, so the distortion is the same; 3 for R exactly (every entry
//   within 2^-14 of max |R|; smaller ones to ~2^-39 of max |R|): each
//   product exact, only the f32 accumulation rounds, as in the f32 kernel,
//   and values on a boundary go to the lower cell as there. Entries of R
//   below ~2^-40 max |R| (e.g. subnormals) count as 0.
//   Non-finite rows as above: a row whose norm is NaN or +Inf gets that norm
//   and code 0 everywhere. Measured on an H100 at 262144 rows, 4 bits, bf16
//   (bench/bench_encode.cpp): Dim 128 226 us (3 parts 271, f32 kernel 375),
//   Dim 256 786 us (3 parts 968, f32 kernel 1326);
// - tiled (encode.comp): the portable f32 kernel, everywhere else
//   (EncodeOptions::tensor_cores = false or TILEKERNELS_PATH=portable force it).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tilekernels/core.hpp"
#include "tilekernels/spirv/features.hpp"
#include "tilekernels/spirv/aura/encode.hpp"
#include "tilekernels/spirv/aura/encode_small.hpp"
#include "tilekernels/spirv/aura/encode_small_cw16.hpp"
#include "tilekernels/spirv/aura/encode_small_cw8.hpp"
#include "tilekernels/spirv/aura/encode_small_a64.hpp"
#include "tilekernels/spirv/aura/encode_small_cw16_a64.hpp"
#include "tilekernels/spirv/aura/encode_small_cw8_a64.hpp"
#if TILEKERNELS_GLSLC_HAS_GL_NV_COOPERATIVE_MATRIX
#include "tilekernels/spirv/aura/encode_tc.hpp"
#include "tilekernels/spirv/aura/encode_tc_emu.hpp"
#endif

namespace tilekernels::aura {

template <std::uint32_t Dim, std::uint32_t Bits, DType In = DType::bf16>
struct EncodeConfig {
  static_assert(Dim % 32 == 0, "EncodeConfig: Dim must be a multiple of 32 (whole 32-value blocks and whole packed words)");
  static_assert(Dim >= 32 && Dim <= 512, "EncodeConfig: Dim must be in [32, 512] (shared memory is sized from Dim)");
  static_assert(Bits == 2 || Bits == 3 || Bits == 4 || Bits == 6 || Bits == 8,
                "EncodeConfig: Bits must be 2, 3, 4, 6 or 8");
  static_assert(In == DType::f32 || In == DType::f16 || In == DType::bf16,
                "EncodeConfig: In must be DType::f32, DType::f16 or DType::bf16");

  static constexpr std::uint32_t dim = Dim;
  static constexpr std::uint32_t bits = Bits;
  static constexpr DType in_dtype = In;
  static constexpr std::uint32_t levels = 1u << Bits;
  static constexpr std::uint32_t packed_words = Dim * Bits / 32;  // per row
  static_assert(packed_words * 32 == Dim * Bits, "EncodeConfig: a row must pack into whole u32 words");

  // The cell-table quantiser of aura_pack.glsl (32 cells of 16 + 8 bytes and 8 flag words of 16).
  static constexpr std::uint32_t cell_table_bytes = 32 * 16 + 8 * 16 + 32 * 8;

  // Dense kernel: LANES * ROW_GROUPS invocations, each owning 8 coordinates
  // of TM rows; the product runs over K chunks of k_chunk columns.
  static constexpr std::uint32_t lanes = Dim / 8;
  static constexpr std::uint32_t row_groups = std::min<std::uint32_t>(std::bit_floor(256 / lanes), 32);
  static constexpr std::uint32_t dense_invocations = lanes * row_groups;
  static constexpr std::uint32_t max_rows_per_invocation = std::min<std::uint32_t>(8, lanes);
  // Columns per staged K chunk: wide chunks (fewer load round trips, what
  // few-row calls are bound by) where the rotation chunk still fits.
  static constexpr std::uint32_t k_chunk(std::uint32_t tm) { return tm <= 2 && Dim <= 128 ? 32 : Dim <= 256 ? 16 : 8; }
  // Shared scratch in 16-byte units for TM rows per invocation.
  static constexpr std::uint32_t dense_scratch_vec4(std::uint32_t tm) {
    const std::uint32_t rows = tm * row_groups;
    const std::uint32_t product = k_chunk(tm) * (rows + 4) + k_chunk(tm) * (Dim + 4);
    const std::uint32_t epilogue = rows * Dim / 4 + rows * lanes;
    return (std::max(product, epilogue) + 3) / 4;
  }
  static constexpr std::uint32_t dense_shared_bytes(std::uint32_t tm) {
    return dense_scratch_vec4(tm) * 16 + 8 * levels + 4 * tm * row_groups + cell_table_bytes;
  }
  static_assert(dense_shared_bytes(1) <= 32768 && dense_shared_bytes(2) <= 32768 &&
                    dense_shared_bytes(max_rows_per_invocation) <= 32768,
                "EncodeConfig: the dense kernel must fit the portable 32 KiB of shared memory");

  // Few-rows dense kernel (encode_small.comp): one workgroup per
  // (small_rows_per_group rows, C output coordinates), 256 / C invocations
  // per coordinate, each owning a share of the product's columns; the
  // Dim / C workgroups of a row block combine their parts of the norm
  // correction through a workspace. C is 32, 16 (Bits even) or 8 (Bits 4
  // or 8): a block's codes fill whole words (EncodeOptions::small_block).
  static constexpr std::uint32_t small_rows_per_group = 8;  // literal in the shader
  static constexpr std::uint32_t small_invocations = 256;   // literal in the shader
  // (256 / C invocations per coordinate, each with whole 16-byte pieces of
  // the rotation row: Dim a multiple of 1024 / C).
  static constexpr bool small_block_allowed(std::uint32_t c) {
    return (c == 32 || c == 16 || c == 8) && c * Bits % 32 == 0 && Dim % (1024 / c) == 0;
  }
  static constexpr std::uint32_t small_max_blocks =
      Dim / (small_block_allowed(8) ? 8 : small_block_allowed(16) ? 16 : 32);
  static constexpr std::uint32_t small_shared_bytes =
      small_rows_per_group * (Dim * 4 + small_invocations * 4 + 32 * 8 + 8 * 4) + 8 * levels + 4;
  static_assert(small_shared_bytes <= 32768,
                "EncodeConfig: the few-rows dense kernel must fit the portable 32 KiB of shared memory");

  // Hadamard kernel: Dim/32 invocations per row, 128 invocations per workgroup.
  static constexpr std::uint32_t hadamard_blocks = Dim / 32;
  static constexpr std::uint32_t hadamard_rows = 128 / hadamard_blocks;
  static constexpr std::uint32_t hadamard_shared_bytes =
      4 * (hadamard_rows * (Dim + hadamard_blocks) + 2 * hadamard_rows * hadamard_blocks + 2 * levels + Dim);
  static_assert(hadamard_shared_bytes <= 32768,
                "EncodeConfig: the Hadamard kernel must fit the portable 32 KiB of shared memory");

  // Register Hadamard kernel (encode_hadamard_sg.comp): v values per
  // invocation (8..64, a power of two, <= Dim), Dim / v invocations per row,
  // `rows` rows per workgroup.
  static constexpr std::uint32_t hadamard_values = 32;
  static constexpr std::uint32_t hadamard_sg_shared_bytes(std::uint32_t v, std::uint32_t rows) {
    const std::uint32_t wg = rows * (Dim / v);
    return 4 * (wg * (v > 32 ? v / 4 : 8) + wg + Dim + 2 * levels) + cell_table_bytes;
  }
  static_assert(hadamard_sg_shared_bytes(hadamard_values, 256 * hadamard_values / Dim) <= 32768,
                "EncodeConfig: the register Hadamard kernel must fit the portable 32 KiB of shared memory");

  // Tensor-core kernel (encode_tc.comp): 256 or 512 invocations (8 or 16
  // subgroups of 32), blocks of `rows` rows; subgroup grid of row groups x
  // column groups, each subgroup rps x cps 16x16 accumulator tiles;
  // `buffers` staging buffers for the rotation parts. Not for Dim > 256 (the
  // staged block would not leave room for 16 rows) -- such configs take the
  // f32 kernel.
  struct TensorCoreGeometry {
    std::uint32_t rows = 0, rps = 0, cps = 0, buffers = 0, mem_vec4 = 0, shared_bytes = 0, invocations = 0;
  };
  static constexpr std::uint32_t tc_shared_limit = 49152;  // what NVIDIA's Vulkan drivers give a workgroup
  static constexpr TensorCoreGeometry tc_geometry_for(std::uint32_t bm, std::uint32_t nbuf, std::uint32_t inv) {
    TensorCoreGeometry g;
    if (Dim > 256 || bm * Dim > 64 * inv) return g;  // the shader's literal bounds (8 pieces of 8 per invocation)
    const std::uint32_t rt = bm / 16, ct = Dim / 16, nsg = inv / 32;
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
    const std::uint32_t planes = In == DType::f32 ? 2 : 1, xs = Dim / 8 + 1;
    const std::uint32_t products = planes * bm * xs + nbuf * 16 * xs;
    const std::uint32_t cg = nsg / (rt / g.rps);
    const std::uint32_t epilogue = nsg * 16 * 5 + bm * Dim / 16 + (bm * 2 * cg + 3) / 4;
    g.rows = bm;
    g.buffers = nbuf;
    g.invocations = inv;
    g.mem_vec4 = std::max(products, epilogue);
    g.shared_bytes = g.mem_vec4 * 16 + 8 * levels + 12 * bm + 4 + cell_table_bytes;
    return g;
  }
  // The first of (128 rows, 2 buffers), (128, 1), (64, 2), ... that fits
  // `limit` bytes of shared memory (48 KiB on NVIDIA; the emulation on a
  // 32 KiB device gets a smaller block); `rows` != 0 asks for that block size.
  static constexpr TensorCoreGeometry tc_geometry(std::uint32_t limit = tc_shared_limit, std::uint32_t invocations = 256,
                                                  std::uint32_t rows = 0) {
    for (std::uint32_t bm : {128u, 64u, 32u, 16u})
      for (std::uint32_t nbuf : {2u, 1u}) {
        if (rows != 0 && bm != rows) continue;
        const auto g = tc_geometry_for(bm, nbuf, invocations);
        if (g.rows != 0 && g.shared_bytes <= limit) return g;
      }
    return {};
  }
  static constexpr bool tc_supported = tc_geometry().rows != 0;
};

namespace impl {

template <class Config>
void expect_encode_tensors(const Context& ctx, const char* name, const TensorRef& input, const TensorRef& boundaries,
                           const TensorRef& codebook, const TensorRef& packed, const TensorRef& norms) {
  tilekernels::detail::expect_rank(name, "input", input, 2);
  const auto rows = input.shape[0];
  tilekernels::detail::expect_tensor(ctx, name, "input", input, Config::in_dtype, {rows, Config::dim});
  tilekernels::detail::expect_tensor(ctx, name, "boundaries", boundaries, DType::f32, {Config::levels - 1});
  tilekernels::detail::expect_tensor(ctx, name, "codebook", codebook, DType::f32, {Config::levels});
  tilekernels::detail::expect_tensor(ctx, name, "packed", packed, DType::u32, {rows, Config::packed_words});
  tilekernels::detail::expect_tensor(ctx, name, "norms", norms, DType::f32, {rows});
  if (static_cast<std::uint64_t>(rows) * Config::dim >= (1ull << 32))
    throw Error(ErrorCode::unsupported, std::string(name) + ": input has too many elements for 32-bit indexing");
}

inline void expect_workgroup(const Context& ctx, const char* name, std::uint32_t invocations, std::uint32_t shared) {
  const auto& info = ctx.info();
  if (invocations > info.max_workgroup_invocations || shared > info.max_shared_memory)
    throw Error(ErrorCode::unsupported, std::string(name) + ": needs workgroups of " + std::to_string(invocations) +
                                            " invocations and " + std::to_string(shared) +
                                            " bytes of shared memory; the device allows " +
                                            std::to_string(info.max_workgroup_invocations) + " and " +
                                            std::to_string(info.max_shared_memory));
}

struct EncodePush {
  std::uint32_t group_offset, rows, pad0, pad1;
};

}  // namespace impl

// Tuning of Encode.
struct EncodeOptions {
  // Calls of up to this many rows run the few-rows kernel (workgroups of 8
  // rows and 8 to 32 output coordinates: latency-bound calls);
  // larger ones the tensor-core kernel where available, else the
  // register-tiled kernel. 0: never the few-rows kernel.
  std::uint32_t small_rows = 64;
  // Few-rows kernel: output coordinates per workgroup, 32, 16 (even Bits,
  // Dim a multiple of 64) or 8 (Bits 4 or 8, Dim a multiple of 128); 0:
  // automatic.
  std::uint32_t small_block = 0;
  // Few-rows kernel: combine the workgroups' parts of the norm correction
  // with one 64-bit atomic per row where the device has them (one round
  // trip); false: the portable way (parts written, an arrival counter, the
  // last workgroup reads them back).
  bool small_atomic64 = true;
  // Take the tensor-core kernel where the device has VK_NV_cooperative_matrix
  // with subgroups of 32 and 48 KiB of shared memory, the build compiled it
  // and Dim <= 256 (TILEKERNELS_PATH=portable also turns it off).
  bool tensor_cores = true;
  // Tensor-core kernel: fp16 parts of the rotation, 2 (each R entry to
  // within 2^-20 of itself) or 3 (each R entry exact: the codes as exact as
  // the f32 kernel's, ties included; one product more per tile, 271 instead
  // of 226 us at 262144 x 128 on an H100).
  std::uint32_t rotation_parts = 2;
  // Tensor-core kernel: most workgroups in the grid (each loops over blocks
  // of rows, setting up the rotation's scale and the tables once); 0: 528.
  std::uint32_t tc_workgroups = 0;
  // Tensor-core kernel: load the next block's rows during this block's products.
  bool tc_prefetch = true;
  // Tensor-core kernel: invocations per workgroup, 256 or 512 (0: 256), and
  // rows per block, 16, 32, 64 or 128 (0: the most that fit).
  std::uint32_t tc_invocations = 0;
  std::uint32_t tc_block_rows = 0;
  // Diagnostics: run the tensor-core kernel's emulation (plain loops in place
  // of the cooperative-matrix calls, any device) for rows above small_rows;
  // how the tests check that kernel on CPU drivers. Slow.
  bool tc_emulate = false;
};

// Which kernel Encode::record runs for a call.
enum class EncodePath { few_rows, tiled, cooperative_matrix_nv, cooperative_matrix_nv_emulated };

inline const char* path_name(EncodePath p) {
  switch (p) {
    case EncodePath::few_rows: return "few_rows";
    case EncodePath::tiled: return "tiled";
    case EncodePath::cooperative_matrix_nv: return "cooperative_matrix_nv";
    default: return "cooperative_matrix_nv_emulated";
  }
}

// Dense-rotation encode.
template <class Config>
class Encode {
 public:
  static constexpr const char* name = "aura.encode";

  struct Args {
    TensorRef input, rotation, boundaries, codebook, packed, norms;
  };

  explicit Encode(Context& ctx, EncodeOptions options = {}) : ctx_(&ctx), options_(options) {
    if (options_.rotation_parts != 2 && options_.rotation_parts != 3)
      throw Error(ErrorCode::invalid_argument,
                  std::string(name) + ": rotation_parts must be 2 or 3, got " + std::to_string(options_.rotation_parts));
    if (options_.tc_invocations != 0 && options_.tc_invocations != 256 && options_.tc_invocations != 512)
      throw Error(ErrorCode::invalid_argument,
                  std::string(name) + ": tc_invocations must be 256 or 512, got " + std::to_string(options_.tc_invocations));
    const auto b = options_.tc_block_rows;
    if (b != 0 && b != 16 && b != 32 && b != 64 && b != 128)
      throw Error(ErrorCode::invalid_argument,
                  std::string(name) + ": tc_block_rows must be 16, 32, 64 or 128, got " + std::to_string(b));
    if (options_.small_block != 0 && !Config::small_block_allowed(options_.small_block))
      throw Error(ErrorCode::invalid_argument,
                  std::string(name) +
                      ": small_block must be 32, 16 (even Bits, Dim a multiple of 64) or 8 (Bits 4 or 8, Dim a "
                      "multiple of 128); got " +
                      std::to_string(options_.small_block) + " at Dim " + std::to_string(Config::dim) + ", Bits " +
                      std::to_string(Config::bits));
  }

  // The tensor-core kernel's geometry on this device with these options
  // (rows == 0 where it does not fit).
  typename Config::TensorCoreGeometry tc_geometry() const {
    const auto& info = ctx_->info();
    const std::uint32_t inv = options_.tc_invocations ? options_.tc_invocations : 256;
    if (inv > info.max_workgroup_invocations) return {};
    return Config::tc_geometry(std::min(Config::tc_shared_limit, info.max_shared_memory), inv, options_.tc_block_rows);
  }

  void check(const Args& a) const {
    impl::expect_encode_tensors<Config>(*ctx_, name, a.input, a.boundaries, a.codebook, a.packed, a.norms);
    tilekernels::detail::expect_tensor(*ctx_, name, "rotation", a.rotation, DType::f32, {Config::dim, Config::dim});
  }

  // Whether this device and build can run the tensor-core kernel for Config.
  bool tensor_cores_available() const {
#if TILEKERNELS_GLSLC_HAS_GL_NV_COOPERATIVE_MATRIX
    if constexpr (Config::tc_supported) {
      const auto& info = ctx_->info();
      return info.cooperative_matrix_nv && info.allows_subgroup_size(32) && !ctx_->force_portable() &&
             tc_geometry().rows != 0;
    }
#endif
    return false;
  }

  // Output coordinates per workgroup of the few-rows kernel for a call of
  // `rows` rows: the option, else the smallest block allowed at these Bits
  // that keeps the grid within 128 workgroups (smaller blocks: less of the
  // rotation per workgroup, more workgroups).
  std::uint32_t small_block(std::int64_t rows) const {
    if (options_.small_block != 0) return options_.small_block;
    const auto row_blocks =
        static_cast<std::uint64_t>((rows + Config::small_rows_per_group - 1) / Config::small_rows_per_group);
    for (std::uint32_t c : {8u, 16u})
      if (Config::small_block_allowed(c) && row_blocks * (Config::dim / c) <= 128) return c;
    return 32;
  }
  // Whether the few-rows kernel combines its parts with 64-bit atomics.
  bool small_uses_atomic64() const { return options_.small_atomic64 && ctx_->info().int64_atomics; }

  // The kernel record() runs for a call of `rows` rows.
  EncodePath path(std::int64_t rows) const {
    if (rows <= static_cast<std::int64_t>(options_.small_rows)) return EncodePath::few_rows;
#if TILEKERNELS_GLSLC_HAS_GL_NV_COOPERATIVE_MATRIX
    if constexpr (Config::tc_supported) {
      if (options_.tc_emulate) return EncodePath::cooperative_matrix_nv_emulated;
      if (options_.tensor_cores && tensor_cores_available()) return EncodePath::cooperative_matrix_nv;
    }
#endif
    return EncodePath::tiled;
  }

  // Rows per invocation: the most (best reuse of the staged rotation) that
  // still leaves about 256 workgroups to fill the device.
  static std::uint32_t rows_per_invocation(std::int64_t rows) {
    std::uint32_t tm = Config::max_rows_per_invocation;
    while (tm > 1 && (rows + tm * Config::row_groups - 1) / (tm * Config::row_groups) < 256) tm /= 2;
    return tm;
  }

  void record(vk::CommandBuffer cmd, const Args& a) const {
    check(a);
    const auto rows = a.input.shape[0];
    if (rows == 0) return;
    const EncodePath p = path(rows);
#if TILEKERNELS_GLSLC_HAS_GL_NV_COOPERATIVE_MATRIX
    if (p == EncodePath::cooperative_matrix_nv || p == EncodePath::cooperative_matrix_nv_emulated) {
      const auto g = tc_geometry();
      if (g.rows == 0)
        throw Error(ErrorCode::unsupported, std::string(name) + ": the tensor-core kernel with these options does not fit "
                                                "this device's " + std::to_string(ctx_->info().max_shared_memory) +
                                                " bytes of shared memory");
      impl::expect_workgroup(*ctx_, name, g.invocations, g.shared_bytes);
      const bool emu = p == EncodePath::cooperative_matrix_nv_emulated;
      const std::uint64_t blocks = (static_cast<std::uint64_t>(rows) + g.rows - 1) / g.rows;
      const std::uint64_t groups = std::min<std::uint64_t>(blocks, options_.tc_workgroups ? options_.tc_workgroups : 528);
      PipelineKey key{emu ? spirv::aura_encode_tc_emu : spirv::aura_encode_tc,
                      emu ? std::size(spirv::aura_encode_tc_emu) : std::size(spirv::aura_encode_tc),
                      {g.invocations, Config::dim, Config::bits, static_cast<std::uint32_t>(Config::in_dtype),
                       g.rows, g.rps, g.cps, options_.rotation_parts, g.buffers, g.mem_vec4,
                       options_.tc_prefetch ? 1u : 0u},
                      6, sizeof(impl::EncodePush), !emu && ctx_->info().subgroup_size_control ? 32u : 0u};
      const Pipeline& pipeline = ctx_->pipeline(key);
      const impl::EncodePush push{0, static_cast<std::uint32_t>(rows), static_cast<std::uint32_t>(groups), 0};
      tilekernels::detail::record_dispatch(*ctx_, cmd, pipeline,
                                           {a.input, a.rotation, a.boundaries, a.codebook, a.packed, a.norms}, push, groups);
      return;
    }
#endif
    if (p == EncodePath::few_rows) {
      impl::expect_workgroup(*ctx_, name, Config::small_invocations, Config::small_shared_bytes);
      const std::uint64_t row_blocks = (static_cast<std::uint64_t>(rows) + Config::small_rows_per_group - 1) /
                                       Config::small_rows_per_group;
      const SmallWorkspace& w = small_workspace(row_blocks);
      const std::uint32_t block = small_block(rows);
      using Words = std::span<const std::uint32_t>;
      const bool a64 = small_uses_atomic64();
      const Words module =
          block == 8    ? (a64 ? Words(spirv::aura_encode_small_cw8_a64) : Words(spirv::aura_encode_small_cw8))
          : block == 16 ? (a64 ? Words(spirv::aura_encode_small_cw16_a64) : Words(spirv::aura_encode_small_cw16))
                        : (a64 ? Words(spirv::aura_encode_small_a64) : Words(spirv::aura_encode_small));
      PipelineKey key{module.data(), module.size(),
                      {Config::small_invocations, Config::dim, Config::bits, static_cast<std::uint32_t>(Config::in_dtype)},
                      8, sizeof(impl::EncodePush), 0};
      const Pipeline& pipeline = ctx_->pipeline(key);
      const impl::EncodePush push{0, static_cast<std::uint32_t>(rows), 0, 0};
      tilekernels::detail::record_dispatch(
          *ctx_, cmd, pipeline,
          {a.input, a.rotation, a.boundaries, a.codebook, a.packed, a.norms, a64 ? w.row_sums.ref() : w.parts.ref(),
           w.counters.ref()},
          push,
          row_blocks * (Config::dim / block));
      return;
    }
    const std::uint32_t tm = rows_per_invocation(rows);
    impl::expect_workgroup(*ctx_, name, Config::dense_invocations, Config::dense_shared_bytes(tm));
    const std::uint32_t rows_per_group = tm * Config::row_groups;
    PipelineKey key{spirv::aura_encode, std::size(spirv::aura_encode),
                    {Config::dense_invocations, Config::dim, Config::bits, static_cast<std::uint32_t>(Config::in_dtype),
                     Config::row_groups, tm, Config::k_chunk(tm), Config::dense_scratch_vec4(tm)},
                    6, sizeof(impl::EncodePush), 0};
    const Pipeline& pipeline = ctx_->pipeline(key);
    const impl::EncodePush push{0, static_cast<std::uint32_t>(rows), 0, 0};
    tilekernels::detail::record_dispatch(*ctx_, cmd, pipeline, {a.input, a.rotation, a.boundaries, a.codebook, a.packed, a.norms},
                            push, static_cast<std::uint64_t>((rows + rows_per_group - 1) / rows_per_group));
  }

  void run(const Args& a) const {
    check(a);
    const auto rows = a.input.shape[0];
    if (rows > 0 && path(rows) == EncodePath::few_rows)  // the workspace exists before recording
      small_workspace((static_cast<std::uint64_t>(rows) + Config::small_rows_per_group - 1) / Config::small_rows_per_group);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, a); });
  }

 private:
  // Few-rows kernel: for the counter path, per (row, coordinate block) a
  // part of the squared reconstruction norm and per row block an arrival
  // counter; for the 64-bit atomic path, per row a count-and-sum word. Each
  // dispatch leaves the counters and words at zero.
  struct SmallWorkspace {
    Tensor parts, counters, row_sums;
  };
  const SmallWorkspace& small_workspace(std::uint64_t row_blocks) const {
    std::lock_guard lock(workspace_mutex_);
    if (!small_workspace_ || static_cast<std::uint64_t>(small_workspace_->counters.elements()) < row_blocks) {
      const auto rb = static_cast<std::int64_t>(row_blocks);
      // Recorded but unexecuted dispatches may still use the old one.
      if (small_workspace_) retired_.push_back(std::move(small_workspace_));
      small_workspace_ = std::make_unique<SmallWorkspace>(SmallWorkspace{
          Tensor(*ctx_, DType::f32, {rb * Config::small_rows_per_group * Config::small_max_blocks}),
          Tensor(*ctx_, DType::u32, {rb}), Tensor(*ctx_, DType::u32, {rb * Config::small_rows_per_group * 2})});
      small_workspace_->counters.buffer().fill(0);
      small_workspace_->row_sums.buffer().fill(0);
    }
    return *small_workspace_;
  }

  Context* ctx_;
  EncodeOptions options_;
  mutable std::mutex workspace_mutex_;
  mutable std::unique_ptr<SmallWorkspace> small_workspace_;
  mutable std::vector<std::unique_ptr<SmallWorkspace>> retired_;
};

}  // namespace tilekernels::aura

// HadamardEncode (the same encode with a randomised Hadamard rotation).
#include "tilekernels/aura/encode_hadamard.hpp"
