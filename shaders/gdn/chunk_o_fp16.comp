// SPDX-License-Identifier: MIT
#version 460
//! requires GL_KHR_cooperative_matrix
// Gated DeltaNet chunk_fwd_o on cooperative matrices (fp16 operands, f32
// accumulators; the device's tile shape, common/mma.glsl), with every
// global load of a tile issued at once (one memory round trip per tile).
// TILES_PER_GROUP tiles per workgroup (1: holding a next tile's registers
// costs more occupancy than the overlap gains).
//
// - A workgroup (WR x WC subgroups of SUBGROUP invocations, WR = BT / 16;
//   WC = 4 gives 16 subgroups at BT = 64) owns TILES_PER_GROUP consecutive
//   tiles (chunk, head, V tile): the GQA heads sharing q and k run back to
//   back.
// - Every K stage of a tile (q, k, h), its v_new and its g live in registers
//   (NK = K / KC stage sets). Right after a set is converted to fp16 and
//   stored in shared memory, the same registers are refilled with that part
//   of the next tile, so a whole tile of loads is in flight while this one
//   is multiplied, gated, rounded and written.
// - One shared K stage buffer; after the K loop it holds v, A and one 16x16
//   f32 scratch tile per subgroup.
//
// fp16 range: a tile with a finite value beyond 65504
// (an input or bf16(A)) is recomputed by the scalar f32 algorithm
// (chunk_o_scalar) and the workgroup goes on with the next tile.
//
// o is a view: 16-byte stores where its rows start at multiples of 8
// elements, four 32-bit words each with O_UNALIGNED (even elements).
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require

#extension GL_GOOGLE_include_directive : require
#include "tilekernels/gdn/chunk_o_abi.h"

TK_DECLARE_SPEC(TK_CHUNK_O_SPEC)
const uint WG = gl_WorkGroupSize.x;  // SUBGROUP * WR * WC
const uint TILES_PER_GROUP = 1;                  // tiles per workgroup
const uint KC = KSTAGE;              // K columns per shared stage

#define CHUNK_O_GROUP 4u
#include "../common/gdn_chunk_o.glsl"

#include "../common/mma.glsl"

const uint WR = BT / 16;
const uint NW = WR * WC;             // subgroups
const uint OT = BV / WC / 16;        // o tiles per subgroup
const uint NB = WR * (WR + 1) / 2;   // lower-triangle blocks of q k^T
const uint NA = (NB + NW - 1) / NW;  // of them per subgroup, at most
const uint NK = KDIM / KC;           // K stages
// Shared memory in uvec4 units (8 fp16 or 4 f32 each).
const uint SQ = KC / 8 + 1;          // stage row stride
const uint SV = BV / 8 + 1;
const uint SA = BT / 8 + 1;
const uint SS = 5;                   // f32 scratch row: 16 floats + 4 of padding
const uint Q_OFF = 0;
const uint K_OFF = BT * SQ;
const uint H_OFF = 2 * BT * SQ;
const uint V_OFF = 0;
const uint A_OFF = BT * SV;
const uint SCR_OFF = A_OFF + BT * SA;
const uint REGION = TK_CHUNK_O_FP16_REGION(BT, BV, WC, KC);
shared uvec4 smem[REGION];
shared float gsh[BT];
shared uint bad_flag;

// uvec4 loads (8 bf16) per invocation: q and k, h per stage; v.
const uint QN = BT * KC / 8, HN = BV * KC / 8, VN = BT * BV / 8;
const uint RQ = (QN + WG - 1) / WG, RH = (HN + WG - 1) / WG, RV = (VN + WG - 1) / WG;

// The next tile's inputs in flight: every K stage, v and g.
uvec4 rq[NK * RQ], rk[NK * RQ], rh[NK * RH], rv[RV];
float rg;

void load_stage(ChunkOTile s, uint tid, uint kc) {
  [[unroll]] for (uint r = 0; r < RQ; ++r) {
    const uint u = tid + r * WG, row = u / (KC / 8), c8 = u % (KC / 8);
    rq[kc * RQ + r] = uvec4(0);
    rk[kc * RQ + r] = uvec4(0);
    if (u < QN && row < s.c.rows) {
      const uint e = (((s.c.token + row) * pc.Hg + s.kh) * KDIM + kc * KC) / 8 + c8;
      rq[kc * RQ + r] = q_4[e];
      rk[kc * RQ + r] = k_4[e];
    }
  }
  [[unroll]] for (uint r = 0; r < RH; ++r) {
    const uint u = tid + r * WG, row = u / (KC / 8), c8 = u % (KC / 8);
    if (u < HN)
      rh[kc * RH + r] = h_4[(((s.c.chunk * pc.H + s.ih) * VDIM + s.v0 + row) * KDIM + kc * KC) / 8 + c8];
  }
}

void load_v(ChunkOTile s, uint tid) {
  [[unroll]] for (uint r = 0; r < RV; ++r) {
    const uint u = tid + r * WG, row = u / (BV / 8), c8 = u % (BV / 8);
    rv[r] = uvec4(0);
    if (u < VN && row < s.c.rows) rv[r] = v_4[(((s.c.slot + row) * pc.H + s.ih) * VDIM + s.v0) / 8 + c8];
  }
}

void load_g(ChunkOTile s, uint tid) {
  rg = tid < s.c.rows ? g_f[(s.c.slot + tid) * pc.H + s.ih] : 0.0;
}

void put_stage(uint kc, uint tid, inout uint bad) {
  [[unroll]] for (uint r = 0; r < RQ; ++r) {
    const uint u = tid + r * WG;
    if (u < QN) {
      const uint o = (u / (KC / 8)) * SQ + u % (KC / 8);
      smem[o + Q_OFF] = tk_bf16x8_to_f16x8(rq[kc * RQ + r], bad);
      smem[o + K_OFF] = tk_bf16x8_to_f16x8(rk[kc * RQ + r], bad);
    }
  }
  [[unroll]] for (uint r = 0; r < RH; ++r) {
    const uint u = tid + r * WG;
    if (u < HN) smem[H_OFF + (u / (KC / 8)) * SQ + u % (KC / 8)] = tk_bf16x8_to_f16x8(rh[kc * RH + r], bad);
  }
}

void main() {
  const uint first = (gl_WorkGroupID.x + pc.group_offset) * TILES_PER_GROUP;
  if (first >= pc.total_groups) return;  // uniform over the workgroup; total_groups counts tiles here
  const uint tid = gl_LocalInvocationID.x;
  const uint warp = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint wr = warp / WC, wc = warp % WC;
  // This subgroup's f32 scratch tile, read back in pieces (mma.glsl).
  const uint scr = SCR_OFF + warp * 16 * SS;

  // This subgroup's q k^T blocks (row block ar, column block ac <= ar).
  uint ar[NA], ac[NA];
  [[unroll]] for (uint a = 0; a < NA; ++a) {
    uint b = warp + a * NW, r = 0;
    [[unroll]] for (uint x = 1; x < WR; ++x)
      if (b >= r + 1) {
        b -= r + 1;
        ++r;
      }
    ar[a] = r;
    ac[a] = b;
  }

  ChunkOTile s = chunk_o_tile(first);
  [[unroll]] for (uint kc = 0; kc < NK; ++kc) load_stage(s, tid, kc);
  load_v(s, tid);
  load_g(s, tid);

  for (uint j = 0; j < TILES_PER_GROUP; ++j) {
    const uint unit = first + j;
    if (unit >= pc.total_groups) break;  // uniform
    const bool more = j + 1 < TILES_PER_GROUP && unit + 1 < pc.total_groups;
    const ChunkOTile nx = chunk_o_tile(more ? unit + 1 : unit);

    TK_MMA_C acc_o[OT][TK_MMA_PARTS];
    TK_MMA_C acc_a[NA][TK_MMA_PARTS];
    [[unroll]] for (uint n = 0; n < OT; ++n) TK_MMA_FILL(acc_o[n], 0.0);
    [[unroll]] for (uint a = 0; a < NA; ++a) TK_MMA_FILL(acc_a[a], 0.0);

    uint bad = 0u;
    [[unroll]] for (uint kc = 0; kc < NK; ++kc) {
      barrier();  // the stage buffer (at kc = 0: the previous tile's v, A, scratch and g) is free
      if (kc == 0) {
        if (tid < BT) gsh[tid] = rg;
        if (tid == 0) bad_flag = 0;
        if (more) load_g(nx, tid);
      }
      put_stage(kc, tid, bad);
      barrier();
      if (more) load_stage(nx, tid, kc);
      [[unroll]] for (uint ks = 0; ks < KC / 16; ++ks) {
        TK_MMA_A qa[TK_MMA_PARTS];
        TK_MMA_LOAD_A_ROW(qa, smem, Q_OFF + 16 * wr * SQ + 2 * ks, SQ);
        [[unroll]] for (uint n = 0; n < OT; ++n) {
          TK_MMA_B hb[TK_MMA_PARTS];  // h^T block: column n of it is row n of h
          TK_MMA_LOAD_B_COL(hb, smem, H_OFF + (wc * OT + n) * 16 * SQ + 2 * ks, SQ);
          TK_MMA(acc_o[n], qa, hb);
        }
        [[unroll]] for (uint a = 0; a < NA; ++a) {
          if (warp + a * NW < NB) {
            TK_MMA_A qb[TK_MMA_PARTS];
            TK_MMA_B kb[TK_MMA_PARTS];
            TK_MMA_LOAD_A_ROW(qb, smem, Q_OFF + 16 * ar[a] * SQ + 2 * ks, SQ);
            TK_MMA_LOAD_B_COL(kb, smem, K_OFF + 16 * ac[a] * SQ + 2 * ks, SQ);
            TK_MMA(acc_a[a], qb, kb);
          }
        }
      }
    }
    barrier();  // the stage is consumed: v, A and the scratch tiles take its place
    [[unroll]] for (uint r = 0; r < RV; ++r) {
      const uint u = tid + r * WG;
      if (u < VN) smem[V_OFF + (u / (BV / 8)) * SV + u % (BV / 8)] = tk_bf16x8_to_f16x8(rv[r], bad);
    }
    if (more) load_v(nx, tid);

    // bf16(tril_incl(q k^T * exp(gi - gj))) as fp16 into the A region.
    // (TK_MMA_SYNC in control flow uniform over the workgroup, mma.glsl.)
    [[unroll]] for (uint a = 0; a < NA; ++a) {
      const bool mine = warp + a * NW < NB;  // uniform per subgroup
      if (mine) TK_MMA_STORE_C_ROW(acc_a[a], smem, scr, SS);
      TK_MMA_SYNC();
      [[unroll]] for (uint x = 0; x < TK_MMA_MAX_PIECES; ++x) {
        const uint piece = lane + x * SUBGROUP, lr = piece / 2, lh = piece % 2;  // scratch row, 8-column half
        if (!mine || !tk_mma_piece(x, lane)) continue;
        const uint i = 16 * ar[a] + lr;
        const float gi = gsh[i];
        const uvec4 x0 = smem[scr + lr * SS + 2 * lh], x1 = smem[scr + lr * SS + 2 * lh + 1];
        uvec4 packed;
        [[unroll]] for (uint e = 0; e < 4; ++e) {
          vec2 x;
          [[unroll]] for (uint p = 0; p < 2; ++p) {
            const uint m = 2 * e + p;
            const uint jj = 16 * ac[a] + 8 * lh + m;
            const float val = uintBitsToFloat(m < 4 ? x0[m] : x1[m - 4]) * exp(gi - gsh[jj]);
            x[p] = jj <= i ? round_bf16(val) : 0.0;
            if (!(abs(x[p]) < 65536.0)) bad |= 1u;  // beyond fp16, Inf or NaN
          }
          packed[e] = packHalf2x16(x);
        }
        smem[A_OFF + i * SA + 2 * ac[a] + lh] = packed;
      }
      TK_MMA_SYNC();
    }
    if (bad != 0u) atomicOr(bad_flag, 1u);
    barrier();  // A, v and the flag complete
    if (bad_flag != 0u) {
      chunk_o_scalar(s, tid);
    } else {
      // o = scale * (exp(gi) (q h^T) + A v), one 16-column tile at a time.
      TK_MMA_A af[WR][TK_MMA_PARTS];
      [[unroll]] for (uint jt = 0; jt < WR; ++jt)
        if (jt <= wr) TK_MMA_LOAD_A_ROW(af[jt], smem, A_OFF + 16 * wr * SA + 2 * jt, SA);
      [[unroll]] for (uint n = 0; n < OT; ++n) {
        const uint c16 = wc * OT + n;  // 16-column tile within the V tile
        TK_MMA_C av[TK_MMA_PARTS];
        TK_MMA_FILL(av, 0.0);
        [[unroll]] for (uint jt = 0; jt < WR; ++jt) {
          if (jt <= wr) {
            TK_MMA_B vb[TK_MMA_PARTS];
            TK_MMA_LOAD_B_ROW(vb, smem, V_OFF + 16 * jt * SV + 2 * c16, SV);
            TK_MMA(av, af[jt], vb);
          }
        }
        // q h^T, then A v, through the scratch tile; a lane keeps its
        // pieces of q h^T in registers between the two.
        vec4 qh[2 * TK_MMA_MAX_PIECES];
        TK_MMA_STORE_C_ROW(acc_o[n], smem, scr, SS);
        TK_MMA_SYNC();
        [[unroll]] for (uint x = 0; x < TK_MMA_MAX_PIECES; ++x) {
          const uint piece = lane + x * SUBGROUP, lr = piece / 2, lh = piece % 2;
          if (tk_mma_piece(x, lane)) {
            qh[2 * x] = uintBitsToFloat(smem[scr + lr * SS + 2 * lh]);
            qh[2 * x + 1] = uintBitsToFloat(smem[scr + lr * SS + 2 * lh + 1]);
          }
        }
        TK_MMA_SYNC();
        TK_MMA_STORE_C_ROW(av, smem, scr, SS);
        TK_MMA_SYNC();
        [[unroll]] for (uint x = 0; x < TK_MMA_MAX_PIECES; ++x) {
          const uint piece = lane + x * SUBGROUP, lr = piece / 2, lh = piece % 2;
          const uint i = 16 * wr + lr;
          if (tk_mma_piece(x, lane) && i < s.c.rows) {
            const float eg = exp(gsh[i]);
            const vec4 y0 = (qh[2 * x] * eg + uintBitsToFloat(smem[scr + lr * SS + 2 * lh])) * pc.scale;
            const vec4 y1 = (qh[2 * x + 1] * eg + uintBitsToFloat(smem[scr + lr * SS + 2 * lh + 1])) * pc.scale;
            const uvec4 packed = uvec4(tk_f32_to_bf16(y0.x) | (tk_f32_to_bf16(y0.y) << 16),
                                       tk_f32_to_bf16(y0.z) | (tk_f32_to_bf16(y0.w) << 16),
                                       tk_f32_to_bf16(y1.x) | (tk_f32_to_bf16(y1.y) << 16),
                                       tk_f32_to_bf16(y1.z) | (tk_f32_to_bf16(y1.w) << 16));
            // element 0 of the tile's row of o, then this piece's 8
            const uint oe = chunk_o_element(s.c.token + i, s.ih) + s.v0 + 16 * c16 + 8 * lh;
            if (O_UNALIGNED == 0u) {
              o_4[oe / 8] = packed;
            } else {  // an even element: four words
              [[unroll]] for (uint w = 0; w < 4; ++w) o_w[oe / 2 + w] = packed[w];
            }
          }
        }
        TK_MMA_SYNC();
      }
    }
    s = nx;
  }
}
