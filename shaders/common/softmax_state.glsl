// SPDX-License-Identifier: MIT
// The online-softmax merge state of attention over blocks of keys, for
// every attention kernel (pass 1, the split-K merges). A state covers a set
// of keys j with scores s_j:
//   m = max_j s_j,  l = sum_j e^(s_j - m),  o = sum_j e^(s_j - m) v_j
// (o un-normalised; each kernel keeps its own slice of o, a vec4 per
// invocation). l == 0 means empty (no key): m and o of an empty state are
// meaningless and never read, so they may hold garbage, NaN or Inf.
// Merging states is exact: rescale each to the largest m of the non-empty
// ones and add. The reference is include/tilekernels/reference/softmax_state.hpp.
#ifndef TK_SOFTMAX_STATE_GLSL
#define TK_SOFTMAX_STATE_GLSL

#define TK_NEG_INF uintBitsToFloat(0xff800000u)

// The maximum after taking in a state (m, l): empty states do not count.
float tk_softmax_max(float m_acc, float m, float l) { return max(m_acc, l != 0.0 ? m : TK_NEG_INF); }

// The factor that rescales a state of maximum m (and sum l) to maximum
// m_new >= m: 0 for an empty state, so that neither its o nor its m is used.
float tk_softmax_weight(float m, float l, float m_new) { return l != 0.0 ? exp(m - m_new) : 0.0; }

// The factor that rescales an accumulator of maximum m_acc to m_new >=
// m_acc; 1 while both are -inf (nothing taken in yet), never NaN.
float tk_softmax_rescale(float m_acc, float m_new) { return m_new == m_acc ? 1.0 : exp(m_acc - m_new); }

// The output o / l; 0 for an empty state (l == 0), never NaN from the
// division. A NaN l propagates.
vec4 tk_softmax_output(vec4 o, float l) { return o * (l != 0.0 ? 1.0 / l : 0.0); }

// ln of the softmax denominator, m + ln l; -inf for an empty state.
float tk_softmax_lse(float m, float l) { return l != 0.0 ? m + log(l) : TK_NEG_INF; }

#endif
