// SPDX-License-Identifier: MIT
#version 460
//! requires GL_KHR_cooperative_matrix
//! requires GL_EXT_bfloat16
// Gated DeltaNet WY representation on bf16 tensor cores
// (VK_KHR_cooperative_matrix with VK_KHR_shader_bfloat16, bf16 x bf16 ->
// f32, 16x16x16):
//   u = A bf16(v * beta),   w = A bf16((k * beta) * exp(g)).
// The operands are bf16 in FLA too, so they enter the products as they
// are: no fp16 range handling. A in f32 enters as bf16 + bf16 residual.
//
// Geometry (the host relies on it):
// - persistent workgroups in pairs: workgroup 2s + 1 computes w (D = K
//   columns), 2s computes u (D = V), for the tiles (batch, chunk, value
//   head) s, s + pairs, s + 2 pairs, ... The global loads of the next tile
//   are issued before this tile's products, so they are in flight while it
//   is multiplied and stored;
// - WG = 512 or 256 invocations (16 or 8 subgroups of 32, at least BT /
//   16; the host takes 512 where its shared memory fits); every global
//   load is issued unconditionally, in 16-byte pieces, with clamped
//   addresses and selects afterwards (v is a view whose pieces, with
//   V_UNALIGNED, are read as the 32-bit words that hold them);
// - shared memory: the bf16 operand rows [BT][max(K, V) / 8 + 1] uvec4,
//   A in bf16 [BT][BT / 8 + 1] (and the residual for A in f32), then one
//   output scratch tile [16][3] per subgroup;
// - subgroup s owns row tile s % RT and the MT column tiles from
//   (s / RT) * MT; each result tile passes through its scratch so that it
//   leaves in whole 32-byte sectors, and rows past T are not written.
// Two workgroup barriers per tile: after staging, after the products.

#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_bfloat16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/gdn/recompute_wu_abi.h"
#include "../common/convert.glsl"
#include "../common/tile_walk.glsl"

TK_DECLARE_SPEC(TK_RECOMPUTE_WU_SPEC)
TK_DECLARE_PUSH(TK_RECOMPUTE_WU_PUSH)
const uint WG = gl_WorkGroupSize.x;           // 256 or 512 invocations
const uint OPS = TK_RECOMPUTE_WU_OPS(K, V);  // uvec4 per staged operand row
const uint SMEM_VEC4 = TK_RECOMPUTE_WU_BF16_VEC4(BT, K, V, A_DTYPE == TK_F32, WG);
// SHAPE (never set by the host) guards code paths that do not run: bit 0
// no products, 1 no result stores, 2 no operand conversion, 3 no global
// loads, 4 result tiles stored straight from registers. The driver
// allocates this kernel's registers best with them in place.

const uint NSG = WG / 32;
const uint RT = BT / 16;                  // row tiles
const uint SPR = NSG / RT;                // subgroups per row tile
const uint AS = BT / 8 + 1;               // uvec4 per staged A row
const uint A_BASE = BT * OPS;
const uint AL_BASE = A_BASE + BT * AS;    // residual part (A in f32)
const uint A_PIECES = BT * BT / 8;        // 8 values each
const uint A_SWEEPS = (A_PIECES + WG - 1) / WG;
const uint SCR = 3;                       // uvec4 per scratch row: 16 bf16 + 1 of skew
const uint SCR_SG = 16 * SCR;
const uint SCR_BASE = SMEM_VEC4 - NSG * SCR_SG;  // per-subgroup output scratch, after the staged tile

// Literal bounds (the largest over the specialisations the host allows),
// the specialised bound as a guard: the loops unroll, arrays stay in registers.
const uint MAX_OP_SWEEPS = 8;  // BT * D / 8 / WG <= 64 * 256 / 8 / 256
const uint MAX_A_SWEEPS = 2;   // 64 * 64 / 8 / 256
const uint MAX_RT = 4;
const uint MAX_MT = 8;

layout(std430, binding = 0) readonly buffer KBuf { uvec4 k8[]; };
layout(std430, binding = 1) readonly buffer VBuf { uvec4 v8[]; };
layout(std430, binding = 1) readonly buffer VWords { uint v_w[]; };  // V_UNALIGNED
layout(std430, binding = 2) readonly buffer BetaBuf { float beta[]; };
layout(std430, binding = 3) readonly buffer GBuf { float gate[]; };
layout(std430, binding = 4) readonly buffer ABuf { vec4 a4[]; };
layout(std430, binding = 4) readonly buffer ABufH { uvec4 a8[]; };  // 8 bf16 values
layout(std430, binding = 5) writeonly buffer WBuf { uvec4 w8[]; };
layout(std430, binding = 6) writeonly buffer UBuf { uvec4 u8[]; };
// The outputs as bf16 arrays, for whole tiles stored from registers.
layout(std430, binding = 5) writeonly buffer WBufB { bfloat16_t wb[]; };
layout(std430, binding = 6) writeonly buffer UBufB { bfloat16_t ub[]; };
layout(std430, binding = 7) readonly buffer IndexBuf { uvec4 index_table[]; };
#define TK_GDN_INDEX(i) index_table[i]
#include "../common/gdn_chunks.glsl"

shared uvec4 smem[SMEM_VEC4];

// Operands are rounded to bf16 (to nearest even) by tk_pack_bf16_split:
// three float operations instead of the integer rounding's five and a NaN
// test; its limits (NaN for +-Inf and beyond 5.19e33) are in
// include/tilekernels/gdn/recompute_wu.hpp.

// Two values converted to bf16 by the hardware's rounding: only for A's
// leading part, whose residual is taken from the value actually stored.
uint pack_bf16_any(vec2 x) { return pack32(bfloat16BitsToUintEXT(bf16vec2(x))); }

// 8 values scaled by f (and then by d for w), rounded to bf16.
uvec4 scale8(uvec4 x, float f, float d, bool is_w) {
  uvec4 r;
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    vec2 p = tk_bf16_pair(x[i]) * f;
    if (is_w) p *= d;
    r[i] = tk_pack_bf16_split(p);
  }
  return r;
}

// One tile: the u (or w) block of one (batch, chunk, value head).
struct Tile {
  uint h, kh;
  TkTileRows c;  // the chunk's rows
};

// The tile of digits d (e: chunk d.c's index entry, varlen); past the last
// batch, a tile of the last batch (a valid address whose loads go unused).
Tile tile_of(TkDigits d, uvec4 e) {
  Tile t;
  t.kh = d.kh;
  t.h = d.kh * pc.ratio + d.r;
  t.c = tk_gdn_rows(min(d.b, pc.batch - 1), d.c, e, pc.T, pc.chunks, BT, VARLEN != 0u, SLOTS != 0u);
  return t;
}

// Registers that carry one tile's global loads from the moment they are
// issued to the moment they are staged.
uvec4 raw[MAX_OP_SWEEPS];
float row_f[MAX_OP_SWEEPS], row_d[MAX_OP_SWEEPS];
vec4 a_lo[MAX_A_SWEEPS], a_hi[MAX_A_SWEEPS];  // A in f32
uvec4 a_raw[MAX_A_SWEEPS];                     // A in bf16, widened when staged

// Issues every global load of tile `t`, unconditionally (clamped addresses,
// selects when staging): a load inside a conditional block is waited for
// at the block's end on the H100, which would serialise the loads.
void load_tile(const bool IS_W, Tile t) {
  const uint tid = gl_LocalInvocationID.x;
  const uint H = pc.H;
  const uint D8 = (IS_W ? K : V) / 8;
  const uint OP_PIECES = BT * D8;
  const uint OP_SWEEPS = (OP_PIECES + WG - 1) / WG;
  [[unroll]] for (uint n = 0; n < MAX_OP_SWEEPS; ++n) {
    if (n < OP_SWEEPS) {  // specialisation constants only
      const uint p = min(tid + n * WG, OP_PIECES - 1);
      const uint r = min(p / D8, tk_last_row(t.c.rows)), c8 = p % D8;
      const uint tok = t.c.token + r, slot = t.c.slot + r;
      if ((SHAPE & 8) != 0) {
        raw[n] = uvec4(tok * 0x10001u);
        row_f[n] = 0.5;
        row_d[n] = -0.1;
      } else {
        if (IS_W) {
          raw[n] = k8[(tok * pc.Hg + t.kh) * (K / 8) + c8];
        } else {
          const uint e = pc.v_at + tok * pc.v_token + t.h * pc.v_head + 8 * c8;  // v is a view
          if (V_UNALIGNED == 0u)
            raw[n] = v8[e / 8];
          else
            raw[n] = TK_LOAD8_16(v_w, e);
        }
        row_f[n] = beta[slot * H + t.h];
        row_d[n] = IS_W ? gate[slot * H + t.h] : 0.0;
      }
    }
  }
  [[unroll]] for (uint n = 0; n < MAX_A_SWEEPS; ++n) {
    if (n < A_SWEEPS) {
      const uint p = min(tid + n * WG, A_PIECES - 1);
      const uint r = min(p / (BT / 8), tk_last_row(t.c.rows)), c = 8 * (p % (BT / 8));
      const uint e = ((t.c.slot + r) * H + t.h) * BT + c;
      if ((SHAPE & 8) != 0) {
        a_lo[n] = vec4(float(e));
        a_hi[n] = vec4(float(e + 1));
      } else if (A_DTYPE == TK_F32) {
        a_lo[n] = a4[e / 4];
        a_hi[n] = a4[e / 4 + 1];
      } else {
        a_raw[n] = a8[e / 8];
      }
    }
  }
}

// Operands scaled and rounded to bf16 (as FLA), A in bf16 (+ residual),
// rows and columns past the chunk's end zeroed, into shared memory.
void stage_tile(const bool IS_W, Tile t) {
  const uint tid = gl_LocalInvocationID.x;
  const uint D8 = (IS_W ? K : V) / 8;
  const uint OP_PIECES = BT * D8;
  const uint OP_SWEEPS = (OP_PIECES + WG - 1) / WG;
  [[unroll]] for (uint n = 0; n < MAX_OP_SWEEPS; ++n) {
    const uint p = tid + n * WG;
    if (n < OP_SWEEPS && p < OP_PIECES) {
      const uint r = p / D8, c8 = p % D8;
      const uvec4 x = r < t.c.rows ? raw[n] : uvec4(0u);
      smem[r * OPS + c8] = (SHAPE & 4) != 0 ? x : scale8(x, row_f[n], exp(row_d[n]), IS_W);
    }
  }
  [[unroll]] for (uint n = 0; n < MAX_A_SWEEPS; ++n) {
    const uint p = tid + n * WG;
    if (n < A_SWEEPS && p < A_PIECES) {
      const uint r = p / (BT / 8), c8 = p % (BT / 8), c = 8 * c8;
      // selects, so that NaN in the ignored columns or rows does not leak
      const bool live = r < t.c.rows;
      const bvec4 keep_lo = bvec4(live && c < t.c.rows, live && c + 1 < t.c.rows, live && c + 2 < t.c.rows,
                                  live && c + 3 < t.c.rows);
      const bvec4 keep_hi = bvec4(live && c + 4 < t.c.rows, live && c + 5 < t.c.rows, live && c + 6 < t.c.rows,
                                  live && c + 7 < t.c.rows);
      if ((SHAPE & 4) != 0) {
        smem[A_BASE + r * AS + c8] = A_DTYPE == TK_F32 ? floatBitsToUint(a_lo[n] + a_hi[n]) : a_raw[n];
        continue;
      }
      // A whole chunk in bf16 (uniform): nothing to mask, the words go to
      // shared memory as loaded, saving the masks, unpacking and repacking
      // below.
      if (A_DTYPE != TK_F32 && t.c.rows == BT) {
        smem[A_BASE + r * AS + c8] = a_raw[n];
        continue;
      }
      const vec4 a_l = A_DTYPE == TK_F32 ? a_lo[n] : vec4(tk_bf16_pair(a_raw[n].x), tk_bf16_pair(a_raw[n].y));
      const vec4 a_h = A_DTYPE == TK_F32 ? a_hi[n] : vec4(tk_bf16_pair(a_raw[n].z), tk_bf16_pair(a_raw[n].w));
      const vec4 lo = mix(vec4(0.0), a_l, keep_lo), hi = mix(vec4(0.0), a_h, keep_hi);
      const uvec4 ph = uvec4(pack_bf16_any(lo.xy), pack_bf16_any(lo.zw), pack_bf16_any(hi.xy), pack_bf16_any(hi.zw));
      smem[A_BASE + r * AS + c8] = ph;
      if (A_DTYPE == TK_F32) {
        const vec4 rl = lo - vec4(tk_bf16_pair(ph.x), tk_bf16_pair(ph.y));
        const vec4 rh = hi - vec4(tk_bf16_pair(ph.z), tk_bf16_pair(ph.w));
        smem[AL_BASE + r * AS + c8] =
            uvec4(pack_bf16_any(rl.xy), pack_bf16_any(rl.zw), pack_bf16_any(rh.xy), pack_bf16_any(rh.zw));
      }
    }
  }
}

// Products from the staged tile, results to memory. Ends with every
// subgroup done with shared memory (a workgroup barrier).
void multiply_store(const bool IS_W, Tile t) {
  const uint sg = gl_SubgroupID;
  const uint rt = sg % RT, cs = sg / RT;
  const uint D = IS_W ? K : V;
  const uint D8 = D / 8;
  const uint CT = D / 16;
  const uint MT = (CT + SPR - 1) / SPR;
  const uint ct0 = cs * MT;
  coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[MAX_MT];
  [[unroll]] for (uint m = 0; m < MAX_MT; ++m)
    acc[m] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
  [[unroll]] for (uint kk = 0; kk < MAX_RT; ++kk) {
    if (kk < RT && (SHAPE & 1) == 0) {
      coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> am, al;
      coopMatLoad(am, smem, A_BASE + rt * 16 * AS + kk * 2, AS, gl_CooperativeMatrixLayoutRowMajor);
      if (A_DTYPE == TK_F32)
        coopMatLoad(al, smem, AL_BASE + rt * 16 * AS + kk * 2, AS, gl_CooperativeMatrixLayoutRowMajor);
      [[unroll]] for (uint m = 0; m < MAX_MT; ++m) {
        if (m < MT) {
          // a subgroup whose range runs past the last column tile repeats
          // that tile (not stored)
          coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> xb;
          coopMatLoad(xb, smem, kk * 16 * OPS + min(ct0 + m, CT - 1) * 2, OPS, gl_CooperativeMatrixLayoutRowMajor);
          acc[m] = coopMatMulAdd(am, xb, acc[m]);
          if (A_DTYPE == TK_F32) acc[m] = coopMatMulAdd(al, xb, acc[m]);
        }
      }
    }
  }
  // Every subgroup is done with the staged tile: the next one may be staged
  // while this one's results leave (through scratch of their own).
  barrier();

  const uint o_stride = pc.H * D;  // bf16 elements from one row to the next
  const uint o_base = ((t.c.slot + rt * 16) * pc.H + t.h) * D;
  // uniform per subgroup:
  const bool whole = rt * 16 + 16 <= t.c.rows, partial = !whole && rt * 16 < t.c.rows;
  const uint lane = gl_SubgroupInvocationID;
  const uint scr = SCR_BASE + sg * SCR_SG;
  [[unroll]] for (uint m = 0; m < MAX_MT; ++m) {
    if (m < MT && ct0 + m < CT) {
      for (int i = 0; i < acc[m].length(); ++i) acc[m][i] = tk_round_bf16_split(acc[m][i]);
      coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> ob =
          coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(acc[m]);
      // Each tile leaves through this subgroup's scratch: one 16-byte store
      // per lane (whole 32-byte sectors), rows past the chunk's end left alone. (Stored
      // straight from registers, ablation bit 4, the kernel took 2x as long.)
      if ((SHAPE & 2) != 0) {
        if (float(ob[0]) == 1234.5) coopMatStore(ob, wb, o_base, o_stride, gl_CooperativeMatrixLayoutRowMajor);
      } else if ((SHAPE & 16) != 0 && whole) {
        if (IS_W)
          coopMatStore(ob, wb, o_base + (ct0 + m) * 16, o_stride, gl_CooperativeMatrixLayoutRowMajor);
        else
          coopMatStore(ob, ub, o_base + (ct0 + m) * 16, o_stride, gl_CooperativeMatrixLayoutRowMajor);
      } else if (whole || partial) {  // in a tail chunk's last rows, only those before its end are written
        coopMatStore(ob, smem, scr, SCR, gl_CooperativeMatrixLayoutRowMajor);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        const uint orow = lane / 2, half_ = lane % 2;
        if (rt * 16 + orow < t.c.rows) {
          const uvec4 x = smem[scr + orow * SCR + half_];
          const uint o8 = (o_base + orow * o_stride) / 8 + (ct0 + m) * 2 + half_;
          if (IS_W)
            w8[o8] = x;
          else
            u8[o8] = x;
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();  // read before the next tile overwrites it
      }
    }
  }
}

// Persistent: pair slot s (workgroups 2s and 2s + 1, u and w) walks the
// tiles s, s + pairs, ...; the loads of the next tile are in flight while
// this one is multiplied and stored, and (varlen) the index entry of the
// tile after it.
void walk(const bool IS_W, uint slot) {
  const uvec3 radix = uvec3(pc.ratio, pc.Hg, pc.chunks);
  const TkDigits stride = tk_digits_of(pc.stride, radix);
  const bool varlen = VARLEN != 0u;
  // One set of digits lives through the loop: those of the next tile (dn),
  // whose index entry (en, varlen only) is read a tile ahead of its use.
  TkDigits dn = tk_digits_of(slot, radix);
  bool live = dn.b < pc.batch;
  Tile t = tile_of(dn, tk_gdn_entry(pc.N, dn.c, varlen));
  load_tile(IS_W, t);
  dn = tk_digits_add(dn, stride, radix);
  uvec4 en = tk_gdn_entry(pc.N, dn.c, varlen);
  while (live) {  // uniform per workgroup
    stage_tile(IS_W, t);
    live = dn.b < pc.batch;
    const Tile n = tile_of(dn, en);  // past the end: unused loads
    dn = tk_digits_add(dn, stride, radix);
    en = tk_gdn_entry(pc.N, dn.c, varlen);
    load_tile(IS_W, n);
    barrier();
    multiply_store(IS_W, t);
    t = n;
  }
}

void main() {
  const uint group = gl_WorkGroupID.x + pc.group_offset;
  if (group % 2 == 1)
    walk(true, group >> 1);
  else
    walk(false, group >> 1);
}
