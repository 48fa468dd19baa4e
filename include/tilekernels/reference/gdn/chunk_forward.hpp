// SPDX-License-Identifier: MIT
// Double-precision reference of Gated DeltaNet's chunked forward, stage by
// stage as FLA's chunk_gated_delta_rule runs it, so that each GPU stage can
// be tested in isolation (feed it this reference's inputs to the stage,
// compare with its output) and the whole forward against FLA-tracking values.
// The problem and the recurrence it computes: problem.hpp.
//
// Per sequence, value head h and chunk of BT tokens (chunks restart at each
// sequence's first token; the last one may be short), with g the chunk-local
// cumulative log decay and i, j rows of the chunk:
//   A  = (I + M)^-1,   M[i][j] = beta_i (k_i . k_j) exp(g_i - g_j) for j < i, else 0
//   u  = A (beta v),   w = A (beta exp(g) k)
//   h_c = S (state at the chunk's start),   v_new = u - w S
//   S  <- exp(g_last) S + sum_i k_i^T (exp(g_last - g_i) v_new_i)
//   o_i = scale (exp(g_i) q_i S + sum_{j <= i} (q_i . k_j) exp(g_i - g_j) v_new_j)
// Rounding::none keeps every intermediate exact, and the result equals the
// recurrence (gated_delta_rule.hpp) to double rounding. Rounding::fla gives
// each intermediate the value FLA stores: bf16 for l2-normalised q and k, A,
// w, u, the per-chunk h and v_new; f32 for g and a sigmoid beta; the state
// update's operand bf16(exp(g_last - g_i) v_new_i), taken from the unrounded
// v_new, and bf16(S) in w S, as FLA's kernel does. Sums stay in double, and
// outputs (o, final state) are not narrowed.
//
// g is in natural log, as gdn::ChunkO and gdn::RecomputeWU take it (FLA
// stores g / ln 2 and uses exp2; the values agree to f32 rounding). The two
// existing references, chunk_o.hpp and recompute_wu.hpp, compute those two
// stages under Rounding::fla.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "tilekernels/core/dtype.hpp"
#include "tilekernels/reference/gdn/chunk_o.hpp"
#include "tilekernels/reference/gdn/problem.hpp"
#include "tilekernels/reference/gdn/recompute_wu.hpp"

namespace tilekernels::reference::gdn {

enum class Rounding { none, fla };

// One chunk: a row of FLA's chunk_indices (sequence, chunk within it) with its
// global index (FLA's chunk_offsets[seq] + chunk), the row of h. Chunks are
// numbered sequence by sequence, so fixed-length batches give h [B, NT, ...].
struct ChunkSpan {
  std::size_t seq;  // sequence n
  std::size_t first;  // flat token of its first row
  std::size_t rows;  // 1..BT
  std::size_t index;  // global chunk index
};

inline std::vector<ChunkSpan> chunk_spans(const GatedDeltaRuleProblem& p, std::size_t BT) {
  std::vector<ChunkSpan> spans;
  for (std::size_t n = 0; n < p.N(); ++n)
    for (std::size_t t0 = p.bos(n); t0 < p.eos(n); t0 += BT)
      spans.push_back({n, t0, std::min(BT, p.eos(n) - t0), spans.size()});
  return spans;
}

namespace detail {
inline double to_bf16(double x, Rounding r) { return r == Rounding::fla ? double(round_to_bf16(float(x))) : x; }
inline double to_f32(double x, Rounding r) { return r == Rounding::fla ? double(float(x)) : x; }
inline std::vector<float> narrowed(std::span<const double> x, std::size_t first, std::size_t count) {
  return std::vector<float>(x.begin() + std::ptrdiff_t(first), x.begin() + std::ptrdiff_t(first + count));
}
inline double dot(const double* a, const double* b, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
}  // namespace detail

inline std::vector<double> widened(std::span<const float> x) { return {x.begin(), x.end()}; }

// q or k [B, T, Hg, K] as the chunk kernels read them: L2-normalised and
// stored in bf16 (FLA's l2norm_fwd writes the input dtype) when qk_l2norm.
inline std::vector<double> prepare_qk(const GatedDeltaRuleProblem& p, std::span<const float> x, Rounding r) {
  std::vector<double> out(x.size());
  for (std::size_t t = 0; t < p.tokens(); ++t)
    for (std::size_t kh = 0; kh < p.Hg; ++kh) {
      const std::vector<double> row = qk_row(p, x, t, kh);
      for (std::size_t c = 0; c < p.K; ++c)
        out[(t * p.Hg + kh) * p.K + c] = p.qk_l2norm ? detail::to_bf16(row[c], r) : row[c];
    }
  return out;
}

// beta [B, T, H]; FLA's sigmoid writes f32.
inline std::vector<double> prepare_beta(const GatedDeltaRuleProblem& p, const GatedDeltaRuleInputs& in, Rounding r) {
  std::vector<double> out(p.tokens() * p.H);
  for (std::size_t t = 0; t < p.tokens(); ++t)
    for (std::size_t h = 0; h < p.H; ++h) out[t * p.H + h] = detail::to_f32(beta_value(p, in, t, h), r);
  return out;
}

// Chunk-local cumulative sum of the per-token log decay (the gate applied
// first with gate_in_kernel), [B, T, H], natural log; f32 as FLA stores it.
inline std::vector<double> gate_cumsum(const GatedDeltaRuleProblem& p, const GatedDeltaRuleInputs& in,
                                       std::size_t BT, Rounding r) {
  std::vector<double> out(p.tokens() * p.H);
  for (const ChunkSpan& c : chunk_spans(p, BT))
    for (std::size_t h = 0; h < p.H; ++h) {
      double acc = 0;
      for (std::size_t i = 0; i < c.rows; ++i) {
        acc += gate_log(p, in, c.first + i, h);
        out[(c.first + i) * p.H + h] = detail::to_f32(acc, r);
      }
    }
  return out;
}

// A = (I + M)^-1 per chunk, [B, T, H, BT]: row = token, column = row of its
// chunk; unit lower triangular, zeros above the diagonal and past the chunk's
// rows. FLA builds M in f32 (never stored) and stores A in bf16.
inline std::vector<double> kkt_solve(const GatedDeltaRuleProblem& p, std::span<const double> k,
                                     std::span<const double> beta, std::span<const double> g, std::size_t BT,
                                     Rounding r) {
  const std::size_t H = p.H, K = p.K;
  std::vector<double> A(p.tokens() * H * BT, 0.0), M(BT * BT), inv(BT * BT);
  for (const ChunkSpan& c : chunk_spans(p, BT))
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t kh = p.key_head(h);
      auto krow = [&](std::size_t i) { return &k[((c.first + i) * p.Hg + kh) * K]; };
      auto at = [&](std::size_t i) { return (c.first + i) * H + h; };
      for (std::size_t i = 0; i < c.rows; ++i)
        for (std::size_t j = 0; j < i; ++j)
          M[i * BT + j] = beta[at(i)] * detail::dot(krow(i), krow(j), K) * std::exp(g[at(i)] - g[at(j)]);
      // Forward substitution of (I + M) inv = I, row by row: inv is unit lower triangular.
      for (std::size_t i = 0; i < c.rows; ++i) {
        for (std::size_t j = 0; j < i; ++j) {
          double s = 0;
          for (std::size_t m = j; m < i; ++m) s += M[i * BT + m] * inv[m * BT + j];
          inv[i * BT + j] = -s;
        }
        inv[i * BT + i] = 1.0;
      }
      for (std::size_t i = 0; i < c.rows; ++i)
        for (std::size_t j = 0; j <= i; ++j) A[at(i) * BT + j] = detail::to_bf16(inv[i * BT + j], r);
    }
  return A;
}

struct WU {
  std::vector<double> w;  // [B, T, H, K]
  std::vector<double> u;  // [B, T, H, V]
};

// u = A bf16(beta v), w = A bf16(beta exp(g) k); bf16 in FLA. Under
// Rounding::fla this is recompute_wu.hpp's reference, one sequence at a time.
inline WU recompute_w_u(const GatedDeltaRuleProblem& p, std::span<const double> k, std::span<const float> v,
                        std::span<const double> beta, std::span<const double> g, std::span<const double> A,
                        std::size_t BT, Rounding r) {
  const std::size_t H = p.H, K = p.K, V = p.V, Hg = p.Hg;
  WU out{std::vector<double>(p.tokens() * H * K, 0.0), std::vector<double>(p.tokens() * H * V, 0.0)};
  if (r == Rounding::fla) {
    for (std::size_t n = 0; n < p.N(); ++n) {
      const std::size_t b = p.bos(n), L = p.eos(n) - b;
      if (L == 0) continue;
      const std::vector<float> kf = detail::narrowed(k, b * Hg * K, L * Hg * K);
      const std::vector<float> vf(v.begin() + std::ptrdiff_t(b * H * V), v.begin() + std::ptrdiff_t((b + L) * H * V));
      const std::vector<float> bf = detail::narrowed(beta, b * H, L * H), gf = detail::narrowed(g, b * H, L * H);
      const std::vector<float> Af = detail::narrowed(A, b * H * BT, L * H * BT);
      const RecomputeWUResult s = recompute_wu(kf, vf, bf, gf, Af, 1, L, Hg, H, K, V, BT);
      for (std::size_t i = 0; i < s.w.size(); ++i) out.w[b * H * K + i] = detail::to_bf16(s.w[i], r);
      for (std::size_t i = 0; i < s.u.size(); ++i) out.u[b * H * V + i] = detail::to_bf16(s.u[i], r);
    }
    return out;
  }
  for (const ChunkSpan& c : chunk_spans(p, BT))
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t kh = p.key_head(h);
      for (std::size_t i = 0; i < c.rows; ++i) {
        const std::size_t ti = (c.first + i) * H + h;
        for (std::size_t j = 0; j <= i; ++j) {
          const std::size_t tj = (c.first + j) * H + h;
          const double a = A[ti * BT + j] * beta[tj], ag = a * std::exp(g[tj]);
          for (std::size_t x = 0; x < V; ++x) out.u[ti * V + x] += a * double(v[tj * V + x]);
          const double* kj = &k[((c.first + j) * Hg + kh) * K];
          for (std::size_t x = 0; x < K; ++x) out.w[ti * K + x] += ag * kj[x];
        }
      }
    }
  return out;
}

struct ChunkStates {
  std::vector<double> h;  // [NT_total, H, K, V] or [.., V, K]: state at each chunk's start (bf16 in FLA)
  std::vector<double> v_new;  // [B, T, H, V]: u - w h (bf16 in FLA)
  std::vector<double> final_state;  // [N, H, K, V] or [N, H, V, K] (f32 in FLA)
};

// The inter-chunk recurrence from initial_state (float, as the caller stores
// it; empty = zeros) to the final state, in the problem's state layout.
inline ChunkStates state_recurrence(const GatedDeltaRuleProblem& p, std::span<const double> k,
                                    std::span<const double> w, std::span<const double> u, std::span<const double> g,
                                    std::span<const float> initial_state, std::size_t BT, Rounding r) {
  const std::size_t H = p.H, K = p.K, V = p.V, KV = K * V;
  const std::vector<ChunkSpan> spans = chunk_spans(p, BT);
  ChunkStates out{std::vector<double>(spans.size() * H * KV), std::vector<double>(p.tokens() * H * V),
                  std::vector<double>(p.state_elements())};
  std::vector<double> S(KV), hS(KV), vn(BT * V);  // [K][V]
  std::size_t first_chunk = 0;
  for (std::size_t n = 0; n < p.N(); ++n) {
    std::size_t end_chunk = first_chunk;
    while (end_chunk < spans.size() && spans[end_chunk].seq == n) ++end_chunk;
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t block = (n * H + h) * KV, kh = p.key_head(h);
      for (std::size_t kk = 0; kk < K; ++kk)
        for (std::size_t vv = 0; vv < V; ++vv)
          S[kk * V + vv] = initial_state.empty() ? 0.0 : double(initial_state[block + p.state_offset(kk, vv)]);
      for (std::size_t ci = first_chunk; ci < end_chunk; ++ci) {
        const ChunkSpan& c = spans[ci];
        double* hc = &out.h[(c.index * H + h) * KV];
        for (std::size_t kk = 0; kk < K; ++kk)
          for (std::size_t vv = 0; vv < V; ++vv) {
            hS[kk * V + vv] = detail::to_bf16(S[kk * V + vv], r);
            hc[p.state_offset(kk, vv)] = hS[kk * V + vv];
          }
        for (std::size_t i = 0; i < c.rows; ++i) {
          const std::size_t ti = (c.first + i) * H + h;
          for (std::size_t vv = 0; vv < V; ++vv) {
            double wh = 0;
            for (std::size_t kk = 0; kk < K; ++kk) wh += w[ti * K + kk] * hS[kk * V + vv];
            vn[i * V + vv] = u[ti * V + vv] - wh;
            out.v_new[ti * V + vv] = detail::to_bf16(vn[i * V + vv], r);
          }
        }
        const double g_last = g[(c.first + c.rows - 1) * H + h];
        for (double& s : S) s *= std::exp(g_last);
        for (std::size_t i = 0; i < c.rows; ++i) {
          const std::size_t ti = (c.first + i) * H + h;
          const double decay = std::exp(g_last - g[ti]);
          const double* ki = &k[((c.first + i) * p.Hg + kh) * K];
          for (std::size_t vv = 0; vv < V; ++vv) {
            const double operand = detail::to_bf16(vn[i * V + vv] * decay, r);
            for (std::size_t kk = 0; kk < K; ++kk) S[kk * V + vv] += ki[kk] * operand;
          }
        }
      }
      for (std::size_t kk = 0; kk < K; ++kk)
        for (std::size_t vv = 0; vv < V; ++vv) out.final_state[block + p.state_offset(kk, vv)] = S[kk * V + vv];
    }
    first_chunk = end_chunk;
  }
  return out;
}

// o [B, T, H, V] before the final narrowing to bf16. Under Rounding::fla this
// is chunk_o.hpp's reference (q k^T gated and masked, rounded to bf16 before
// its product with v_new), one sequence at a time with h transposed to [V, K].
inline std::vector<double> chunk_output(const GatedDeltaRuleProblem& p, std::span<const double> q,
                                        std::span<const double> k, std::span<const double> v_new,
                                        std::span<const double> h, std::span<const double> g, std::size_t BT,
                                        Rounding r) {
  const std::size_t H = p.H, K = p.K, V = p.V, Hg = p.Hg, KV = K * V;
  const double scale = p.resolved_scale();
  std::vector<double> o(p.tokens() * H * V, 0.0);
  if (r == Rounding::fla) {
    std::size_t first_chunk = 0;
    for (std::size_t n = 0; n < p.N(); ++n) {
      const std::size_t b = p.bos(n), L = p.eos(n) - b, nt = (L + BT - 1) / BT;
      if (L == 0) continue;
      std::vector<float> hv(nt * H * KV);  // [nt, H, V, K], the layout chunk_o takes
      for (std::size_t c = 0; c < nt * H; ++c)
        for (std::size_t kk = 0; kk < K; ++kk)
          for (std::size_t vv = 0; vv < V; ++vv)
            hv[c * KV + vv * K + kk] = float(h[(first_chunk * H + c) * KV + p.state_offset(kk, vv)]);
      const std::vector<double> s =
          chunk_o(detail::narrowed(q, b * Hg * K, L * Hg * K), detail::narrowed(k, b * Hg * K, L * Hg * K),
                  detail::narrowed(v_new, b * H * V, L * H * V), hv, detail::narrowed(g, b * H, L * H), scale,
                  ChunkOShape{1, L, Hg, H, K, V, BT});
      std::copy(s.begin(), s.end(), o.begin() + std::ptrdiff_t(b * H * V));
      first_chunk += nt;
    }
    return o;
  }
  for (const ChunkSpan& c : chunk_spans(p, BT))
    for (std::size_t hh = 0; hh < H; ++hh) {
      const std::size_t kh = p.key_head(hh);
      const double* hc = &h[(c.index * H + hh) * KV];
      for (std::size_t i = 0; i < c.rows; ++i) {
        const std::size_t ti = (c.first + i) * H + hh;
        const double* qi = &q[((c.first + i) * Hg + kh) * K];
        const double eg = std::exp(g[ti]);
        double* out = &o[ti * V];
        for (std::size_t vv = 0; vv < V; ++vv) {
          double inter = 0;
          for (std::size_t kk = 0; kk < K; ++kk) inter += qi[kk] * hc[p.state_offset(kk, vv)];
          out[vv] = eg * inter;
        }
        for (std::size_t j = 0; j <= i; ++j) {
          const std::size_t tj = (c.first + j) * H + hh;
          const double a = detail::dot(qi, &k[((c.first + j) * Hg + kh) * K], K) * std::exp(g[ti] - g[tj]);
          for (std::size_t vv = 0; vv < V; ++vv) out[vv] += a * v_new[tj * V + vv];
        }
        for (std::size_t vv = 0; vv < V; ++vv) out[vv] *= scale;
      }
    }
  return o;
}

struct ChunkForwardResult {
  std::vector<double> q, k;  // [B, T, Hg, K] as the chunk stages read them (prepare_qk)
  std::vector<double> beta;  // [B, T, H] (prepare_beta)
  std::vector<double> g;  // [B, T, H] chunk-local cumulative log decay
  std::vector<double> A;  // [B, T, H, BT] (I + M)^-1
  std::vector<double> w, u;  // [B, T, H, K], [B, T, H, V]
  std::vector<double> h;  // [NT_total, H, K, V] or [.., V, K]
  std::vector<double> v_new;  // [B, T, H, V]
  std::vector<double> final_state;  // [N, H, K, V] or [N, H, V, K]
  std::vector<double> o;  // [B, T, H, V], not narrowed
};

// The whole forward in FLA's order. BT is the chunk size (FLA: 16, 32 or 64; any >= 1 here).
inline ChunkForwardResult chunk_forward(const GatedDeltaRuleProblem& p, const GatedDeltaRuleInputs& in,
                                        std::size_t BT, Rounding r) {
  check(p, in);
  ChunkForwardResult f;
  f.q = prepare_qk(p, in.q, r);
  f.k = prepare_qk(p, in.k, r);
  f.beta = prepare_beta(p, in, r);
  f.g = gate_cumsum(p, in, BT, r);
  f.A = kkt_solve(p, f.k, f.beta, f.g, BT, r);
  WU wu = recompute_w_u(p, f.k, in.v, f.beta, f.g, f.A, BT, r);
  f.w = std::move(wu.w);
  f.u = std::move(wu.u);
  ChunkStates st = state_recurrence(p, f.k, f.w, f.u, f.g, in.initial_state, BT, r);
  f.h = std::move(st.h);
  f.v_new = std::move(st.v_new);
  f.final_state = std::move(st.final_state);
  f.o = chunk_output(p, f.q, f.k, f.v_new, f.h, f.g, BT, r);
  return f;
}

}  // namespace tilekernels::reference::gdn
