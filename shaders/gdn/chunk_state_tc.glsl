// SPDX-License-Identifier: MIT
// Gated DeltaNet inter-chunk state recurrence on 16 x 16 subgroup
// matrices (shaders/common/coopmat.glsl): the body of chunk_state_bf16.comp
// (bf16 tensor cores) and of its emulated test twin. Same math, layouts and
// rounding points as chunk_state.comp:
//   h_c = bf16(S);  v_new = u - w bf16(S);  S = exp(g_last) S + k^T bf16(v_new exp(g_last - g_i)).
//
// Geometry (the host relies on it): one workgroup per (sequence n, value
// head h, BV columns of V), x = (n H + h) (V / BV) + slice, of NSG =
// (BT / 16)(BV / 16) subgroups of 32. Subgroup s owns the v_new tile
// (s / (BV/16), s % (BV/16)) and the K / BT state tiles s K/BT .. (row
// tile, column tile in row-major order), whose f32 accumulators hold S for
// the whole sequence. Per chunk:
//   stage  w and k (registers loaded during the previous chunk) and the
//          rows' factors exp(g_last - g_i) into shared memory, k rows past
//          the sequence end zeroed; bf16(S) into
//          shared memory transposed ([BV][K]: the B operand of w S, and
//          whole 16-byte rows of h);
//   barrier, then issue the next chunk's loads (w, k, g, and this
//          subgroup's u tile, into registers), so that they are in flight
//          while this chunk computes; the previous chunk's v_new tile and
//          h_c read out of shared memory into registers; u through shared
//          memory into a fragment; v_new = u - w bf16(S) (K / 16 products
//          per tile); then the v_new and h_c pieces stored to memory (a
//          store waits for its shared load, so it follows the products
//          instead of delaying them); the operand bf16(v_new exp(g_last - g_i))
//          (rows past the end selected to 0) into shared memory;
//   barrier, S = exp(g_last) S + k^T operand (BT / 16 products per tile);
//   barrier (the next stage overwrites what this chunk read); bf16(v_new)
//          into the subgroup's tile of the operand area.
// u enters and v_new leaves through that tile as one 16-byte piece per
// invocation (invocation l: row l / 2, half l % 2), because fragment loads
// and stores straight from and to storage buffers are slow on NVIDIA's
// driver; within a subgroup, TK_CM_SYNC orders the pieces and the fragment
// accesses of the same tile.
// Rows past the sequence end in w and u are padding slots holding anything:
// they reach only v_new's padding rows (stored to padding slots) and
// operand rows that the select zeroes. u and v_new may be the same memory:
// a piece of u is loaded (one chunk ahead) by the invocation that later
// stores the same piece of v_new.
#define TK_STATE_U_VOLATILE
#include "chunk_state_io.glsl"

const uint RT = BT / 16;              // row tiles of a chunk
const uint CTV = BV / 16;             // column tiles of the slice
const uint NSG = RT * CTV;            // subgroups: one v_new tile each
const uint WG = NSG * 32;
const uint SPT = KDIM / BT;           // state tiles per subgroup
const uint MAX_SPT = 8;
const uint SW = KDIM / 8 + 1;         // row stride of w, k and S^T (uvec4, one of padding)
const uint SVS = BV / 8 + 1;          // row stride of the operand (uvec4)
const uint W_OFF = 0, K_OFF = BT * SW, HST_OFF = 2 * BT * SW, VS_OFF = HST_OFF + BV * SW;
const uint SMEM_VEC4 = VS_OFF + BT * SVS;
const uint PW = BT * (KDIM / 8) / WG;  // 16-byte pieces of w (and of k) per invocation: K / BV
const uint MAX_PW = 8;
const uint PH = BV * (KDIM / 8) / WG;  // pieces of h per invocation: K / BT = SPT (at most MAX_SPT)

shared uvec4 smem[SMEM_VEC4];
shared float s_f[BT];  // exp(g_last - g_i): row i's factor in the update's operand

uvec4 pre_w[MAX_PW], pre_k[MAX_PW];
float pre_g, pre_glast;  // g of row tid % BT, and of the chunk's last row
uvec4 pre_u;  // this invocation's piece of the subgroup's u tile

#include "chunk_state_load.glsl"

void main() {
  const uint tid = gl_LocalInvocationID.x, sg = TK_CM_SUBGROUP_ID;
  const uint slices = VDIM / BV;
  const uint x = gl_WorkGroupID.x + pc.group_offset;
  const uint slice = x % slices, h = (x / slices) % pc.H, n = x / slices / pc.H;
  const uint kh = h / pc.ratio, v0 = slice * BV;
  const TkSeq seq = tk_gdn_seq(n, pc.T, pc.row_chunks, pc.varlen != 0u);
  const uint rt = sg / CTV, vc = sg % CTV;  // this subgroup's v_new tile
  // This invocation's piece of that tile: row pr, uvec4 pc2 of the tile's two.
  const uint pr = rt * 16 + (tid & 31u) / 2, pc2 = (v0 + vc * 16) / 8 + (tid & 1u);
  const uint piece = VS_OFF + pr * SVS + vc * 2 + (tid & 1u);

  // Index tiles (in the w area, before the first staging).
  if (tid < 128) {
    uvec4 q;
    [[unroll]] for (uint e = 0; e < 4; ++e) q[e] = tk_cm_index_word(tid * 4 + e);
    smem[W_OFF + tid] = q;
  }
  barrier();
  TK_CM_ACC row_of;
  TK_CM_LOAD32_ROW(row_of, smem, W_OFF, 4);

  TK_CM_ACC S[MAX_SPT];
  [[unroll]] for (uint j = 0; j < MAX_SPT; ++j) {
    if (j < SPT) {
      const uint t = sg * SPT + j, kr = t / CTV, sc = t % CTV;
      if ((OPTIONS & TK_GDN_OPT_H0) != 0u) {
        if ((OPTIONS & TK_GDN_OPT_STATE_VK) != 0u) {
          TK_CM_LOADF_COL(S[j], h0_f, state_offset(n, h, kr * 16, v0 + sc * 16), KDIM);
        } else {
          TK_CM_LOADF_ROW(S[j], h0_f, state_offset(n, h, kr * 16, v0 + sc * 16), VDIM);
        }
      } else {
        S[j] = TK_CM_FILL(TK_CM_ACC, 0.0);
      }
    }
  }

  const uint chunks = (seq.len + BT - 1) / BT;
  if (chunks > 0) {
    load_wkg(seq, 0, h, kh);
    pre_u = u_4[((seq.first_chunk * BT + pr) * pc.H + h) * (VDIM / 8) + pc2];
  }
  barrier();  // the index tiles are read before the first staging overwrites them

  for (uint c = 0; c < chunks; ++c) {
    const uint cg = seq.first_chunk + c, rows = min(BT, seq.len - c * BT), slot0 = cg * BT;
    // ---- stage -------------------------------------------------------------
    stage_wk(rows);
    const float g_last = pre_glast;
    if (tid < BT) s_f[tid] = exp(g_last - pre_g);
    [[unroll]] for (uint j = 0; j < MAX_SPT; ++j) {
      if (j < SPT) {
        const uint t = sg * SPT + j, kr = t / CTV, sc = t % CTV;
        TK_CM_ACC r16;
        r16 = S[j];
        TK_CM_UNROLL for (int e = 0; e < TK_CM_LEN(r16); ++e) TK_CM_EL(r16, e) = tk_round_bf16_split(TK_CM_EL(r16, e));
        TK_CM_ACC16 b16 = TK_CM_TO_ACC16(r16);
        TK_CM_STORE16_COL(b16, smem, HST_OFF + sc * 16 * SW + kr * 2, SW);
      }
    }
    const uvec4 u_piece = pre_u;
    barrier();

    // ---- the next chunk's loads, h, v_new and the update's operand --------
    if (c + 1 < chunks) {
      load_wkg(seq, c + 1, h, kh);
      pre_u = u_4[((slot0 + BT + pr) * pc.H + h) * (VDIM / 8) + pc2];
    }
    const uvec4 vn_prev = smem[piece];  // stored only from the second chunk on
    uvec4 h_piece[MAX_SPT];
    [[unroll]] for (uint m = 0; m < MAX_SPT; ++m) {
      if (m < PH) {
        const uint p = tid + m * WG;
        h_piece[m] = smem[HST_OFF + (p / (KDIM / 8)) * SW + p % (KDIM / 8)];
      }
    }
    smem[piece] = u_piece;
    TK_CM_SYNC();
    TK_CM_ACC16 u_cur;
    TK_CM_LOAD16_ROW(u_cur, smem, VS_OFF + rt * 16 * SVS + vc * 2, SVS);
    TK_CM_ACC wh = TK_CM_FILL(TK_CM_ACC, 0.0);
    [[unroll]] for (uint kk = 0; kk < KDIM / 16; ++kk) {
      TK_CM_A a;
      TK_CM_B b;
      TK_CM_LOAD16_ROW(a, smem, W_OFF + rt * 16 * SW + kk * 2, SW);
      TK_CM_LOAD16_COL(b, smem, HST_OFF + vc * 16 * SW + kk * 2, SW);
      wh = TK_CM_MMA(a, b, wh);
    }
    // The stores wait on their shared loads; written after the products so
    // that the warp issues the products' loads and MMAs first.
    if (c > 0) vn_4[((slot0 - BT + pr) * pc.H + h) * (VDIM / 8) + pc2] = vn_prev;
    [[unroll]] for (uint m = 0; m < MAX_SPT; ++m) {
      if (m < PH) {
        const uint p = tid + m * WG;
        h_4[((cg * pc.H + h) * VDIM + v0 + p / (KDIM / 8)) * (KDIM / 8) + p % (KDIM / 8)] = h_piece[m];
      }
    }
    TK_CM_ACC vn = TK_CM_TO_ACC(u_cur);
    TK_CM_ACC op = TK_CM_FILL(TK_CM_ACC, 0.0);
    TK_CM_UNROLL for (int e = 0; e < TK_CM_LEN(vn); ++e) {
      const uint i = rt * 16 + tk_cm_pos(TK_CM_EL(row_of, e));
      const float x = TK_CM_EL(vn, e) - TK_CM_EL(wh, e);
      TK_CM_EL(op, e) = i < rows ? tk_round_bf16_split(x * s_f[i]) : 0.0;
      TK_CM_EL(vn, e) = tk_round_bf16_split(x);
    }
    const TK_CM_ACC16 vn16 = TK_CM_TO_ACC16(vn), op16 = TK_CM_TO_ACC16(op);
    TK_CM_SYNC();  // u is read out of the tile before op overwrites it
    TK_CM_STORE16_ROW(op16, smem, VS_OFF + rt * 16 * SVS + vc * 2, SVS);
    barrier();

    // ---- S = exp(g_last) S + k^T operand ----------------------------------
    const float decay = exp(g_last);
    [[unroll]] for (uint j = 0; j < MAX_SPT; ++j) {
      if (j < SPT) {
        const uint t = sg * SPT + j, kr = t / CTV, sc = t % CTV;
        TK_CM_UNROLL for (int e = 0; e < TK_CM_LEN(S[j]); ++e) TK_CM_EL(S[j], e) *= decay;
        [[unroll]] for (uint tt = 0; tt < RT; ++tt) {
          TK_CM_A a;
          TK_CM_B b;
          TK_CM_LOAD16_COL(a, smem, K_OFF + tt * 16 * SW + kr * 2, SW);  // k^T
          TK_CM_LOAD16_ROW(b, smem, VS_OFF + tt * 16 * SVS + sc * 2, SVS);
          S[j] = TK_CM_MMA(a, b, S[j]);
        }
      }
    }
    barrier();
    TK_CM_STORE16_ROW(vn16, smem, VS_OFF + rt * 16 * SVS + vc * 2, SVS);
  }
  if (chunks > 0) {
    TK_CM_SYNC();
    vn_4[(((seq.first_chunk + chunks - 1) * BT + pr) * pc.H + h) * (VDIM / 8) + pc2] = smem[piece];
  }

  if ((OPTIONS & TK_GDN_OPT_HT) != 0u) {
    [[unroll]] for (uint j = 0; j < MAX_SPT; ++j) {
      if (j < SPT) {
        const uint t = sg * SPT + j, kr = t / CTV, sc = t % CTV;
        if ((OPTIONS & TK_GDN_OPT_STATE_VK) != 0u) {
          TK_CM_STOREF_COL(S[j], ht_f, state_offset(n, h, kr * 16, v0 + sc * 16), KDIM);
        } else {
          TK_CM_STOREF_ROW(S[j], ht_f, state_offset(n, h, kr * 16, v0 + sc * 16), VDIM);
        }
      }
    }
  }
}
