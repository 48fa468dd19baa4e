// SPDX-License-Identifier: MIT
#version 460
//! requires GL_KHR_cooperative_matrix
//! requires GL_EXT_bfloat16
// Gated DeltaNet chunk_fwd_o on bf16 tensor cores (VK_KHR_cooperative_matrix
// with VK_KHR_shader_bfloat16, bf16 x bf16 -> f32, 16x16x16):
//   S = q k^T,  P = bf16(tril_incl(S * exp(g_i - g_j))),
//   o = scale * ((q h^T) * exp(g_i) + P v).
// q, k, h and v are bf16 in memory and enter the products as they are (no
// conversion, no fp16 range handling); only P is rounded, where FLA rounds.
//
// Geometry (the host relies on it):
// - 512 invocations (16 subgroups of 32); persistent: workgroup w walks the
//   tiles (batch, chunk, head) w, w + stride, ... with all of V (<= 128
//   columns) per tile, reading (varlen) each tile's index entry a tile
//   ahead;
// - a tile is NK + 1 steps: NK steps over 64-column slices of K (q, k and
//   h slices staged, q h^T and q k^T accumulated), then the v step (v and
//   g staged; S gated, masked and rounded into P; the q h^T accumulators
//   scaled by exp(g_i); P v accumulated; results out). Each step stages
//   the registers loaded during the previous step, passes a workgroup
//   barrier, issues the loads of the next step (across tiles too), then
//   multiplies: every load is in flight while the step before it computes.
//   Where there are two or more K steps, v and g are loaded with the last
//   K step's slices (registers of their own, staged after that step), and
//   the last K step issues the next tile's first loads: two memory round
//   trips per tile. Two workgroup barriers per step (three in the v step);
//   K slices of 64 columns, since every step costs bookkeeping;
// - the order of loads and staging is held by the barriers and `volatile`
//   (below), because all global loads of an invocation may share one
//   scoreboard (they do on the H100): the first use of a loaded value waits
//   for every load issued before it. Staging a step's registers must
//   therefore come before the next step's loads are issued, or the staging
//   waits for those as well and the step hides no memory time;
// - subgroup s owns the o tiles s * OT .. s * OT + OT - 1 (row tile, column
//   tile; the o tiles of one row tile are adjacent, and one subgroup's lie
//   in one row tile) and the S tile (its row tile, s % WPR) where that is on
//   or below the diagonal, so that one q fragment serves all its products
//   in a K step;
// - the position of an accumulator component comes from two 16 x 16 tiles
//   holding their row and column numbers, loaded as f32 accumulators:
//   component-wise operations between matrices of one type pair equal
//   positions, so their components say where each one sits;
// - results leave through per-subgroup scratch in 16-byte stores (whole
//   32-byte sectors; lanes whose row is past T store the chunk's last row
//   again, the same words to the same address, so no store has a branch);
//   o is a view, whose rows start at multiples of 8 elements, or with
//   O_UNALIGNED at even ones (four 32-bit stores a lane then);
// - P and o are rounded to bf16 by the float split (tk_round_bf16_split),
//   the next tile found by digit-wise addition, and the o gate read once
//   for both of a subgroup's o tiles: fewer instructions per tile, which
//   count because one 512-invocation workgroup per multiprocessor issues
//   them all. (Measurements of each choice: bench/notes/2026-11-gdn-chunk-o-recompute-wu.md.)
#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_bfloat16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/gdn/chunk_o_abi.h"
#include "../common/convert.glsl"
#include "../common/tile_walk.glsl"

TK_DECLARE_SPEC(TK_CHUNK_O_SPEC)  // the host passes 512 invocations
TK_DECLARE_PUSH(TK_CHUNK_O_PUSH)
const uint SMEM_VEC4 = TK_CHUNK_O_BF16_VEC4(BT, VDIM);

const uint WG = 512;
const uint NSG = 16;
const uint KC = 64;                   // K columns per step
const uint NK = KDIM / KC;            // K steps
const uint RT = BT / 16;              // row tiles
const uint CT = VDIM / 16;            // o column tiles
const uint OT = (RT * CT + NSG - 1) / NSG;  // o tiles per subgroup
// A subgroup's o tiles lie in one row tile (OT divides CT), and each row
// tile has WPR >= RT subgroups (for BT in {16, 32, 64} and V in {64, 128}:
// the host's configurations), so the S tiles of row r go to subgroups of
// row r, and a K step loads each q fragment once for all of a
// subgroup's products. (The P v loop does not load P's fragment once for
// all o tiles the same way: measured slower, bench/notes/2026-11-gdn-chunk-o-recompute-wu.md.)
const uint WPR = CT / OT;             // subgroups per row tile
// Shared memory, uvec4 units (8 bf16 or 4 f32 each); rows padded by one.
const uint SK = KC / 8 + 1;           // K-step row stride
const uint SVR = VDIM / 8 + 1;        // v row stride
const uint SP = BT / 8 + 1;           // P row stride
const uint Q_OFF = 0, K_OFF = BT * SK, H_OFF = 2 * BT * SK;
const uint V_OFF = 0, P_OFF = BT * SVR;
const uint REGION_K = (2 * BT + VDIM) * SK, REGION_V = BT * SVR + BT * SP;
const uint SCR = 2;                   // scratch row: 16 bf16
// Per-subgroup output scratch [16][SCR] after v and P: inside the K-step
// area, so a barrier follows the output.
const uint SCR_OFF = REGION_V;
const uint REGION_VS = REGION_V + NSG * 16 * SCR;
const uint REGION = REGION_K > REGION_VS ? REGION_K : REGION_VS;
const uint IDX_OFF = REGION;          // row- and column-number tiles, 16 x 16 f32 each
const uint IDX_BIAS = 0x4b000000u;    // bits of 2^23: the float 2^23 + n has bits IDX_BIAS + n
// 16-byte pieces of a step's loads.
const uint QP = BT * (KC / 8);        // of a q (or k) slice
const uint HP = VDIM * (KC / 8);      // of an h slice
const uint VP = BT * (VDIM / 8);      // of v
const uint MAX_OT = 2;                // o tiles per subgroup: 64 * 128 / 256 / 16
const uint MAX_NK = 8;                // a bound on K / KC (at most 4)
const uint MAX_RT = 4;

// Every input is volatile so that the driver keeps each load where it is
// issued, after the barrier that follows the previous staging. Without it
// the H100 build moved loads across barriers, next to or ahead of the
// staging of earlier loads (seen in the SASS, bench/notes/2026-11-gdn-chunk-o-recompute-wu.md).
layout(std430, binding = 0) volatile readonly buffer Q4 { uvec4 q_4[]; };
layout(std430, binding = 1) volatile readonly buffer K4 { uvec4 k_4[]; };
layout(std430, binding = 2) volatile readonly buffer V4 { uvec4 v_4[]; };
layout(std430, binding = 4) volatile readonly buffer G { float g_f[]; };
layout(std430, binding = 3) volatile readonly buffer H4 { uvec4 h_4[]; };
layout(std430, binding = 5) writeonly buffer O4 { uvec4 o_4[]; };
layout(std430, binding = 5) writeonly buffer OW { uint o_w[]; };  // O_UNALIGNED
layout(std430, binding = 6) readonly buffer IndexBuf { uvec4 index_table[]; };
#define TK_GDN_INDEX(i) index_table[i]
#include "../common/gdn_chunks.glsl"

shared uvec4 smem[SMEM_VEC4];
shared float s_g[64];   // g of the tile's rows
shared float s_eg[64];  // exp(g)

#define ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define MAT_A coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MAT_B coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define OUT16 coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

struct Tile {
  uint ih, kh;
  TkTileRows c;  // the chunk's rows
};

// Past the last batch: a tile of the last batch (valid addresses, unused).
// e: the index entry of chunk d.c (varlen).
Tile tile_of(TkDigits d, uvec4 e) {
  Tile t;
  t.kh = d.kh;
  t.ih = d.kh * pc.ratio + d.r;
  t.c = tk_gdn_rows(min(d.b, pc.batch - 1), d.c, e, pc.T, pc.NT, BT, VARLEN != 0u, SLOTS != 0u);
  return t;
}

// The registers that carry one step's loads until they are staged: this
// invocation's q and k pieces and two h pieces of a K step; two v pieces
// and one g value of the v step.
uvec4 pre[4];
uvec4 pre_v[2];
float pre_g;
// v is loaded with the last K step's slices where there are two or more K
// steps; with one, after it is staged (as the K step's loads would
// otherwise wait for the previous tile's v step).
const bool V_EARLY = NK >= 2;

// Every load is unconditional, with clamped rows (v's select comes at
// staging): on the H100 a load inside a conditional block is waited for at
// the block's end, which would stall the step that should overlap it.
// K step c of tile t: q and k piece tid % QP (row, 16 bytes of the slice),
// h pieces (tid + n WG) % HP; invocations past QP or HP repeat a piece,
// unused.
void load_k_step(Tile t, uint c) {
  const uint tid = gl_LocalInvocationID.x;
  const uint pq = tid % QP;
  const uint rq = min(pq / (KC / 8), tk_last_row(t.c.rows)), cq = c * (KC / 8) + pq % (KC / 8);
  const uint qk = ((t.c.token + rq) * pc.Hg + t.kh) * (KDIM / 8) + cq;
  pre[0] = q_4[qk];
  pre[1] = k_4[qk];
  [[unroll]] for (uint n = 0; n < 2; ++n) {
    const uint ph = (tid + n * WG) % HP;
    const uint hv = ph / (KC / 8), ch = c * (KC / 8) + ph % (KC / 8);
    pre[2 + n] = h_4[((t.c.chunk * pc.H + t.ih) * VDIM + hv) * (KDIM / 8) + ch];
  }
}

// v step of tile t: v pieces tid and tid + WG (clamped), g of row tid % BT.
void load_v_step(Tile t) {
  const uint tid = gl_LocalInvocationID.x;
  [[unroll]] for (uint n = 0; n < 2; ++n) {
    const uint p = min(tid + n * WG, VP - 1);
    const uint r = min(p / (VDIM / 8), tk_last_row(t.c.rows)), c8 = p % (VDIM / 8);
    pre_v[n] = v_4[((t.c.slot + r) * pc.H + t.ih) * (VDIM / 8) + c8];
  }
  pre_g = g_f[(t.c.slot + min(tid % BT, tk_last_row(t.c.rows))) * pc.H + t.ih];
}

// q and k rows past the chunk's end repeat its last row (the loads clamp):
// they only reach S's rows and columns past the end, which P masks and the
// output skips, so no select is needed (a select made the H100 build wait
// for the loads early, inside the previous step's products). h rows are all
// valid.
void stage_k_step(Tile t) {
  const uint tid = gl_LocalInvocationID.x;
  const uint r = (tid % QP) / (KC / 8), c8 = tid % (KC / 8);
  if (tid < QP) {
    smem[Q_OFF + r * SK + c8] = pre[0];
    smem[K_OFF + r * SK + c8] = pre[1];
  }
  [[unroll]] for (uint n = 0; n < 2; ++n) {
    const uint p = tid + n * WG;
    if (p < HP) smem[H_OFF + (p / (KC / 8)) * SK + c8] = pre[2 + n];
  }
}

void stage_v_step(Tile t) {
  const uint tid = gl_LocalInvocationID.x;
  if (t.c.rows < BT) {  // uniform: only a tail chunk has rows to clear
    [[unroll]] for (uint n = 0; n < 2; ++n)
      if ((tid + n * WG) / (VDIM / 8) >= t.c.rows) pre_v[n] = uvec4(0u);
  }
  [[unroll]] for (uint n = 0; n < 2; ++n) {
    const uint p = tid + n * WG;
    if (p < VP) {
      const uint r = p / (VDIM / 8), c8 = p % (VDIM / 8);
      smem[V_OFF + r * SVR + c8] = pre_v[n];
    }
  }
  if (tid < BT) {
    s_g[tid] = pre_g;
    s_eg[tid] = exp(pre_g);
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint first = gl_WorkGroupID.x + pc.group_offset;

  // Row- and column-number tiles (16 x 16 each, loaded as f32
  // accumulators): n is stored as the float 2^23 + n, whose bits are
  // IDX_BIAS + n, and read back as floatBitsToUint(x) - IDX_BIAS, an integer
  // subtraction instead of a float-to-int conversion (these stay normal
  // floats, so no device flushes them as denormals).
  if (tid < 128) {
    const uint which = tid / 64, e = (tid % 64) * 4;  // 4 floats per invocation
    const uint r = e / 16, c = e % 16;
    smem[IDX_OFF + tid] = IDX_BIAS + (which == 0 ? uvec4(r) : uvec4(c, c + 1, c + 2, c + 3));
  }

  // This subgroup's row tile, and its S tile: column sg % WPR of that row,
  // if on or below the diagonal.
  const uint rt_w = sg / WPR;
  const uint srt = rt_w, sct = sg % WPR;
  const bool has_s = srt < RT && sct <= srt;

  const uvec3 radix = uvec3(pc.ratio, pc.Hg, pc.NT);
  const TkDigits stride = tk_digits_of(pc.stride, radix);
  const bool varlen = VARLEN != 0u;
  // One set of digits lives through the loop: those of the next tile (dn),
  // whose index entry (en, varlen only) is read a tile ahead of its use.
  TkDigits dn = tk_digits_of(first, radix);
  bool live = dn.b < pc.batch;
  Tile t = tile_of(dn, tk_gdn_entry(pc.N, dn.c, varlen));
  load_k_step(t, 0);
  dn = tk_digits_add(dn, stride, radix);
  uvec4 en = tk_gdn_entry(pc.N, dn.c, varlen);
  while (live) {  // uniform per workgroup
    live = dn.b < pc.batch;
    const Tile tn = tile_of(dn, en);
    dn = tk_digits_add(dn, stride, radix);
    en = tk_gdn_entry(pc.N, dn.c, varlen);
    ACC o_acc[MAX_OT];
    [[unroll]] for (uint j = 0; j < MAX_OT; ++j) o_acc[j] = ACC(0.0);
    ACC s_acc = ACC(0.0);

    // ---- K steps: q h^T and q k^T over 64-column slices ---------------
    [[unroll]] for (uint c = 0; c < MAX_NK; ++c) {
      if (c < NK) {  // specialisation constants only
        stage_k_step(t);
        barrier();
        if (c + 1 < NK) {
          load_k_step(t, c + 1);
          if (V_EARLY && c + 2 == NK) load_v_step(t);
        } else if (V_EARLY) {
          load_k_step(tn, 0);  // the next tile's first step (this one again at the end: unused)
        } else {
          load_v_step(t);
        }
        [[unroll]] for (uint kk = 0; kk < KC / 16; ++kk) {
          MAT_A qa;  // this subgroup's row of q, for all of its products
          if (rt_w < RT)
            coopMatLoad(qa, smem, Q_OFF + rt_w * 16 * SK + kk * 2, SK, gl_CooperativeMatrixLayoutRowMajor);
          [[unroll]] for (uint j = 0; j < MAX_OT; ++j) {
            const uint o = sg * OT + j;
            if (j < OT && o < RT * CT) {
              MAT_B hb;  // h^T: column v of the tile is row v of h
              coopMatLoad(hb, smem, H_OFF + (o % CT) * 16 * SK + kk * 2, SK, gl_CooperativeMatrixLayoutColumnMajor);
              o_acc[j] = coopMatMulAdd(qa, hb, o_acc[j]);
            }
          }
          if (has_s) {
            MAT_B kb;  // k^T: column j of the tile is row j of k
            coopMatLoad(kb, smem, K_OFF + sct * 16 * SK + kk * 2, SK, gl_CooperativeMatrixLayoutColumnMajor);
            s_acc = coopMatMulAdd(qa, kb, s_acc);
          }
        }
        barrier();
      }
    }

    // ---- v step ---------------------------------------------------------
    stage_v_step(t);
    barrier();
    if (!V_EARLY) load_k_step(tn, 0);
    ACC row_of, col_of;
    coopMatLoad(row_of, smem, IDX_OFF, 4, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(col_of, smem, IDX_OFF + 64, 4, gl_CooperativeMatrixLayoutRowMajor);
    if (has_s) {  // P = bf16(tril_incl(S * exp(g_i - g_j))), columns past the chunk's end zero
      for (int i = 0; i < s_acc.length(); ++i) {
        const uint r = srt * 16 + (floatBitsToUint(row_of[i]) - IDX_BIAS);
        const uint c = sct * 16 + (floatBitsToUint(col_of[i]) - IDX_BIAS);
        // rounded unconditionally, then selected: with the rounding inside
        // the condition the driver branched per element
        const float x = tk_round_bf16_split(s_acc[i] * exp(s_g[r] - s_g[c]));
        s_acc[i] = c <= r && c < t.c.rows ? x : 0.0;
      }
      const OUT16 p16 = OUT16(s_acc);
      coopMatStore(p16, smem, P_OFF + srt * 16 * SP + sct * 2, SP, gl_CooperativeMatrixLayoutRowMajor);
    }
    // (q h^T) * exp(g_i): all of this subgroup's o tiles lie in row tile
    // rt_w, so each component's factor is read once for all of them.
    if (rt_w < RT) {
      for (int i = 0; i < row_of.length(); ++i) {
        const float e = s_eg[rt_w * 16 + (floatBitsToUint(row_of[i]) - IDX_BIAS)];
        [[unroll]] for (uint j = 0; j < MAX_OT; ++j)
          if (j < OT && sg * OT + j < RT * CT) o_acc[j][i] *= e;
      }
    }
    barrier();  // P complete
    [[unroll]] for (uint jj = 0; jj < MAX_RT; ++jj) {
      [[unroll]] for (uint j = 0; j < MAX_OT; ++j) {
        const uint o = sg * OT + j;
        if (j < OT && o < RT * CT) {
          const uint rt = o / CT, ct = o % CT;
          if (jj <= rt) {  // P is lower triangular by tiles
            MAT_A pa;
            coopMatLoad(pa, smem, P_OFF + rt * 16 * SP + jj * 2, SP, gl_CooperativeMatrixLayoutRowMajor);
            MAT_B vb;
            coopMatLoad(vb, smem, V_OFF + jj * 16 * SVR + ct * 2, SVR, gl_CooperativeMatrixLayoutRowMajor);
            o_acc[j] = coopMatMulAdd(pa, vb, o_acc[j]);
          }
        }
      }
    }

    const uint scr = SCR_OFF + sg * 16 * SCR;
    [[unroll]] for (uint j = 0; j < MAX_OT; ++j) {
      const uint o = sg * OT + j;
      if (j < OT && o < RT * CT) {
        const uint rt = o / CT, ct = o % CT;
        if (rt * 16 < t.c.rows) {  // uniform per subgroup
          for (int i = 0; i < o_acc[j].length(); ++i) o_acc[j][i] = tk_round_bf16_split(o_acc[j][i] * pc.scale);
          const OUT16 ob = OUT16(o_acc[j]);
          coopMatStore(ob, smem, scr, SCR, gl_CooperativeMatrixLayoutRowMajor);
          subgroupMemoryBarrierShared();
          subgroupBarrier();
          // lanes past the chunk's last row store that row again (same words, same address)
          const uint orow = min(lane / 2, t.c.rows - 1 - rt * 16), half_ = lane % 2;
          const uvec4 x = smem[scr + orow * SCR + half_];
          const uint oe = pc.o_at + (t.c.token + rt * 16 + orow) * pc.o_token + t.ih * pc.o_head + 16 * ct + 8 * half_;
          if (O_UNALIGNED == 0u) {
            o_4[oe / 8] = x;
          } else {  // an even element: four words
            [[unroll]] for (uint w = 0; w < 4; ++w) o_w[oe / 2 + w] = x[w];
          }
          subgroupMemoryBarrierShared();
          subgroupBarrier();  // read before the next tile overwrites it
        }
      }
    }
    barrier();  // the scratch lies in the K-step area, which the next tile stages into
    t = tn;
  }
}
