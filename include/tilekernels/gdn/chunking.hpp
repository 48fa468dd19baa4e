// How the tokens of a Gated DeltaNet call fall into sequences and chunks,
// shared by the stages of the chunked forward (gdn::ChunkForward) and the
// decode step.
//
// Tokens: the [B, T] axis of q, k, v, g and beta, flattened (token b T + t).
// Without cu_seqlens there are N = B sequences of T tokens; with cu_seqlens
// (B = 1) sequence n is tokens [cu_seqlens[n], cu_seqlens[n + 1]), any
// length including 0 and 1.
//
// Chunks: each sequence is cut into ceil(len / BT) chunks of BT tokens, the
// last one short; chunks never straddle sequences. They are numbered
// sequence by sequence (chunk c of sequence n has the global index
// first_chunk(n) + c, FLA's chunk_offsets[n] + c), which is the row of h
// [NT_total, H, V, K].
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
// entry N + c (sequence, first token, rows, chunk within its sequence). The
// shaders read it through shaders/common/gdn_chunks.glsl; fixed-length
// batches need none (the shaders compute the same values).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

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

namespace detail {
using namespace tilekernels::detail;

// The OPTIONS specialization constant of the stage shaders (options_abi.h).
inline std::uint32_t option_bits(const GdnOptions& o, bool dt_bias) {
  return (o.gate_in_kernel ? TK_GDN_OPT_GATE_IN_KERNEL : 0u) | (o.gate_in_kernel && dt_bias ? TK_GDN_OPT_DT_BIAS : 0u) |
         (o.beta_sigmoid ? TK_GDN_OPT_BETA_SIGMOID : 0u) | (o.allow_neg_eigval ? TK_GDN_OPT_NEG_EIGVAL : 0u) |
         (o.state_layout == StateLayout::vk ? TK_GDN_OPT_STATE_VK : 0u) | (o.qk_l2norm ? TK_GDN_OPT_L2NORM : 0u);
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
  }
}
}  // namespace detail

class Chunking {
 public:
  // B, T: q's first two dimensions; cu_seqlens: the host copy (empty for
  // fixed-length batches); bt: the chunk length.
  Chunking(std::int64_t B, std::int64_t T, std::span<const std::int32_t> cu_seqlens, std::uint32_t bt)
      : B_(B), T_(T), cu_(cu_seqlens), bt_(bt) {
    if (varlen()) {
      for (std::size_t n = 0; n + 1 < cu_.size(); ++n) {
        const std::int64_t len = std::int64_t(cu_[n + 1]) - cu_[n];
        if (len > 0) chunks_ += (len + bt - 1) / bt;
      }
    } else {
      chunks_ = B * ((T + bt - 1) / bt);
    }
  }

  bool varlen() const noexcept { return !cu_.empty(); }
  std::int64_t N() const noexcept { return varlen() ? std::int64_t(cu_.size()) - 1 : B_; }
  std::int64_t B() const noexcept { return B_; }
  std::int64_t T() const noexcept { return T_; }
  std::uint32_t bt() const noexcept { return bt_; }
  std::int64_t chunks() const noexcept { return chunks_; }  // NT_total
  std::int64_t slots() const noexcept { return chunks_ * bt_; }
  // Chunks of one fixed-length row (0 with cu_seqlens).
  std::int64_t row_chunks() const noexcept { return varlen() ? 0 : (T_ + bt_ - 1) / bt_; }

  // Calls f(n, bos, len, first_chunk) for every sequence, in order.
  template <class F>
  void for_each_sequence(F&& f) const {
    std::int64_t first = 0;
    for (std::int64_t n = 0; n < N(); ++n) {
      const std::int64_t bos = varlen() ? cu_[std::size_t(n)] : n * T_;
      const std::int64_t len = varlen() ? std::int64_t(cu_[std::size_t(n) + 1]) - bos : T_;
      f(n, bos, len, first);
      first += (len + bt_ - 1) / bt_;
    }
  }

  // Throws unless the host cu_seqlens is a valid partition of the B T
  // tokens (and, when given, the device copy has its shape and dtype).
  void check(const Context& ctx, std::string_view kernel, const std::optional<TensorRef>& device_copy) const {
    const auto fail = [&](const std::string& why) {
      throw Error(ErrorCode::invalid_argument, std::string(kernel) + ": cu_seqlens: " + why);
    };
    if (!varlen()) {
      if (device_copy) fail("the device copy was given without the host copy (Args::cu_seqlens_host)");
      return;
    }
    if (B_ != 1) fail("needs B = 1 (one row of concatenated sequences), got B = " + std::to_string(B_));
    if (cu_.size() < 2) fail("needs at least 2 offsets (one sequence), got " + std::to_string(cu_.size()));
    if (cu_.front() != 0) fail("must start at 0, got " + std::to_string(cu_.front()));
    if (cu_.back() != T_)
      fail("must end at T = " + std::to_string(T_) + " (the tokens of q), got " + std::to_string(cu_.back()));
    for (std::size_t n = 0; n + 1 < cu_.size(); ++n)
      if (cu_[n + 1] < cu_[n])
        fail("must not decrease; offsets " + std::to_string(n) + " and " + std::to_string(n + 1) + " are " +
             std::to_string(cu_[n]) + ", " + std::to_string(cu_[n + 1]));
    if (device_copy)
      tilekernels::detail::expect_tensor(ctx, kernel, "cu_seqlens", *device_copy, DType::i32,
                                         {static_cast<std::int64_t>(cu_.size())});
  }

  // Throws unless a call with cu_seqlens was given its index table
  // (index_bytes() of u32, Chunking::record_index); without, nothing.
  void check_index(const Context& ctx, std::string_view kernel, const std::optional<TensorRef>& index) const {
    if (!varlen()) return;
    if (!index) throw Error(ErrorCode::invalid_argument, std::string(kernel) + ": index: cu_seqlens needs it");
    tilekernels::detail::expect_tensor(ctx, kernel, "index", *index, DType::u32,
                                       {static_cast<std::int64_t>(index_bytes() / 4)});
  }

  // Bytes of the index table (0 without cu_seqlens).
  std::uint64_t index_bytes() const noexcept {
    return varlen() ? static_cast<std::uint64_t>(N() + chunks_) * 16 : 0;
  }

  // Records the index table into `table` (index_bytes() bytes, u32) with
  // vkCmdUpdateBuffer, between barriers that order it after earlier compute
  // and transfer accesses and before later compute reads. Nothing is
  // allocated: the table goes out in pieces from a fixed buffer.
  void record_index(const Context& ctx, vk::CommandBuffer cmd, const TensorRef& table) const {
    if (!varlen()) return;
    const auto& d = ctx.dispatcher();
    using A = vk::AccessFlagBits;
    using S = vk::PipelineStageFlagBits;
    const vk::DeviceSize bytes = index_bytes();
    const vk::BufferMemoryBarrier before(A::eShaderRead | A::eShaderWrite | A::eTransferWrite, A::eTransferWrite,
                                         VK_QUEUE_FAMILY_IGNORED, VK_QUEUE_FAMILY_IGNORED, table.buffer, table.offset,
                                         bytes);
    cmd.pipelineBarrier(S::eComputeShader | S::eTransfer, S::eTransfer, {}, {}, before, {}, d);
    std::array<std::uint32_t, 4096> piece{};  // 16 KiB per vkCmdUpdateBuffer (the limit is 64 KiB)
    std::size_t used = 0;
    vk::DeviceSize at = table.offset;
    const auto put = [&](std::uint32_t a, std::uint32_t b, std::uint32_t c, std::uint32_t e) {
      piece[used++] = a;
      piece[used++] = b;
      piece[used++] = c;
      piece[used++] = e;
      if (used == piece.size()) {
        cmd.updateBuffer(table.buffer, at, used * 4, piece.data(), d);
        at += used * 4;
        used = 0;
      }
    };
    const auto u32 = [](std::int64_t x) { return static_cast<std::uint32_t>(x); };
    for_each_sequence([&](std::int64_t, std::int64_t bos, std::int64_t len, std::int64_t first) {
      put(u32(bos), u32(len), u32(first), 0);
    });
    for_each_sequence([&](std::int64_t n, std::int64_t bos, std::int64_t len, std::int64_t) {
      for (std::int64_t c = 0; c * bt_ < len; ++c)
        put(u32(n), u32(bos + c * bt_), u32(std::min<std::int64_t>(bt_, len - c * bt_)), u32(c));
    });
    if (used) cmd.updateBuffer(table.buffer, at, used * 4, piece.data(), d);
    const vk::BufferMemoryBarrier after(A::eTransferWrite, A::eShaderRead, VK_QUEUE_FAMILY_IGNORED,
                                        VK_QUEUE_FAMILY_IGNORED, table.buffer, table.offset, bytes);
    cmd.pipelineBarrier(S::eTransfer, S::eComputeShader, {}, {}, after, {}, d);
  }

 private:
  std::int64_t B_, T_;
  std::span<const std::int32_t> cu_;
  std::uint32_t bt_;
  std::int64_t chunks_ = 0;
};

}  // namespace tilekernels::gdn
