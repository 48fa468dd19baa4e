// SPDX-License-Identifier: MIT
#version 460
// Gated DeltaNet chunk_fwd_o, portable path (any Vulkan 1.2 device, any
// subgroup size, at most 30 KiB of shared memory):
//   o = scale * ((q h^T) * exp(g_i) + bf16(tril_incl((q k^T) * exp(g_i - g_j))) v)
// per chunk of BT rows and head, f32 accumulation on register tiles.
//
// One workgroup of 256 invocations per (chunk, head, BV = 64 or 128
// columns of V), as a 16 x 16 grid (tr, tc). Invocation (tr, tc) owns
// chunk rows RR tr .. RR tr + RR - 1 (RR = BT / 16), q k^T columns RR tc ..
// and output columns 64 b + 4 tc .. + 3 (b < BV / 64), so that every
// operand it reads from shared memory is RR or 4 consecutive floats.
// Phase 1: q k^T and q h^T over K in stages of KC columns, staged
// transposed as f32 ([column][row]: q's BT rows, k's, then h's BV). Then
// the gated, masked, bf16-rounded A goes to shared memory, transposed.
// Phase 2: A v over the chunk in stages of JC rows of v (over the first
// stage's memory). Each stage's global loads are issued one stage ahead
// into registers. Rows past the chunk's end are read as zeros and never
// written.
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/gdn/chunk_o_abi.h"

TK_DECLARE_SPEC(TK_CHUNK_O_SPEC)  // the host passes BV = min(V, 128) and 256 invocations
const uint WG = gl_WorkGroupSize.x;

#include "../common/gdn_chunk_o.glsl"

layout(std430, binding = 0) readonly buffer Q2 { uvec2 q_2[]; };
layout(std430, binding = 1) readonly buffer K2 { uvec2 k_2[]; };
layout(std430, binding = 2) readonly buffer V2 { uvec2 v_2[]; };
layout(std430, binding = 3) readonly buffer H2 { uvec2 h_2[]; };

const uint RR = BT / 16u;  // rows (and q k^T columns) per invocation
const uint NB = BV / 64u;  // output column blocks per invocation
const uint KC = TK_CHUNK_O_PORTABLE_KC(BV);  // K columns per stage
const uint JC = 16u;       // v rows per stage
const uint NR = 2u * BT + BV;  // staged rows: q, k, h
const uint SST = TK_CHUNK_O_PORTABLE_STAGE_STRIDE(BT, BV);  // floats per staged column (NR + 4: 4 banks apart)
const uint SAT = BT + 4u;  // floats per column of A^T
const uint PK = NR * (KC / 4u);   // 4-element pieces of a K stage
const uint PV = JC * (BV / 4u);   // of a v stage
const uint NPK = (PK + WG - 1u) / WG, NPV = (PV + WG - 1u) / WG;
const uint A_OFF = TK_ABI_MAX(KC * SST, JC * BV);  // floats; the stages lie below
const uint G_OFF = A_OFF + BT * SAT;
shared vec4 sm[(G_OFF + BT) / 4u];

float sm_at(uint f) { return sm[f >> 2][f & 3u]; }
void sm_put(uint f, float x) { sm[f >> 2][f & 3u] = x; }
// RR consecutive floats from f (a multiple of RR), picked by selects so
// that no compiler indexes the vector in memory.
void sm_rows(uint f, out float x[RR]) {
  const vec4 q = sm[f >> 2];
  const uint at = f & 3u;
  const vec4 a = RR == 4u ? q : RR == 2u ? (at >= 2u ? q.zwzw : q.xyxy)
                                         : vec4(at >= 2u ? (at >= 3u ? q.w : q.z) : (at >= 1u ? q.y : q.x));
  [[unroll]] for (uint r = 0; r < RR; ++r) x[r] = a[r];
}

void main() {
  const uint id = gl_WorkGroupID.x + pc.group_offset;
  if (id >= pc.total_groups) return;  // uniform over the workgroup
  const ChunkOTile s = chunk_o_tile(id);
  const uint tid = gl_LocalInvocationID.x;
  const uint tr = tid / 16u, tc = tid % 16u;
  const uint rows = s.c.rows;
  const uint hrow0 = (s.c.chunk * pc.H + s.ih) * VDIM + s.v0;

  if (tid < BT) sm_put(G_OFF + tid, tid < rows ? g_f[(s.c.slot + tid) * pc.H + s.ih] : 0.0);

  // Stage k0 / KC's pieces (row, 4 columns) into registers; rows of q and k
  // past the chunk's end are zeros.
  uvec2 pre[NPK];
#define TK_LOAD_K_STAGE(k0)                                                              \
  [[unroll]] for (uint n = 0; n < NPK; ++n) {                                             \
    const uint p = min(tid + n * WG, PK - 1u), row = p / (KC / 4u), c4 = ((k0) + 4u * (p % (KC / 4u))) / 4u; \
    const uint r = row % BT;                                                              \
    if (row >= 2u * BT)                                                                   \
      pre[n] = h_2[(hrow0 + row - 2u * BT) * (KDIM / 4u) + c4];                           \
    else if (r < rows) {                                                                  \
      const uint e = ((s.c.token + r) * pc.Hg + s.kh) * (KDIM / 4u) + c4;                 \
      pre[n] = row < BT ? q_2[e] : k_2[e];                                                \
    } else                                                                                \
      pre[n] = uvec2(0u);                                                                 \
  }
  uvec2 pre_v[NPV];
#define TK_LOAD_V_STAGE(j0)                                                                \
  [[unroll]] for (uint n = 0; n < NPV; ++n) {                                               \
    const uint p = min(tid + n * WG, PV - 1u), row = (j0) + p / (BV / 4u);                   \
    pre_v[n] = row < rows ? v_2[((s.c.slot + row) * pc.H + s.ih) * (VDIM / 4u) + (s.v0 / 4u) + p % (BV / 4u)] \
                          : uvec2(0u);                                                      \
  }

  float S[RR][RR];
  vec4 P[RR][NB];
  [[unroll]] for (uint r = 0; r < RR; ++r) {
    [[unroll]] for (uint m = 0; m < RR; ++m) S[r][m] = 0.0;
    [[unroll]] for (uint b = 0; b < NB; ++b) P[r][b] = vec4(0.0);
  }

  TK_LOAD_K_STAGE(0u)
  for (uint k0 = 0; k0 < KDIM; k0 += KC) {
    barrier();  // the previous stage is consumed
    [[unroll]] for (uint n = 0; n < NPK; ++n) {
      const uint p = tid + n * WG;
      if (p < PK) {
        const uint row = p / (KC / 4u), c = 4u * (p % (KC / 4u));
        const vec4 x = tk_unpack4(TK_BF16, pre[n]);
        [[unroll]] for (uint e = 0; e < 4u; ++e) sm_put((c + e) * SST + row, x[e]);
      }
    }
    barrier();
    if (k0 + KC < KDIM) {
      TK_LOAD_K_STAGE(k0 + KC)
    } else {
      TK_LOAD_V_STAGE(0u)
    }
    for (uint kk = 0; kk < KC; ++kk) {
      float qv[RR], kv[RR];
      sm_rows(kk * SST + RR * tr, qv);
      sm_rows(kk * SST + BT + RR * tc, kv);
      vec4 hv[NB];
      [[unroll]] for (uint b = 0; b < NB; ++b) hv[b] = sm[(kk * SST + 2u * BT + 64u * b + 4u * tc) / 4u];
      [[unroll]] for (uint r = 0; r < RR; ++r) {
        [[unroll]] for (uint m = 0; m < RR; ++m) S[r][m] = fma(qv[r], kv[m], S[r][m]);
        [[unroll]] for (uint b = 0; b < NB; ++b) P[r][b] = fma(vec4(qv[r]), hv[b], P[r][b]);
      }
    }
  }

  // A^T = bf16(tril_incl(S * exp(gi - gj)))^T; P *= exp(gi). (A has its own
  // memory: no barrier needed before these writes.)
  [[unroll]] for (uint r = 0; r < RR; ++r) {
    const uint i = RR * tr + r;
    const float gi = sm_at(G_OFF + i);
    [[unroll]] for (uint m = 0; m < RR; ++m) {
      const uint j = RR * tc + m;
      sm_put(A_OFF + j * SAT + i, j <= i ? round_bf16(S[r][m] * exp(gi - sm_at(G_OFF + j))) : 0.0);
    }
    const float eg = exp(gi);
    [[unroll]] for (uint b = 0; b < NB; ++b) P[r][b] *= eg;
  }

  for (uint j0 = 0; j0 < BT; j0 += JC) {
    barrier();  // K stages (first pass) or the previous v stage consumed; A complete
    [[unroll]] for (uint n = 0; n < NPV; ++n) {
      const uint p = tid + n * WG;
      if (p < PV) sm[p] = tk_unpack4(TK_BF16, pre_v[n]);  // row p / (BV / 4), columns 4 (p % (BV / 4)) ..
    }
    barrier();
    if (j0 + JC < BT) TK_LOAD_V_STAGE(j0 + JC)
    for (uint jj = 0; jj < JC; ++jj) {
      float av[RR];
      sm_rows(A_OFF + (j0 + jj) * SAT + RR * tr, av);
      [[unroll]] for (uint b = 0; b < NB; ++b) {
        const vec4 vv = sm[jj * (BV / 4u) + 16u * b + tc];
        [[unroll]] for (uint r = 0; r < RR; ++r) P[r][b] = fma(vec4(av[r]), vv, P[r][b]);
      }
    }
  }
#undef TK_LOAD_K_STAGE
#undef TK_LOAD_V_STAGE

  [[unroll]] for (uint r = 0; r < RR; ++r) {
    const uint i = RR * tr + r;
    if (i < rows) {
      [[unroll]] for (uint b = 0; b < NB; ++b) {
        const uint ow = chunk_o_element(s.c.token + i, s.ih) / 2u + (s.v0 + 64u * b + 4u * tc) / 2u;
        const uvec2 o = tk_pack4(TK_BF16, P[r][b] * pc.scale);  // two stores: o's rows start at even elements
        o_w[ow] = o.x;
        o_w[ow + 1u] = o.y;
      }
    }
  }
}
