// SPDX-License-Identifier: MIT
#version 460
// Gated DeltaNet chunk_fwd_o, portable path (any Vulkan 1.2 device, any
// subgroup size, 30 KiB of shared memory at BT = 64):
//   o = scale * ((q h^T) * exp(g_i) + bf16(tril_incl((q k^T) * exp(g_i - g_j))) v)
// per chunk of BT rows and head, f32 accumulation.
//
// One workgroup of 256 invocations per (chunk, head, BV = 64 columns of V),
// as a 16 x 16 grid (tr, tc). Invocation (tr, tc) owns chunk rows
// i = tr + 16 r (r < BT / 16), q k^T columns j = tc + 16 m (m < BT / 16) and
// output columns 2 tc + e + 32 p (e, p in {0, 1}), so that it writes whole
// 32-bit words of bf16 pairs.
// Phase 1: q k^T and q h^T over K in stages of 16 columns held as f32 in
// shared memory. Then the gated, masked, bf16-rounded A goes to shared
// memory. Phase 2: A v over the chunk in stages of 16 rows of v.
// Rows past the chunk's end are read as zeros and never written.
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/gdn/chunk_o_abi.h"

TK_DECLARE_SPEC(TK_CHUNK_O_SPEC)  // the host passes BV = 64 and 256 invocations
const uint WG = gl_WorkGroupSize.x;

#include "../common/gdn_chunk_o.glsl"

const uint RM = BT / 16;  // rows (and q k^T columns) per invocation
const uint KC = 16;       // K columns per stage
const uint JC = 16;       // v rows per stage
const uint SK = KC + 1;   // padded stage row (floats)
const uint SA = BT + 1;   // padded A row
const uint Q_OFF = 0;
const uint K_OFF = BT * SK;
const uint H_OFF = 2 * BT * SK;
const uint V_OFF = 0;  // v stages replace the K stages
const uint A_OFF = (2 * BT + BV) * SK;
const uint G_OFF = A_OFF + BT * SA;
shared float sm[G_OFF + BT];

void main() {
  const uint id = gl_WorkGroupID.x + pc.group_offset;
  if (id >= pc.total_groups) return;  // uniform over the workgroup
  const ChunkOTile s = chunk_o_tile(id);
  const uint tid = gl_LocalInvocationID.x;
  const uint tr = tid / 16, tc = tid % 16;
  const uint rows = s.c.rows;

  if (tid < BT) sm[G_OFF + tid] = tid < rows ? g_f[(s.c.slot + tid) * pc.H + s.ih] : 0.0;

  float S[RM][RM], P[RM][4];
  for (uint r = 0; r < RM; ++r) {
    for (uint m = 0; m < RM; ++m) S[r][m] = 0.0;
    for (uint n = 0; n < 4; ++n) P[r][n] = 0.0;
  }

  const uint hrow0 = (s.c.chunk * pc.H + s.ih) * VDIM + s.v0;
  for (uint k0 = 0; k0 < KDIM; k0 += KC) {
    barrier();  // the previous stage is consumed
    // BT rows of q and k and BV rows of h, KC / 2 words each.
    for (uint u = tid; u < (2 * BT + BV) * (KC / 2); u += WG) {
      const uint row = u / (KC / 2), w = u % (KC / 2);
      uint word = 0u;
      if (row < 2 * BT) {
        const uint r = row % BT;
        if (r < rows) {
          const uint e = (((s.c.token + r) * pc.Hg + s.kh) * KDIM + k0) / 2 + w;
          word = row < BT ? q_w[e] : k_w[e];
        }
      } else {
        word = h_w[((hrow0 + row - 2 * BT) * KDIM + k0) / 2 + w];
      }
      sm[row * SK + 2 * w] = bf16_lo(word);
      sm[row * SK + 2 * w + 1] = bf16_hi(word);
    }
    barrier();
    for (uint kk = 0; kk < KC; ++kk) {
      float qv[RM], kv[RM], hv[4];
      for (uint r = 0; r < RM; ++r) qv[r] = sm[Q_OFF + (tr + 16 * r) * SK + kk];
      for (uint m = 0; m < RM; ++m) kv[m] = sm[K_OFF + (tc + 16 * m) * SK + kk];
      for (uint n = 0; n < 4; ++n) hv[n] = sm[H_OFF + (2 * tc + n % 2 + 32 * (n / 2)) * SK + kk];
      for (uint r = 0; r < RM; ++r) {
        for (uint m = 0; m < RM; ++m) S[r][m] = fma(qv[r], kv[m], S[r][m]);
        for (uint n = 0; n < 4; ++n) P[r][n] = fma(qv[r], hv[n], P[r][n]);
      }
    }
  }

  // A = bf16(tril_incl(S * exp(gi - gj))) to shared memory; P *= exp(gi).
  for (uint r = 0; r < RM; ++r) {
    const uint i = tr + 16 * r;
    const float gi = sm[G_OFF + i];
    for (uint m = 0; m < RM; ++m) {
      const uint j = tc + 16 * m;
      sm[A_OFF + i * SA + j] = j <= i ? round_bf16(S[r][m] * exp(gi - sm[G_OFF + j])) : 0.0;
    }
    const float eg = exp(gi);
    for (uint n = 0; n < 4; ++n) P[r][n] *= eg;
  }

  for (uint j0 = 0; j0 < BT; j0 += JC) {
    barrier();  // K stages (first pass) or the previous v stage consumed; A complete
    for (uint u = tid; u < JC * (BV / 2); u += WG) {
      const uint row = u / (BV / 2), w = u % (BV / 2);
      uint word = 0u;
      if (j0 + row < rows) word = v_w[(((s.c.slot + j0 + row) * pc.H + s.ih) * VDIM + s.v0) / 2 + w];
      sm[V_OFF + row * BV + 2 * w] = bf16_lo(word);
      sm[V_OFF + row * BV + 2 * w + 1] = bf16_hi(word);
    }
    barrier();
    for (uint jj = 0; jj < JC; ++jj) {
      float av[RM], vv[4];
      for (uint r = 0; r < RM; ++r) av[r] = sm[A_OFF + (tr + 16 * r) * SA + j0 + jj];
      for (uint n = 0; n < 4; ++n) vv[n] = sm[V_OFF + jj * BV + 2 * tc + n % 2 + 32 * (n / 2)];
      for (uint r = 0; r < RM; ++r)
        for (uint n = 0; n < 4; ++n) P[r][n] = fma(av[r], vv[n], P[r][n]);
    }
  }

  for (uint r = 0; r < RM; ++r) {
    const uint i = tr + 16 * r;
    if (i >= rows) continue;
    const uint ow = chunk_o_element(s.c.token + i, s.ih) / 2 + s.v0 / 2 + tc;
    for (uint p = 0; p < 2; ++p)
      o_w[ow + 16 * p] = tk_f32_to_bf16(P[r][2 * p] * pc.scale) | (tk_f32_to_bf16(P[r][2 * p + 1] * pc.scale) << 16);
  }
}
