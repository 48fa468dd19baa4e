// SPDX-License-Identifier: MIT
#version 460
// Gated DeltaNet: the gate, its chunk-local cumulative sum, beta, and the
// solved intra-chunk block A = (I + M)^-1 of one chunk and value head, with
//   M[i][j] = beta_i (k_i . k_j) exp(g_i - g_j)   for j < i < rows, else 0,
// g the cumulative log decay (natural log): the portable path, scalar f32
// throughout, no subgroup operation (the tensor-core path:
// chunk_kkt_solve_tc.glsl).
//
// Geometry (the host relies on it): one workgroup per (chunk c, value head
// h), x = c H + h (heads of one chunk adjacent, so that GQA heads find
// their k rows in the cache); 256 invocations.
// Outputs per chunk, in slots c BT .. c BT + BT - 1 (gdn/chunking.hpp):
// g_out and beta_out [slots, H] f32 (padding slots: the last cumulative
// value and 0), A [slots, H, BT] bf16 (rounded to nearest even; zero above
// the diagonal and in padding rows).
//
// The solve: the 16 x 16 diagonal blocks of (I + M) by forward substitution,
// one invocation per column; then the blocks below the diagonal by
// distance d = 1 .. BT/16 - 1, X_IJ = -X_II sum_{m=J}^{I-1} M_Im X_mJ, the
// sum kept in M's unused upper block (J, I).
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/gdn/kkt_solve_abi.h"
#include "../common/convert.glsl"

TK_DECLARE_SPEC(TK_KKT_SOLVE_SPEC)
TK_DECLARE_PUSH(TK_KKT_SOLVE_PUSH)

#include "chunk_kkt_gate.glsl"

const uint WG = 256;  // the host's workgroup size
const uint RT = BT / 16;                 // 16-row blocks per chunk
const uint NBLK = RT * (RT + 1) / 2;     // blocks on and below the diagonal
const uint KC = KDIM < 64 ? KDIM : 64;   // k columns staged per step
const uint NK = KDIM / KC;
const uint SK = KC / 8 + 1;              // k row stride (uvec4, one of padding)
const uint MSTR = BT / 4 + 1;            // M row stride (uvec4)
const uint XSTR = 17;                    // X block row stride (words)
const uint XBLK = 16 * XSTR;             // words per X block
// Shared memory (uvec4 units): M [BT][MSTR]; then the k slice, whose place
// the X blocks take once M is built.
const uint MS_OFF = 0;
const uint KS_OFF = BT * MSTR;
const uint XS_OFF = KS_OFF;
const uint XS_VEC4 = (NBLK * XBLK + 3) / 4;
const uint KX_VEC4 = BT * SK > XS_VEC4 ? BT * SK : XS_VEC4;
const uint SMEM_VEC4 = KS_OFF + KX_VEC4;

shared uvec4 smem[SMEM_VEC4];

float m_at(uint i, uint j) {
  const uint w = MS_OFF * 4 + i * (BT + 4) + j;
  return uintBitsToFloat(smem[w >> 2][w & 3u]);
}
void m_set(uint i, uint j, float v) {
  const uint w = MS_OFF * 4 + i * (BT + 4) + j;
  smem[w >> 2][w & 3u] = floatBitsToUint(v);
}
uint blk(uint I, uint J) { return I * (I + 1) / 2 + J; }
float x_at(uint b, uint r, uint c) {
  const uint w = XS_OFF * 4 + b * XBLK + r * XSTR + c;
  return uintBitsToFloat(smem[w >> 2][w & 3u]);
}
void x_set(uint b, uint r, uint c, float v) {
  const uint w = XS_OFF * 4 + b * XBLK + r * XSTR + c;
  smem[w >> 2][w & 3u] = floatBitsToUint(v);
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint x = gl_WorkGroupID.x + pc.group_offset;
  const uint h = x % pc.H, c = x / pc.H;
  const TkChunk ch = tk_gdn_chunk(c, pc.N, pc.T, pc.row_chunks, BT, pc.varlen != 0u);
  const uint kh = h / pc.ratio;
  const uint slot0 = c * BT;

  // ---- gate, beta and the inclusive cumulative sum of the gate ----------
  kkt_gate_beta(tid, ch, h);
  kkt_gate_cumsum(tid, slot0, h);

  // ---- k k^T over slices of KC columns -------------------------------------
  const uint BQ = BT / 4;  // 4 x 4 blocks of M per row of blocks
  const uint bi = tid / BQ, bj = tid % BQ;
  const bool has_block = tid < BQ * BQ && bj <= bi;
  float m[16];
  [[unroll]] for (uint e = 0; e < 16; ++e) m[e] = 0.0;
  const uint PIECES = BT * KC / 8;
  [[unroll]] for (uint s = 0; s < NK; ++s) {
    barrier();  // the previous slice is read (and, first time, the scan is done)
    [[unroll]] for (uint p = tid; p < PIECES; p += WG) {
      const uint i = p / (KC / 8), c8 = p % (KC / 8);
      const uint tok = ch.first + min(i, tk_last_row(ch.rows));
      const uvec4 q = k_4[(tok * pc.Hg + kh) * (KDIM / 8) + s * (KC / 8) + c8];
      smem[KS_OFF + i * SK + c8] = i < ch.rows ? q : uvec4(0u);
    }
    barrier();
    if (has_block) {
      for (uint w = 0; w < KC / 2; ++w) {
        vec2 a[4], b[4];
        [[unroll]] for (uint r = 0; r < 4; ++r) {
          const uint wa = (KS_OFF + (4 * bi + r) * SK) * 4 + w, wb = (KS_OFF + (4 * bj + r) * SK) * 4 + w;
          a[r] = tk_bf16_pair(smem[wa >> 2][wa & 3u]);
          b[r] = tk_bf16_pair(smem[wb >> 2][wb & 3u]);
        }
        [[unroll]] for (uint r = 0; r < 4; ++r)
          [[unroll]] for (uint q = 0; q < 4; ++q) m[r * 4 + q] += dot(a[r], b[q]);
      }
    }
  }

  // ---- M into shared memory (its own region: no barrier needed) ----------
  if (has_block) {
    [[unroll]] for (uint r = 0; r < 4; ++r)
      [[unroll]] for (uint q = 0; q < 4; ++q) {
        const uint i = 4 * bi + r, j = 4 * bj + q;
        m_set(i, j, gated(m[r * 4 + q], i, j, ch.rows));
      }
  }
  barrier();  // M complete; the k slice is dead and X may take its place

  // ---- diagonal blocks: one invocation per column ------------------------
  if (tid < RT * 16) {
    const uint b = tid / 16, j = tid % 16, o = b * 16;
    float xs[16];
    [[unroll]] for (uint i = 0; i < 16; ++i) {
      float s = i == j ? 1.0 : 0.0;  // rows above j come out 0: their sums only see zeros
      [[unroll]] for (uint q = 0; q < i; ++q) s -= m_at(o + i, o + q) * xs[q];
      xs[i] = s;
    }
    [[unroll]] for (uint i = 0; i < 16; ++i) x_set(blk(b, b), i, j, xs[i]);
  }
  barrier();

  // ---- blocks below the diagonal, by distance ---------------------------
  [[unroll]] for (uint d = 1; d < RT; ++d) {
    const uint items = (RT - d) * 256;
    for (uint p = tid; p < items; p += WG) {
      const uint J = p / 256, I = J + d, r = (p % 256) / 16, cc = p % 16;
      float s = 0.0;
      for (uint mb = J; mb < I; ++mb)
        [[unroll]] for (uint q = 0; q < 16; ++q) s += m_at(I * 16 + r, mb * 16 + q) * x_at(blk(mb, J), q, cc);
      m_set(J * 16 + r, I * 16 + cc, s);  // the sum, in M's upper block (J, I)
    }
    barrier();
    for (uint p = tid; p < items; p += WG) {
      const uint J = p / 256, I = J + d, r = (p % 256) / 16, cc = p % 16;
      float s = m_at(J * 16 + r, I * 16 + cc);  // X_II has a unit diagonal
      for (uint q = 0; q < r; ++q) s += x_at(blk(I, I), r, q) * m_at(J * 16 + q, I * 16 + cc);
      x_set(blk(I, J), r, cc, -s);
    }
    barrier();
  }

  // ---- A in bf16: row i of the chunk, 8 columns per piece ------------------
  [[unroll]] for (uint p = tid; p < BT * BT / 8; p += WG) {
    const uint i = p / (BT / 8), j0 = (p % (BT / 8)) * 8;
    uvec4 q;
    [[unroll]] for (uint e = 0; e < 4; ++e) {
      uint bits[2];
      [[unroll]] for (uint u = 0; u < 2; ++u) {
        const uint j = j0 + 2 * e + u;
        const float x = x_at(blk(i / 16, min(j, i) / 16), i % 16, j % 16);  // in bounds above the diagonal too
        const float v = j <= i && i < ch.rows ? x : 0.0;
        bits[u] = tk_f32_to_bf16(v);
      }
      q[e] = bits[0] | (bits[1] << 16);
    }
    a_4[((slot0 + i) * pc.H + h) * (BT / 8) + j0 / 8] = q;
  }
}
