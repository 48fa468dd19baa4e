// SPDX-License-Identifier: MIT
// Gated DeltaNet: A = (I + M)^-1 of one chunk and value head in scalar f32,
// no subgroup operation, for a workgroup of any size WG (declared by the
// including shader, with the bindings and the gate stage of
// chunk_kkt_gate.glsl):
//   M[i][j] = beta_i (k_i . k_j) exp(g_i - g_j)   for j < i < rows, else 0.
// The body of the portable kernel (chunk_kkt_solve.comp) and the fallback
// of the fp16 matrix kernel (chunk_kkt_solve_mma.glsl) for chunks whose
// values fp16 cannot hold.
//
// The solve: the 16 x 16 diagonal blocks of (I + M) by forward
// substitution, one invocation per column; then the blocks below the
// diagonal by distance d = 1 .. BT/16 - 1, X_IJ = -X_II sum_{m=J}^{I-1}
// M_Im X_mJ, the sum kept in M's unused upper block (J, I). A is X rounded
// to bf16 (nearest even), zero above the diagonal and in padding rows.
//
// Shared memory: smem [TK_KKT_SMEM_VEC4] (the includer may define a larger
// size, for its own use of the same array), from 0: M [BT][BT + 4] f32,
// then the k slice, whose place the X blocks take once M is built
// (TK_KKT_PS_* in kkt_solve_abi.h).
#ifndef TK_KKT_SMEM_VEC4
#define TK_KKT_SMEM_VEC4 TK_KKT_PS_SMEM_VEC4(BT, KDIM)
#endif
shared uvec4 smem[TK_KKT_SMEM_VEC4];

const uint PS_RT = BT / 16;                // 16-row blocks per chunk
const uint PS_KC = TK_KKT_KC(KDIM);        // k columns staged per step
const uint PS_NK = KDIM / PS_KC;
const uint PS_SK = PS_KC / 8 + 1;          // k row stride (uvec4, one of padding)
const uint PS_XSTR = 17;                   // X block row stride (words)
const uint PS_XBLK = 16 * PS_XSTR;         // words per X block
const uint PS_KS_OFF = TK_KKT_PS_KS_OFF(BT);
const uint PS_XS_OFF = PS_KS_OFF;

float ps_m_at(uint i, uint j) {
  const uint w = i * (BT + 4) + j;
  return uintBitsToFloat(smem[w >> 2][w & 3u]);
}
void ps_m_set(uint i, uint j, float v) {
  const uint w = i * (BT + 4) + j;
  smem[w >> 2][w & 3u] = floatBitsToUint(v);
}
uint ps_blk(uint I, uint J) { return I * (I + 1) / 2 + J; }
float ps_x_at(uint b, uint r, uint c) {
  const uint w = PS_XS_OFF * 4 + b * PS_XBLK + r * PS_XSTR + c;
  return uintBitsToFloat(smem[w >> 2][w & 3u]);
}
void ps_x_set(uint b, uint r, uint c, float v) {
  const uint w = PS_XS_OFF * 4 + b * PS_XBLK + r * PS_XSTR + c;
  smem[w >> 2][w & 3u] = floatBitsToUint(v);
}

// By the whole workgroup, in uniform control flow, after the gate stage
// (s_g and s_beta final behind a barrier): writes A of chunk `ch` (slots
// from slot0) and value head h, whose keys are those of key head kh.
void kkt_solve_scalar(uint tid, TkChunk ch, uint slot0, uint h, uint kh) {
  // ---- k k^T in 4 x 4 blocks of M, WG blocks per pass over k ------------
  const uint BQ = BT / 4;  // 4 x 4 blocks per row of blocks
  const uint PIECES = BT * PS_KC / 8;
  for (uint base = 0; base < BQ * BQ; base += WG) {
    const uint b = base + tid, bi = b / BQ, bj = b % BQ;
    const bool has_block = b < BQ * BQ && bj <= bi;
    float m[16];
    [[unroll]] for (uint e = 0; e < 16; ++e) m[e] = 0.0;
    [[unroll]] for (uint s = 0; s < PS_NK; ++s) {
      barrier();  // the previous slice is read (and, first time, the scan is done)
      for (uint p = tid; p < PIECES; p += WG) {
        const uint i = p / (PS_KC / 8), c8 = p % (PS_KC / 8);
        const uint tok = ch.first + min(i, tk_last_row(ch.rows));
        const uvec4 q = k_4[(tok * pc.Hg + kh) * (KDIM / 8) + s * (PS_KC / 8) + c8];
        smem[PS_KS_OFF + i * PS_SK + c8] = i < ch.rows ? q : uvec4(0u);
      }
      barrier();
      if (has_block) {
        for (uint w = 0; w < PS_KC / 2; ++w) {
          vec2 a[4], bb[4];
          [[unroll]] for (uint r = 0; r < 4; ++r) {
            const uint wa = (PS_KS_OFF + (4 * bi + r) * PS_SK) * 4 + w, wb = (PS_KS_OFF + (4 * bj + r) * PS_SK) * 4 + w;
            a[r] = tk_bf16_pair(smem[wa >> 2][wa & 3u]);
            bb[r] = tk_bf16_pair(smem[wb >> 2][wb & 3u]);
          }
          [[unroll]] for (uint r = 0; r < 4; ++r)
            [[unroll]] for (uint q = 0; q < 4; ++q) m[r * 4 + q] += dot(a[r], bb[q]);
        }
      }
    }
    // M into shared memory (its own region: the next pass's first barrier
    // orders it before any reader).
    if (has_block) {
      [[unroll]] for (uint r = 0; r < 4; ++r)
        [[unroll]] for (uint q = 0; q < 4; ++q) {
          const uint i = 4 * bi + r, j = 4 * bj + q;
          ps_m_set(i, j, gated(m[r * 4 + q], i, j, ch.rows));
        }
    }
  }
  barrier();  // M complete; the k slice is dead and X may take its place

  // ---- diagonal blocks: one invocation per column ------------------------
  for (uint col = tid; col < PS_RT * 16; col += WG) {
    const uint b = col / 16, j = col % 16, o = b * 16;
    float xs[16];
    [[unroll]] for (uint i = 0; i < 16; ++i) {
      float s = i == j ? 1.0 : 0.0;  // rows above j come out 0: their sums only see zeros
      [[unroll]] for (uint q = 0; q < i; ++q) s -= ps_m_at(o + i, o + q) * xs[q];
      xs[i] = s;
    }
    [[unroll]] for (uint i = 0; i < 16; ++i) ps_x_set(ps_blk(b, b), i, j, xs[i]);
  }
  barrier();

  // ---- blocks below the diagonal, by distance ---------------------------
  [[unroll]] for (uint d = 1; d < PS_RT; ++d) {
    const uint items = (PS_RT - d) * 256;
    for (uint p = tid; p < items; p += WG) {
      const uint J = p / 256, I = J + d, r = (p % 256) / 16, cc = p % 16;
      float s = 0.0;
      for (uint mb = J; mb < I; ++mb)
        [[unroll]] for (uint q = 0; q < 16; ++q) s += ps_m_at(I * 16 + r, mb * 16 + q) * ps_x_at(ps_blk(mb, J), q, cc);
      ps_m_set(J * 16 + r, I * 16 + cc, s);  // the sum, in M's upper block (J, I)
    }
    barrier();
    for (uint p = tid; p < items; p += WG) {
      const uint J = p / 256, I = J + d, r = (p % 256) / 16, cc = p % 16;
      float s = ps_m_at(J * 16 + r, I * 16 + cc);  // X_II has a unit diagonal
      for (uint q = 0; q < r; ++q) s += ps_x_at(ps_blk(I, I), r, q) * ps_m_at(J * 16 + q, I * 16 + cc);
      ps_x_set(ps_blk(I, J), r, cc, -s);
    }
    barrier();
  }

  // ---- A in bf16: row i of the chunk, 8 columns per piece ------------------
  for (uint p = tid; p < BT * BT / 8; p += WG) {
    const uint i = p / (BT / 8), j0 = (p % (BT / 8)) * 8;
    uvec4 q;
    [[unroll]] for (uint e = 0; e < 4; ++e) {
      uint bits[2];
      [[unroll]] for (uint u = 0; u < 2; ++u) {
        const uint j = j0 + 2 * e + u;
        const float x = ps_x_at(ps_blk(i / 16, min(j, i) / 16), i % 16, j % 16);  // in bounds above the diagonal too
        const float v = j <= i && i < ch.rows ? x : 0.0;
        bits[u] = tk_f32_to_bf16(v);
      }
      q[e] = bits[0] | (bits[1] << 16);
    }
    a_4[((slot0 + i) * pc.H + h) * (BT / 8) + j0 / 8] = q;
  }
}
