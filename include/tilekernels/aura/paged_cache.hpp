// SPDX-License-Identifier: MIT
// The AURA paged KV cache: its compile-time format (PagedCacheConfig) and
// the codebooks and rotations its kernels read (CacheTables).
//
// Per layer the cache holds K and V, each in a format of its own:
// TurboQuant codes at 2, 3, 4, 6 or 8 bits (per token and KV head: the
// norm-corrected L2 norm and the Lloyd-Max codes of the rotated unit vector,
// the math of encode.hpp), or raw bf16 / f16 values (Bits = 16). So k8v4,
// k4v3, a raw K with a 4-bit V and an uncompressed cache are one family.
//
// Layout (row-major, last index innermost); within a page one KV head's
// tokens are contiguous:
//   coded side  codes [num_pages, kv_heads, PageTokens, Dim * Bits / 32]  u32
//                     (the code of coordinate d at bit d * Bits of the token's
//                     little-endian word stream; 3- and 6-bit codes straddle words)
//               norms [num_pages, kv_heads, PageTokens]                    Norm (f32 or f16)
//   raw side    codes [num_pages, kv_heads, PageTokens, Dim]               Raw (bf16 or f16), no norms
// A sequence's position p lives in page block_table[s, p / PageTokens], slot
// p % PageTokens; a cache slot is page * PageTokens + slot (slot_mapping).
// Capacity (num_pages, from the tensors' shapes) is separate from the live
// lengths (seq_lens). The exact semantics, in double precision, are
// include/tilekernels/reference/aura/paged_cache.hpp.
//
// Split keys (CacheFormat::k_hi_dims, PagedCacheConfig::split_keys): two
// quantisers share K's norm and rotation, the first k_hi_dims rotated
// coordinates taking k_bits + 1 bits and a codebook of their own (the
// Lloyd-Max codebook of that width), the rest k_bits. A token's words
// hold the high part's codes first (k_hi_dims * (k_bits + 1) bits, whole
// words), then the rest's at k_bits each, each part packed as above from
// bit 0 of its first word. K at 2 or 3 bits with half its coordinates
// above the split takes 2.5 or 3.5 bits per coordinate: formats between
// the whole widths. The norm correction divides by the norm of the whole
// decoded vector, both parts. (The tensor-core variants of
// DecodeAttention do not read split keys; the CUDA-core ones do.)
//
// Centred keys (CacheFormat::k_centred, a coded K): real keys share a
// large per-channel mean, and the quantiser's error grows with the key's
// whole norm. A centred cache stores k - mu, where mu is a vector per
// (centre row, KV head) in the caller's tensor
//   k_centre  [centres, kv_heads, Dim]  f32
// (one row per sequence: CacheWrite takes each token's row, DecodeAttention
// each sequence's). Attention is unchanged, since every score of a query
// row gains the same q . mu, which DecodeAttention adds back (before the
// softcap; sinks and lse see the true scores): the centre may be any
// vector, and only the error depends on it. A row must stay fixed while
// the cache holds tokens written with it (KeyCentre sets it from a prompt's
// keys); sequences that share pages must share the row.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tilekernels/aura/codebook.hpp"
#include "tilekernels/aura/rotation.hpp"
#include "tilekernels/core.hpp"

namespace tilekernels::aura {

// The rotation of the coded sides: randomised Hadamard (Dim a power of two,
// applied in O(Dim log Dim)) or a dense random orthogonal matrix. The values
// are the ABI codes the shaders receive (0 means none: a raw side).
enum class Rotation : std::uint32_t { hadamard = 1, dense = 2 };

constexpr bool valid_cache_bits(std::uint32_t b) { return b == 2 || b == 3 || b == 4 || b == 6 || b == 8 || b == 16; }

// A cache format as run-time values: what the kernels use (PagedCacheConfig
// fixes one at compile time, CacheWriteKernel and DecodeAttentionKernel take
// any that validate() accepts).
struct CacheFormat {
  std::uint32_t dim = 128, page_tokens = 16, k_bits = 4, v_bits = 4;
  Rotation rotation = Rotation::hadamard;
  DType norm_dtype = DType::f32, raw_dtype = DType::bf16;
  bool k_centred = false;  // K stored minus its row of k_centre (a coded K only)
  // Split keys: the first k_hi_dims rotated coordinates of K take k_bits + 1
  // bits, the rest k_bits (0: every coordinate k_bits).
  std::uint32_t k_hi_dims = 0;

  static constexpr bool raw(std::uint32_t bits) { return bits == 16; }
  bool k_raw() const { return raw(k_bits); }
  bool v_raw() const { return raw(v_bits); }
  // u32 words of one token of one KV head of a side whose coordinates all
  // take `bits` (raw: two values per word).
  constexpr std::uint32_t words(std::uint32_t bits) const { return raw(bits) ? dim / 2 : dim * bits / 32; }
  // The K side's bits above the split (k_bits + 1) and its words: the
  // high part's codes first (k_hi_dims x k_hi_bits()), then the rest's.
  constexpr bool k_split() const { return k_hi_dims != 0; }
  constexpr std::uint32_t k_hi_bits() const { return k_split() ? k_bits + 1 : k_bits; }
  constexpr std::uint32_t k_hi_words() const { return k_hi_dims * k_hi_bits() / 32; }
  constexpr std::uint32_t k_words() const {
    return k_split() ? k_hi_words() + (dim - k_hi_dims) * k_bits / 32 : words(k_bits);
  }
  constexpr std::uint32_t v_words() const { return words(v_bits); }
  // Codebook levels (0 for a raw side).
  static constexpr std::uint32_t levels(std::uint32_t bits) { return raw(bits) ? 0 : 1u << bits; }
  // The shaders' rotation code of a side: 0 none (raw), else Rotation.
  constexpr std::uint32_t rotation_code(std::uint32_t bits) const {
    return raw(bits) ? 0u : static_cast<std::uint32_t>(rotation);
  }
  // Floats of a side's rotation in the tables: signs [dim] or R [dim, dim].
  constexpr std::uint32_t rotation_floats(std::uint32_t bits) const {
    return raw(bits) ? 0 : rotation == Rotation::hadamard ? dim : dim * dim;
  }
  // The dtype and shape of a side's stored values and of its norms.
  constexpr DType store_dtype(std::uint32_t bits) const { return raw(bits) ? raw_dtype : DType::u32; }
  Shape store_shape(std::uint32_t bits, std::int64_t num_pages, std::int64_t kv_heads) const {
    return {num_pages, kv_heads, page_tokens, raw(bits) ? dim : words(bits)};
  }
  // The same for the K or the V side of this format (split keys included).
  Shape side_store_shape(bool k_side, std::int64_t num_pages, std::int64_t kv_heads) const {
    if (k_side && k_split()) return {num_pages, kv_heads, page_tokens, k_words()};
    return store_shape(k_side ? k_bits : v_bits, num_pages, kv_heads);
  }
  Shape norm_shape(std::int64_t num_pages, std::int64_t kv_heads) const { return {num_pages, kv_heads, page_tokens}; }
  Shape centre_shape(std::int64_t centres, std::int64_t kv_heads) const { return {centres, kv_heads, dim}; }
  // Bytes one token of one KV head takes in the cache (K and V, norms included).
  constexpr std::uint32_t bytes_per_token() const {
    return static_cast<std::uint32_t>(4 * (k_words() + v_words()) + (raw(k_bits) ? 0 : dtype_size(norm_dtype)) +
                                      (raw(v_bits) ? 0 : dtype_size(norm_dtype)));
  }

  // Offsets (in floats) of the tables the kernels read, in one f32 buffer:
  // K codebook [2^k_bits], V codebook, K boundaries and V boundaries (each
  // padded to its codebook's length, +inf last), K rotation, V rotation
  // (signs [dim] for Hadamard, R [dim, dim] row-major for dense; nothing for
  // a raw side), then for split keys the codebook and boundaries of the K
  // coordinates above the split (at k_bits + 1). The shaders receive them
  // as specialization constants.
  constexpr std::uint32_t k_codebook_at() const { return 0; }
  constexpr std::uint32_t v_codebook_at() const { return levels(k_bits); }
  constexpr std::uint32_t k_boundaries_at() const { return v_codebook_at() + levels(v_bits); }
  constexpr std::uint32_t v_boundaries_at() const { return k_boundaries_at() + levels(k_bits); }
  constexpr std::uint32_t k_rotation_at() const { return v_boundaries_at() + levels(v_bits); }
  constexpr std::uint32_t v_rotation_at() const { return k_rotation_at() + rotation_floats(k_bits); }
  constexpr std::uint32_t k_hi_codebook_at() const { return v_rotation_at() + rotation_floats(v_bits); }
  constexpr std::uint32_t k_hi_boundaries_at() const {
    return k_hi_codebook_at() + (k_split() ? levels(k_hi_bits()) : 0);
  }
  constexpr std::uint32_t table_floats() const {
    return k_hi_boundaries_at() + (k_split() ? levels(k_hi_bits()) : 0) + 1;  // never empty
  }

  // Why this is not a format the kernels take (the rules PagedCacheConfig's
  // static_asserts state); empty when it is.
  std::string problem() const {
    if (dim != 64 && dim != 80 && dim != 96 && dim != 128 && dim != 256) return "dim must be 64, 80, 96, 128 or 256";
    if (page_tokens % 16 != 0 || page_tokens < 16 || page_tokens > 256)
      return "page_tokens must be a multiple of 16 in [16, 256]";
    for (std::uint32_t bits : {k_bits, v_bits}) {
      if (!valid_cache_bits(bits)) return "bits must be 2, 3, 4, 6, 8 or 16 (raw), got " + std::to_string(bits);
      if (!raw(bits) && dim * bits % 32 != 0)
        return "dim * bits must be a multiple of 32 (whole u32 words per token), got dim " + std::to_string(dim) +
               " bits " + std::to_string(bits);
    }
    if (rotation != Rotation::hadamard && rotation != Rotation::dense) return "rotation must be hadamard or dense";
    if (rotation == Rotation::hadamard && !std::has_single_bit(dim) && !(raw(k_bits) && raw(v_bits)))
      return "a Hadamard rotation needs dim a power of two (use a dense rotation for 80 or 96)";
    if (norm_dtype != DType::f32 && norm_dtype != DType::f16) return "norms must be f32 or f16";
    if (raw_dtype != DType::bf16 && raw_dtype != DType::f16) return "raw values must be bf16 or f16";
    if (k_centred && raw(k_bits)) return "centred keys need a coded K (a raw K loses nothing to its mean)";
    if (k_split() && ((k_bits != 2 && k_bits != 3) || k_hi_dims % 32 != 0 || k_hi_dims >= dim))
      return "split keys need k_bits 2 or 3 and k_hi_dims a multiple of 32 below dim, got k_bits " +
             std::to_string(k_bits) + " k_hi_dims " + std::to_string(k_hi_dims);
    return {};
  }
  void validate(std::string_view kernel) const {
    const std::string why = problem();
    if (!why.empty()) throw Error(ErrorCode::invalid_argument, std::string(kernel) + ": cache format: " + why);
  }
};

template <std::uint32_t Dim, std::uint32_t PageTokens, std::uint32_t KBits, std::uint32_t VBits,
          Rotation Rot = Rotation::hadamard, DType Norm = DType::f32, DType Raw = DType::bf16, bool KCentred = false,
          std::uint32_t KHiDims = 0>
struct PagedCacheConfig {
  static_assert(Dim == 64 || Dim == 80 || Dim == 96 || Dim == 128 || Dim == 256,
                "PagedCacheConfig: Dim must be 64, 80, 96, 128 or 256");
  static_assert(PageTokens % 16 == 0 && PageTokens >= 16 && PageTokens <= 256,
                "PagedCacheConfig: PageTokens must be a multiple of 16 in [16, 256]");
  static_assert(valid_cache_bits(KBits), "PagedCacheConfig: KBits must be 2, 3, 4, 6, 8 or 16 (raw)");
  static_assert(valid_cache_bits(VBits), "PagedCacheConfig: VBits must be 2, 3, 4, 6, 8 or 16 (raw)");
  static_assert(KBits == 16 || Dim * KBits % 32 == 0,
                "PagedCacheConfig: Dim * KBits must be a multiple of 32 (whole u32 words per token)");
  static_assert(VBits == 16 || Dim * VBits % 32 == 0,
                "PagedCacheConfig: Dim * VBits must be a multiple of 32 (whole u32 words per token)");
  static_assert(Rot != Rotation::hadamard || std::has_single_bit(Dim) || (KBits == 16 && VBits == 16),
                "PagedCacheConfig: a Hadamard rotation needs Dim a power of two (use Rotation::dense for 80 or 96)");
  static_assert(Norm == DType::f32 || Norm == DType::f16, "PagedCacheConfig: Norm must be DType::f32 or DType::f16");
  static_assert(Raw == DType::bf16 || Raw == DType::f16, "PagedCacheConfig: Raw must be DType::bf16 or DType::f16");
  static_assert(!KCentred || KBits != 16, "PagedCacheConfig: centred keys need a coded K (KBits 2 to 8)");
  static_assert(KHiDims == 0 || ((KBits == 2 || KBits == 3) && KHiDims % 32 == 0 && KHiDims < Dim),
                "PagedCacheConfig: split keys (KHiDims > 0) need KBits 2 or 3 and KHiDims a multiple of 32 below Dim");

  static constexpr CacheFormat format{Dim, PageTokens, KBits, VBits, Rot, Norm, Raw, KCentred, KHiDims};
  // The same format with centred keys.
  using centred = PagedCacheConfig<Dim, PageTokens, KBits, VBits, Rot, Norm, Raw, true, KHiDims>;
  // The same format with split keys: the first HiDims rotated coordinates
  // of K at KBits + 1 bits (KBits 2 with HiDims Dim / 2: 2.5 bits per
  // coordinate; KBits 3: 3.5).
  template <std::uint32_t HiDims>
  using split_keys = PagedCacheConfig<Dim, PageTokens, KBits, VBits, Rot, Norm, Raw, KCentred, HiDims>;
  static constexpr std::uint32_t dim = Dim;
  static constexpr std::uint32_t page_tokens = PageTokens;
  static constexpr std::uint32_t k_bits = KBits, v_bits = VBits;
  static constexpr Rotation rotation = Rot;
  static constexpr DType norm_dtype = Norm, raw_dtype = Raw;
  static constexpr bool k_raw = KBits == 16, v_raw = VBits == 16;
  static constexpr bool k_centred = KCentred;
  static constexpr std::uint32_t k_hi_dims = KHiDims;
  static constexpr std::uint32_t k_words = format.k_words(), v_words = format.v_words();
  static constexpr std::uint32_t bytes_per_token = format.bytes_per_token();

  static constexpr bool raw(std::uint32_t bits) { return bits == 16; }
  static constexpr std::uint32_t words(std::uint32_t bits) { return format.words(bits); }
  static constexpr DType store_dtype(std::uint32_t bits) { return format.store_dtype(bits); }
  static Shape store_shape(std::uint32_t bits, std::int64_t num_pages, std::int64_t kv_heads) {
    return format.store_shape(bits, num_pages, kv_heads);
  }
  static Shape side_store_shape(bool k_side, std::int64_t num_pages, std::int64_t kv_heads) {
    return format.side_store_shape(k_side, num_pages, kv_heads);
  }
  static Shape norm_shape(std::int64_t num_pages, std::int64_t kv_heads) { return format.norm_shape(num_pages, kv_heads); }
  static Shape centre_shape(std::int64_t centres, std::int64_t kv_heads) { return format.centre_shape(centres, kv_heads); }
};

// The codebooks (codebook.hpp) and rotations (rotation.hpp, seeded per
// side) of a cache format, as one f32 tensor [format.table_floats()] that
// the caller owns: the CacheWrite that fills a cache and the DecodeAttention
// that reads it take the same tensor (a cache is read with the seeds it was
// written with). values() gives its contents; record_upload() puts them on
// the device from the caller's command buffer.
struct CacheTables {
  static Shape shape(const CacheFormat& f) { return {f.table_floats()}; }
  static std::uint64_t bytes(const CacheFormat& f) { return std::uint64_t(f.table_floats()) * 4; }

  // The contents, for the upload and for references and tools.
  static std::vector<float> values(const CacheFormat& f, std::uint64_t k_seed, std::uint64_t v_seed) {
    f.validate("aura.cache_tables");
    std::vector<float> t(f.table_floats(), 0.0f);
    const auto put = [&](std::uint32_t at, const std::vector<float>& values) {
      std::copy(values.begin(), values.end(), t.begin() + at);
    };
    const auto side = [&](std::uint32_t bits, std::uint64_t seed, std::uint32_t cb_at, std::uint32_t b_at,
                          std::uint32_t rot_at) {
      if (CacheFormat::raw(bits)) return;
      const Codebook cb = lloyd_max_codebook(f.dim, bits);
      put(cb_at, cb.codebook);
      put(b_at, cb.boundaries);
      t[b_at + cb.boundaries.size()] = std::bit_cast<float>(0x7f800000u);  // +inf pads the last slot
      put(rot_at, f.rotation == Rotation::hadamard ? hadamard_signs(f.dim, seed) : dense_rotation(f.dim, seed));
    };
    side(f.k_bits, k_seed, f.k_codebook_at(), f.k_boundaries_at(), f.k_rotation_at());
    side(f.v_bits, v_seed, f.v_codebook_at(), f.v_boundaries_at(), f.v_rotation_at());
    if (f.k_split()) {  // the same distribution of coordinates, one bit more
      const Codebook hi = lloyd_max_codebook(f.dim, f.k_hi_bits());
      put(f.k_hi_codebook_at(), hi.codebook);
      put(f.k_hi_boundaries_at(), hi.boundaries);
      t[f.k_hi_boundaries_at() + hi.boundaries.size()] = std::bit_cast<float>(0x7f800000u);
    }
    return t;
  }

  // Records the upload of `values` into `tables` (a dense f32 tensor of
  // their length whose buffer has TRANSFER_DST usage): vkCmdUpdateBuffer
  // in pieces of 64 KiB, ordered after earlier compute and transfer
  // accesses to it and before later compute reads. The values are copied
  // into the command buffer as it is recorded.
  static void record_upload(const Context& ctx, vk::CommandBuffer cmd, const TensorRef& tables,
                            std::span<const float> values) {
    tilekernels::detail::expect_tensor(ctx, "aura.cache_tables", "tables", tables, DType::f32,
                                       {static_cast<std::int64_t>(values.size())});
    const auto& d = ctx.dispatcher();
    using A = vk::AccessFlagBits;
    using S = vk::PipelineStageFlagBits;
    const vk::DeviceSize bytes = values.size_bytes();
    const vk::BufferMemoryBarrier before(A::eShaderRead | A::eShaderWrite | A::eTransferWrite, A::eTransferWrite,
                                         VK_QUEUE_FAMILY_IGNORED, VK_QUEUE_FAMILY_IGNORED, tables.buffer, tables.offset,
                                         bytes);
    cmd.pipelineBarrier(S::eComputeShader | S::eTransfer, S::eTransfer, {}, {}, before, {}, d);
    constexpr std::size_t piece = 65536 / sizeof(float);
    for (std::size_t at = 0; at < values.size(); at += piece) {
      const std::size_t n = std::min(piece, values.size() - at);
      cmd.updateBuffer(tables.buffer, tables.offset + at * 4, n * 4, values.data() + at, d);
    }
    const vk::BufferMemoryBarrier after(A::eTransferWrite, A::eShaderRead, VK_QUEUE_FAMILY_IGNORED,
                                        VK_QUEUE_FAMILY_IGNORED, tables.buffer, tables.offset, bytes);
    cmd.pipelineBarrier(S::eTransfer, S::eComputeShader, {}, {}, after, {}, d);
  }

  // For tests, tools and programs that let the library allocate: a device
  // tensor holding the tables (allocated and uploaded here, with a submit).
  static Tensor make(Context& ctx, const CacheFormat& f, std::uint64_t k_seed, std::uint64_t v_seed) {
    return Tensor::from_floats(ctx, DType::f32, shape(f), values(f, k_seed, v_seed));
  }
};

}  // namespace tilekernels::aura

namespace tilekernels::detail {

// Checks one side (K or V) of an AURA cache against its format: coded sides
// need codes and norms, raw sides only their values (a norms tensor given
// for them is an error).
inline void expect_cache_side(const Context& ctx, std::string_view kernel, const aura::CacheFormat& f, bool k_side,
                              const TensorRef& store, const std::optional<TensorRef>& norms) {
  const std::uint32_t bits = k_side ? f.k_bits : f.v_bits;
  const char* side = k_side ? "k" : "v";
  const std::string codes_name = std::string(side) + "_codes", norms_name = std::string(side) + "_norms";
  tilekernels::detail::expect_rank(kernel, codes_name, store, 4);
  const auto num_pages = store.shape[0], kv_heads = store.shape[1];
  tilekernels::detail::expect_tensor(ctx, kernel, codes_name, store, f.store_dtype(bits),
                                     f.side_store_shape(k_side, num_pages, kv_heads));
  if (aura::CacheFormat::raw(bits)) {
    if (norms)
      throw Error(ErrorCode::invalid_argument, tilekernels::detail::where(kernel, norms_name) +
                                                   "a raw side has no norms; pass none");
    return;
  }
  if (!norms)
    throw Error(ErrorCode::invalid_argument, tilekernels::detail::where(kernel, norms_name) +
                                                 "a coded side needs its norms; none given");
  tilekernels::detail::expect_tensor(ctx, kernel, norms_name, *norms, f.norm_dtype, f.norm_shape(num_pages, kv_heads));
}

// Checks the centre of a cache's keys and the index naming each row's
// centre (`index` [count] i32: "token_centres" or "seq_centres"): both
// given for a centred format (k_centre [centres, kv_heads, Dim] f32,
// centres >= 1), neither for another. Returns the centres (0: none).
inline std::int64_t expect_key_centre(const Context& ctx, std::string_view kernel, const aura::CacheFormat& f,
                                      std::int64_t kv_heads, const std::optional<TensorRef>& centre,
                                      const std::optional<TensorRef>& index, const char* index_name,
                                      std::int64_t count) {
  using tilekernels::detail::where;
  if (!f.k_centred) {
    if (centre || index)
      throw Error(ErrorCode::invalid_argument, where(kernel, centre ? "k_centre" : index_name) +
                                                   "the cache format's keys are not centred; pass none");
    return 0;
  }
  if (!centre || !index)
    throw Error(ErrorCode::invalid_argument, where(kernel, !centre ? "k_centre" : index_name) +
                                                 "a format with centred keys needs k_centre and " + index_name +
                                                 "; none given");
  tilekernels::detail::expect_rank(kernel, "k_centre", *centre, 3);
  const std::int64_t centres = centre->shape[0];
  if (centres < 1)
    throw Error(ErrorCode::invalid_argument, where(kernel, "k_centre") + "needs at least one row, got shape " +
                                                 shape_string(centre->shape));
  tilekernels::detail::expect_tensor(ctx, kernel, "k_centre", *centre, DType::f32, f.centre_shape(centres, kv_heads));
  if (centres * kv_heads * f.dim >= (std::int64_t{1} << 31))
    throw Error(ErrorCode::unsupported, where(kernel, "k_centre") + "more values than 32-bit indexing allows");
  tilekernels::detail::expect_tensor(ctx, kernel, index_name, *index, DType::i32, {count});
  return centres;
}

// Checks a host copy of a centre index: each entry a row of k_centre, or
// (where `negative_is_none`: KeyCentre's rows, whose negative entries
// mean no row) negative.
inline void expect_centre_rows(std::string_view kernel, const char* index_name, std::span<const std::int32_t> rows,
                               std::int64_t count, std::int64_t centres, bool negative_is_none = false) {
  if (rows.empty()) return;
  const std::string at = tilekernels::detail::where(kernel, index_name);
  if (rows.size() != static_cast<std::size_t>(count))
    throw Error(ErrorCode::shape_mismatch, at + "the host copy holds " + std::to_string(rows.size()) +
                                               " entries, expected " + std::to_string(count));
  for (std::size_t i = 0; i < rows.size(); ++i)
    if ((rows[i] < 0 && !negative_is_none) || rows[i] >= centres)
      throw Error(ErrorCode::invalid_argument, at + "entry " + std::to_string(i) + " = " + std::to_string(rows[i]) +
                                                   " is not a row of k_centre (" + std::to_string(centres) + " rows" +
                                                   (negative_is_none ? "; negative: none)" : ")"));
}

}  // namespace tilekernels::detail
