// SPDX-License-Identifier: MIT
// Gated DeltaNet: the gate, its chunk-local cumulative sum, beta, and the
// solved intra-chunk block A = (I + M)^-1 of one chunk and value head, with
//   M[i][j] = beta_i (k_i . k_j) exp(g_i - g_j)   for j < i < rows, else 0,
// every product on the device's cooperative-matrix tile (common/mma.glsl)
// with 16-bit operands: the body of chunk_kkt_solve_fp16.comp (fp16) and
// chunk_kkt_solve_bf16.comp (bf16, TK_KKT_BF16 1). Same outputs, layouts
// and rounding as chunk_kkt_solve.comp (the portable kernel).
//
// Geometry (the host relies on it): one workgroup per (chunk c, value head
// h), x = c H + h; BT / 16 subgroups of SUBGROUP invocations, subgroup I
// owning row block I of M and of X = (I + M)^-1 (blocks X_IJ, J <= I).
//
// The solve in f32 accuracy on 16-bit operands: every operand of the block
// products is split into hi + lo (hi = T(x), lo = T(x - hi): 16 significant
// bits in bf16, 22 in fp16), and a product takes three MMAs (hi hi + hi lo
// + lo hi) with f32 accumulation; what is dropped is ~2^-16 relative or
// less (2^-25 absolute where an fp16 lo is subnormal), far below A's final
// bf16 rounding (2^-9).
//   1. k k^T: the RT (RT + 1) / 2 tiles (I, J <= I), in row order, dealt
//      to the subgroups in turn (at most 3 each), the k chunk staged in
//      slices of KC columns; gate, beta and the mask applied per
//      element (positions from the index tiles); M_IJ stored split, M_II
//      into the f32 scratch tile of subgroup I.
//   2. X_II = (I + M_II)^-1 by forward substitution in f32, one invocation
//      per column (the first 16 of subgroup I, or each several columns
//      where the subgroup is narrower).
//   3. By distance d = 1 .. BT/16 - 1: subgroup I >= d computes
//      X_IJ = -X_II sum_{m=J}^{I-1} M_Im X_mJ, J = I - d (the X_mJ it
//      reads are of smaller distance, finished at the previous barrier).
// A tile of A leaves from the subgroup's f32 scratch tile, rounded to bf16
// by the invocations, 8 columns of a row each; padding rows and the tiles
// above the diagonal are stored as zeros.
//
// fp16 range: k enters exactly for 2^-17 <= |k| <= 65504, M and X as fp16
// pairs. A workgroup that meets a k element, or an M or X value, beyond
// 65504 (or not finite) solves its chunk again with the scalar f32 code of
// the portable kernel (chunk_kkt_solve_scalar.glsl), whose results replace
// everything it stored; the fp16 kernel's shared memory therefore covers
// both layouts. bf16 holds f32's range: that kernel has no fallback and
// keeps to the matrix layout (under 12 KiB at BT = 64, kkt_solve_abi.h).
// All synchronisation is in control flow uniform over the workgroup:
// workgroup barriers, and TK_MMA_SYNC where a subgroup reads back what it
// stored.
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/gdn/kkt_solve_abi.h"
#include "../common/convert.glsl"

TK_DECLARE_SPEC(TK_KKT_SOLVE_SPEC)
TK_DECLARE_PUSH(TK_KKT_SOLVE_PUSH)

const uint RT = BT / 16;        // row blocks, = subgroups
const uint WG = RT * SUBGROUP;  // the host's workgroup size
#include "chunk_kkt_gate.glsl"
#if TK_KKT_BF16
#define TK_MMA_T bfloat16_t
#endif
#include "../common/mma.glsl"
#include "../common/index_tile.glsl"
#if TK_KKT_BF16
shared uvec4 smem[TK_KKT_TC_SMEM_VEC4(BT, KDIM)];
#else
#define TK_KKT_SMEM_VEC4 TK_ABI_MAX(TK_KKT_PS_SMEM_VEC4(BT, KDIM), TK_KKT_TC_SMEM_VEC4(BT, KDIM))
#include "chunk_kkt_solve_scalar.glsl"
#endif

const uint MAXRT = 4;
const uint NT = RT * (RT + 1) / 2;         // tiles of k k^T on and below the diagonal
const uint TPS = (NT + RT - 1) / RT;       // of them per subgroup, at most
const uint MAXTPS = 3;
const uint KC = TK_KKT_KC(KDIM);           // k columns staged per slice
const uint NK = KDIM / KC;
const uint SK = TK_KKT_TC_SK(KDIM);        // k row stride (uvec4)
const uint TS = TK_KKT_TC_TS;              // 16-bit tile row stride (uvec4)
const uint TILE = 16 * TS;                 // uvec4 per 16-bit tile
const uint FS = TK_KKT_TC_FS;              // f32 scratch row stride (uvec4)
const uint X_OFF = TK_KKT_TC_X_OFF;        // X_IJ hi at X_OFF + 2 xblk(I, J) TILE, lo one TILE further
const uint M_OFF = TK_KKT_TC_M_OFF(BT);    // M_IJ (J < I) hi/lo at M_OFF + 2 mblk(I, J) TILE
const uint SC_OFF = TK_KKT_TC_SC_OFF(BT);  // per subgroup: an f32 [16][FS] tile, or a hi/lo pair
const uint SC_SIZE = TK_KKT_TC_SC_SIZE;
const uint IDX_OFF = TK_KKT_TC_IDX_OFF(BT, KDIM);
const uint KS_OFF = 0;                     // the k slice: dead before the tiles are written
const uint PIECES = BT * KC / 8 / WG;      // 16-byte pieces of a k slice per invocation
const uint COLS = (16 + SUBGROUP - 1) / SUBGROUP;  // columns of X_II per invocation

#if !TK_KKT_BF16
shared uint s_bad;  // nonzero: a value beyond fp16 met, the chunk is solved in f32
#endif
uint bad = 0u;      // this invocation's share of it

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

// x rounded to the operand type, as an f32 (split_hi: the hi part, whose
// range is checked).
#if TK_KKT_BF16
float split_lo(float x) { return tk_round_bf16_split(x); }
float split_hi(float x) { return tk_round_bf16_split(x); }
#else
float split_lo(float x) { return float(float16_t(x)); }
float split_hi(float x) {
  if (!(abs(x) <= 65504.0)) bad = 1u;  // beyond fp16, Inf or NaN
  return split_lo(x);
}
#endif

// x (f32 accumulator parts) = hi + lo, both exactly of the operand type;
// stores them as tiles at `off` and `off + TILE` (the conversion exact).
#define TK_STORE_SPLIT(x, off)                                                                      \
  [[unroll]] for (uint p_ = 0; p_ < TK_MMA_CPARTS; ++p_) {                                          \
    TK_MMA_C hi_ = (x)[p_], lo_ = (x)[p_];                                                          \
    [[unroll]] for (int e_ = 0; e_ < hi_.length(); ++e_) {                                          \
      const float v_ = hi_[e_], h_ = split_hi(v_);                                                  \
      hi_[e_] = h_;                                                                                 \
      lo_[e_] = split_lo(v_ - h_);                                                                  \
    }                                                                                               \
    const TK_MMA_C16 hi16_ = TK_MMA_C16(hi_), lo16_ = TK_MMA_C16(lo_);                              \
    coopMatStore(hi16_, smem, TK_MMA_C16_AT(p_, (off), TS), TS, gl_CooperativeMatrixLayoutRowMajor); \
    coopMatStore(lo16_, smem, TK_MMA_C16_AT(p_, (off) + TILE, TS), TS, gl_CooperativeMatrixLayoutRowMajor); \
  }

// acc += A B for A split into fragments ah, al and B split at b_off: three MMAs.
#define TK_MMA_SPLIT_A(acc, ah, al, b_off)                   \
  {                                                          \
    TK_MMA_B bh_[TK_MMA_PARTS], bl_[TK_MMA_PARTS];           \
    TK_MMA_LOAD_B_ROW(bh_, smem, (b_off), TS);               \
    TK_MMA_LOAD_B_ROW(bl_, smem, (b_off) + TILE, TS);        \
    TK_MMA(acc, ah, bh_);                                    \
    TK_MMA(acc, ah, bl_);                                    \
    TK_MMA(acc, al, bh_);                                    \
  }
// The same with A's split tiles at a_off.
#define TK_MMA_SPLIT(acc, a_off, b_off)                  \
  {                                                      \
    TK_MMA_A ah_[TK_MMA_PARTS], al_[TK_MMA_PARTS];       \
    TK_MMA_LOAD_A_ROW(ah_, smem, (a_off), TS);           \
    TK_MMA_LOAD_A_ROW(al_, smem, (a_off) + TILE, TS);    \
    TK_MMA_SPLIT_A(acc, ah_, al_, b_off)                 \
  }

// The uvec4 of A that holds piece p of block (I, J) of value head h's chunk
// at slot0: 32 pieces per block, piece p row p / 2, columns 8 (p % 2)...
uint a_at(uint slot0, uint h, uint I, uint J, uint p) {
  return ((slot0 + I * 16 + p / 2) * pc.H + h) * (BT / 8) + 2 * J + p % 2;
}

// Block (I, J) of A: from the f32 tile at `sc` (rows past the chunk's as
// zeros), or zeros where `zero`; the pieces of lane l are l, l + SUBGROUP, ...
void store_a(uint sc, uint lane, uint I, uint J, bool zero, TkChunk ch, uint slot0, uint h) {
  [[unroll]] for (uint x = 0; x < TK_MMA_MAX_PIECES; ++x) {
    if (!tk_mma_piece(x, lane)) continue;
    const uint piece = lane + x * SUBGROUP, r = piece / 2, hc = piece % 2;
    uvec4 q = uvec4(0u);
    if (!zero && I * 16 + r < ch.rows) {
      const vec4 a = uintBitsToFloat(smem[sc + r * FS + 2 * hc]), b = uintBitsToFloat(smem[sc + r * FS + 2 * hc + 1]);
      q = uvec4(tk_f32_to_bf16(a.x) | (tk_f32_to_bf16(a.y) << 16), tk_f32_to_bf16(a.z) | (tk_f32_to_bf16(a.w) << 16),
                tk_f32_to_bf16(b.x) | (tk_f32_to_bf16(b.y) << 16), tk_f32_to_bf16(b.z) | (tk_f32_to_bf16(b.w) << 16));
    }
    a_4[a_at(slot0, h, I, J, piece)] = q;
  }
}

// Block (I, J) of A from x (f32 accumulator parts), by the subgroups where
// `mine` (uniform per subgroup; every subgroup reaches the macro, for its
// subgroup barriers), through the subgroup's scratch tile at sc once every
// invocation has read what it held. bf16 keeps A's own type in the scratch
// (rows past the chunk's zeroed, the rest rounded to nearest even), fp16
// keeps f32 and rounds as it stores.
#if TK_KKT_BF16
#define TK_STORE_A(x, mine, I, J)                                                                  \
  {                                                                                                \
    TK_MMA_C16 a16_[TK_MMA_PARTS];                                                                 \
    if (mine) {                                                                                    \
      [[unroll]] for (uint p_ = 0; p_ < TK_MMA_CPARTS; ++p_) {                                     \
        TK_MMA_C a_ = (x)[p_];                                                                     \
        [[unroll]] for (int e_ = 0; e_ < a_.length(); ++e_) {                                      \
          const uint i_ = (I) * 16 + tk_cm_pos(row_of[p_][e_]);                                    \
          a_[e_] = i_ < ch.rows ? tk_round_bf16_split(a_[e_]) : 0.0;                               \
        }                                                                                          \
        a16_[p_] = TK_MMA_C16(a_);                                                                 \
      }                                                                                            \
    }                                                                                              \
    TK_MMA_SYNC();                                                                                 \
    if (mine)                                                                                      \
      [[unroll]] for (uint p_ = 0; p_ < TK_MMA_CPARTS; ++p_)                                       \
        coopMatStore(a16_[p_], smem, TK_MMA_C16_AT(p_, sc, TS), TS, gl_CooperativeMatrixLayoutRowMajor); \
    TK_MMA_SYNC();                                                                                 \
    if (mine) {                                                                                    \
      [[unroll]] for (uint x_ = 0; x_ < TK_MMA_MAX_PIECES; ++x_) {                                 \
        const uint q_ = lane + x_ * SUBGROUP;                                                      \
        if (tk_mma_piece(x_, lane))                                                                \
          a_4[a_at(slot0, h, (I), (J), q_)] = smem[sc + (q_ / 2) * TS + q_ % 2];                  \
      }                                                                                            \
    }                                                                                              \
  }
#else
#define TK_STORE_A(x, mine, I, J)                                \
  {                                                              \
    TK_MMA_SYNC();                                               \
    if (mine) TK_MMA_STORE_C_ROW(x, smem, sc, FS);               \
    TK_MMA_SYNC();                                               \
    if (mine) store_a(sc, lane, I, J, false, ch, slot0, h);      \
  }
#endif

void main() {
  const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint x = gl_WorkGroupID.x + pc.group_offset;
  const uint h = x % pc.H, c = x / pc.H;
  const TkChunk ch = tk_gdn_chunk(c, pc.N, pc.T, pc.row_chunks, BT, pc.varlen != 0u);
  const uint kh = h / pc.ratio;
  const uint slot0 = c * BT;

  // The first k slice's loads, in flight during the gate and its sum.
  uvec4 pre[PIECES];
  [[unroll]] for (uint n = 0; n < PIECES; ++n) {
    const uint p = tid + n * WG, i = p / (KC / 8), c8 = p % (KC / 8);
    pre[n] = k_4[((ch.first + min(i, tk_last_row(ch.rows))) * pc.Hg + kh) * (KDIM / 8) + c8];
  }

  // ---- gate, beta and the inclusive cumulative sum of the gate ----------
#if !TK_KKT_BF16
  if (tid == 0) s_bad = 0u;
#endif
  kkt_gate_beta(tid, ch, h);
  for (uint p = tid; p < 128; p += WG) {  // the index tiles
    uvec4 q;
    [[unroll]] for (uint e = 0; e < 4; ++e) q[e] = tk_cm_index_word(p * 4 + e);
    smem[IDX_OFF + p] = q;
  }
  kkt_gate_cumsum(tid, slot0, h);

  // ---- k k^T: tiles t = sg + q RT (row block I, column block J) ----------
  TK_MMA_C acc[MAXTPS][TK_MMA_PARTS];
  [[unroll]] for (uint q = 0; q < MAXTPS; ++q) TK_MMA_FILL(acc[q], 0.0);
  [[unroll]] for (uint s = 0; s < NK; ++s) {
    if (s > 0) barrier();  // the previous slice is read
    [[unroll]] for (uint n = 0; n < PIECES; ++n) {
      const uint p = tid + n * WG, i = p / (KC / 8), c8 = p % (KC / 8);
#if TK_KKT_BF16
      smem[KS_OFF + i * SK + c8] = i < ch.rows ? pre[n] : uvec4(0u);
#else
      smem[KS_OFF + i * SK + c8] = i < ch.rows ? tk_bf16x8_to_f16x8(pre[n], bad) : uvec4(0u);
#endif
    }
    barrier();
    if (s + 1 < NK) {
      [[unroll]] for (uint n = 0; n < PIECES; ++n) {
        const uint p = tid + n * WG, i = p / (KC / 8), c8 = p % (KC / 8);
        pre[n] = k_4[((ch.first + min(i, tk_last_row(ch.rows))) * pc.Hg + kh) * (KDIM / 8) + (s + 1) * (KC / 8) + c8];
      }
    }
    [[unroll]] for (uint q = 0; q < MAXTPS; ++q) {
      const uint t = sg + q * RT;
      const uvec2 ij = tile_of(t);
      if (q < TPS && t < NT) {  // uniform per subgroup
        [[unroll]] for (uint kk = 0; kk < KC / 16; ++kk) {
          TK_MMA_A a[TK_MMA_PARTS];
          TK_MMA_B b[TK_MMA_PARTS];
          TK_MMA_LOAD_A_ROW(a, smem, KS_OFF + ij.x * 16 * SK + kk * 2, SK);
          TK_MMA_LOAD_B_COL(b, smem, KS_OFF + ij.y * 16 * SK + kk * 2, SK);  // k^T
          TK_MMA(acc[q], a, b);
        }
      }
    }
  }
  TK_MMA_C row_of[TK_MMA_PARTS], col_of[TK_MMA_PARTS];
  TK_MMA_LOAD_C_ROW(row_of, smem, IDX_OFF, 4);
  TK_MMA_LOAD_C_ROW(col_of, smem, IDX_OFF + 64, 4);
  [[unroll]] for (uint q = 0; q < MAXTPS; ++q) {
    const uint t = sg + q * RT;
    const uvec2 ij = tile_of(t);
    if (q < TPS && t < NT) {
      [[unroll]] for (uint p = 0; p < TK_MMA_CPARTS; ++p) {
        TK_MMA_C m = acc[q][p];
        [[unroll]] for (int e = 0; e < m.length(); ++e) {
          const uint i = ij.x * 16 + tk_cm_pos(row_of[p][e]), jj = ij.y * 16 + tk_cm_pos(col_of[p][e]);
          m[e] = gated(m[e], i, jj, ch.rows);
        }
        acc[q][p] = m;
      }
    }
  }
  barrier();  // every subgroup is done with the k slice: X, M and the scratch may take its place

  // ---- M below the diagonal (split) and M_II (f32 scratch of subgroup I) --
  const uint sc = SC_OFF + sg * SC_SIZE;
  [[unroll]] for (uint q = 0; q < MAXTPS; ++q) {
    const uint t = sg + q * RT;
    const uvec2 ij = tile_of(t);
    if (q < TPS && t < NT) {
      if (ij.y < ij.x) {
        TK_STORE_SPLIT(acc[q], M_OFF + 2 * mblk(ij.x, ij.y) * TILE);
      } else {
        TK_MMA_STORE_C_ROW(acc[q], smem, SC_OFF + ij.x * SC_SIZE, FS);
      }
    }
  }
  barrier();

  // ---- this subgroup's row of M into registers (its area becomes X's) ----
  TK_MMA_A mh[MAXRT - 1][TK_MMA_PARTS], ml[MAXRT - 1][TK_MMA_PARTS];
  [[unroll]] for (uint m = 0; m + 1 < MAXRT; ++m) {
    if (m < sg) {  // uniform per subgroup
      TK_MMA_LOAD_A_ROW(mh[m], smem, M_OFF + 2 * mblk(sg, m) * TILE, TS);
      TK_MMA_LOAD_A_ROW(ml[m], smem, M_OFF + 2 * mblk(sg, m) * TILE + TILE, TS);
    }
  }

  // ---- X_II by forward substitution (a column per invocation) -----------
  float xs[COLS][16];
  [[unroll]] for (uint cc = 0; cc < COLS; ++cc) {
    const uint j = lane + cc * SUBGROUP;
    if (j < 16) {
      [[unroll]] for (uint i = 0; i < 16; ++i) {
        float s = i == j ? 1.0 : 0.0;  // rows above j come out 0: their sums only see zeros
        // Row i of M_II four elements per load (the same for every lane).
        [[unroll]] for (uint q4 = 0; 4 * q4 < i; ++q4) {
          const vec4 m = uintBitsToFloat(smem[sc + i * FS + q4]);
          [[unroll]] for (uint e = 0; e < 4; ++e)
            if (4 * q4 + e < i) s -= m[e] * xs[cc][4 * q4 + e];
        }
        xs[cc][i] = s;
      }
    }
  }
  barrier();  // M_II is read and every row of M is in registers
  [[unroll]] for (uint cc = 0; cc < COLS; ++cc) {
    const uint j = lane + cc * SUBGROUP;
    if (j < 16) [[unroll]] for (uint i = 0; i < 16; ++i) f32_set(sc, i, j, xs[cc][i]);
  }
  barrier();

  // ---- X_II split into the X area; its A tile; zero tiles above it -------
  {
    TK_MMA_C xd[TK_MMA_PARTS];
    TK_MMA_LOAD_C_ROW(xd, smem, sc, FS);
    TK_STORE_SPLIT(xd, X_OFF + 2 * xblk(sg, sg) * TILE);
    TK_STORE_A(xd, true, sg, sg);
    [[unroll]] for (uint j = 0; j < MAXRT; ++j)
      if (j > sg && j < RT) store_a(sc, lane, sg, j, true, ch, slot0, h);
  }

  // ---- blocks below the diagonal, by distance ---------------------------
  // A loop, not unrolled (one barrier-separated step per distance; unrolled,
  // the bf16 kernel took 1-2% longer).
  [[dont_unroll]] for (uint d = 1; d < RT; ++d) {
    barrier();  // X tiles of distance < d are in place, the scratch tiles read
    const bool mine = sg >= d;  // uniform per subgroup
    const uint J = sg - d;
    if (mine) {
      TK_MMA_C t[TK_MMA_PARTS];
      TK_MMA_FILL(t, 0.0);
      [[unroll]] for (uint m = 0; m + 1 < MAXRT; ++m) {
        if (m >= J && m < sg) TK_MMA_SPLIT_A(t, mh[m], ml[m], X_OFF + 2 * xblk(m, J) * TILE)  // uniform per subgroup
      }
      TK_STORE_SPLIT(t, sc);
    }
    barrier();
    TK_MMA_C xo[TK_MMA_PARTS];
    if (mine) {
      TK_MMA_FILL(xo, 0.0);
      TK_MMA_SPLIT(xo, X_OFF + 2 * xblk(sg, sg) * TILE, sc);
      [[unroll]] for (uint p = 0; p < TK_MMA_CPARTS; ++p) {
        TK_MMA_C n = xo[p];
        [[unroll]] for (int e = 0; e < n.length(); ++e) n[e] = -n[e];
        xo[p] = n;
      }
      if (sg + 1 < RT) TK_STORE_SPLIT(xo, X_OFF + 2 * xblk(sg, J) * TILE);
    }
    TK_STORE_A(xo, mine, sg, J);  // after the product's pair at sc is read
  }

#if !TK_KKT_BF16
  // ---- beyond fp16: the chunk again in f32, over what was stored --------
  if (bad != 0u) atomicOr(s_bad, 1u);
  memoryBarrierBuffer();
  barrier();
  if (s_bad != 0u) kkt_solve_scalar(tid, ch, slot0, h, kh);  // uniform
#endif
}
