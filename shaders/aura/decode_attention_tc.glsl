// SPDX-License-Identifier: MIT
// AURA decode attention on tensor cores: the math, bindings and
// specialization constants of decode_attention.comp (include/tilekernels/
// aura/decode_attention.hpp has both), with S = Q K^T and O += P V as
// 16x16x16 fp16 matrix products (f32 accumulators) composed of the tiles
// the device lists (shaders/common/mma.glsl). Included by
// decode_attention_tc.comp (the staged variant, whose tile loop is
// decode_attention_tc_staged.glsl) and
// decode_attention_tc_lanes.comp.
//
// Geometry (invariants the host relies on):
// - workgroup (x = (seq * kv_heads + kv_head) * splits + split, y = row
//   chunk) of NW = WG / SUBGROUP subgroups owns 16 query rows (ROW_VECS
//   = 4) of one KV head: row r = i * gqa + g as in decode_attention.comp,
//   rows past gqa * q_len padding (never visible, never written). The 16
//   rows are the M dimension of every product, so GQA 4 with one new token
//   fills a quarter of it; the tensor cores have that to spare.
// - the keys some row of the chunk sees, [lo, hi), are cut into blocks of
//   BT = NW * 16 keys from lo; split s takes blocks [nb s / splits,
//   nb (s + 1) / splits). Subgroup w takes keys 16 w .. 16 w + 15 of each
//   block and keeps its own softmax state; the NW states are merged at the
//   end, then decode_attention_finish.glsl publishes the state (splits)
//   or writes the output, as in the CUDA-core kernel.
// - the staged variant's lane work is written for 32 virtual lanes per
//   subgroup: lane l takes v = l + y SUBGROUP for each piece y that
//   exists (mma.glsl's tk_mma_piece; per-piece arrays are sized by the
//   specialization constant TK_MMA_PIECES, so a subgroup of 32 or more
//   holds one), so it runs at any subgroup size.
// - per 16-key tile, a subgroup: decodes K's codes through the codebook
//   into fp16 rows in its shared stage (virtual lane v: key v / 2, dims
//   (v % 2) DIM / 2 ..), S = Q K^T (DIM / 16 products, Q's fragments held
//   since the prologue), decodes V into the same stage, computes the
//   tile's weights (virtual lanes 2r and 2r + 1: row r, 8 keys each; the
//   row maximum through one shuffle), rescales O where its reference maximum
//   moved, then O += P V (DIM / 16 products). The tile after next's page id and the next
//   tile's code words and norms are loaded one tile ahead.
// - numerics: fp16 operands. Q is scaled per row by a power of two into
//   [256, 512) at its largest element (scores rescaled exactly in f32);
//   codebook entries are fp16-rounded (relative 2^-11); the weights
//   e^(z - m) * norm_v enter as e^(z + ln norm_v - m_o) <= e^8, with m_o
//   a reference for z + ln norm_v kept apart from the softmax maximum m:
//   it moves only when a weight would pass e^8, so O is rarely rescaled
//   (and by e^(m_o - m) when the subgroups merge); no norm can overflow
//   fp16. Accurate to ~1e-4 relative: the variant serves bf16 and
//   f16 outputs only (decode_attention.hpp).
// - element positions of accumulators are learnt from a row-index tile
//   (index_tile.glsl), never assumed, except in the lanes variant
//   (TK_TC_LANES: decode_attention_tc_lanes.comp, coded K and V, the
//   device's 16x16x16 tile at subgroups of 32), whose tile loop
//   (decode_attention_tc_lanes.glsl) builds the operands in registers in
//   a known layout; it shares the rest of this file, with Q's
//   and O's dims in its orders (TK_TC_OCOL for O) and 16-aligned
//   tiles.
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/aura/decode_attention_abi.h"
#include "../common/convert.glsl"
#include "../common/softmax_state.glsl"
#include "../common/aura_cache.glsl"
#include "../common/index_tile.glsl"

TK_DECLARE_SPEC(TK_DECODE_ATTENTION_SPEC)
TK_DECLARE_PUSH(TK_DECODE_ATTENTION_PUSH)
#include "../common/mma.glsl"

const uint WG = gl_WorkGroupSize.x;
const uint NW = WG / SUBGROUP;  // subgroups
const uint RV = ROW_VECS;  // 4
const uint ROWS = 4u * RV;  // the chunk's rows: 16 (the lanes variant: 4, 8 or 16)
const uint MR = 16u;        // rows of the matrix tiles (past ROWS: padding)
const uint KT = 16u;        // keys per subgroup tile
#ifndef TK_TC_LANES
#define TK_TC_LANES 0
#endif
// The lanes variant above Dim 128: the subgroups work in pairs, each of a
// pair on one half of the dims (its Q and O fragments, its share of the
// code rows) of the same keys, their partial scores summed through shared
// memory (decode_attention_tc_lanes.glsl; the host's twin of this rule:
// decode_attention_lanes_pairs). Everything per subgroup below counts DL
// dims.
const uint HALVES = TK_TC_LANES != 0 && DIM > 128u ? 2u : 1u;
const uint DL = DIM / HALVES;
const uint BT = NW / HALVES * KT;  // keys per block
const uint DT = DL / 16u;          // 16-dim tiles of a subgroup
const uint KW = DIM * K_BITS / 32u;  // words per key row
const uint VW = DIM * V_BITS / 32u;
const uint LKW = KW / 2u;  // words per lane (half a row)
const uint LVW = VW / 2u;
#if TK_TC_LANES
// decode_attention_tc_lanes.glsl: a lane's share of its subgroup's DL dims
// of a K row (DL / 4 dims, K_SHARE bits, lane j's from bit j K_SHARE) and
// of a V row (DL / 8 dims, lane g's from bit g V_SHARE). A share that may
// start inside a word (its bits not a multiple of 32) is loaded as the LKR
// (LVR) words that cover it wherever it starts and shifted down into LKC
// (LVC) words.
const uint K_SHARE = DL / 4u * K_BITS, V_SHARE = DL / 8u * V_BITS;
const uint LKC = (K_SHARE + 31u) / 32u, LVC = (V_SHARE + 31u) / 32u;
const uint K_GRAIN = (K_SHARE & (0u - K_SHARE)) >= 32u ? 32u : K_SHARE & (0u - K_SHARE);  // gcd(K_SHARE, 32)
const uint V_GRAIN = (V_SHARE & (0u - V_SHARE)) >= 32u ? 32u : V_SHARE & (0u - V_SHARE);
const uint LKR = (K_SHARE + 32u - K_GRAIN + 31u) / 32u, LVR = (V_SHARE + 32u - V_GRAIN + 31u) / 32u;
// Byte tables of 256 entries in 16 copies (entry e's copy c at [e][c]: the
// two indices, not 16 e + c, let the driver address a lookup as e * 64 +
// c * 4 with one multiply-add). Up to 4 bits an entry is a pair of codes
// (2 BITS bits, the lower dim's code low) and holds their fp16 values
// (codebook[e % 2^BITS], codebook[e / 2^BITS]); at 6 and 8 bits it is one
// code, its value in both halves. V's table is s_lut; K's is s_lut as well
// when the widths are equal (the codebook is a function of width and Dim),
// else the queries' scratch, dead during the tile loop (K_OWN_LUT).
shared uint s_lut[256u][16u];
const bool K_OWN_LUT = K_BITS != V_BITS;
// The entries a width's lookups reach (the rest are never filled).
#define TK_TC_LUT_USED(BITS) ((BITS) <= 4u ? 1u << (2u * (BITS)) : 1u << (BITS))
#define TK_TC_LUT_ENTRY(cb, BITS, e)                                                                  \
  ((BITS) <= 4u ? (cb[(e) & (uint(cb.length()) - 1u)] | (cb[((e) >> (BITS)) & (uint(cb.length()) - 1u)] << 16)) \
                : (cb[(e) & (uint(cb.length()) - 1u)] * 0x10001u))
#endif
const uint K_LEVELS = 1u << K_BITS;
const uint V_LEVELS = 1u << V_BITS;
const uint PAIRS = TK_DECODE_ATTENTION_PAIRS(DIM, WG);
// Shared stage of one subgroup, in uvec4: the decoded K or V tile (16 rows
// of DIM fp16, row stride KS), S (16 x 16 f32, stride SS), P (16 x 16 fp16).
const uint KS = TK_DECODE_ATTENTION_TC_KS(DIM);
const uint SS = 5u;
const uint S_OFF = 16u * KS;
const uint P_OFF = S_OFF + 16u * SS;
const uint STAGE = TK_DECODE_ATTENTION_TC_STAGE(DIM);
const uint OS = DIM / 4u + 1u;     // the merged O (16 rows of DIM f32) over the stages
// The lanes variant stages nothing per subgroup: its smem holds the queries,
// then (16 rows, Dim <= 128) the merged O; in pairs (at most 8 rows), during
// the tile loop, the partial scores (NW x 2 x 32 uvec4 <= 16 KS at Dim 256,
// decode_attention_types.hpp checks it).
const uint IDX_OFF = TK_TC_LANES != 0 ? 16u * (HALVES > 1u ? KS : OS) : NW * STAGE;  // the row-index tile (64 uvec4)

#include "../common/decode_attention_io.glsl"

// Where dim d (of a subgroup's DL) sits in O's columns (16 t + column of
// tile t): in order, or in the lanes variant's order
// (decode_attention_tc_lanes.glsl).
#if TK_TC_LANES
#define TK_TC_OCOL(d) (16u * (((d) % (DL / 8u)) / 2u) + (d) / (DL / 8u) + 8u * ((d) % 2u))
#else
#define TK_TC_OCOL(d) (d)
#endif

shared uvec4 smem[IDX_OFF + 64u];
shared vec4 s_scratch[TK_DECODE_ATTENTION_TC_SCRATCH(DIM, TK_TC_LANES)];  // the queries as floats; decode_attention_finish.glsl
shared uint s_cbk[K_LEVELS], s_cbv[V_LEVELS];             // codebooks as fp16 bits
shared float s_kn[NW * KT], s_lvn[NW * KT];               // the tile's K norms, ln V norms
shared float s_alpha[NW * MR];                          // per subgroup and row: O's rescale factor
shared uint s_flag[NW];                                   // per subgroup: some row of O needs rescaling
shared float s_wm[NW * MR], s_wl[NW * MR];            // the subgroups' states
shared float s_mf[MR], s_lf[MR];                        // per row: the workgroup's (m, l) over the subgroups
shared float s_qf[MR];                                  // per row: 2^e undoing Q's fp16 scaling
shared float s_qc[MR];                                  // per row: scale * <q, centre> (K_CENTRED)
shared float s_qcp[K_CENTRED != 0u ? WG : 1u];          // the invocations' parts of <q, centre>
shared float s_red[WG];

// Code `j` (0 <= j < DIM / 2) of a lane's half row held in w[0 .. n).
#define TK_CODE(w, n, j, BITS)                                                                      \
  ((((j) * (BITS)) & 31u) + (BITS) <= 32u ? (w[((j) * (BITS)) >> 5] >> (((j) * (BITS)) & 31u)) & ((1u << (BITS)) - 1u) \
                                          : tk_code_window(w[((j) * (BITS)) >> 5], w[min((((j) * (BITS)) >> 5) + 1u, (n) - 1u)], \
                                                           ((j) * (BITS)) & 31u, (BITS)))

// A lane's half row of codes as fp16 codebook values into the stage (row
// `key`, dims half * DIM / 2 ..).
#define TK_DECODE_ROW(w, n, BITS, cb, stage, key, hlf)                                      \
  [[unroll]] for (uint c = 0; c < DIM / 16u; ++c) {                                          \
    uvec4 h;                                                                                 \
    [[unroll]] for (uint i = 0; i < 4u; ++i) {                                               \
      const uint j = 8u * c + 2u * i;                                                        \
      h[i] = cb[TK_CODE(w, n, j, BITS)] | (cb[TK_CODE(w, n, j + 1u, BITS)] << 16);           \
    }                                                                                        \
    smem[(stage) + (key) * KS + (hlf) * (DIM / 16u) + c] = h;                               \
  }

// n words of cache row `row` (ROWW words) from word `at` into dst, in loads
// of VEC words (4 or 2: `at`, n and ROWW multiples of it; else 1, and words
// past the row are its last one again).
#define TK_LOAD_WORDS(dst, n, ROWW, words, words2, words4, row, at, VEC)                      \
  {                                                                                          \
    const uint at_ = (row) * (ROWW) + (at);                                                 \
    if ((VEC) == 4u) {                                                                       \
      [[unroll]] for (uint i = 0; i < (n) / 4u; ++i) {                                       \
        const uvec4 v_ = words4[at_ / 4u + i];                                               \
        dst[4u * i] = v_.x;                                                                    \
        dst[4u * i + 1u] = v_.y;                                                               \
        dst[4u * i + 2u] = v_.z;                                                               \
        dst[4u * i + 3u] = v_.w;                                                               \
      }                                                                                      \
    } else if ((VEC) == 2u) {                                                                \
      [[unroll]] for (uint i = 0; i < (n) / 2u; ++i) {                                       \
        const uvec2 v_ = words2[at_ / 2u + i];                                               \
        dst[2u * i] = v_.x;                                                                    \
        dst[2u * i + 1u] = v_.y;                                                               \
      }                                                                                      \
    } else {                                                                                 \
      [[unroll]] for (uint i = 0; i < (n); ++i) dst[i] = words[(row) * (ROWW) + min((at) + i, (ROWW) - 1u)]; \
    }                                                                                        \
  }
// The widest load of a lane's half row of n words in the staged loop.
#define TK_HALF_VEC(n) ((n) % 4u == 0u ? 4u : (n) % 2u == 0u ? 2u : 1u)

// Row `row`'s merge over the subgroups' states (s_wm, s_wl; the two of a
// pair hold the same state, taken once): M their maximum; the calling
// subgroup's O factor e^(m_o - M) into s_alpha (its reference m_o is -inf
// where no key had a non-zero weight, and then O is 0); subgroup 0 also
// writes the workgroup's (M, L = sum l e^(m - M)) into s_mf, s_lf.
#define TK_TC_ROW_MERGE(row, mo)                                                               \
  {                                                                                            \
    float big_m_ = TK_NEG_INF;                                                                 \
    for (uint w_ = 0; w_ < NW; w_ += HALVES) big_m_ = tk_softmax_max(big_m_, s_wm[w_ * MR + (row)], s_wl[w_ * MR + (row)]); \
    s_alpha[warp * MR + (row)] = (mo) == TK_NEG_INF || big_m_ == TK_NEG_INF ? 0.0 : exp((mo) - big_m_); \
    if (warp == 0u) {                                                                          \
      float l_ = 0.0;                                                                          \
      for (uint w_ = 0; w_ < NW; w_ += HALVES) l_ += s_wl[w_ * MR + (row)] * tk_softmax_weight(s_wm[w_ * MR + (row)], s_wl[w_ * MR + (row)], big_m_); \
      s_mf[row] = big_m_;                                                                      \
      s_lf[row] = l_;                                                                          \
    }                                                                                          \
  }

// O's rows scaled by the calling subgroup's factors in s_alpha (element i
// of part p sits in row tk_cm_pos(row_of[p][i])).
#define TK_TC_RESCALE_O()                                                   \
  [[unroll]] for (uint p_ = 0; p_ < TK_MMA_RM * TK_MMA_RN; ++p_)             \
    [[unroll]] for (uint i_ = 0; i_ < uint(row_of[p_].length()); ++i_) {     \
      const float a_ = s_alpha[warp * MR + tk_cm_pos(row_of[p_][i_])];       \
      [[unroll]] for (uint t_ = 0; t_ < DT; ++t_) o_acc[t_][p_][i_] *= a_;   \
    }

// The power of two 2^e that brings a row's largest magnitude m into
// [256, 512) (1 for 0, infinities and NaN).
float q_pow2(float m) {
  int ex = 0;
  frexp(m, ex);  // m = f 2^ex, f in [0.5, 1)
  ex = m > 0.0 && !isinf(m) && !isnan(m) ? clamp(ex - 9, -100, 100) : 0;
  return exp2(float(ex));
}

void main() {
  const uint inv = gl_LocalInvocationID.x;
  const uint warp = gl_SubgroupID, lane = inv % SUBGROUP;  // full subgroups (the pipeline requires its size)
  const uint x = gl_WorkGroupID.x + pc.group_offset;
  const uint unit = x / pc.splits, split = x % pc.splits;
  const uint seq = unit / pc.kv_heads, kvh = unit % pc.kv_heads;
  const uint chunk = gl_WorkGroupID.y;
  const uint group = unit * gl_NumWorkGroups.y + chunk;
  const uint q_heads = pc.kv_heads * pc.gqa;
  const uint row0 = chunk * ROWS;
  const int seq_len = seq_lens[seq];
  const uint stage = warp * STAGE;

  // The codebooks' entries (at clamped indices) are loaded in straight-line
  // code ahead of every store, so that their round trips run with
  // seq_len's rather than one after another; stored below. The queries'
  // loads stay below: issued here, for every row of the tile, they slow
  // the unsplit steps of many workgroups
  // (bench/notes/2026-12-aura-short-context-probes.md).
  const uint CBK_PI = (K_LEVELS + WG - 1u) / WG, CBV_PI = (V_LEVELS + WG - 1u) / WG;
  float cbk[CBK_PI], cbv[CBV_PI];
  [[unroll]] for (uint k = 0; k < CBK_PI; ++k) cbk[k] = tables[K_CODEBOOK_AT + min(inv + k * WG, K_LEVELS - 1u)];
  [[unroll]] for (uint k = 0; k < CBV_PI; ++k) cbv[k] = tables[V_CODEBOOK_AT + min(inv + k * WG, V_LEVELS - 1u)];

  // Centred keys: each row's scores gain scale * <q, centre>; WG / MR
  // invocations per row sum strided dims of it here, with the first loads
  // (q read straight from its view), and the row's sum is taken in order
  // with Q's scale below.
  if (K_CENTRED != 0u) {
    const uint per = WG / MR, r = inv / per, at = centre_at(seq, kvh);
    float acc = 0.0;
    if (r < ROWS && row0 + r < pc.gqa * pc.q_len)
      for (uint d = inv % per; d < DIM; d += per) acc = fma(load_q(q_element(seq, row0 + r, kvh, d)), k_centre[at + d], acc);
    s_qcp[inv] = acc;
  }
  [[unroll]] for (uint k = 0; k < CBK_PI; ++k)
    if (inv + k * WG < K_LEVELS) s_cbk[inv + k * WG] = tk_f32_to_f16(cbk[k]);
  [[unroll]] for (uint k = 0; k < CBV_PI; ++k)
    if (inv + k * WG < V_LEVELS) s_cbv[inv + k * WG] = tk_f32_to_f16(cbv[k]);
  for (uint i = inv; i < 64u; i += WG)
    smem[IDX_OFF + i] = uvec4(tk_cm_index_word(4u * i), tk_cm_index_word(4u * i + 1u), tk_cm_index_word(4u * i + 2u),
                              tk_cm_index_word(4u * i + 3u));

  // The queries, rotated once (as decode_attention.comp) and scaled, then
  // per row a power of two 2^-e that brings the largest into [256, 512),
  // as fp16 rows in subgroup 0's stage (row stride KS). Invocation inv
  // ends with QPI consecutive elements of row inv / QL in qv. Where the QL
  // invocations of a row share a subgroup and the rotation is a Hadamard
  // transform (or none), they hold them from the start and transform
  // them through shuffles (Q_SHUFFLE: no barrier); else the rows go
  // through the scratch.
  const uint QPI = MR * DIM / WG, QL = WG / MR;
  const bool Q_SHUFFLE = K_ROT != 2u && SUBGROUP >= QL;
  float qv[QPI];
  if (Q_SHUFFLE) {
    // The row's loads under one branch, from one address, so that they are
    // in flight together (a branch and an address per element let each
    // load wait for the one before it).
    const uint r = inv / QL, rg = row0 + r, d0 = inv % QL * QPI;
    [[unroll]] for (uint k = 0; k < QPI; ++k) qv[k] = 0.0;
    if (r < ROWS && rg < pc.gqa * pc.q_len) {
      const uint at = q_element(seq, rg, kvh, d0);
      [[unroll]] for (uint k = 0; k < QPI; ++k) qv[k] = load_q(at + k);
    }
    if (K_ROT == 1u)
      [[unroll]] for (uint k = 0; k < QPI; ++k) qv[k] *= tables[K_ROTATION_AT + d0 + k];
  } else {
    for (uint e = inv; e < MR * DIM; e += WG) {
      const uint r = e / DIM, d = e % DIM, rg = row0 + r;
      float v = 0.0;
      if (r < ROWS && rg < pc.gqa * pc.q_len) v = load_q(q_element(seq, rg, kvh, d));
      if (K_ROT == 1u) v *= tables[K_ROTATION_AT + d];
      SF(e) = v;
    }
  }
  const int len = clamp(seq_len, 0, int(pc.max_pages * PAGE_TOKENS));

  // Each row's visible keys [first, end); each piece's row (v / 2) kept
  // for the weights; [lo, hi) over the chunk.
  int lo = len, hi = 0;
#if TK_TC_LANES
  int rf[2] = int[2](0, 0), re[2] = int[2](0, 0);  // rows lane / 4 and lane / 4 + 8
#else
  int row_first[TK_MMA_PIECES], row_end[TK_MMA_PIECES];
#endif
  [[unroll]] for (uint r = 0; r < MR; ++r) {
    const uint rg = row0 + r;
    int f = 0, e = 0;
    if (r < ROWS && rg < pc.gqa * pc.q_len) {
      const int pos1 = len - int(pc.q_len) + int(rg / pc.gqa) + 1;
      e = clamp(pos1, 0, len);
      f = pc.window != 0u ? clamp(pos1 - int(pc.window), 0, e) : 0;
    }
#if TK_TC_LANES
    if (r % 8u == lane / 4u) {
      rf[r / 8u] = f;
      re[r / 8u] = e;
    }
#else
    [[unroll]] for (uint y = 0; y < TK_MMA_PIECES; ++y)
      if (r == ((lane + y * SUBGROUP) & 31u) / 2u) {
        row_first[y] = f;
        row_end[y] = e;
      }
#endif
    if (f < e) {
      lo = min(lo, f);
      hi = max(hi, e);
    }
  }
  if (lo >= hi) lo = hi = 0;
  const uint nb = (uint(hi) - (TK_TC_LANES != 0 ? uint(lo) & ~15u : uint(lo)) + BT - 1u) / BT;
  const uint b0 = nb * split / pc.splits, b1 = nb * (split + 1u) / pc.splits;
  const uint half_ = warp % HALVES;  // the subgroup's half of the dims
#if TK_TC_LANES
#include "decode_attention_tc_lanes_first.glsl"
#endif

  barrier();
#if TK_TC_LANES
  // An entry per invocation, so its codebook lookups run once, not once per
  // copy; its 16 copies start at column e % 16, spreading a store's banks.
  [[unroll]] for (uint k = 0; k < (TK_TC_LUT_USED(V_BITS) + WG - 1u) / WG; ++k) {
    const uint e = inv + k * WG;
    if (e < TK_TC_LUT_USED(V_BITS)) {
      const uint v = TK_TC_LUT_ENTRY(s_cbv, V_BITS, e);
      [[unroll]] for (uint c = 0; c < 16u; ++c) s_lut[e][(c + e) % 16u] = v;
    }
  }
#endif
  const float q_scale = K_ROT == 1u ? pc.scale * pc.inv_sqrt_dim : pc.scale;
  float qmax = 0.0;
  if (Q_SHUFFLE) {
    if (K_ROT == 1u) {
      // H's butterflies over the bits of k, then over those of inv % QL.
      TK_FWHT_REGS(qv, QPI)
      TK_FWHT_SHUFFLE(float, qv, QPI, inv, 1u, QL)
    }
    [[unroll]] for (uint k = 0; k < QPI; ++k) {
      qv[k] *= q_scale;
      qmax = max(qmax, abs(qv[k]));
    }
    [[unroll]] for (uint b = 1u; b < QL; b <<= 1) qmax = max(qmax, subgroupShuffleXor(qmax, b));
  } else {
    if (K_ROT == 1u) TK_FWHT_SHARED(SF, ROWS, DIM, inv, WG)
    [[unroll]] for (uint k = 0; k < QPI; ++k) {
      const uint e = inv * QPI + k, r = e / DIM, d = e % DIM;
      float v = 0.0;
      if (K_ROT == 2u) {
        for (uint j = 0; j < DIM; ++j) v = fma(tables[K_ROTATION_AT + d * DIM + j], SF(r * DIM + j), v);
      } else {
        v = SF(r * DIM + d);
      }
      qv[k] = v * q_scale;
      qmax = max(qmax, abs(qv[k]));
    }
    s_red[inv] = qmax;
    barrier();  // also: the scratch's queries are read
    if (inv < MR) {
      float m = 0.0;
      for (uint i = 0; i < QL; ++i) m = max(m, s_red[inv * QL + i]);
      s_qf[inv] = q_pow2(m);
    }
  }
  // The row's 2^e (Q_SHUFFLE: every invocation of the row has its maximum).
  const float q_pow = Q_SHUFFLE ? q_pow2(qmax) : 1.0;
  if (Q_SHUFFLE && inv % QL == 0u) s_qf[inv / QL] = q_pow;
#if TK_TC_LANES
  if (K_OWN_LUT)
    [[unroll]] for (uint i = inv; i < TK_TC_LUT_USED(K_BITS) * 16u; i += WG) SF(i) = uintBitsToFloat(TK_TC_LUT_ENTRY(s_cbk, K_BITS, i / 16u));
#endif
  if (K_CENTRED != 0u && inv < MR) {
    float c = 0.0;
    for (uint i = 0; i < QL; ++i) c += s_qcp[inv * QL + i];
    s_qc[inv] = c * pc.scale;
  }
  if (!Q_SHUFFLE) barrier();  // s_qf
#if TK_TC_LANES
  // Scaled into fp16 pairs straight from the registers: in the half of the
  // row of dims DL c .., Q's column 16 t + k holds dim
  // (DL / 4) ((k % 8) / 2) + 4 t + 2 (k / 8) + k % 2 of the half
  // (decode_attention_tc_lanes.glsl), so dims d, d + 1 (d even, e = d % DL)
  // are the halves of word DL c / 2 + 8 t + 4 ((e / 2) % 2) + e / (DL / 4)
  // of the row, with t = (e % (DL / 4)) / 4. Converted by the device, as
  // P is (decode_attention_tc_lanes.glsl): the scaled queries are below 512
  // in magnitude (q_pow2), well inside fp16's range, and the portable
  // block's exact conversion costs instructions in every subgroup's
  // prologue.
  {
    const uint r = inv * QPI / DIM, d0 = inv * QPI % DIM;
    const float f = 1.0 / (Q_SHUFFLE ? q_pow : s_qf[r]);
    [[unroll]] for (uint k = 0; k < QPI; k += 2u) {
      const uint d = d0 + k, e = d % DL;
      const uint w = d / DL * (DL / 2u) + 8u * ((e % (DL / 4u)) / 4u) + 4u * ((e / 2u) % 2u) + e / (DL / 4u);
      smem[r * KS + w / 4u][w % 4u] = packFloat2x16(f16vec2(qv[k] * f, qv[k + 1u] * f));
    }
  }
#else
  {
    const uint r = inv * QPI / DIM, d0 = inv * QPI % DIM;
    const float f = 1.0 / (Q_SHUFFLE ? q_pow : s_qf[r]);
    [[unroll]] for (uint k = 0; k < QPI; k += 2u) {
      const uint w = 4u * r * KS + (d0 + k) / 2u;
      smem[w / 4u][w % 4u] = tk_f32_to_f16(qv[k] * f) | (tk_f32_to_f16(qv[k + 1u] * f) << 16);
    }
  }
#endif
  barrier();
  TK_MMA_A qa[DT][TK_MMA_PARTS];
  [[unroll]] for (uint t = 0; t < DT; ++t) TK_MMA_LOAD_A_ROW(qa[t], smem, half_ * (DL / 8u) + 2u * t, KS);
  TK_MMA_C row_of[TK_MMA_PARTS];  // element i of part p sits in row tk_cm_pos(row_of[p][i])
  TK_MMA_LOAD_C_ROW(row_of, smem, IDX_OFF, 4u);
  TK_MMA_C o_acc[DT][TK_MMA_PARTS];
  [[unroll]] for (uint t = 0; t < DT; ++t) TK_MMA_FILL(o_acc[t], 0.0);
  barrier();  // the queries are read before the stages are written

#if TK_TC_LANES
#include "decode_attention_tc_lanes.glsl"
#else
#include "decode_attention_tc_staged.glsl"
#endif
  barrier();
  // The state as decode_attention_finish.glsl takes it.
  vec4 o_fin[RV * PAIRS * 2u], m_fin[RV], l_fin[RV];
#if TK_TC_LANES
  // Chunks of 4 or 8 rows, 4 rows per pass: each subgroup stores its scaled
  // rows 4 r .. 4 r + 3 (held by lanes 16 r .. 16 r + 15, elements 0 .. 3)
  // into the dead byte table as part[subgroup][row % 4][column'] (NW x 4 x
  // DL <= 4096 words: DL is at most 128, the subgroups at most 8), then the
  // invocations that hold output pairs sum their dims over the subgroups of
  // their half. column' swizzles the column's bits 2..4 (TK_TC_OSUM_COL)
  // so that neither the stores (4 rows at once) nor the sums (a subgroup's
  // pairs at once) meet in a bank. 16 rows (Dim <= 128: pairs take at most
  // 8) take the subgroup-serial sum (four passes kept every accumulator
  // live and spilled).
#define TK_TC_OSUM_COL(k, col) ((col) ^ ((((col) >> 5) & 3u) << 2) ^ ((k) << 3))
// Word c (a swizzled column) of part[w][k], as the table's entry and copy:
// DL is a multiple of 16, so the part's rows of the table are whole, and a
// sum over subgroups addresses each with a constant offset.
#define TK_TC_OSUM(w, k, c) s_lut[((w) * 4u + (k)) * (DL / 16u) + (c) / 16u][(c) % 16u]
  if (RV <= 2u) {
    [[unroll]] for (uint i = 0; i < RV * PAIRS * 2u; ++i) o_fin[i] = vec4(0.0);
    [[unroll]] for (uint r = 0; r < RV; ++r) {
      if (r > 0u) barrier();  // the previous pass's sums have read the table
      if (lane / 16u == r) {
        const uint k = (lane / 4u) % 4u;
        const float a = s_alpha[warp * MR + 4u * r + k];
        [[unroll]] for (uint t = 0; t < DT; ++t)
          [[unroll]] for (uint e = 0; e < 4u; ++e) {
            const uint c = TK_TC_OSUM_COL(k, 16u * t + 2u * (lane % 4u) + (e & 1u) + 8u * (e >> 1));
            TK_TC_OSUM(warp, k, c) = floatBitsToUint(o_acc[t][0][e] * a);
          }
      }
      barrier();
      [[unroll]] for (uint n = 0; n < PAIRS; ++n) {
        const uint p = inv + n * WG;
        if (p < DIM / 2u)
          [[unroll]] for (uint h = 0; h < 2u; ++h)
            [[unroll]] for (uint k = 0; k < 4u; ++k) {
              float o = 0.0;
              const uint d = 2u * p + h, c = TK_TC_OSUM_COL(k, TK_TC_OCOL(d % DL));
              [[unroll]] for (uint w = 0; w < NW / HALVES; ++w) o += uintBitsToFloat(TK_TC_OSUM(w * HALVES + d / DL, k, c));
              o_fin[(r * PAIRS + n) * 2u + h][k] = o;
            }
      }
    }
#undef TK_TC_OSUM
#undef TK_TC_OSUM_COL
  } else
#endif
  {
    TK_TC_RESCALE_O();
    // Subgroup w adds what subgroups 0 .. w-1 left, then (after a barrier:
    // every invocation of it has read the sum) stores its own.
    for (uint w = 0; w < NW; ++w) {
      if (warp == w && w > 0u)
        [[unroll]] for (uint t = 0; t < DT; ++t) {
          TK_MMA_C prev[TK_MMA_PARTS];
          TK_MMA_LOAD_C_ROW(prev, smem, 4u * t, OS);
          [[unroll]] for (uint p = 0; p < TK_MMA_RM * TK_MMA_RN; ++p)
            [[unroll]] for (uint i = 0; i < uint(prev[p].length()); ++i) o_acc[t][p][i] += prev[p][i];
        }
      barrier();
      if (warp == w)
        [[unroll]] for (uint t = 0; t < DT; ++t) TK_MMA_STORE_C_ROW(o_acc[t], smem, 4u * t, OS);
      barrier();
    }

    [[unroll]] for (uint n = 0; n < PAIRS; ++n) {
      const uint p = min(inv + n * WG, DIM / 2u - 1u);
      [[unroll]] for (uint h = 0; h < 2u; ++h) {
        const uint d = 2u * p + h;
        [[unroll]] for (uint r = 0; r < RV; ++r)
          [[unroll]] for (uint k = 0; k < 4u; ++k)
            o_fin[(r * PAIRS + n) * 2u + h][k] = uintBitsToFloat(smem[(4u * r + k) * OS + TK_TC_OCOL(d) / 4u][TK_TC_OCOL(d) % 4u]);
      }
    }
  }
  [[unroll]] for (uint r = 0; r < RV; ++r)
    [[unroll]] for (uint k = 0; k < 4u; ++k) {
      m_fin[r][k] = s_mf[4u * r + k];
      l_fin[r][k] = s_lf[4u * r + k];
    }
#define TK_FINISH_SHUFFLE 1
#include "../common/decode_attention_finish.glsl"
}
