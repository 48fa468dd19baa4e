// SPDX-License-Identifier: MIT
// Gated DeltaNet inter-chunk state recurrence on the device's
// cooperative-matrix tiles (common/mma.glsl): the body of
// chunk_state_bf16.comp (bf16 operands, 16x16x16 at subgroups of 32) and of
// chunk_state_fp16.comp (TK_STATE_FP16 1: fp16 operands on the device's
// tile and subgroup size). Same math, layouts and rounding points as
// chunk_state.comp:
//   h_c = bf16(S);  v_new = u - w bf16(S);  S = exp(g_last) S + k^T bf16(v_new' exp(g_last - g_i)).
//
// Geometry (the host relies on it): one workgroup per (sequence n, value
// head h, BV columns of V), x = (n H + h) (V / BV) + slice, of NSG =
// (BT / 16)(BV / 16) subgroups of SUBGROUP invocations. Subgroup s owns the
// v_new tile (s / (BV/16), s % (BV/16)) and the K / BT state tiles s K/BT ..
// (row tile, column tile in row-major order), whose f32 accumulators hold S
// for the whole sequence. Per chunk:
//   stage  w and k (registers loaded during the previous chunk) and the
//          rows' factors exp(g_last - g_i) into shared memory, k rows past
//          the sequence end zeroed; bf16(S) into shared memory transposed
//          ([BV][K]: the B operand of w S, and whole 16-byte rows of h);
//   barrier, then issue the next chunk's loads (w, k, g, and this
//          subgroup's u tile, into registers), so that they are in flight
//          while this chunk computes; the previous chunk's v_new tile and
//          h_c read out of shared memory into registers; u through shared
//          memory into an accumulator; v_new = u - w bf16(S); then the v_new
//          and h_c pieces stored to memory (a store waits for its shared
//          load, so it follows the products instead of delaying them); the
//          operand bf16(v_new exp(g_last - g_i)) (rows past the end selected
//          to 0) into shared memory;
//   barrier, S = exp(g_last) S + k^T operand;
//   barrier (the next stage overwrites what this chunk read); bf16(v_new)
//          into the subgroup's tile of the operand area.
// u enters and v_new leaves through that tile in 32 pieces of 16 bytes
// (piece q: row q / 2, half q % 2; lane l takes pieces l, l + SUBGROUP, ...),
// because fragment loads and stores straight from and to storage buffers
// are slow on NVIDIA's driver; within a subgroup, TK_MMA_SYNC orders the
// pieces and the fragment accesses of the same tile. Elements of
// accumulators learn their row from an index tile.
// Rows past the sequence end in w and u are padding slots holding anything:
// they reach only v_new's padding rows (stored to padding slots) and
// operand rows that the select zeroes. u and v_new may be the same memory:
// a piece of u is loaded (one chunk ahead) by the invocation that later
// stores the same piece of v_new.
//
// fp16 range: every fp16 operand is a bf16 value times a power of two
// (exact) that brings the largest finite magnitude of its group into
// [2^14, 2^15), and each product is scaled back in f32. Groups: w, k and
// bf16(S), one factor each per chunk (their maxima gathered by shared
// atomics before the previous chunk's last barrier, so no barrier is
// added); each 16 x 16 tile of u, of v_new and of the update's operand, by
// the subgroup that owns it (u's with w's, k's and S's in one subgroup
// reduction, v_new's and the operand's in another: the reductions lie on
// the chunk's dependency chain). Padding rows are left out of the maxima, and
// so are Inf and NaN, which pass through as in f32. Only values under
// 2^-31 of their group's largest lose bits (fp16 subnormals): an error
// below 2^-39 of that largest, far under the outputs' bf16 rounding.
// All synchronisation is in control flow uniform over the workgroup.
#ifndef TK_STATE_FP16
#define TK_STATE_FP16 0
#endif
#define TK_STATE_U_VOLATILE
#include "chunk_state_io.glsl"
#if !TK_STATE_FP16
#define TK_MMA_T bfloat16_t
#endif
#include "../common/mma.glsl"
#include "../common/index_tile.glsl"

const uint RT = BT / 16;               // row tiles of a chunk
const uint CTV = BV / 16;              // column tiles of the slice
const uint NSG = RT * CTV;             // subgroups: one v_new tile each
const uint WG = NSG * SUBGROUP;
const uint SPT = KDIM / BT;            // state tiles per subgroup
const uint MAX_SPT = 8;
const uint SW = KDIM / 8 + 1;          // row stride of w, k and S^T (uvec4, one of padding)
const uint SVS = BV / 8 + 1;           // row stride of the operand (uvec4)
const uint W_OFF = 0, K_OFF = BT * SW, HST_OFF = 2 * BT * SW, VS_OFF = HST_OFF + BV * SW;
const uint SMEM_VEC4 = VS_OFF + BT * SVS;
const uint PW = BT * (KDIM / 8) / WG;  // 16-byte pieces of w (and of k) per invocation (the host keeps it whole)
const uint MAX_PW = 16;
const uint HN = BV * (KDIM / 8);       // 16-byte pieces of h_c
const uint PH = (HN + WG - 1) / WG;    // of them per invocation
const uint MAX_PH = 16;
const uint GPI = (BT + WG - 1) / WG;   // rows of g per invocation
const uint MAX_GPI = 2;

shared uvec4 smem[SMEM_VEC4];
shared float s_f[BT];  // exp(g_last - g_i): row i's factor in the update's operand

uvec4 pre_w[MAX_PW], pre_k[MAX_PW];
float pre_g[MAX_GPI], pre_glast;
uvec4 pre_u[TK_MMA_MAX_PIECES];  // this lane's pieces of the subgroup's u tile

#if TK_STATE_FP16
shared uint s_max[2][3];           // by chunk parity: the largest |w|, |k| and |bf16(S)| (f32 bits)
shared int s_shift_op[NSG];        // per tile of the operand (subgroup order): its shift

// The shift s that brings a largest magnitude m into [2^14, 2^15) (0 for
// m = 0), clamped so that 2^s and 2^-s are normal f32 and the largest bf16
// value stays within fp16.
int range_shift(float m) { return m == 0.0 ? 0 : clamp(141 - int(floatBitsToUint(m) >> 23), -112, 112); }
float pow2(int s) { return uintBitsToFloat(uint(s + 127) << 23); }

// The largest finite magnitude among 8 packed bf16 values.
float bf16x8_max(uvec4 q) {
  uint m = 0u;
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    const uint lo = q[i] & 0x7fffu, hi = (q[i] >> 16) & 0x7fffu;
    m = max(m, max(lo < 0x7f80u ? lo : 0u, hi < 0x7f80u ? hi : 0u));
  }
  return uintBitsToFloat(m << 16);
}
// m raised to the largest finite |x| among this invocation's elements of
// the state tiles S (not rounded: bf16 rounding lifts a value scaled below
// 2^15 to 2^15 at most, still within fp16).
#define TK_STATE_MAX(S, m)                                                                                 \
  [[unroll]] for (uint j_ = 0; j_ < MAX_SPT; ++j_)                                                         \
    if (j_ < SPT)                                                                                          \
      [[unroll]] for (uint p_ = 0; p_ < TK_MMA_CPARTS; ++p_)                                               \
        [[unroll]] for (int e_ = 0; e_ < S[j_][p_].length(); ++e_) m = max(m, tk_finite_abs(S[j_][p_][e_]))

// 8 packed bf16 values times 2^s, as fp16.
uvec4 to_operand(uvec4 q, int s) {
  const float f = pow2(s);
  uvec4 r;
  [[unroll]] for (uint i = 0; i < 4; ++i) r[i] = packHalf2x16(tk_bf16_pair(q[i]) * f);
  return r;
}
// 8 packed fp16 values of a group with shift s, back to bf16.
uvec4 from_operand(uvec4 q, int s) {
  const float f = pow2(-s);
  uvec4 r;
  [[unroll]] for (uint i = 0; i < 4; ++i) r[i] = tk_pack_bf16_split(unpackHalf2x16(q[i]) * f);
  return r;
}

// The largest magnitudes of what a chunk stages from registers, in one
// subgroup reduction: w (rows before `rows`) and k among the loaded pieces
// and bf16(S) (ms, this invocation's) into the atomics of chunk parity
// `par`; returned, the shift of u's tile (rows before `rows`), which only
// this subgroup stages.
int gather_maxima(uint rows, uint par, uint rt, uint lane, float ms) {
  float mw = 0.0, mk = 0.0, mu = 0.0;
  [[unroll]] for (uint n = 0; n < MAX_PW; ++n) {
    if (n < PW) {
      if ((gl_LocalInvocationID.x + n * WG) / (KDIM / 8) < rows) mw = max(mw, bf16x8_max(pre_w[n]));
      mk = max(mk, bf16x8_max(pre_k[n]));
    }
  }
  [[unroll]] for (uint xp = 0; xp < TK_MMA_MAX_PIECES; ++xp) {
    const uint q = lane + xp * SUBGROUP;
    if (tk_mma_piece(xp, lane) && rt * 16 + q / 2 < rows) mu = max(mu, bf16x8_max(pre_u[xp]));
  }
  const vec4 m = subgroupMax(vec4(mw, mk, ms, mu));
  if (subgroupElect()) {
    atomicMax(s_max[par][0], floatBitsToUint(m.x));
    atomicMax(s_max[par][1], floatBitsToUint(m.y));
    atomicMax(s_max[par][2], floatBitsToUint(m.z));
  }
  return range_shift(m.w);
}
#define TK_TO_OPERAND(q, s) to_operand(q, s)
#define TK_FROM_OPERAND(q, s) from_operand(q, s)
#else
#define TK_TO_OPERAND(q, s) (q)
#define TK_FROM_OPERAND(q, s) (q)
#endif
#include "chunk_state_load.glsl"

// Where piece q of this subgroup's operand tile (rt, vc) lies in shared
// memory, and in u / v_new at row slot `slot0` of the chunk.
uint piece_smem(uint rt, uint vc, uint q) { return VS_OFF + (rt * 16 + q / 2) * SVS + vc * 2 + q % 2; }
uint piece_mem(uint slot0, uint h, uint rt, uint v0, uint vc, uint q) {
  return ((slot0 + rt * 16 + q / 2) * pc.H + h) * (VDIM / 8) + (v0 + vc * 16) / 8 + q % 2;
}

void main() {
  const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint slices = VDIM / BV;
  const uint x = gl_WorkGroupID.x + pc.group_offset;
  const uint slice = x % slices, h = (x / slices) % pc.H, n = x / slices / pc.H;
  const uint kh = h / pc.ratio, v0 = slice * BV;
  const TkSeq seq = tk_gdn_seq(n, pc.T, pc.row_chunks, pc.varlen != 0u);
  const uint rt = sg / CTV, vc = sg % CTV;  // this subgroup's v_new tile
  const uint tile_off = VS_OFF + rt * 16 * SVS + vc * 2;

  // Index tiles (in the w area, before the first staging).
  for (uint p = tid; p < 64; p += WG) {
    uvec4 q;
    [[unroll]] for (uint e = 0; e < 4; ++e) q[e] = tk_cm_index_word(p * 4 + e);
    smem[W_OFF + p] = q;
  }
#if TK_STATE_FP16
  if (tid < 6) s_max[tid / 3][tid % 3] = 0u;
#endif
  barrier();
  TK_MMA_C row_of[TK_MMA_PARTS];
  TK_MMA_LOAD_C_ROW(row_of, smem, W_OFF, 4);

  TK_MMA_C S[MAX_SPT][TK_MMA_PARTS];
  [[unroll]] for (uint j = 0; j < MAX_SPT; ++j) {
    if (j < SPT) {
      const uint t = sg * SPT + j, kr = t / CTV, sc = t % CTV;
      if ((OPTIONS & TK_GDN_OPT_H0) != 0u) {
        const uint at = state_offset(n, h, kr * 16, v0 + sc * 16) / 4;
        if ((OPTIONS & TK_GDN_OPT_STATE_VK) != 0u) {
          TK_MMA_LOAD_C_COL(S[j], h0_4, at, KDIM / 4);
        } else {
          TK_MMA_LOAD_C_ROW(S[j], h0_4, at, VDIM / 4);
        }
      } else {
        TK_MMA_FILL(S[j], 0.0);
      }
    }
  }

  const uint chunks = (seq.len + BT - 1) / BT;
  if (chunks > 0) {
    load_wkg(seq, 0, h, kh);
    [[unroll]] for (uint xp = 0; xp < TK_MMA_MAX_PIECES; ++xp)
      if (tk_mma_piece(xp, lane)) pre_u[xp] = u_4[piece_mem(seq.first_chunk * BT, h, rt, v0, vc, lane + xp * SUBGROUP)];
  }
#if TK_STATE_FP16
  float ms = 0.0;
  TK_STATE_MAX(S, ms);
  int shift_u = 0;   // u's tile, for the chunk staged next
  if (chunks > 0) shift_u = gather_maxima(min(BT, seq.len), 0, rt, lane, ms);
  int shift_vn = 0;  // v_new's tile, as stored after the last barrier of a chunk
#endif
  barrier();  // the index tiles are read before the first staging overwrites them

  for (uint c = 0; c < chunks; ++c) {
    const uint cg = seq.first_chunk + c, rows = min(BT, seq.len - c * BT), slot0 = cg * BT;
    // ---- stage -------------------------------------------------------------
#if TK_STATE_FP16
    const uint par = c & 1u;
    const int shift_w = range_shift(uintBitsToFloat(s_max[par][0])), shift_k = range_shift(uintBitsToFloat(s_max[par][1]));
    const int shift_s = range_shift(uintBitsToFloat(s_max[par][2]));
    const float ps = pow2(shift_s);
    stage_wk(rows, shift_w, shift_k);
#else
    stage_wk(rows, 0, 0);
#endif
    const float g_last = pre_glast;
    stage_factors(g_last);
    [[unroll]] for (uint j = 0; j < MAX_SPT; ++j) {
      if (j < SPT) {
        const uint t = sg * SPT + j, kr = t / CTV, sc = t % CTV;
        TK_MMA_C16 b16[TK_MMA_PARTS];
        [[unroll]] for (uint p = 0; p < TK_MMA_CPARTS; ++p) {
          TK_MMA_C r = S[j][p];
          [[unroll]] for (int e = 0; e < r.length(); ++e) r[e] = tk_round_bf16_split(r[e]);
#if TK_STATE_FP16
          r = r * ps;
#endif
          b16[p] = TK_MMA_C16(r);
        }
        TK_MMA_STORE_C16_COL(b16, smem, HST_OFF + sc * 16 * SW + kr * 2, SW);
      }
    }
    uvec4 u_piece[TK_MMA_MAX_PIECES];
    [[unroll]] for (uint xp = 0; xp < TK_MMA_MAX_PIECES; ++xp) u_piece[xp] = pre_u[xp];
    barrier();

    // ---- the next chunk's loads, h, v_new and the update's operand --------
#if TK_STATE_FP16
    if (tid < 3) s_max[par ^ 1u][tid] = 0u;  // gathered for the next chunk after the next barrier
#endif
    if (c + 1 < chunks) {
      load_wkg(seq, c + 1, h, kh);
      [[unroll]] for (uint xp = 0; xp < TK_MMA_MAX_PIECES; ++xp)
        if (tk_mma_piece(xp, lane)) pre_u[xp] = u_4[piece_mem(slot0 + BT, h, rt, v0, vc, lane + xp * SUBGROUP)];
    }
    uvec4 vn_prev[TK_MMA_MAX_PIECES];  // stored only from the second chunk on
    [[unroll]] for (uint xp = 0; xp < TK_MMA_MAX_PIECES; ++xp)
      if (tk_mma_piece(xp, lane)) vn_prev[xp] = smem[piece_smem(rt, vc, lane + xp * SUBGROUP)];
    uvec4 h_piece[MAX_PH];
    [[unroll]] for (uint m = 0; m < MAX_PH; ++m) {
      const uint p = tid + m * WG;
      if (m < PH && p < HN) h_piece[m] = smem[HST_OFF + (p / (KDIM / 8)) * SW + p % (KDIM / 8)];
    }
    [[unroll]] for (uint xp = 0; xp < TK_MMA_MAX_PIECES; ++xp)
      if (tk_mma_piece(xp, lane)) smem[piece_smem(rt, vc, lane + xp * SUBGROUP)] = TK_TO_OPERAND(u_piece[xp], shift_u);
    TK_MMA_SYNC();
    TK_MMA_C16 u16[TK_MMA_PARTS];
    TK_MMA_LOAD_C16_ROW(u16, smem, tile_off, SVS);
    TK_MMA_C wh[TK_MMA_PARTS];
    TK_MMA_FILL(wh, 0.0);
    [[unroll]] for (uint kk = 0; kk < KDIM / 16; ++kk) {
      TK_MMA_A a[TK_MMA_PARTS];
      TK_MMA_B b[TK_MMA_PARTS];
      TK_MMA_LOAD_A_ROW(a, smem, W_OFF + rt * 16 * SW + kk * 2, SW);
      TK_MMA_LOAD_B_COL(b, smem, HST_OFF + vc * 16 * SW + kk * 2, SW);
      TK_MMA(wh, a, b);
    }
    // The stores wait on their shared loads; written after the products so
    // that the subgroup issues the products' loads and MMAs first.
    if (c > 0) {
      [[unroll]] for (uint xp = 0; xp < TK_MMA_MAX_PIECES; ++xp)
        if (tk_mma_piece(xp, lane))
          vn_4[piece_mem(slot0 - BT, h, rt, v0, vc, lane + xp * SUBGROUP)] = TK_FROM_OPERAND(vn_prev[xp], shift_vn);
    }
    [[unroll]] for (uint m = 0; m < MAX_PH; ++m) {
      const uint p = tid + m * WG;
      if (m < PH && p < HN) {
        const uint vv = p / (KDIM / 8), c8 = p % (KDIM / 8);
        h_4[((cg * pc.H + h) * VDIM + v0 + vv) * (KDIM / 8) + c8] =
            TK_FROM_OPERAND(h_piece[m], shift_s);
      }
    }
    // v_new' = u - w bf16(S) in f32; the operand and bf16(v_new') from it.
    TK_MMA_C vnf[TK_MMA_PARTS], opf[TK_MMA_PARTS];
#if TK_STATE_FP16
    float mv = 0.0, mo = 0.0;
    const float unw = pow2(-shift_w), uns = pow2(-shift_s), unu = pow2(-shift_u);
#endif
    [[unroll]] for (uint p = 0; p < TK_MMA_CPARTS; ++p) {
      vnf[p] = TK_MMA_C(u16[p]);
#if TK_STATE_FP16
      vnf[p] = vnf[p] * unu;
      wh[p] = wh[p] * unw * uns;
#endif
      opf[p] = vnf[p];
      [[unroll]] for (int e = 0; e < vnf[p].length(); ++e) {
        const uint i = rt * 16 + tk_cm_pos(row_of[p][e]);
        const float d = vnf[p][e] - wh[p][e];
        opf[p][e] = i < rows ? tk_round_bf16_split(d * s_f[i]) : 0.0;
        vnf[p][e] = tk_round_bf16_split(d);
#if TK_STATE_FP16
        mo = max(mo, tk_finite_abs(opf[p][e]));
        if (i < rows) mv = max(mv, tk_finite_abs(vnf[p][e]));
#endif
      }
    }
#if TK_STATE_FP16
    const vec2 mvo = subgroupMax(vec2(mv, mo));
    shift_vn = range_shift(mvo.x);
    const int shift_op = range_shift(mvo.y);
    if (subgroupElect()) s_shift_op[sg] = shift_op;
    const float pv = pow2(shift_vn), po = pow2(shift_op);
    [[unroll]] for (uint p = 0; p < TK_MMA_CPARTS; ++p) {
      vnf[p] = vnf[p] * pv;
      opf[p] = opf[p] * po;
    }
#endif
    TK_MMA_C16 vn16[TK_MMA_PARTS], op16[TK_MMA_PARTS];
    [[unroll]] for (uint p = 0; p < TK_MMA_CPARTS; ++p) {
      vn16[p] = TK_MMA_C16(vnf[p]);
      op16[p] = TK_MMA_C16(opf[p]);
    }
    TK_MMA_SYNC();  // u is read out of the tile before op overwrites it
    TK_MMA_STORE_C16_ROW(op16, smem, tile_off, SVS);
    barrier();

    // ---- S = exp(g_last) S + k^T operand ----------------------------------
    const float decay = exp(g_last);
    [[unroll]] for (uint j = 0; j < MAX_SPT; ++j) {
      if (j < SPT) {
        const uint t = sg * SPT + j, kr = t / CTV, sc = t % CTV;
#if TK_STATE_FP16
        TK_MMA_C upd[TK_MMA_PARTS];
        TK_MMA_FILL(upd, 0.0);
#else
        [[unroll]] for (uint p = 0; p < TK_MMA_CPARTS; ++p) S[j][p] = S[j][p] * decay;
#endif
        [[unroll]] for (uint tt = 0; tt < RT; ++tt) {
          TK_MMA_A a[TK_MMA_PARTS];
          TK_MMA_B b[TK_MMA_PARTS];
          TK_MMA_LOAD_A_COL(a, smem, K_OFF + tt * 16 * SW + kr * 2, SW);  // k^T
          TK_MMA_LOAD_B_ROW(b, smem, VS_OFF + tt * 16 * SVS + sc * 2, SVS);
#if TK_STATE_FP16
          TK_MMA_C pr[TK_MMA_PARTS];
          TK_MMA_FILL(pr, 0.0);
          TK_MMA(pr, a, b);
          const float f = pow2(-s_shift_op[tt * CTV + sc]);
          [[unroll]] for (uint p = 0; p < TK_MMA_CPARTS; ++p) upd[p] = upd[p] + pr[p] * f;
#else
          TK_MMA(S[j], a, b);
#endif
        }
#if TK_STATE_FP16
        const float unk = pow2(-shift_k);
        [[unroll]] for (uint p = 0; p < TK_MMA_CPARTS; ++p) S[j][p] = S[j][p] * decay + upd[p] * unk;
#endif
      }
    }
#if TK_STATE_FP16
    if (c + 1 < chunks) {
      ms = 0.0;
      TK_STATE_MAX(S, ms);
      shift_u = gather_maxima(min(BT, seq.len - (c + 1) * BT), par ^ 1u, rt, lane, ms);
    }
#endif
    barrier();
    TK_MMA_STORE_C16_ROW(vn16, smem, tile_off, SVS);
  }
  if (chunks > 0) {
    TK_MMA_SYNC();
    [[unroll]] for (uint xp = 0; xp < TK_MMA_MAX_PIECES; ++xp) {
      const uint q = lane + xp * SUBGROUP;
      if (tk_mma_piece(xp, lane))
        vn_4[piece_mem((seq.first_chunk + chunks - 1) * BT, h, rt, v0, vc, q)] =
            TK_FROM_OPERAND(smem[piece_smem(rt, vc, q)], shift_vn);
    }
  }

  if ((OPTIONS & TK_GDN_OPT_HT) != 0u) {
    [[unroll]] for (uint j = 0; j < MAX_SPT; ++j) {
      if (j < SPT) {
        const uint t = sg * SPT + j, kr = t / CTV, sc = t % CTV;
        const uint at = state_offset(n, h, kr * 16, v0 + sc * 16) / 4;
        if ((OPTIONS & TK_GDN_OPT_STATE_VK) != 0u) {
          TK_MMA_STORE_C_COL(S[j], ht_4, at, KDIM / 4);
        } else {
          TK_MMA_STORE_C_ROW(S[j], ht_4, at, VDIM / 4);
        }
      }
    }
  }
}
