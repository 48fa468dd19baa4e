// SPDX-License-Identifier: MIT
// Gated DeltaNet: the gate, its chunk-local cumulative sum, beta, and the
// solved intra-chunk block A = (I + M)^-1 of one chunk and value head, with
//   M[i][j] = beta_i (k_i . k_j) exp(g_i - g_j)   for j < i < rows, else 0,
// every product on 16 x 16 subgroup matrices (shaders/common/coopmat.glsl):
// the body of chunk_kkt_solve_bf16.comp (bf16 tensor cores) and of its
// emulated test twin. Same outputs, layouts and rounding as
// chunk_kkt_solve.comp (the portable kernel).
//
// Geometry (the host relies on it): one workgroup per (chunk c, value head
// h), x = c H + h; BT / 16 subgroups of 32, subgroup I owning row block I
// of M and of X = (I + M)^-1 (blocks X_IJ, J <= I).
//
// The solve in f32 accuracy on bf16 tensor cores: every operand of the
// block products is split into bf16 hi + lo (hi = bf16(x), lo =
// bf16(x - hi): 16 significant bits), and a product takes three MMAs
// (hi hi + hi lo + lo hi), f32 accumulation; the dropped lo lo term and
// the lo rounding are ~2^-16 relative, finer than FLA's tf32 products
// (2^-11) and far below A's final bf16 rounding (2^-9).
//   1. k k^T: the RT (RT + 1) / 2 tiles (I, J <= I), in row order, dealt
//      to the subgroups in turn (at most 3 each at BT = 64, where row
//      block 3 alone has 4), the k chunk staged in slices of KC columns;
//      gate, beta and the mask applied per element; M_IJ stored split,
//      M_II into the scratch of subgroup I.
//   2. X_II = (I + M_II)^-1 by forward substitution, one invocation per
//      column (lanes 0..15 of subgroup I), in f32.
//   3. By distance d = 1 .. BT/16 - 1: subgroup I >= d computes
//      X_IJ = -X_II sum_{m=J}^{I-1} M_Im X_mJ, J = I - d (the X_mJ it
//      reads are of smaller distance, finished at the previous barrier).
// A = bf16(X) is X's hi part, stored per tile with padding rows zeroed;
// tiles above the diagonal are stored as zeros. A tile leaves through the
// subgroup's f32 scratch (free by then), one 16-byte piece per invocation
// (row lane / 2, half lane % 2): fragment stores straight to storage
// buffers are slow on NVIDIA's driver.
// Shared memory stays under 12 KiB (kkt_solve_abi.h), so that four
// workgroups fit a multiprocessor: subgroup I holds its row of M (hi/lo)
// in registers from step 2 on, so M's tiles and X's share one area, and
// the subgroup's one f32 tile holds M_II, then X_II, then each product's
// hi/lo pair and the A tile on its way out.
// All synchronisation is in uniform control flow: workgroup barriers, and
// TK_CM_SYNC where a subgroup reads back its own A tile (a workgroup
// barrier in the emulation, which spreads a virtual subgroup over hardware
// subgroups of any size).
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/gdn/kkt_solve_abi.h"
#include "../common/convert.glsl"

TK_DECLARE_SPEC(TK_KKT_SOLVE_SPEC)
TK_DECLARE_PUSH(TK_KKT_SOLVE_PUSH)

#include "chunk_kkt_gate.glsl"
#include "../common/coopmat.glsl"

const uint RT = BT / 16;                  // row blocks, = subgroups
const uint WG = RT * 32;                  // the host's workgroup size
const uint MAXRT = 4;
const uint NT = RT * (RT + 1) / 2;         // tiles of k k^T on and below the diagonal
const uint TPS = (NT + RT - 1) / RT;      // of them per subgroup, at most
const uint MAXTPS = 3;
const uint KC = TK_KKT_TC_KC(KDIM);       // k columns staged per slice
const uint NK = KDIM / KC;
const uint SK = TK_KKT_TC_SK(KDIM);       // k row stride (uvec4)
const uint TS = TK_KKT_TC_TS;             // bf16 tile row stride (uvec4)
const uint TILE = 16 * TS;                // uvec4 per bf16 tile
const uint FS = TK_KKT_TC_FS;             // f32 scratch row stride (uvec4)
const uint X_OFF = TK_KKT_TC_X_OFF;       // X_IJ hi at X_OFF + 2 xblk(I, J) TILE, lo one TILE further
const uint M_OFF = TK_KKT_TC_M_OFF(BT);   // M_IJ (J < I) hi/lo at M_OFF + 2 mblk(I, J) TILE
const uint SC_OFF = TK_KKT_TC_SC_OFF(BT);  // per subgroup: f32 [16][FS], then T hi, T lo (or f32 [16][FS])
const uint SC_SIZE = TK_KKT_TC_SC_SIZE;
const uint IDX_OFF = TK_KKT_TC_IDX_OFF(BT, KDIM);
const uint KS_OFF = 0;                    // the k slice: dead before the tiles are written
const uint PIECES = BT * KC / 8 / WG;     // 16-byte pieces of a k slice per invocation

shared uvec4 smem[TK_KKT_TC_SMEM_VEC4(BT, KDIM)];

// Tile pairs: X_IJ for I < RT - 1 (J <= I) and X_II of the last row, in
// row order (the last row's other blocks are never read back); M_IJ, J < I.
uint xblk(uint I, uint J) { return I + 1 < RT ? I * (I + 1) / 2 + J : (RT - 1) * RT / 2; }
uint mblk(uint I, uint J) { return I * (I - 1) / 2 + J; }
// Tile t of k k^T in row order: its row and column blocks (I, J) (RT <= 4: t < 10).
uvec2 tile_of(uint t) {
  const uint I = t < 1 ? 0u : t < 3 ? 1u : t < 6 ? 2u : 3u;
  return uvec2(I, t - I * (I + 1) / 2);
}

void f32_set(uint off, uint r, uint c, float v) {
  const uint w = off * 4 + r * FS * 4 + c;
  smem[w >> 2][w & 3u] = floatBitsToUint(v);
}

// x = hi + lo, both exactly bf16; stores them as tiles at `off` and `off + TILE`.
#define TK_STORE_SPLIT(x, off)                                                  \
  {                                                                             \
    TK_CM_ACC hi_ = x, lo_ = x;                                                 \
    TK_CM_UNROLL for (int e_ = 0; e_ < TK_CM_LEN(hi_); ++e_) {                  \
      const float v_ = TK_CM_EL(hi_, e_), h_ = tk_round_bf16_split(v_);         \
      TK_CM_EL(hi_, e_) = h_;                                                   \
      TK_CM_EL(lo_, e_) = tk_round_bf16_split(v_ - h_);                         \
    }                                                                           \
    const TK_CM_ACC16 hi16_ = TK_CM_TO_ACC16(hi_), lo16_ = TK_CM_TO_ACC16(lo_); \
    TK_CM_STORE16_ROW(hi16_, smem, (off), TS);                                  \
    TK_CM_STORE16_ROW(lo16_, smem, (off) + TILE, TS);                           \
  }

// acc += A B for A split into fragments ah, al and B split at b_off: three MMAs.
#define TK_MMA_SPLIT_A(acc, ah, al, b_off)           \
  {                                                  \
    TK_CM_B bh_, bl_;                                \
    TK_CM_LOAD16_ROW(bh_, smem, (b_off), TS);        \
    TK_CM_LOAD16_ROW(bl_, smem, (b_off) + TILE, TS); \
    acc = TK_CM_MMA(ah, bh_, acc);                   \
    acc = TK_CM_MMA(ah, bl_, acc);                   \
    acc = TK_CM_MMA(al, bh_, acc);                   \
  }
// The same with A's split tiles at a_off.
#define TK_MMA_SPLIT(acc, a_off, b_off)                  \
  {                                                      \
    TK_CM_A ah_, al_;                                    \
    TK_CM_LOAD16_ROW(ah_, smem, (a_off), TS);            \
    TK_CM_LOAD16_ROW(al_, smem, (a_off) + TILE, TS);     \
    TK_MMA_SPLIT_A(acc, ah_, al_, b_off)                 \
  }

void main() {
  const uint tid = gl_LocalInvocationID.x, sg = TK_CM_SUBGROUP_ID, lane = tid % 32u;
  const uint x = gl_WorkGroupID.x + pc.group_offset;
  const uint h = x % pc.H, c = x / pc.H;
  const TkChunk ch = tk_gdn_chunk(c, pc.N, pc.T, pc.row_chunks, BT, pc.varlen != 0u);
  const uint kh = h / pc.ratio;
  const uint slot0 = c * BT;
  const uint a_stride = pc.H * BT / 8;  // A row stride (uvec4)
  // This invocation's piece of row block sg of A, column block 0.
  const uint a_piece = (slot0 + sg * 16 + lane / 2) * a_stride + h * (BT / 8) + (lane & 1u);

  // The first k slice's loads, in flight during the gate and its sum.
  uvec4 pre[PIECES];
  [[unroll]] for (uint n = 0; n < PIECES; ++n) {
    const uint p = tid + n * WG, i = p / (KC / 8), c8 = p % (KC / 8);
    pre[n] = k_4[((ch.first + min(i, tk_last_row(ch.rows))) * pc.Hg + kh) * (KDIM / 8) + c8];
  }

  // ---- gate, beta and the inclusive cumulative sum of the gate ----------
  kkt_gate_beta(tid, ch, h);
  for (uint p = tid; p < 128; p += WG) {  // the index tiles
    uvec4 q;
    [[unroll]] for (uint e = 0; e < 4; ++e) q[e] = tk_cm_index_word(p * 4 + e);
    smem[IDX_OFF + p] = q;
  }
  kkt_gate_cumsum(tid, slot0, h);

  // ---- k k^T: tiles t = sg + q RT (row block I, column block J) ----------
  TK_CM_ACC acc[MAXTPS];
  TK_CM_UNROLL for (uint q = 0; q < MAXTPS; ++q) acc[q] = TK_CM_FILL(TK_CM_ACC, 0.0);
  TK_CM_UNROLL for (uint s = 0; s < NK; ++s) {
    if (s > 0) barrier();  // the previous slice is read
    [[unroll]] for (uint n = 0; n < PIECES; ++n) {
      const uint p = tid + n * WG, i = p / (KC / 8), c8 = p % (KC / 8);
      smem[KS_OFF + i * SK + c8] = i < ch.rows ? pre[n] : uvec4(0u);
    }
    barrier();
    if (s + 1 < NK) {
      [[unroll]] for (uint n = 0; n < PIECES; ++n) {
        const uint p = tid + n * WG, i = p / (KC / 8), c8 = p % (KC / 8);
        pre[n] = k_4[((ch.first + min(i, tk_last_row(ch.rows))) * pc.Hg + kh) * (KDIM / 8) + (s + 1) * (KC / 8) + c8];
      }
    }
    TK_CM_UNROLL for (uint q = 0; q < MAXTPS; ++q) {
      const uint t = sg + q * RT;
      const uvec2 ij = tile_of(t);
      const uint I = ij.x, J = ij.y;
      if (q < TPS && t < NT) {  // uniform per subgroup
        TK_CM_UNROLL for (uint kk = 0; kk < KC / 16; ++kk) {
          TK_CM_A a;
          TK_CM_B b;
          TK_CM_LOAD16_ROW(a, smem, KS_OFF + I * 16 * SK + kk * 2, SK);
          TK_CM_LOAD16_COL(b, smem, KS_OFF + J * 16 * SK + kk * 2, SK);  // k^T
          acc[q] = TK_CM_MMA(a, b, acc[q]);
        }
      }
    }
  }
  TK_CM_ACC row_of, col_of;
  TK_CM_LOAD32_ROW(row_of, smem, IDX_OFF, 4);
  TK_CM_LOAD32_ROW(col_of, smem, IDX_OFF + 64, 4);
  TK_CM_UNROLL for (uint q = 0; q < MAXTPS; ++q) {
    const uint t = sg + q * RT;
    const uvec2 ij = tile_of(t);
    const uint I = ij.x, J = ij.y;
    if (q < TPS && t < NT) {
      // Gated in a copy: element access on an element of the array made
      // NVIDIA's driver keep the whole array in local memory.
      TK_CM_ACC m = acc[q];
      TK_CM_UNROLL for (int e = 0; e < TK_CM_LEN(m); ++e) {
        const uint i = I * 16 + tk_cm_pos(TK_CM_EL(row_of, e)), jj = J * 16 + tk_cm_pos(TK_CM_EL(col_of, e));
        TK_CM_EL(m, e) = gated(TK_CM_EL(m, e), i, jj, ch.rows);
      }
      acc[q] = m;
    }
  }
  barrier();  // every subgroup is done with the k slice: X, M and the scratch may take its place

  // ---- M below the diagonal (split) and M_II (f32 scratch of subgroup I) --
  const uint sc = SC_OFF + sg * SC_SIZE;
  TK_CM_UNROLL for (uint q = 0; q < MAXTPS; ++q) {
    const uint t = sg + q * RT;
    const uvec2 ij = tile_of(t);
    const uint I = ij.x, J = ij.y;
    if (q < TPS && t < NT) {
      if (J < I) {
        TK_STORE_SPLIT(acc[q], M_OFF + 2 * mblk(I, J) * TILE);
      } else {
        TK_CM_STORE32_ROW(acc[q], smem, SC_OFF + I * SC_SIZE, FS);
      }
    }
  }
  barrier();

  // ---- this subgroup's row of M into registers (its area becomes X's) ----
  TK_CM_A mh[MAXRT - 1], ml[MAXRT - 1];
  TK_CM_UNROLL for (uint m = 0; m + 1 < MAXRT; ++m) {
    if (m < sg) {  // uniform per subgroup
      TK_CM_LOAD16_ROW(mh[m], smem, M_OFF + 2 * mblk(sg, m) * TILE, TS);
      TK_CM_LOAD16_ROW(ml[m], smem, M_OFF + 2 * mblk(sg, m) * TILE + TILE, TS);
    }
  }

  // ---- X_II by forward substitution (column lane of lanes 0..15) --------
  float xs[16];
  if (lane < 16) {
    const uint j = lane;
    [[unroll]] for (uint i = 0; i < 16; ++i) {
      float s = i == j ? 1.0 : 0.0;  // rows above j come out 0: their sums only see zeros
      // Row i of M_II four elements per load (the same for every lane).
      [[unroll]] for (uint q4 = 0; 4 * q4 < i; ++q4) {
        const vec4 m = uintBitsToFloat(smem[sc + i * FS + q4]);
        [[unroll]] for (uint e = 0; e < 4; ++e)
          if (4 * q4 + e < i) s -= m[e] * xs[4 * q4 + e];
      }
      xs[i] = s;
    }
  }
  barrier();  // M_II is read and every row of M is in registers
  if (lane < 16)
    [[unroll]] for (uint i = 0; i < 16; ++i) f32_set(sc, i, lane, xs[i]);
  barrier();

  // ---- X_II split into the X area; its A tile; zero tiles above it -------
  {
    TK_CM_ACC xd;
    TK_CM_LOAD32_ROW(xd, smem, sc, FS);
    TK_STORE_SPLIT(xd, X_OFF + 2 * xblk(sg, sg) * TILE);
    TK_CM_UNROLL for (int e = 0; e < TK_CM_LEN(xd); ++e) {
      const uint i = sg * 16 + tk_cm_pos(TK_CM_EL(row_of, e));
      TK_CM_EL(xd, e) = i < ch.rows ? tk_round_bf16_split(TK_CM_EL(xd, e)) : 0.0;
    }
    const TK_CM_ACC16 a16 = TK_CM_TO_ACC16(xd);
    TK_CM_SYNC();  // X_II's f32 tile is read
    TK_CM_STORE16_ROW(a16, smem, sc, TS);
    [[unroll]] for (uint j = 0; j < MAXRT; ++j) {
      if (j > sg && j < RT) a_4[a_piece + j * 2] = uvec4(0u);
    }
    TK_CM_SYNC();
    a_4[a_piece + sg * 2] = smem[sc + (lane / 2) * TS + (lane & 1u)];
  }

  // ---- blocks below the diagonal, by distance ---------------------------
  TK_CM_UNROLL for (uint d = 1; d < MAXRT; ++d) {
    if (d < RT) {
      barrier();  // X tiles of distance < d are in place
      const bool mine = sg >= d;  // uniform per subgroup
      const uint J = sg - d;
      if (mine) {
        TK_CM_ACC t = TK_CM_FILL(TK_CM_ACC, 0.0);
        TK_CM_UNROLL for (uint m = 0; m + 1 < MAXRT; ++m) {
          if (m >= J && m < sg) TK_MMA_SPLIT_A(t, mh[m], ml[m], X_OFF + 2 * xblk(m, J) * TILE)  // uniform per subgroup
        }
        TK_STORE_SPLIT(t, sc);
      }
      barrier();
      TK_CM_ACC16 a16;
      if (mine) {
        TK_CM_ACC xo = TK_CM_FILL(TK_CM_ACC, 0.0);
        TK_MMA_SPLIT(xo, X_OFF + 2 * xblk(sg, sg) * TILE, sc);
        TK_CM_UNROLL for (int e = 0; e < TK_CM_LEN(xo); ++e) TK_CM_EL(xo, e) = -TK_CM_EL(xo, e);
        if (sg + 1 < RT) TK_STORE_SPLIT(xo, X_OFF + 2 * xblk(sg, J) * TILE);
        TK_CM_UNROLL for (int e = 0; e < TK_CM_LEN(xo); ++e) {
          const uint i = sg * 16 + tk_cm_pos(TK_CM_EL(row_of, e));
          TK_CM_EL(xo, e) = i < ch.rows ? tk_round_bf16_split(TK_CM_EL(xo, e)) : 0.0;
        }
        a16 = TK_CM_TO_ACC16(xo);
      }
      TK_CM_SYNC();  // the product's pair is read before the A tile takes its place
      if (mine) TK_CM_STORE16_ROW(a16, smem, sc, TS);
      TK_CM_SYNC();
      if (mine) a_4[a_piece + J * 2] = smem[sc + (lane / 2) * TS + (lane & 1u)];
    }
  }
}
