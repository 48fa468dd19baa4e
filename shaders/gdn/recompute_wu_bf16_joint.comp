// SPDX-License-Identifier: MIT
#version 460
//! requires GL_KHR_cooperative_matrix
//! requires GL_EXT_bfloat16
// Gated DeltaNet WY representation on bf16 tensor cores, u and w of a
// chunk in one workgroup (A in bf16, BT = 64, K and V <= 128):
//   u = A bf16(v * beta),   w = A bf16((k * beta) * exp(g)).
//
// Why a second kernel beside recompute_wu_bf16.comp: that one gives u and
// w to two workgroups, each with one tile's loads (24 KB) in flight while
// it multiplies the previous tile. Here one workgroup issues a whole
// chunk's loads (v, k and A once: 40 KB at K = V = 128) before multiplying
// the previous chunk, so more bytes are in flight per SM and A is read
// once. Its time per tile is close to the memory floor's, and the rest is
// instruction issue (one workgroup per SM at 123 registers): every
// instruction per tile counts (bench/notes/2026-11-gdn-chunk-o-recompute-wu.md).
//
// Geometry (the host relies on it):
// - 512 invocations (16 subgroups of 32), persistent: workgroup s walks the
//   tiles (batch, chunk, value head) s, s + grid, s + 2 grid, ...; the next
//   tile's loads are issued before this tile's products, and (varlen) the
//   index entry of the tile after it;
// - every global load of a tile is issued unconditionally in 16-byte pieces
//   (addresses clamped to the chunk's rows; rows past its end zeroed when
//   staged); v is a view whose pieces, with V_UNALIGNED, are read as the
//   32-bit words that hold them (TK_LOAD8_16); invocation i = 32 * subgroup + lane stages pieces i, i + 512,
//   ... of each operand and piece i of A;
// - shared memory, uvec4: v rows [64][V / 8 + 1], k rows [64][K / 8 + 1],
//   A rows [64][9] (44032 bytes at K = V = 128);
// - subgroup s owns row tile s / 4 and column tiles (s % 4) * MT.. of both
//   u and w, and skips A's tiles above the diagonal (A is lower
//   triangular); each result tile leaves through a 16 x 16 bf16 scratch in the
//   A rows 4s..4s+3, which only subgroup s stages (A piece i is row i / 8),
//   so the scratch needs no workgroup barrier of its own; lanes whose row
//   is past T store the chunk's last row again (no branch per store).
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

TK_DECLARE_SPEC(TK_RECOMPUTE_WU_SPEC)  // the host passes BT = 64, A in bf16 and 512 invocations
TK_DECLARE_PUSH(TK_RECOMPUTE_WU_PUSH)
const uint WG = 512;
const uint RT = BT / 16;           // row tiles
const uint K8 = K / 8, V8 = V / 8;
const uint OPK = K8 + 1, OPV = V8 + 1;  // uvec4 per staged row (one of skew)
const uint AS = BT / 8 + 1;        // uvec4 per staged A row
const uint V_BASE = 0;
const uint K_BASE = BT * OPV;
const uint A_BASE = K_BASE + BT * OPK;
const uint SMEM_VEC4 = TK_RECOMPUTE_WU_JOINT_VEC4(K, V);  // == A_BASE + BT * AS
const uint CTV = V / 16, CTK = K / 16;
const uint MTV = (CTV + 3) / 4, MTK = (CTK + 3) / 4;  // column tiles per subgroup
const uint V_SWEEPS = (BT * V8 + WG - 1) / WG;
const uint K_SWEEPS = (BT * K8 + WG - 1) / WG;
const uint MAX_SWEEPS = 2;  // 64 * 128 / 8 / 512
const uint MAX_MT = 2;      // 8 column tiles over 4 subgroups

layout(std430, binding = 0) readonly buffer KBuf { uvec4 k8[]; };
layout(std430, binding = 1) readonly buffer VBuf { uvec4 v8[]; };
layout(std430, binding = 1) readonly buffer VWords { uint v_w[]; };  // V_UNALIGNED
layout(std430, binding = 2) readonly buffer BetaBuf { float beta[]; };
layout(std430, binding = 3) readonly buffer GBuf { float gate[]; };
layout(std430, binding = 4) readonly buffer ABuf { uvec4 a8[]; };  // 8 bf16 values
layout(std430, binding = 5) writeonly buffer WBuf { uvec4 w8[]; };
layout(std430, binding = 6) writeonly buffer UBuf { uvec4 u8[]; };
layout(std430, binding = 7) readonly buffer IndexBuf { uvec4 index_table[]; };
#define TK_GDN_INDEX(i) index_table[i]
#include "../common/gdn_chunks.glsl"

shared uvec4 smem[SMEM_VEC4];

// 8 bf16 values times f, rounded to bf16.
uvec4 scale8(uvec4 x, float f) {
  uvec4 r;
  [[unroll]] for (uint i = 0; i < 4; ++i) r[i] = tk_pack_bf16_split(tk_bf16_pair(x[i]) * f);
  return r;
}

struct Tile {
  uint h, kh;
  TkTileRows c;  // the chunk's rows
};

// Past the last batch: a tile of the last batch (valid addresses, unused
// loads). e: the index entry of chunk d.c (varlen).
Tile tile_of(TkDigits d, uvec4 e) {
  Tile t;
  t.kh = d.kh;
  t.h = d.kh * pc.ratio + d.r;
  t.c = tk_gdn_rows(min(d.b, pc.batch - 1), d.c, e, pc.T, pc.chunks, BT, VARLEN != 0u, SLOTS != 0u);
  return t;
}

// One tile's loads, from issue to staging.
uvec4 raw_v[MAX_SWEEPS], raw_k[MAX_SWEEPS], raw_a;
float beta_v[MAX_SWEEPS], beta_k[MAX_SWEEPS], g_k[MAX_SWEEPS];

uint invocation() { return gl_SubgroupID * 32 + gl_SubgroupInvocationID; }

void load_tile(Tile t) {
  const uint i = invocation();
  const uint H = pc.H;
  [[unroll]] for (uint n = 0; n < MAX_SWEEPS; ++n) {
    if (n < V_SWEEPS) {
      const uint p = min(i + n * WG, BT * V8 - 1);
      const uint r = min(p / V8, tk_last_row(t.c.rows));
      const uint e = pc.v_at + (t.c.token + r) * pc.v_token + t.h * pc.v_head + 8 * (p % V8);  // v is a view
      if (V_UNALIGNED == 0u)
        raw_v[n] = v8[e / 8];
      else
        raw_v[n] = TK_LOAD8_16(v_w, e);
      beta_v[n] = beta[(t.c.slot + r) * H + t.h];
    }
    if (n < K_SWEEPS) {
      const uint p = min(i + n * WG, BT * K8 - 1);
      const uint r = min(p / K8, tk_last_row(t.c.rows));
      raw_k[n] = k8[((t.c.token + r) * pc.Hg + t.kh) * K8 + p % K8];
      if (K == V) {  // same rows as the v pieces
        beta_k[n] = beta_v[n];
      } else {
        beta_k[n] = beta[(t.c.slot + r) * H + t.h];
      }
      g_k[n] = gate[(t.c.slot + r) * H + t.h];
    }
  }
  const uint r = min(i / (BT / 8), tk_last_row(t.c.rows));
  raw_a = a8[(((t.c.slot + r) * H + t.h) * BT) / 8 + i % (BT / 8)];
}

// Operands scaled and rounded to bf16 (as FLA), A as loaded; rows and
// columns past the chunk's end zeroed (in a branch of tail chunks only:
// selects in every tile cost 2% on the H100).
void stage_tile(Tile t) {
  const uint i = invocation();
  if (t.c.rows < BT) {  // uniform
    [[unroll]] for (uint n = 0; n < MAX_SWEEPS; ++n) {
      if ((i + n * WG) / V8 >= t.c.rows) raw_v[n] = uvec4(0u);
      if ((i + n * WG) / K8 >= t.c.rows) raw_k[n] = uvec4(0u);
    }
  }
  [[unroll]] for (uint n = 0; n < MAX_SWEEPS; ++n) {
    const uint p = i + n * WG;
    if (n < V_SWEEPS && p < BT * V8) {
      const uint r = p / V8;
      smem[V_BASE + r * OPV + p % V8] = scale8(raw_v[n], beta_v[n]);
    }
    if (n < K_SWEEPS && p < BT * K8) {
      const uint r = p / K8;
      smem[K_BASE + r * OPK + p % K8] = scale8(raw_k[n], beta_k[n] * exp(g_k[n]));
    }
  }
  const uint r = i / (BT / 8), c8 = i % (BT / 8), c = 8 * c8;
  uvec4 a = raw_a;
  if (t.c.rows < BT) {  // uniform: only a tail chunk has rows or columns to clear
    const bool live = r < t.c.rows;
    [[unroll]] for (uint j = 0; j < 4; ++j) {
      const uint lo = live && c + 2 * j < t.c.rows ? 0x0000ffffu : 0u;
      const uint hi = live && c + 2 * j + 1 < t.c.rows ? 0xffff0000u : 0u;
      a[j] &= lo | hi;
    }
  }
  smem[A_BASE + r * AS + c8] = a;
}

// The subgroup's result tile leaves through its scratch (16 rows of 32
// bytes in A rows it stages itself), one 16-byte store per lane. `row` is
// the lane's output row in the tile, clamped to the chunk's last row
// (lanes past it repeat that row: the same words to the same address) and
// `at` its row index in w or u, (slot + rt 16 + row) H + h.
void store_tile(const bool IS_W, coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc, uint row,
                uint at, uint ct, uint scr) {
  const uint half_ = gl_SubgroupInvocationID % 2;
  for (int e = 0; e < acc.length(); ++e) acc[e] = tk_round_bf16_split(acc[e]);
  coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> ob =
      coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(acc);
  coopMatStore(ob, smem, scr, 2, gl_CooperativeMatrixLayoutRowMajor);
  subgroupMemoryBarrierShared();
  subgroupBarrier();
  const uvec4 x = smem[scr + 2 * row + half_];
  if (IS_W)
    w8[at * K8 + ct * 2 + half_] = x;
  else
    u8[at * V8 + ct * 2 + half_] = x;
  subgroupMemoryBarrierShared();
  subgroupBarrier();  // read before the next tile overwrites it
}

// Products from the staged tile, results to memory.
void multiply_store(Tile t) {
  const uint sg = gl_SubgroupID;
  // A is lower triangular by tiles, so row tile rt takes rt + 1 of the RT
  // products; the four subgroups of a column group (sg % 4: on NVIDIA the
  // scheduler that issues them) hold one row tile each, so that every
  // scheduler issues the same number.
  const uint rt = sg / 4, cs = sg % 4;
  coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc_u[MAX_MT], acc_w[MAX_MT];
  [[unroll]] for (uint m = 0; m < MAX_MT; ++m) {
    acc_u[m] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
    acc_w[m] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
  }
  [[unroll]] for (uint kk = 0; kk < RT; ++kk) {
    if (kk > rt) continue;  // A's tiles above the diagonal are zero (uniform per subgroup)
    coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> am;
    coopMatLoad(am, smem, A_BASE + rt * 16 * AS + kk * 2, AS, gl_CooperativeMatrixLayoutRowMajor);
    [[unroll]] for (uint m = 0; m < MAX_MT; ++m) {
      // a subgroup whose range runs past the last column tile repeats that
      // tile (not stored)
      coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> xb;
      if (m < MTV) {
        coopMatLoad(xb, smem, V_BASE + kk * 16 * OPV + min(cs * MTV + m, CTV - 1) * 2, OPV,
                    gl_CooperativeMatrixLayoutRowMajor);
        acc_u[m] = coopMatMulAdd(am, xb, acc_u[m]);
      }
      if (m < MTK) {
        coopMatLoad(xb, smem, K_BASE + kk * 16 * OPK + min(cs * MTK + m, CTK - 1) * 2, OPK,
                    gl_CooperativeMatrixLayoutRowMajor);
        acc_w[m] = coopMatMulAdd(am, xb, acc_w[m]);
      }
    }
  }
  barrier();  // every subgroup is done with the staged tile
  if (rt * 16 < t.c.rows) {  // uniform per subgroup
    const uint scr = A_BASE + gl_SubgroupID * 4 * AS;
    const uint row = min(gl_SubgroupInvocationID / 2, t.c.rows - 1 - rt * 16);
    const uint at = (t.c.slot + rt * 16 + row) * pc.H + t.h;
    [[unroll]] for (uint m = 0; m < MAX_MT; ++m) {
      if (m < MTV && cs * MTV + m < CTV) store_tile(false, acc_u[m], row, at, cs * MTV + m, scr);
      if (m < MTK && cs * MTK + m < CTK) store_tile(true, acc_w[m], row, at, cs * MTK + m, scr);
    }
  }
}

void main() {
  const uvec3 radix = uvec3(pc.ratio, pc.Hg, pc.chunks);
  const TkDigits stride = tk_digits_of(pc.stride, radix);
  const bool varlen = VARLEN != 0u;
  // One set of digits lives through the loop: those of the next tile (dn),
  // whose index entry (en, varlen only) is read a tile ahead of its use.
  TkDigits dn = tk_digits_of(gl_WorkGroupID.x + pc.group_offset, radix);
  bool live = dn.b < pc.batch;
  Tile t = tile_of(dn, tk_gdn_entry(pc.N, dn.c, varlen));
  load_tile(t);
  dn = tk_digits_add(dn, stride, radix);
  uvec4 en = tk_gdn_entry(pc.N, dn.c, varlen);
  while (live) {  // uniform per workgroup
    stage_tile(t);
    live = dn.b < pc.batch;
    const Tile n = tile_of(dn, en);  // past the end: unused loads
    dn = tk_digits_add(dn, stride, radix);
    en = tk_gdn_entry(pc.N, dn.c, varlen);
    load_tile(n);  // in flight while this tile is multiplied and stored
    barrier();
    multiply_store(t);
    t = n;
  }
}
