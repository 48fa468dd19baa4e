// SPDX-License-Identifier: MIT
#version 460
//! variant subgroup -DTK_SUBGROUP=1
// Gated DeltaNet decode step (FLA's fused_recurrent_gated_delta_rule), f32
// throughout. Per sequence n, value head h (key head h / ratio) and each of
// its tokens in order, with S [K, V] the f32 state:
//   S  = exp(g) S
//   v' = beta (v - S^T k)
//   S += k v'^T
//   o  = S^T (scale q)
// k and q optionally divided by sqrt(|x|^2 + 1e-6) (f32, not rounded), the
// gate optionally -exp(A_log[h]) softplus(g + dt_bias[h]), beta optionally
// a sigmoid (doubled with NEG_EIGVAL). The state is read once, kept in
// registers across the tokens, and written back in place once (and after
// every token to the per-token states when asked).
//
// Geometry (the host relies on it): one workgroup per (sequence, value
// head, BV columns of V), x = ((n H + h) (V / BV) + slice), of
// R Q invocations, R = KDIM / KPI, Q = BV / 4. Lane t = ql + QL (rg + R qh)
// holds the rows rg KPI .. rg KPI + KPI - 1 of the four columns 4 quad ..
// + 3 of the slice, quad = ql + QL qh (one vec4 per row): the state moves
// in 16-byte pieces, QL quads of a row (16 QL bytes) on adjacent lanes, and
// the R lanes of a column quad lie QL apart, so that the sums over K are a
// reduction over lanes whose indices differ in the rg bits only.
//
// One reduction per token: S^T k, S^T q (of the decayed state), |k|^2,
// |q|^2 and k.q, from which o follows without a second one:
//   o = (S_decayed^T q + v' (k.q)) scale   (q, k normalised where asked).
// The portable module sums the R lanes' partials through shared memory in
// a fixed order; the subgroup module (TK_SUBGROUP) first butterflies them
// with subgroup shuffles over the row groups a subgroup holds and goes
// through shared memory only for what spans subgroups. Every lane of a quad ends
// with the same bits. The subgroup module numbers lanes by subgroup
// (t = subgroup * size + invocation), a permutation of the workgroup when
// it is whole subgroups (or one smaller subgroup); the host uses it only then.
//
// Sequences: without cu_seqlens sequence n is tokens n T .. n T + T - 1;
// with it (B = 1), tokens cu[n] .. cu[n + 1] - 1, the offsets clamped into
// [0, T] so that no offset can move an access out of bounds. An empty
// sequence leaves its state untouched.
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#ifdef TK_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#include "tilekernels/gdn/recurrent_step_abi.h"
#include "../common/convert.glsl"
// Only tk_softplus of gdn_chunks.glsl is used: there is no index table.
#define TK_GDN_INDEX(i) uvec4(0u)
#include "../common/gdn_chunks.glsl"

TK_DECLARE_SPEC(TK_RECURRENT_STEP_SPEC)
TK_DECLARE_PUSH(TK_RECURRENT_STEP_PUSH)

layout(std430, binding = 0) readonly buffer Qb { uint q_w[]; };
layout(std430, binding = 1) readonly buffer Kb { uint k_w[]; };
layout(std430, binding = 2) readonly buffer Vb { uint v_w[]; };
layout(std430, binding = 3) readonly buffer G { float g_f[]; };
layout(std430, binding = 4) readonly buffer Beta { float beta_f[]; };
layout(std430, binding = 5) readonly buffer ALog { float a_log[]; };
layout(std430, binding = 6) readonly buffer DtBias { float dt_bias[]; };
layout(std430, binding = 7) readonly buffer Cu { int cu[]; };
layout(std430, binding = 8) buffer State { vec4 state4[]; };
layout(std430, binding = 9) writeonly buffer O { uint o_w[]; };
layout(std430, binding = 10) writeonly buffer TokenStates { vec4 ts4[]; };

const uint R = KDIM / KPI;  // lanes per column quad
const uint Q = BV / 4;      // column quads per workgroup (a multiple of QL)
const uint WG = R * Q;
const uint SLICES = VDIM / BV;
const bool DENSE = VIEWS == TK_STEP_VIEWS_DENSE;
// Rows start at multiples of their vectors; with MASK the host's word on it
// (masking an index's low bits tells the compiler what a dense view's
// compile-time address already does).
const bool WHOLE = VIEWS != TK_STEP_VIEWS_ANY;
const bool MASK = VIEWS == TK_STEP_VIEWS_ALIGNED;

// Element index of token tok, head hh of view `name` whose rows are `row`
// elements long (dense: [tokens, heads, row]).
#define TK_VIEW_AT(name, tok, hh, heads, row) \
  (DENSE ? ((tok) * (heads) + (hh)) * (row) : pc.name##_at + (tok) * pc.name##_token + (hh) * pc.name##_head)

// Partials of the reduction, double-buffered by token parity: a lane
// writes token t's buffer only after the barrier of token t - 1, which
// every lane passes only once done reading token t - 2's (the same buffer).
shared vec4 red_k[2 * WG];  // S^T k per lane
shared vec4 red_q[2 * WG];  // S^T q per lane
shared vec4 red_s[2 * R];   // (|k|^2, |q|^2, k.q, 0) per row group

vec2 widen_pair(uint w, uint dtype) {
  return dtype == TK_BF16 ? tk_bf16_pair(w) : vec2(tk_f16_to_f32(w & 0xffffu), tk_f16_to_f32(w >> 16));
}

uint narrow(float x, uint dtype) { return dtype == TK_BF16 ? tk_f32_to_bf16(x) : tk_f32_to_f16(x); }

// KPI consecutive elements of q or k from element e on: by pairs of a
// word where e is even (every view whose offset and strides are), else
// one element at a time. With WHOLE, e is a multiple of KPI: the compiler
// then loads the row as whole vectors.
#define TK_LOAD_ROW(buf, e_in, out_)                                                    \
  {                                                                                    \
  const uint e = MASK ? (e_in) & ~(KPI - 1u) : (e_in);                                   \
  if (QK_DTYPE == TK_F32) {                                                            \
    [[unroll]] for (uint i = 0; i < KPI; ++i) out_[i] = uintBitsToFloat(buf[(e) + i]);    \
  } else if (WHOLE || ((e) & 1u) == 0u) {                                               \
    [[unroll]] for (uint i = 0; i < KPI; i += 2) {                                     \
      const vec2 p = widen_pair(buf[((e) + i) >> 1], QK_DTYPE);                        \
      out_[i] = p.x;                                                                   \
      out_[i + 1] = p.y;                                                               \
    }                                                                                  \
  } else {                                                                             \
    [[unroll]] for (uint i = 0; i < KPI; ++i) out_[i] = tk_load16(QK_DTYPE, buf[((e) + i) >> 1], (e) + i); \
  }                                                                                    \
  }

// vec4 index of state row kk, column quad vq of head block nh ([K, V]), or
// of the four rows kk .. kk + 3 of column vv ([V, K]).
uint kv_index(uint nh, uint kk, uint vq) { return (nh * KDIM + kk) * (VDIM / 4) + vq; }
uint vk_index(uint nh, uint vv, uint kk) { return (nh * VDIM + vv) * (KDIM / 4) + kk / 4; }

void main() {
#ifdef TK_SUBGROUP
  const uint lane = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
#else
  const uint lane = gl_LocalInvocationID.x;
#endif
  const uint x = gl_WorkGroupID.x + pc.group_offset;
  const uint slice = x % SLICES, nh = x / SLICES, h = nh % pc.H, n = nh / pc.H;
  const uint kh = h / pc.ratio;
  const uint rg = (lane / QL) % R, quad = lane % QL + QL * (lane / (QL * R));
  const uint k0 = rg * KPI, vq = slice * Q + quad;  // rows k0.., columns 4 vq ..
  const uint options = pc.options;
  const bool VK = (options & TK_GDN_OPT_STATE_VK) != 0u;

  uint bos = n * pc.T, len = pc.T;
  if (pc.varlen != 0u) {
    const int lo = clamp(cu[n], 0, int(pc.T)), hi = clamp(cu[n + 1], lo, int(pc.T));
    bos = uint(lo);
    len = uint(hi - lo);
  }
  if (len == 0u) return;  // uniform: the state stays as it is

  vec4 S[KPI];
  if (!VK) {
    [[unroll]] for (uint r = 0; r < KPI; ++r) S[r] = state4[kv_index(nh, k0 + r, vq)];
  } else {
    [[unroll]] for (uint c = 0; c < 4; ++c)
      [[unroll]] for (uint p = 0; p < KPI / 4; ++p) {
        const vec4 col = state4[vk_index(nh, 4 * vq + c, k0 + 4 * p)];
        [[unroll]] for (uint i = 0; i < 4; ++i) S[4 * p + i][c] = col[i];
      }
  }

  const bool l2 = (options & TK_GDN_OPT_L2NORM) != 0u;
  for (uint t = 0; t < len; ++t) {
    const uint tok = bos + t;
    float gl = g_f[TK_VIEW_AT(g, tok, h, pc.H, 1u)];
    if ((options & TK_GDN_OPT_GATE_IN_KERNEL) != 0u) {
      const float bias = (options & TK_GDN_OPT_DT_BIAS) != 0u ? dt_bias[h] : 0.0;
      gl = -exp(a_log[h]) * tk_softplus(gl + bias);
    }
    float beta = beta_f[TK_VIEW_AT(beta, tok, h, pc.H, 1u)];
    if ((options & TK_GDN_OPT_BETA_SIGMOID) != 0u)
      beta = ((options & TK_GDN_OPT_NEG_EIGVAL) != 0u ? 2.0 : 1.0) / (1.0 + exp(-beta));
    const float decay = exp(gl);

    float kx[KPI], qx[KPI];
    const uint k_row = TK_VIEW_AT(k, tok, kh, pc.Hg, KDIM) + k0;
    const uint q_row = TK_VIEW_AT(q, tok, kh, pc.Hg, KDIM) + k0;
    TK_LOAD_ROW(k_w, k_row, kx)
    TK_LOAD_ROW(q_w, q_row, qx)
    vec4 vx;
    const uint ve_in = TK_VIEW_AT(v, tok, h, pc.H, VDIM) + 4 * vq;
    const uint ve = MASK ? ve_in & ~3u : ve_in;
    if (V_DTYPE == TK_F32) {
      vx = vec4(uintBitsToFloat(v_w[ve]), uintBitsToFloat(v_w[ve + 1]), uintBitsToFloat(v_w[ve + 2]),
                uintBitsToFloat(v_w[ve + 3]));
    } else if (WHOLE || (ve & 1u) == 0u) {
      vx = vec4(widen_pair(v_w[ve / 2], V_DTYPE), widen_pair(v_w[ve / 2 + 1], V_DTYPE));
    } else {
      [[unroll]] for (uint c = 0; c < 4; ++c) vx[c] = tk_load16(V_DTYPE, v_w[(ve + c) >> 1], ve + c);
    }

    // This lane's share of the sums over K.
    vec4 pk = vec4(0.0), pq = vec4(0.0);
    vec3 ps = vec3(0.0);
    [[unroll]] for (uint r = 0; r < KPI; ++r) {
      S[r] *= decay;
      pk += S[r] * kx[r];
      pq += S[r] * qx[r];
      ps += vec3(kx[r] * kx[r], qx[r] * qx[r], kx[r] * qx[r]);
    }
    uint span = 1;  // lanes of the quad whose partials each lane now holds summed
#ifdef TK_SUBGROUP
    [[unroll]] for (uint m = 1; m < R; m <<= 1) {
      if (QL * m >= gl_SubgroupSize) break;  // uniform
      pk += subgroupShuffleXor(pk, QL * m);
      pq += subgroupShuffleXor(pq, QL * m);
      ps += subgroupShuffleXor(ps, QL * m);
    }
    span = min(R, max(gl_SubgroupSize / QL, 1u));
#endif
    if (span < R) {  // uniform
      const uint buf = t & 1u;
      if (rg % span == 0u) {
        red_k[buf * WG + quad * R + rg] = pk;
        red_q[buf * WG + quad * R + rg] = pq;
        if (quad == 0u) red_s[buf * R + rg] = vec4(ps, 0.0);
      }
      barrier();
      pk = vec4(0.0);
      pq = vec4(0.0);
      ps = vec3(0.0);
      for (uint i = 0; i < R; i += span) {
        pk += red_k[buf * WG + quad * R + i];
        pq += red_q[buf * WG + quad * R + i];
        ps += red_s[buf * R + i].xyz;
      }
    }

    const float ik = l2 ? 1.0 / sqrt(ps.x + 1e-6) : 1.0;
    const float iq = l2 ? 1.0 / sqrt(ps.y + 1e-6) : 1.0;
    const vec4 vn = beta * (vx - pk * ik);
    [[unroll]] for (uint r = 0; r < KPI; ++r) S[r] += (kx[r] * ik) * vn;
    const vec4 o = (pq + vn * (ps.z * ik)) * (pc.scale * iq);

    if (rg == 0u) {
      // Even for 16-bit o, a multiple of 4 with WHOLE (the host checks).
      const uint oe_in = TK_VIEW_AT(o, tok, h, pc.H, VDIM) + 4 * vq;
      const uint oe = MASK ? oe_in & ~3u : oe_in;
      if (V_DTYPE == TK_F32) {
        [[unroll]] for (uint c = 0; c < 4; ++c) o_w[oe + c] = floatBitsToUint(o[c]);
      } else {
        o_w[oe / 2] = narrow(o.x, V_DTYPE) | (narrow(o.y, V_DTYPE) << 16);
        o_w[oe / 2 + 1] = narrow(o.z, V_DTYPE) | (narrow(o.w, V_DTYPE) << 16);
      }
    }
    if ((options & TK_GDN_OPT_TOKEN_STATES) != 0u) {
      const uint th = tok * pc.H + h;  // token states are [tokens, H, ...]
      if (!VK) {
        [[unroll]] for (uint r = 0; r < KPI; ++r) ts4[kv_index(th, k0 + r, vq)] = S[r];
      } else {
        [[unroll]] for (uint c = 0; c < 4; ++c)
          [[unroll]] for (uint p = 0; p < KPI / 4; ++p)
            ts4[vk_index(th, 4 * vq + c, k0 + 4 * p)] =
                vec4(S[4 * p][c], S[4 * p + 1][c], S[4 * p + 2][c], S[4 * p + 3][c]);
      }
    }
  }

  if (!VK) {
    [[unroll]] for (uint r = 0; r < KPI; ++r) state4[kv_index(nh, k0 + r, vq)] = S[r];
  } else {
    [[unroll]] for (uint c = 0; c < 4; ++c)
      [[unroll]] for (uint p = 0; p < KPI / 4; ++p)
        state4[vk_index(nh, 4 * vq + c, k0 + 4 * p)] =
            vec4(S[4 * p][c], S[4 * p + 1][c], S[4 * p + 2][c], S[4 * p + 3][c]);
  }
}
