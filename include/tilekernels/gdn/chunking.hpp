// SPDX-License-Identifier: MIT
// How the tokens of a Gated DeltaNet call fall into sequences and chunks,
// shared by the stages of the chunked forward (gdn::ChunkForward) and the
// decode step.
//
// Tokens: the [B, T] axis of q, k, v, g and beta, flattened (token b T + t).
// Without cu_seqlens there are N = B sequences of T tokens; with cu_seqlens
// (B = 1, N + 1 offsets on the device) sequence n is tokens [cu_seqlens[n],
// cu_seqlens[n + 1]), any length including 0 and 1. The device reads the
// offsets clamped into [0, T] and made non-decreasing (each the largest of
// it and those before it), so that garbage offsets give empty or shortened
// sequences, never an access outside the tensors.
//
// Chunks: each sequence is cut into ceil(len / BT) chunks of BT tokens, the
// last one short; chunks never straddle sequences. They are numbered
// sequence by sequence (chunk c of sequence n has the global index
// first_chunk(n) + c, FLA's chunk_offsets[n] + c), which is the row of h
// [chunks, H, V, K]. With cu_seqlens the host does not know the lengths:
// the intermediates hold chunks() = min(T, (T + N (BT - 1)) / BT) chunks,
// as many as any lengths summing to at most T can need, and the chunks
// past the last are padding (0 rows) that every stage skips; a command
// buffer recorded once serves any lengths.
//
// Slots: the intermediates of the forward (g cumsum, beta, A, w, u, v_new)
// are stored per chunk in BT slots each, [slots = NT_total BT, H, ...]: row
// i of global chunk c is slot c BT + i, whatever its length. Slots past a
// sequence's end are padding that the stages may fill with anything and
// never read as data. Where every sequence's length is a multiple of BT
// (fixed-length batches with T % BT == 0, in particular) slot and token
// coincide.
//
// The index table (device, u32 words, cu_seqlens only): uvec4 per sequence
// n at entry n (bos, len, first_chunk, 0), then uvec4 per global chunk c at
// entry N + c (sequence, first token, rows, chunk within its sequence; rows
// 0 for the padding chunks). gdn::ChunkIndex builds it from cu_seqlens on
// the device; the shaders read it through shaders/common/gdn_chunks.glsl.
// Fixed-length batches need none (the shaders compute the same values).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tilekernels/core.hpp"
#include "tilekernels/gdn/options_abi.h"

namespace tilekernels::gdn {

// How one head's state is stored in the caller's initial and final states
// (and the decode step's state): [K, V] is FLA's default, [V, K] its
// state_v_first.
enum class StateLayout : std::uint32_t { kv = 0, vk = 1 };

// The per-call options of the forward and the decode step, as FLA names them.
struct GdnOptions {
  bool qk_l2norm = false;  // q, k /= sqrt(|x|^2 + 1e-6) per token and head
  // g is raw: log decay = -exp(A_log[h]) * softplus(g + dt_bias[h]) (A_log
  // required, dt_bias optional)
  bool gate_in_kernel = false;
  bool beta_sigmoid = false;      // beta holds logits: beta = sigmoid(beta)
  bool allow_neg_eigval = false;  // with beta_sigmoid only: beta = 2 sigmoid(beta)
  StateLayout state_layout = StateLayout::kv;
};

// The shape of a call of one stage of the chunked forward (kkt_solve,
// recompute_wu, state_recurrence, chunk_o).
struct StageProblem {
  std::int64_t B = 0, T = 0, Hg = 0, H = 0;
  std::int64_t N = 0;       // sequences with cu_seqlens (B = 1); 0: B rows of T tokens
  bool slot_major = true;   // intermediates in slots (below), else by token
};

// What the chunked kernels are built for: the options the calls will pass
// (unset: every combination; a set with gate_in_kernel covers calls with
// and without dt_bias), whether a stage called on its own may get
// token-major intermediates, and whether v (recompute_wu) and o (chunk_o)
// may be views whose rows do not all start on a 16-byte boundary (an
// element offset in the binding, a token or a head stride that is not a
// multiple of 8): those are read and written by 32-bit words instead of
// 16-byte pieces, in pipelines of their own. Dense tensors, and views of
// fused rows whose offsets and strides are multiples of 8 elements, take
// the 16-byte pipelines.
struct GdnEnvelope {
  std::optional<GdnOptions> options;
  bool token_major = true;
  bool unaligned_views = true;
};

namespace detail {
using namespace tilekernels::detail;

// The OPTIONS specialization constant of the stage shaders (options_abi.h).
inline std::uint32_t option_bits(const GdnOptions& o, bool dt_bias) {
  return (o.gate_in_kernel ? TK_GDN_OPT_GATE_IN_KERNEL : 0u) | (o.gate_in_kernel && dt_bias ? TK_GDN_OPT_DT_BIAS : 0u) |
         (o.beta_sigmoid ? TK_GDN_OPT_BETA_SIGMOID : 0u) | (o.allow_neg_eigval ? TK_GDN_OPT_NEG_EIGVAL : 0u) |
         (o.state_layout == StateLayout::vk ? TK_GDN_OPT_STATE_VK : 0u) | (o.qk_l2norm ? TK_GDN_OPT_L2NORM : 0u);
}

// The values the OPTIONS specialization constant takes under `mask` for
// the calls inside `e` (a kernel builds one pipeline per value).
inline std::vector<std::uint32_t> option_bit_sets(const GdnEnvelope& e, std::uint32_t mask) {
  std::vector<GdnOptions> sets;
  if (e.options) {
    sets.push_back(*e.options);
  } else {
    for (const bool gate : {false, true})
      for (const int beta : {0, 1, 2}) {
        GdnOptions o;
        o.gate_in_kernel = gate;
        o.beta_sigmoid = beta > 0;
        o.allow_neg_eigval = beta > 1;
        for (const StateLayout layout : {StateLayout::kv, StateLayout::vk}) {
          o.state_layout = layout;
          sets.push_back(o);
        }
      }
  }
  std::vector<std::uint32_t> bits;
  for (const GdnOptions& o : sets)
    for (const bool dt_bias : {false, true}) {
      const std::uint32_t b = option_bits(o, dt_bias) & mask;
      if (std::find(bits.begin(), bits.end(), b) == bits.end()) bits.push_back(b);
    }
  return bits;
}

// Throws unless options `o` (dt_bias given or not), under `mask`, are among
// the sets a kernel built for envelope `e` has pipelines for.
inline void expect_options_in(std::string_view kernel, const GdnEnvelope& e, const GdnOptions& o, bool dt_bias,
                              std::uint32_t mask) {
  const auto sets = option_bit_sets(e, mask);
  if (std::find(sets.begin(), sets.end(), option_bits(o, dt_bias) & mask) == sets.end())
    throw Error(ErrorCode::invalid_argument,
                std::string(kernel) + ": options: outside the envelope the kernel was constructed for "
                                      "(GdnEnvelope::options fixes them; leave it unset for every option)");
}

// The options' own rules and the gate's tensors A_log, dt_bias [H] f32, as
// every kernel that takes GdnOptions checks them.
inline void expect_options(const Context& ctx, const char* kernel, const GdnOptions& o,
                           const std::optional<TensorRef>& A_log, const std::optional<TensorRef>& dt_bias,
                           std::int64_t H) {
  if (o.allow_neg_eigval && !o.beta_sigmoid)
    throw Error(ErrorCode::invalid_argument, std::string(kernel) + ": allow_neg_eigval needs beta_sigmoid (as in FLA)");
  if (o.gate_in_kernel) {
    if (!A_log) throw Error(ErrorCode::invalid_argument, where(kernel, "A_log") + "gate_in_kernel needs it");
    expect_tensor(ctx, kernel, "A_log", *A_log, DType::f32, {H});
    if (dt_bias) expect_tensor(ctx, kernel, "dt_bias", *dt_bias, DType::f32, {H});
  } else if (A_log || dt_bias) {  // a gate the caller meant to apply would be silently dropped
    throw Error(ErrorCode::invalid_argument, where(kernel, A_log ? "A_log" : "dt_bias") +
                                                 "given without options.gate_in_kernel, which alone reads it");
  }
}

// Whether the rows of view `l` all start on a 16-byte boundary (16-bit
// elements: offset and strides multiples of 8), as the 16-byte loads and
// stores of the stages' default pipelines need.
inline bool aligned_rows(const ViewLayout& l) { return l.aligned(8); }

// The fp16 matrix-unit variants on a CPU device take chunks of 16 only:
// lavapipe compiles a pipeline when a queue first runs it, and its compile
// time grows steeply with the chunk (bench/notes/2026-12-khr-matrices.md).
inline Status cpu_chunk_rule(const DeviceInfo& info, std::uint32_t bt) {
  return info.is_cpu() && bt > 16
             ? Status::failure(ErrorCode::unsupported,
                               "on a CPU device chunks of 16 only (lavapipe takes minutes to compile larger ones)")
             : Status::success();
}

// A view's strides as an error message names them.
inline std::string strides_string(const TensorRef& t) {
  return t.strides.empty() ? std::string("dense") : shape_string(t.strides);
}

// Throws unless a call may pass view `t` (where `l` says) to a kernel built
// for envelope `e`.
inline void expect_view_in(std::string_view kernel, std::string_view name, const GdnEnvelope& e, const TensorRef& t,
                           const ViewLayout& l) {
  if (aligned_rows(l) || e.unaligned_views) return;
  throw Error(ErrorCode::invalid_argument,
              where(kernel, name) + "a view whose rows do not all start on a 16-byte boundary (offset " +
                  std::to_string(t.offset) + " bytes, strides " + strides_string(t) +
                  ") is outside the envelope the kernel was constructed for (GdnEnvelope::unaligned_views)");
}

// Throws unless the rows of the 16-bit output view `t` (where `l` says)
// start at even elements: its elements are stored in pairs, as 32-bit
// words, which must not reach into the elements beside the view.
inline void expect_word_rows(std::string_view kernel, std::string_view name, const TensorRef& t, const ViewLayout& l) {
  if (l.aligned(2)) return;
  throw Error(ErrorCode::invalid_argument,
              where(kernel, name) + "a 16-bit output view needs an even element offset and even strides (pairs are "
                                    "written as 32-bit words), got offset " +
                  std::to_string(t.offset) + " bytes and strides " + strides_string(t));
}
// Throws unless `p` is the shape of a stage's call: B, T, Hg and H > 0, H a
// multiple of Hg, B = 1 with sequences; and with `slot_major_only` (the
// stages that have no token-major form), slot-major intermediates.
inline void expect_stage_shape(std::string_view kernel, const StageProblem& p, bool slot_major_only) {
  if (p.B <= 0 || p.T <= 0 || p.Hg <= 0 || p.H <= 0 || p.H % p.Hg != 0 || p.N < 0 || (p.N > 0 && p.B != 1) ||
      (slot_major_only && !p.slot_major))
    throw Error(ErrorCode::invalid_argument,
                std::string(kernel) + ": B, T, Hg, H must be > 0, H a multiple of Hg, B = 1 with sequences" +
                    (slot_major_only ? ", intermediates slot-major" : ""));
}

}  // namespace detail

class Chunking {
 public:
  // B, T: q's first two dimensions; sequences: N with cu_seqlens (B = 1),
  // 0 for fixed-length batches; bt: the chunk length.
  Chunking(std::int64_t B, std::int64_t T, std::int64_t sequences, std::uint32_t bt)
      : B_(B), T_(T), N_(sequences > 0 ? sequences : B), varlen_(sequences > 0), bt_(bt) {
    if (varlen_)
      chunks_ = std::min<std::int64_t>(T, (T + N_ * (bt - 1)) / bt);
    else
      chunks_ = B * ((T + bt - 1) / bt);
  }
  // The same with the offsets known on the host (tests and tools):
  // for_each_sequence() walks the device's layout.
  Chunking(std::int64_t B, std::int64_t T, std::span<const std::int32_t> cu_seqlens, std::uint32_t bt)
      : Chunking(B, T, cu_seqlens.empty() ? 0 : std::int64_t(cu_seqlens.size()) - 1, bt) {
    cu_ = cu_seqlens;
  }

  bool varlen() const noexcept { return varlen_; }
  std::int64_t N() const noexcept { return N_; }
  std::int64_t B() const noexcept { return B_; }
  std::int64_t T() const noexcept { return T_; }
  std::uint32_t bt() const noexcept { return bt_; }
  std::int64_t chunks() const noexcept { return chunks_; }  // the chunk slots (an upper bound with cu_seqlens)
  std::int64_t slots() const noexcept { return chunks_ * bt_; }
  // Chunks of one fixed-length row (0 with cu_seqlens).
  std::int64_t row_chunks() const noexcept { return varlen_ ? 0 : (T_ + bt_ - 1) / bt_; }

  // Calls f(n, bos, len, first_chunk) for every sequence, in order, as the
  // device lays them out (with cu_seqlens, from the host copy given).
  template <class F>
  void for_each_sequence(F&& f) const {
    std::int64_t first = 0, bos = 0;
    for (std::int64_t n = 0; n < N(); ++n) {
      std::int64_t len = T_;
      if (varlen_) {
        const auto clamped = [&](std::size_t i) { return std::clamp<std::int64_t>(cu_[i], 0, T_); };
        bos = std::max(bos, clamped(std::size_t(n)));
        len = std::max(bos, clamped(std::size_t(n) + 1)) - bos;
      } else {
        bos = n * T_;
      }
      f(n, bos, len, first);
      first += (len + bt_ - 1) / bt_;
    }
  }

  // Throws unless the device copy of cu_seqlens (given exactly when the
  // call is variable-length) has N + 1 i32 entries with B = 1, and the host
  // copy, where given, is a valid partition of the T tokens.
  void check(const Context& ctx, std::string_view kernel, const std::optional<TensorRef>& device_copy,
             std::span<const std::int32_t> host_copy = {}) const {
    const auto fail = [&](const std::string& why) {
      throw Error(ErrorCode::invalid_argument, std::string(kernel) + ": cu_seqlens: " + why);
    };
    if (!device_copy) {
      if (!host_copy.empty()) fail("the host copy was given without the device copy");
      return;
    }
    if (B_ != 1) fail("needs B = 1 (one row of concatenated sequences), got B = " + std::to_string(B_));
    tilekernels::detail::expect_rank(kernel, "cu_seqlens", *device_copy, 1);
    if (device_copy->shape[0] < 2)
      fail("needs at least 2 offsets (one sequence), got shape " + shape_string(device_copy->shape));
    tilekernels::detail::expect_tensor(ctx, kernel, "cu_seqlens", *device_copy, DType::i32, device_copy->shape);
    if (host_copy.empty()) return;
    if (host_copy.size() != static_cast<std::size_t>(device_copy->shape[0]))
      fail("the host copy holds " + std::to_string(host_copy.size()) + " offsets, the device copy " +
           std::to_string(device_copy->shape[0]));
    if (const std::string why = partition_problem(host_copy, T_); !why.empty()) fail(why);
  }

  // Why offsets `cu` are not a partition of T tokens into sequences (empty
  // when they are): they must start at 0, end at T and never decrease.
  static std::string partition_problem(std::span<const std::int32_t> cu, std::int64_t T) {
    if (cu.empty()) return "no offsets";
    if (cu.front() != 0) return "must start at 0, got " + std::to_string(cu.front());
    if (cu.back() != T) return "must end at T = " + std::to_string(T) + " (the tokens of q), got " + std::to_string(cu.back());
    for (std::size_t n = 0; n + 1 < cu.size(); ++n)
      if (cu[n + 1] < cu[n])
        return "must not decrease; offsets " + std::to_string(n) + " and " + std::to_string(n + 1) + " are " +
               std::to_string(cu[n]) + ", " + std::to_string(cu[n + 1]);
    return {};
  }

  // Throws unless a variable-length call was given its index table
  // (index_bytes() of u32, gdn::ChunkIndex); without, nothing.
  void check_index(const Context& ctx, std::string_view kernel, const std::optional<TensorRef>& index) const {
    if (!varlen_) return;
    if (!index) throw Error(ErrorCode::invalid_argument, std::string(kernel) + ": index: cu_seqlens needs it (gdn::ChunkIndex)");
    tilekernels::detail::expect_tensor(ctx, kernel, "index", *index, DType::u32,
                                       {static_cast<std::int64_t>(index_bytes() / 4)});
  }

  // Bytes of the index table (0 without cu_seqlens).
  std::uint64_t index_bytes() const noexcept {
    return varlen_ ? static_cast<std::uint64_t>(N_ + chunks_) * 16 : 0;
  }

 private:
  std::int64_t B_, T_, N_;
  bool varlen_;
  std::uint32_t bt_;
  std::int64_t chunks_ = 0;
  std::span<const std::int32_t> cu_;
};

}  // namespace tilekernels::gdn
