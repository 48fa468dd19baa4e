// SPDX-License-Identifier: MIT
// The end of a decode-attention workgroup, from its softmax state to the
// output. In the first dispatch (shaders/aura/decode_attention*.comp):
// with PUBLISH (the call splits the keys) the state goes to the workspace
// and the workgroup returns (PUBLISH 2: unless it is the last of its group
// to arrive, which merges the states and goes on); otherwise, as in the
// merge kernel (decode_attention_merge.comp, TK_DECODE_ATTENTION_MERGE)
// once it has merged the split states: the sink, o / l, lse, V's rotation
// undone, the output rows written.
// Statements, not a function: included at the end of main(), so that
// the including kernel compiles to what it would with them written there.
//
// The including shader declares (as decode_attention.comp does): WG, RV
// (ROWS = 4 RV rows), DIM, PAIRS (output dim pairs per invocation), the
// bindings (work, sinks, tables, out_f32 / out_16, lse_out), the push
// constants pc, the shared s_scratch (at least ROWS * DIM / 4 vec4) read
// as floats through SF(i), and the helper output4. Defining
// TK_FINISH_SHUFFLE 1, it also vouches for its subgroups (below).
//
// main() holds inv, seq, kvh, q_heads, group, split, row0 and the state,
// the same in every invocation for m_fin, l_fin: rows
// 4v .. 4v+3 in component order; invocation inv holds dims 2p, 2p+1 of
// p = inv + n WG in o_fin[(v * PAIRS + n) * 2 + h] (rotated V domain, not
// divided by l). Every invocation of the workgroup reaches it.
#ifndef TK_DECODE_ATTENTION_MERGE
  TK_LOAD_V_SIGNS(v_sign, PUBLISH != 1u)  // under the publication and the merge
  if (PUBLISH != 0u) {
    // State group * splits + split: o at dims d of rows 4v ..
    // 4v + 3 in work[(state * DIM + d) * RV + v], (m, l) in work[ml_at +
    // (state * RV + v) * 2 + {0, 1}] (decode_attention_types.hpp).
    const uint slot = group * pc.splits + split;
    [[unroll]] for (uint n = 0; n < PAIRS; ++n) {
      const uint p = inv + n * WG;
      if (p < DIM / 2u)
        [[unroll]] for (uint h = 0; h < 2u; ++h)
          [[unroll]] for (uint r = 0; r < RV; ++r) work[(slot * DIM + 2u * p + h) * RV + r] = o_fin[(r * PAIRS + n) * 2u + h];
    }
    if (inv == 0u)
      [[unroll]] for (uint r = 0; r < RV; ++r) {
        work[pc.ml_at + (slot * RV + r) * 2u] = m_fin[r];
        work[pc.ml_at + (slot * RV + r) * 2u + 1u] = l_fin[r];
      }
    if (PUBLISH == 1u) return;
    // PUBLISH 2: the workgroup counts its arrival once its state is
    // ordered before it: the workgroup barrier orders every invocation's
    // stores before invocation 0's atomic, whose release (device scope;
    // work is coherent) reaches the acquire of the group's last arrival,
    // and the barrier after the atomic carries that acquire to every
    // invocation of the last workgroup. It merges the states and resets
    // the counter. No invocation but the one at the atomic waits for the
    // stores to reach device scope.
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, gl_StorageSemanticsBuffer | gl_StorageSemanticsShared,
                   gl_SemanticsAcquireRelease);
    if (inv == 0u)
      s_arrival = atomicAdd(arrivals[group], 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsAcquireRelease);
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, gl_StorageSemanticsBuffer | gl_StorageSemanticsShared,
                   gl_SemanticsAcquireRelease);
    const uint arrival = s_arrival, arrived = arrival & TK_DECODE_ATTENTION_ARRIVAL_COUNT_MASK;
    const bool tagged = arrival - arrived == TK_DECODE_ATTENTION_ARRIVAL_TAG && arrived < pc.splits;
    if (tagged && arrived + 1u < pc.splits) return;  // uniform
    if (tagged && inv == 0u) atomicExchange(arrivals[group], TK_DECODE_ATTENTION_ARRIVAL_TAG);
    [[unroll]] for (uint r = 0; r < RV; ++r) {
#define TK_MERGE_QUAD r
#define TK_MERGE_M m_fin[r]
#define TK_MERGE_L l_fin[r]
#define TK_MERGE_O(i) o_fin[r * PAIRS * 2u + (i)]
// Teams of DIM / 2 invocations (one pair per invocation), 4, 2 or 1 as
// the workgroup holds them: a power of two, so that a round still takes
// the 16 states the host's split rule counts on. Their sums, (teams - 1)
// DIM + teams vec4, fit the includers' scratch: 4 DIM vec4 on tensor
// cores (teams at most 4, Dim at least 64); on CUDA cores
// TK_DECODE_ATTENTION_SCRATCH(WG), more than the 3 WG / 2 + 4 that teams
// can take (4 teams need Dim <= WG / 2, 2 teams Dim <= WG).
#define TK_MERGE_TEAMS (PAIRS != 1u ? 1u : WG / (DIM / 2u) >= 4u ? 4u : WG / (DIM / 2u) >= 2u ? 2u : 1u)
// Short steps (at most 8 states): the merge in registers.
#define TK_MERGE_FLAT 8u
#include "decode_attention_merge_states.glsl"
#undef TK_MERGE_FLAT
#undef TK_MERGE_QUAD
#undef TK_MERGE_M
#undef TK_MERGE_L
#undef TK_MERGE_O
#undef TK_MERGE_TEAMS
      barrier();  // the merge's scratch is read before it is written again
      // A counter that was not a call's: the group's rows become NaN
      // (every workgroup of the group writes them).
      if (!tagged) {
        const vec4 nan = vec4(uintBitsToFloat(0x7FC00000u));
        m_fin[r] = l_fin[r] = nan;
        [[unroll]] for (uint i = 0; i < PAIRS * 2u; ++i) o_fin[r * PAIRS * 2u + i] = nan;
      }
    }
  }
#endif

  // Finish the rows: the sink joins the denominator (a state m = sink,
  // l = 1, o = 0), then o / l and lse in the rotated domain.
  vec4 lse[RV];
  [[unroll]] for (uint r = 0; r < RV; ++r) {
    vec4 keep = vec4(1.0);
    if ((pc.flags & 2u) != 0u) {
      [[unroll]] for (uint k = 0; k < 4u; ++k) {
        const uint rg = row0 + 4u * r + k;
        if (rg < pc.gqa * pc.q_len) {
          const float sink = sinks[kvh * pc.gqa + rg % pc.gqa];
          if (sink != TK_NEG_INF) {
            const float m_new = tk_softmax_max(tk_softmax_max(TK_NEG_INF, m_fin[r][k], l_fin[r][k]), sink, 1.0);
            keep[k] = tk_softmax_weight(m_fin[r][k], l_fin[r][k], m_new);
            l_fin[r][k] = l_fin[r][k] * keep[k] + exp(sink - m_new);
            m_fin[r][k] = m_new;
          }
        }
      }
    }
    [[unroll]] for (uint k = 0; k < 4u; ++k) lse[r][k] = tk_softmax_lse(m_fin[r][k], l_fin[r][k]);
    [[unroll]] for (uint i = 0; i < PAIRS * 2u; ++i) {
      const vec4 o = o_fin[r * PAIRS * 2u + i] * keep;
      o_fin[r * PAIRS * 2u + i] = output4(o, l_fin[r]);
    }
  }

  // V's rotation undone: Hadamard x = s * (H y) / sqrt(DIM); dense x = R^T y.
#if TK_FINISH_SHUFFLE
  // The includer's subgroups are full, of SUBGROUP invocations each, in
  // order (inv = subgroup * SUBGROUP + lane), and have shuffles. With one
  // pair per invocation, dim d = 2 inv + h: H's butterflies over d's bit 0
  // are within the registers, over the next log2 SUBGROUP bits (the lane's)
  // through shuffles, and those over the bits above (the subgroup's) in one
  // pass through the scratch, each dim summing its coset's values with
  // signs (-1)^popcount(own bits & other's).
  if (V_ROT == 1u && PAIRS == 1u) {
    [[unroll]] for (uint r = 0; r < RV; ++r) {
      vec4 x[2] = vec4[2](o_fin[2u * r] + o_fin[2u * r + 1u], o_fin[2u * r] - o_fin[2u * r + 1u]);
      TK_FWHT_SHUFFLE(vec4, x, 2u, inv, 1u, min(SUBGROUP, DIM / 2u))
      o_fin[2u * r] = x[0];
      o_fin[2u * r + 1u] = x[1];
    }
    if (DIM / 2u > SUBGROUP) {
      if (inv < DIM / 2u)
        [[unroll]] for (uint h = 0; h < 2u; ++h)
          [[unroll]] for (uint r = 0; r < ROWS; ++r) SF(r * DIM + 2u * inv + h) = o_fin[(r / 4u) * 2u + h][r % 4u];
      barrier();
      const uint p = min(inv, DIM / 2u - 1u), own = p / SUBGROUP, lane_p = p % SUBGROUP;
      [[unroll]] for (uint h = 0; h < 2u; ++h)
        [[unroll]] for (uint r = 0; r < ROWS; ++r) {
          float v = 0.0;
          for (uint j = 0; j < DIM / 2u / SUBGROUP; ++j) {
            const float y = SF(r * DIM + 2u * (j * SUBGROUP + lane_p) + h);
            v += (bitCount(j & own) & 1u) != 0u ? -y : y;
          }
          o_fin[(r / 4u) * 2u + h][r % 4u] = v;
        }
    }
    [[unroll]] for (uint i = 0; i < RV * 2u; ++i) o_fin[i] *= v_sign[i % 2u] * pc.inv_sqrt_dim;
  } else
#endif
  if (V_ROT != 0u) {
    [[unroll]] for (uint n = 0; n < PAIRS; ++n) {
      const uint p = inv + n * WG;
      if (p < DIM / 2u)
        [[unroll]] for (uint h = 0; h < 2u; ++h)
          [[unroll]] for (uint r = 0; r < ROWS; ++r) SF(r * DIM + 2u * p + h) = o_fin[((r / 4u) * PAIRS + n) * 2u + h][r % 4u];
    }
    barrier();
    if (V_ROT == 1u) TK_FWHT_SHARED(SF, ROWS, DIM, inv, WG)
    [[unroll]] for (uint n = 0; n < PAIRS; ++n) {
      const uint p = min(inv + n * WG, DIM / 2u - 1u);
      [[unroll]] for (uint h = 0; h < 2u; ++h) {
        const uint d = 2u * p + h;
        [[unroll]] for (uint r = 0; r < ROWS; ++r) {
          float v;
          if (V_ROT == 1u) {
            v = SF(r * DIM + d) * v_sign[n * 2u + h] * pc.inv_sqrt_dim;
          } else {
            v = 0.0;
            for (uint j = 0; j < DIM; ++j) v = fma(tables[V_ROTATION_AT + j * DIM + d], SF(r * DIM + j), v);
          }
          o_fin[((r / 4u) * PAIRS + n) * 2u + h][r % 4u] = v;
        }
      }
    }
  }

  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    const uint rg = row0 + r;
    if (rg >= pc.gqa * pc.q_len) continue;
    const uint out_row = (seq * pc.q_len + rg / pc.gqa) * q_heads + kvh * pc.gqa + rg % pc.gqa;  // lse's
    const uint out_at = out_element(seq, rg, kvh);
    [[unroll]] for (uint n = 0; n < PAIRS; ++n) {
      const uint p = inv + n * WG;
      if (p >= DIM / 2u) continue;
      const float a = o_fin[((r / 4u) * PAIRS + n) * 2u][r % 4u], b = o_fin[((r / 4u) * PAIRS + n) * 2u + 1u][r % 4u];
      const uint o = out_at + 2u * p;  // even for 16-bit outputs (the host checks)
      if (OUT_DTYPE == TK_F32) {
        out_f32[o] = a;
        out_f32[o + 1u] = b;
      } else {
        out_16[o >> 1] = tk_narrow16(OUT_DTYPE, a) | (tk_narrow16(OUT_DTYPE, b) << 16);
      }
    }
    if ((pc.flags & 1u) != 0u && inv == r) lse_out[out_row] = lse[r / 4u][r % 4u];
  }
