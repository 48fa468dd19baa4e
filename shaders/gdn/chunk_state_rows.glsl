// SPDX-License-Identifier: MIT
// Gated DeltaNet inter-chunk state recurrence with the state's columns held
// by the subgroups: the body of chunk_state_rows_bf16.comp. Same math,
// layouts and rounding points as chunk_state.comp, written transposed:
//   h_c = bf16(S);  v_new^T = u^T - (bf16(S)^T w^T);
//   S^T = exp(g_last) S^T + bf16(v_new' exp(g_last - g_i))^T k.
//
// Geometry (the host relies on it): one workgroup per (sequence n, value
// head h, BV = BT columns of V), x = (n H + h) (V / BV) + slice, of BV / 16
// subgroups of 32. Subgroup s owns the 16 state columns v0 + 16 s .. and
// holds their S^T (16 x K, f32 accumulators) for the whole sequence, so
// both products take their A operand from registers: bf16(S^T) for w S,
// and the update's operand from v_new^T's accumulators, element by
// element. That needs an A operand's element i where an accumulator's
// element i is, and the element's column (the m16n8k16 accumulator layout:
// 2 (lane % 4) + (i & 1) + 8 ((i >> 1) & 1)), which the Context reads back
// from the device (gdn::state_rows_layout); lavapipe, without bf16 tiles,
// never runs it.
// Only the B operands (w^T, k) are fragment loads, each once per subgroup.
// Values are rounded to bf16 before the device converts them (its own
// conversion does not round to nearest even).
// Per chunk:
//   stage  w, k, u (registers loaded during the chunk before) and the
//          rows' factors exp(g_last - g_i) into shared memory, k rows past
//          the sequence end zeroed;
//   barrier, then issue the next chunk's loads (in flight for the whole
//          chunk); per row tile of the chunk, bf16(S^T) w^T, v_new^T = u^T
//          minus it in f32 (FLA's order), the update's operand and
//          bf16(v_new) from its elements, v_new over u's columns (only this
//          subgroup reads them);
//   barrier (w is read): h_c's rows (bf16(S^T), the products' operands)
//          through the w area and v_new's columns out to memory, as one
//          16-byte piece per invocation (fragment stores to storage buffers
//          are slow on NVIDIA's driver); S^T = exp(g_last) S^T + operand k;
//   barrier (the next stage overwrites w, k and u).
// Rows past the sequence end in w and u are padding slots holding anything:
// they reach only v_new's padding columns (stored to padding slots) and
// operand columns that the select zeroes. u and v_new may be the same
// memory: a chunk's u is staged before any of its v_new is stored.
#define TK_STATE_U_VOLATILE volatile
#include "chunk_state_io.glsl"
#define TK_MMA_T bfloat16_t
#include "../common/mma.glsl"

// bf16 16 x 16 x 16 fragments, in the layout the host checked.
#define ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define ACC16 coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define AOP coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define BOP coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define ROW gl_CooperativeMatrixLayoutRowMajor
#define COL gl_CooperativeMatrixLayoutColumnMajor

const uint NSG = BV / 16;             // subgroups: 16 state columns each
const uint WG = NSG * 32;
const uint RT = BT / 16;              // row tiles of a chunk
const uint KT = KDIM / 16;            // column tiles of S^T
const uint MAX_RT = 4, MAX_KT = 8;
const uint SW = KDIM / 8 + 1;         // row stride of w, k and h_c (uvec4, one of padding)
const uint SU = BV / 8 + 1;           // row stride of u and v_new (uvec4)
const uint W_OFF = 0, K_OFF = BT * SW, U_OFF = 2 * BT * SW;
const uint SMEM_VEC4 = U_OFF + BT * SU;
const uint PW = BT * (KDIM / 8) / WG;  // 16-byte pieces of w (and of k) per invocation
const uint MAX_PW = 8;
const uint PU = BT * (BV / 8) / WG;   // pieces of u per invocation
const uint MAX_PU = 4;
const uint PH = KDIM / 16;            // pieces of the subgroup's h_c rows per invocation
const uint PV = BT / 16;              // pieces of the subgroup's v_new columns per invocation

// The column of lane l's accumulator element e in its 16 x 16 tile.
#define TK_ACC_COL(l, e) (2u * ((l) & 3u) + (uint(e) & 1u) + 8u * ((uint(e) >> 1) & 1u))

shared uvec4 smem[SMEM_VEC4];
shared float s_f[BT];  // exp(g_last - g_i): row i's factor in the update's operand

const uint GPI = 1, MAX_GPI = 1;      // rows of g per invocation (WG > BT)

uvec4 pre_w[MAX_PW], pre_k[MAX_PW], pre_u[MAX_PU];
float pre_g[MAX_GPI], pre_glast;  // g of row tid, and of the chunk's last row

#define TK_TO_OPERAND(q, s) (q)
#include "chunk_state_load.glsl"

// Issues the loads of chunk c of the sequence: w, k and g, and the
// workgroup's BV columns of u.
void load_chunk(TkSeq seq, uint c, uint h, uint kh, uint v0) {
  load_wkg(seq, c, h, kh);
  const uint tid = gl_LocalInvocationID.x, slot0 = (seq.first_chunk + c) * BT;
  [[unroll]] for (uint n = 0; n < MAX_PU; ++n) {
    if (n < PU) {
      const uint p = tid + n * WG, i = p / (BV / 8), c8 = p % (BV / 8);
      pre_u[n] = u_4[((slot0 + i) * pc.H + h) * (VDIM / 8) + v0 / 8 + c8];
    }
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x, lane = tid & 31u, sg = gl_SubgroupID;
  const uint slices = VDIM / BV;
  const uint x = gl_WorkGroupID.x + pc.group_offset;
  const uint slice = x % slices, h = (x / slices) % pc.H, n = x / slices / pc.H;
  const uint kh = h / pc.ratio, v0 = slice * BV, vr = v0 + sg * 16;
  const TkSeq seq = tk_gdn_seq(n, pc.T, pc.row_chunks, pc.varlen != 0u);


  // S^T's tile j: state columns vr .. vr + 15 (rows), K rows 16 j .. (columns).
  ACC S[MAX_KT];
  [[unroll]] for (uint j = 0; j < MAX_KT; ++j) {
    if (j < KT) {
      if ((OPTIONS & TK_GDN_OPT_H0) != 0u) {
        if ((OPTIONS & TK_GDN_OPT_STATE_VK) != 0u) {
          coopMatLoad(S[j], h0_4, state_offset(n, h, j * 16, vr) / 4, KDIM / 4, ROW);
        } else {
          coopMatLoad(S[j], h0_4, state_offset(n, h, j * 16, vr) / 4, VDIM / 4, COL);
        }
      } else {
        S[j] = ACC(0.0);
      }
    }
  }

  const uint chunks = (seq.len + BT - 1) / BT;
  if (chunks > 0) load_chunk(seq, 0, h, kh, v0);

  for (uint c = 0; c < chunks; ++c) {
    const uint cg = seq.first_chunk + c, rows = min(BT, seq.len - c * BT), slot0 = cg * BT;
    // ---- stage -------------------------------------------------------------
    stage_wk(rows, 0, 0);
    [[unroll]] for (uint m = 0; m < MAX_PU; ++m) {
      if (m < PU) {
        const uint p = tid + m * WG;
        smem[U_OFF + (p / (BV / 8)) * SU + p % (BV / 8)] = pre_u[m];
      }
    }
    const float g_last = pre_glast;
    stage_factors(g_last);
    barrier();

    // ---- the next chunk's loads; bf16(S^T) ----------------------------------
    if (c + 1 < chunks) load_chunk(seq, c + 1, h, kh, v0);
    AOP ha[MAX_KT];
    [[unroll]] for (uint j = 0; j < MAX_KT; ++j) {
      if (j < KT) {
        [[unroll]] for (int e = 0; e < S[j].length(); ++e) ha[j][e] = bfloat16_t(tk_round_bf16_split(S[j][e]));
      }
    }
    // Per row tile of the chunk: w bf16(S); v_new' = u - it (FLA's order:
    // the product, then the difference, in f32); the operand bf16(v_new'
    // exp(g_last - g_i)) (columns past the end 0); bf16(v_new') over u's
    // tile, which only this subgroup reads.
    AOP op[MAX_RT];
    [[unroll]] for (uint t = 0; t < MAX_RT; ++t) {
      if (t < RT) {
        ACC wh = ACC(0.0);
        [[unroll]] for (uint j = 0; j < MAX_KT; ++j) {
          if (j < KT) {
            BOP b;
            coopMatLoad(b, smem, W_OFF + t * 16 * SW + j * 2, SW, COL);  // w^T
            wh = coopMatMulAdd(ha[j], b, wh);
          }
        }
        ACC16 u16;
        coopMatLoad(u16, smem, U_OFF + t * 16 * SU + sg * 2, SU, COL);
        ACC vn = ACC(u16);
        [[unroll]] for (int e = 0; e < vn.length(); ++e) {
          const uint i = t * 16 + TK_ACC_COL(lane, e);
          const float v = vn[e] - wh[e];
          op[t][e] = bfloat16_t(i < rows ? tk_round_bf16_split(v * s_f[i]) : 0.0);
          vn[e] = tk_round_bf16_split(v);
        }
        const ACC16 vn16 = ACC16(vn);
        TK_MMA_SYNC();  // u's tile is read before v_new overwrites it
        coopMatStore(vn16, smem, U_OFF + t * 16 * SU + sg * 2, SU, COL);
      }
    }
    barrier();  // every subgroup is done with w

    // ---- h_c and v_new out; S^T = exp(g_last) S^T + operand k ---------------
    [[unroll]] for (uint j = 0; j < MAX_KT; ++j) {
      if (j < KT) coopMatStore(ha[j], smem, W_OFF + sg * 16 * SW + j * 2, SW, ROW);
    }
    TK_MMA_SYNC();
    [[unroll]] for (uint m = 0; m < MAX_KT; ++m) {
      if (m < PH) {
        const uint p = lane + m * 32, r = p / (KDIM / 8), c8 = p % (KDIM / 8);
        h_4[((cg * pc.H + h) * VDIM + vr + r) * (KDIM / 8) + c8] = smem[W_OFF + (sg * 16 + r) * SW + c8];
      }
    }
    [[unroll]] for (uint m = 0; m < MAX_RT; ++m) {
      if (m < PV) {
        const uint p = lane + m * 32, i = p / 2, hv = p % 2;
        vn_4[((slot0 + i) * pc.H + h) * (VDIM / 8) + vr / 8 + hv] = smem[U_OFF + i * SU + sg * 2 + hv];
      }
    }
    const float decay = exp(g_last);
    [[unroll]] for (uint j = 0; j < MAX_KT; ++j) {
      if (j < KT) {
        S[j] = S[j] * decay;
      }
    }
    [[unroll]] for (uint t = 0; t < MAX_RT; ++t) {
      if (t < RT) {
        [[unroll]] for (uint j = 0; j < MAX_KT; ++j) {
          if (j < KT) {
            BOP b;
            coopMatLoad(b, smem, K_OFF + t * 16 * SW + j * 2, SW, ROW);
            S[j] = coopMatMulAdd(op[t], b, S[j]);
          }
        }
      }
    }
    barrier();
  }

  if ((OPTIONS & TK_GDN_OPT_HT) != 0u) {
    [[unroll]] for (uint j = 0; j < MAX_KT; ++j) {
      if (j < KT) {
        if ((OPTIONS & TK_GDN_OPT_STATE_VK) != 0u) {
          coopMatStore(S[j], ht_4, state_offset(n, h, j * 16, vr) / 4, KDIM / 4, ROW);
        } else {
          coopMatStore(S[j], ht_4, state_offset(n, h, j * 16, vr) / 4, VDIM / 4, COL);
        }
      }
    }
  }
}
