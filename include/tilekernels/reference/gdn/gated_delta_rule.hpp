// SPDX-License-Identifier: MIT
// Double-precision reference of the Gated DeltaNet recurrence, token by
// token: the semantics of FLA's naive_recurrent_gated_delta_rule and
// fused_recurrent_gated_delta_rule (the decode step), with every option of
// GatedDeltaRuleProblem (problem.hpp): GQA, fixed-length batches or
// cu_seqlens, initial and final state in either layout, in-kernel gate,
// beta sigmoid, q/k L2 norm. Nothing is rounded: FLA's recurrent kernel
// keeps q, k, v, beta, the gate and the state in f32 and narrows only o.
//
// A decode step is this function with T new tokens per sequence, the state
// of the previous step as initial_state and final_state as the state that
// the kernel writes back in place.
#pragma once

#include <cstddef>
#include <vector>

#include "tilekernels/reference/gdn/problem.hpp"

namespace tilekernels::reference::gdn {

struct GatedDeltaRuleResult {
  std::vector<double> o;  // [B, T, H, V], before any narrowing
  std::vector<double> final_state;  // [N, H, K, V] or [N, H, V, K] (state_layout)
  // With keep_token_states: the state after each token, [B * T, H, K, V] or
  // [B * T, H, V, K] by flat token (for fixed length that is [N, T, H, ...]);
  // empty otherwise.
  std::vector<double> token_states;
};

inline GatedDeltaRuleResult gated_delta_rule(const GatedDeltaRuleProblem& p, const GatedDeltaRuleInputs& in,
                                             bool keep_token_states = false) {
  check(p, in);
  const std::size_t K = p.K, V = p.V, H = p.H, KV = K * V;
  const double scale = p.resolved_scale();
  GatedDeltaRuleResult r;
  r.o.assign(p.tokens() * H * V, 0.0);
  r.final_state.assign(p.state_elements(), 0.0);
  if (keep_token_states) r.token_states.assign(p.tokens() * H * KV, 0.0);

  std::vector<double> S(KV), vd(V);  // S is [K][V] here whatever the storage layout
  for (std::size_t n = 0; n < p.N(); ++n)
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t block = (n * H + h) * KV, kh = p.key_head(h);
      for (std::size_t kk = 0; kk < K; ++kk)
        for (std::size_t vv = 0; vv < V; ++vv)
          S[kk * V + vv] = in.initial_state.empty() ? 0.0 : double(in.initial_state[block + p.state_offset(kk, vv)]);

      for (std::size_t t = p.bos(n); t < p.eos(n); ++t) {
        const double decay = std::exp(gate_log(p, in, t, h)), beta = beta_value(p, in, t, h);
        const std::vector<double> q = qk_row(p, in.q, t, kh), k = qk_row(p, in.k, t, kh);
        for (double& s : S) s *= decay;
        // v' = beta (v - S^T k): the delta rule corrects what the decayed state predicts for k.
        for (std::size_t vv = 0; vv < V; ++vv) {
          double pred = 0;
          for (std::size_t kk = 0; kk < K; ++kk) pred += S[kk * V + vv] * k[kk];
          vd[vv] = beta * (double(in.v[(t * H + h) * V + vv]) - pred);
        }
        for (std::size_t kk = 0; kk < K; ++kk)
          for (std::size_t vv = 0; vv < V; ++vv) S[kk * V + vv] += k[kk] * vd[vv];
        double* o = &r.o[(t * H + h) * V];
        for (std::size_t vv = 0; vv < V; ++vv) {
          double acc = 0;
          for (std::size_t kk = 0; kk < K; ++kk) acc += S[kk * V + vv] * q[kk];
          o[vv] = scale * acc;
        }
        if (keep_token_states) {
          double* dst = &r.token_states[(t * H + h) * KV];
          for (std::size_t kk = 0; kk < K; ++kk)
            for (std::size_t vv = 0; vv < V; ++vv) dst[p.state_offset(kk, vv)] = S[kk * V + vv];
        }
      }
      for (std::size_t kk = 0; kk < K; ++kk)
        for (std::size_t vv = 0; vv < V; ++vv) r.final_state[block + p.state_offset(kk, vv)] = S[kk * V + vv];
    }
  return r;
}

}  // namespace tilekernels::reference::gdn
