// SPDX-License-Identifier: MIT
// The Gated DeltaNet problem as flash-linear-attention poses it (its
// chunk_gated_delta_rule and fused_recurrent_gated_delta_rule), shared by
// the double-precision references: gated_delta_rule.hpp (token by token)
// and chunk_forward.hpp (the chunked stages). Semantics and FLA's rounding
// points: bench/notes/2026-11-gdn-forward.md.
//
// Every tensor is a flat row-major vector, last index innermost. A "token"
// is a flat index into the [B, T] axis (B = 1 with cu_seqlens), so that
// token t of sequence n is at bos(n) + t in every [B, T, ...] tensor.
// The recurrence, per sequence, value head h (q/k head h / (H / Hg)) and
// token t, with the state S [K, V] starting from initial_state (or zeros):
//   S   = exp(gate_t) S
//   v'  = beta_t (v_t - S^T k_t)
//   S  += k_t v'^T
//   o_t = S^T (scale q_t)
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace tilekernels::reference::gdn {

// How one head's state is stored in initial_state, final_state, the per-chunk
// states h and the per-token states: [K, V] is FLA's default, [V, K] its
// state_v_first (the layout of gdn::ChunkO's h).
enum class StateLayout { kv, vk };

struct GatedDeltaRuleProblem {
  std::size_t B = 1;  // batch rows; must be 1 when cu_seqlens is given
  std::size_t T = 0;  // tokens per batch row (with cu_seqlens: all tokens of all sequences)
  std::size_t Hg = 1;  // q/k heads
  std::size_t H = 1;  // v heads, a multiple of Hg: v head h reads q/k head h / (H / Hg)
  std::size_t K = 0;  // q/k head size (rows of the state)
  std::size_t V = 0;  // v head size (columns of the state)
  // Empty: B sequences of T tokens, sequence n = batch row n. Otherwise N + 1
  // non-decreasing token offsets from 0 to T: sequence n is tokens
  // [cu_seqlens[n], cu_seqlens[n + 1]) of the one batch row. A sequence may
  // be empty (its final state is its initial state). No state crosses from
  // one sequence to the next, and chunks restart at each sequence's first token.
  std::vector<std::int32_t> cu_seqlens;
  double scale = 0;  // multiplies q; 0 means FLA's default 1 / sqrt(K)
  bool qk_l2norm = false;  // q, k /= sqrt(|x|^2 + 1e-6) per token and head (FLA's eps, inside the root)
  bool gate_in_kernel = false;  // g is raw: log decay = -exp(A_log[h]) * softplus(g + dt_bias[h])
  bool beta_sigmoid = false;  // beta holds logits: beta = sigmoid(beta)
  bool allow_neg_eigval = false;  // with beta_sigmoid only: beta = 2 sigmoid(beta), in (0, 2)
  StateLayout state_layout = StateLayout::kv;

  std::size_t N() const { return cu_seqlens.empty() ? B : cu_seqlens.size() - 1; }
  std::size_t tokens() const { return B * T; }
  std::size_t bos(std::size_t n) const { return cu_seqlens.empty() ? n * T : std::size_t(cu_seqlens[n]); }
  std::size_t eos(std::size_t n) const { return cu_seqlens.empty() ? n * T + T : std::size_t(cu_seqlens[n + 1]); }
  std::size_t key_head(std::size_t h) const { return h / (H / Hg); }
  double resolved_scale() const { return scale != 0 ? scale : 1.0 / std::sqrt(double(K)); }
  // Offset of S[kk][vv] inside one head's K * V block, in this layout.
  std::size_t state_offset(std::size_t kk, std::size_t vv) const {
    return state_layout == StateLayout::kv ? kk * V + vv : vv * K + kk;
  }
  std::size_t state_elements() const { return N() * H * K * V; }

  void check() const {
    auto fail = [](const std::string& what) { throw std::invalid_argument("GatedDeltaRuleProblem: " + what); };
    if (K == 0 || V == 0 || Hg == 0 || H == 0) fail("K, V, Hg and H must be positive");
    if (H % Hg != 0) fail("H must be a multiple of Hg; got H=" + std::to_string(H) + ", Hg=" + std::to_string(Hg));
    if (allow_neg_eigval && !beta_sigmoid) fail("allow_neg_eigval needs beta_sigmoid (as in FLA)");
    if (!cu_seqlens.empty()) {
      if (B != 1) fail("B must be 1 with cu_seqlens; got " + std::to_string(B));
      if (cu_seqlens.size() < 2 || cu_seqlens.front() != 0 || std::size_t(cu_seqlens.back()) != T)
        fail("cu_seqlens must run from 0 to T with at least one sequence");
      for (std::size_t n = 0; n + 1 < cu_seqlens.size(); ++n)
        if (cu_seqlens[n + 1] < cu_seqlens[n]) fail("cu_seqlens must not decrease");
    }
  }
};

// The caller's tensors, widened to float (bf16 inputs as the kernels read them).
struct GatedDeltaRuleInputs {
  std::span<const float> q, k;  // [B, T, Hg, K]
  std::span<const float> v;  // [B, T, H, V]
  std::span<const float> g;  // [B, T, H]: per-token natural-log decay (<= 0), or the raw gate with gate_in_kernel
  std::span<const float> beta;  // [B, T, H] (logits with beta_sigmoid)
  std::span<const float> A_log;  // [H], read with gate_in_kernel only
  std::span<const float> dt_bias;  // [H] or empty (no bias), read with gate_in_kernel only
  std::span<const float> initial_state;  // [N, H, K, V] or [N, H, V, K] per state_layout; empty: zeros
};

inline void check(const GatedDeltaRuleProblem& p, const GatedDeltaRuleInputs& in) {
  p.check();
  auto need = [](std::span<const float> x, std::size_t n, const char* name) {
    if (x.size() != n)
      throw std::invalid_argument(std::string("GatedDeltaRuleInputs: ") + name + " has " + std::to_string(x.size()) +
                                  " elements, expected " + std::to_string(n));
  };
  const std::size_t tok = p.tokens();
  need(in.q, tok * p.Hg * p.K, "q");
  need(in.k, tok * p.Hg * p.K, "k");
  need(in.v, tok * p.H * p.V, "v");
  need(in.g, tok * p.H, "g");
  need(in.beta, tok * p.H, "beta");
  if (p.gate_in_kernel) {
    need(in.A_log, p.H, "A_log");
    if (!in.dt_bias.empty()) need(in.dt_bias, p.H, "dt_bias");
  }
  if (!in.initial_state.empty()) need(in.initial_state, p.state_elements(), "initial_state");
}

// FLA's softplus returns x itself above 20, where log(1 + e^x) equals x to
// within 2e-9.
inline double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

// Natural-log decay of token t in value head h (the per-token g of the recurrence).
inline double gate_log(const GatedDeltaRuleProblem& p, const GatedDeltaRuleInputs& in, std::size_t t,
                       std::size_t h) {
  const double raw = in.g[t * p.H + h];
  if (!p.gate_in_kernel) return raw;
  const double bias = in.dt_bias.empty() ? 0.0 : double(in.dt_bias[h]);
  return -std::exp(double(in.A_log[h])) * softplus(raw + bias);
}

inline double beta_value(const GatedDeltaRuleProblem& p, const GatedDeltaRuleInputs& in, std::size_t t,
                         std::size_t h) {
  const double raw = in.beta[t * p.H + h];
  if (!p.beta_sigmoid) return raw;
  return (p.allow_neg_eigval ? 2.0 : 1.0) / (1.0 + std::exp(-raw));
}

// Row (token t, q/k head kh) of q or k, L2-normalised when the problem says so; not scaled.
inline std::vector<double> qk_row(const GatedDeltaRuleProblem& p, std::span<const float> x, std::size_t t,
                                  std::size_t kh) {
  std::vector<double> r(x.begin() + std::ptrdiff_t((t * p.Hg + kh) * p.K),
                        x.begin() + std::ptrdiff_t((t * p.Hg + kh + 1) * p.K));
  if (p.qk_l2norm) {
    double ss = 0;
    for (double e : r) ss += e * e;
    const double inv = 1.0 / std::sqrt(ss + 1e-6);
    for (double& e : r) e *= inv;
  }
  return r;
}

}  // namespace tilekernels::reference::gdn
