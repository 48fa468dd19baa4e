#version 460
//! requires GL_NV_cooperative_matrix
// Gated DeltaNet chunk_fwd_o on NVIDIA tensor cores, version 2
// (VK_NV_cooperative_matrix, fp16 x fp16 -> fp32 16x16x16). Same math and
// rounding points as the portable path (gdn_chunk_o.glsl) and version 1
// (chunk_o_nv.comp); built for more workgroups per SM and fewer shared-memory
// round trips:
//
// - One workgroup per (batch, chunk, head, V tile of BV columns) with
//   WR x WC subgroups (WR = BT / 16); WC = 1 gives 128 invocations at BT = 64,
//   so that several workgroups share an SM and one's loads overlap another's
//   arithmetic. Subgroup (wr, wc) owns rows [16 wr, +16) and o columns
//   [wc * BV / WC, +BV / WC).
// - The WR (WR + 1) / 2 lower-triangle blocks of q k^T are dealt round-robin
//   over all subgroups (at most NA each), not by row, to balance registers.
// - Shared memory as uvec4 (8 halves): 16-byte stores of the converted
//   stages, rows padded by one uvec4 against bank conflicts.
// - K loop in stages of KC columns, NBUF shared buffers: the global loads of
//   stage kc + 1 (v_new in place of the last) are issued into registers
//   before the products of stage kc; with two buffers one barrier per stage.
// - The gate exp(g_i) of q h^T is applied at the output: A v_new goes into a
//   fresh accumulator per 16-column tile, and both tiles meet in a per-
//   subgroup scratch area once, where o = scale * (exp(g_i) qh + av) is
//   rounded to bf16 and stored with 16-byte writes.
//
// fp16 range: as version 1. bf16 -> fp16 is exact for 2^-17 <= |x| <= 65504;
// a finite input or bf16(A) element beyond 65504 raises a flag and the
// workgroup recomputes its tile with the scalar f32 algorithm
// (chunk_o_scalar), so nothing overflows silently.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BT = 64;
layout(constant_id = 2) const uint KDIM = 128;
layout(constant_id = 3) const uint VDIM = 128;
layout(constant_id = 4) const uint BV = 128;
layout(constant_id = 5) const uint WG = 128;  // equal to local_size_x = 32 * WR * WC
layout(constant_id = 6) const uint WC = 1;    // subgroups along V
layout(constant_id = 7) const uint KC = 32;   // K columns per stage
layout(constant_id = 8) const uint NBUF = 2;  // shared-memory stage buffers (1 or 2)

#define CHUNK_O_GROUP 4u
#include "../common/gdn_chunk_o.glsl"

#define F16MAT fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F32MAT fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

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
const uint STAGE = (2 * BT + BV) * SQ;
// After the K loop the same space holds v, A and two 16x16 f32 scratch tiles
// per subgroup.
const uint V_OFF = 0;
const uint A_OFF = BT * SV;
const uint SCR_OFF = A_OFF + BT * SA;
const uint TAIL = SCR_OFF + NW * 32 * SS;
const uint REGION = NBUF * STAGE > TAIL ? NBUF * STAGE : TAIL;
shared uvec4 smem[REGION];
shared float gsh[BT];
shared uint bad_flag;

// uvec4 loads (8 bf16) per invocation: q and k, h per stage; v.
const uint QN = BT * KC / 8, HN = BV * KC / 8, VN = BT * BV / 8;
const uint RQ = (QN + WG - 1) / WG, RH = (HN + WG - 1) / WG, RV = (VN + WG - 1) / WG;

uvec4 rq[RQ], rk[RQ], rh[RH], rv[RV];

void load_stage(ChunkOTile s, uint tid, uint kc) {
  const uint t0 = s.it * BT;
  [[unroll]] for (uint r = 0; r < RQ; ++r) {
    const uint u = tid + r * WG, row = u / (KC / 8), c8 = u % (KC / 8);
    rq[r] = uvec4(0);
    rk[r] = uvec4(0);
    if (u < QN && t0 + row < pc.T) {
      const uint e = (((s.b * pc.T + t0 + row) * pc.Hg + s.kh) * KDIM + kc * KC) / 8 + c8;
      rq[r] = q_4[e];
      rk[r] = k_4[e];
    }
  }
  [[unroll]] for (uint r = 0; r < RH; ++r) {
    const uint u = tid + r * WG, row = u / (KC / 8), c8 = u % (KC / 8);
    if (u < HN) rh[r] = h_4[((((s.b * pc.NT + s.it) * pc.H + s.ih) * VDIM + s.v0 + row) * KDIM + kc * KC) / 8 + c8];
  }
}

void load_v(ChunkOTile s, uint tid) {
  const uint t0 = s.it * BT;
  [[unroll]] for (uint r = 0; r < RV; ++r) {
    const uint u = tid + r * WG, row = u / (BV / 8), c8 = u % (BV / 8);
    rv[r] = uvec4(0);
    if (u < VN && t0 + row < pc.T) rv[r] = v_4[(((s.b * pc.T + t0 + row) * pc.H + s.ih) * VDIM + s.v0) / 8 + c8];
  }
}

// A finite bf16 beyond the fp16 range (|x| >= 65536; Inf and NaN excluded).
bool beyond_f16(uint bits16) { return (bits16 & 0x7fffu) - 0x4780u < 0x7f80u - 0x4780u; }

// 8 bf16 -> 8 fp16; raises `bad` for a finite value fp16 cannot hold.
uvec4 to_f16x8(uvec4 w, inout bool bad) {
  uvec4 h;
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    bad = bad || beyond_f16(w[i]) || beyond_f16(w[i] >> 16);
    h[i] = packHalf2x16(vec2(bf16_lo(w[i]), bf16_hi(w[i])));
  }
  return h;
}

void put_stage(uint base, uint tid, inout bool bad) {
  [[unroll]] for (uint r = 0; r < RQ; ++r) {
    const uint u = tid + r * WG;
    if (u < QN) {
      const uint o = base + (u / (KC / 8)) * SQ + u % (KC / 8);
      smem[o + Q_OFF] = to_f16x8(rq[r], bad);
      smem[o + K_OFF] = to_f16x8(rk[r], bad);
    }
  }
  [[unroll]] for (uint r = 0; r < RH; ++r) {
    const uint u = tid + r * WG;
    if (u < HN) smem[base + H_OFF + (u / (KC / 8)) * SQ + u % (KC / 8)] = to_f16x8(rh[r], bad);
  }
}

void sync_subgroup() {
  subgroupMemoryBarrierShared();
  subgroupBarrier();
}

void main() {
  const uint id = gl_WorkGroupID.x + pc.group_offset;
  if (id >= pc.total_groups) return;  // uniform over the workgroup
  const ChunkOTile s = chunk_o_tile(id);
  const uint tid = gl_LocalInvocationID.x;
  const uint warp = tid / 32, lane = tid % 32;
  const uint wr = warp / WC, wc = warp % WC;
  const uint t0 = s.it * BT;

  if (tid < BT) gsh[tid] = t0 + tid < pc.T ? g_f[(s.b * pc.T + t0 + tid) * pc.H + s.ih] : 0.0;
  if (tid == 0) bad_flag = 0;

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

  F32MAT acc_o[OT];
  F32MAT acc_a[NA];
  [[unroll]] for (uint n = 0; n < OT; ++n) acc_o[n] = F32MAT(0.0);
  [[unroll]] for (uint a = 0; a < NA; ++a) acc_a[a] = F32MAT(0.0);

  bool bad = false;
  load_stage(s, tid, 0);
  [[unroll]] for (uint kc = 0; kc < NK; ++kc) {
    const uint base = (kc % NBUF) * STAGE;
    if (NBUF == 1 && kc > 0) barrier();  // the single buffer is consumed
    put_stage(base, tid, bad);
    barrier();
    if (kc + 1 < NK)
      load_stage(s, tid, kc + 1);
    else
      load_v(s, tid);
    [[unroll]] for (uint ks = 0; ks < KC / 16; ++ks) {
      F16MAT qa;
      coopMatLoadNV(qa, smem, base + Q_OFF + 16 * wr * SQ + 2 * ks, SQ, false);
      [[unroll]] for (uint n = 0; n < OT; ++n) {
        F16MAT hb;  // h^T block: column n of it is row n of h
        coopMatLoadNV(hb, smem, base + H_OFF + (wc * OT + n) * 16 * SQ + 2 * ks, SQ, true);
        acc_o[n] = coopMatMulAddNV(qa, hb, acc_o[n]);
      }
      [[unroll]] for (uint a = 0; a < NA; ++a) {
        if (warp + a * NW < NB) {
          F16MAT qb, kb;
          coopMatLoadNV(qb, smem, base + Q_OFF + 16 * ar[a] * SQ + 2 * ks, SQ, false);
          coopMatLoadNV(kb, smem, base + K_OFF + 16 * ac[a] * SQ + 2 * ks, SQ, true);
          acc_a[a] = coopMatMulAddNV(qb, kb, acc_a[a]);
        }
      }
    }
  }
  barrier();  // every stage consumed: v, A and the scratch tiles take their place
  [[unroll]] for (uint r = 0; r < RV; ++r) {
    const uint u = tid + r * WG;
    if (u < VN) smem[V_OFF + (u / (BV / 8)) * SV + u % (BV / 8)] = to_f16x8(rv[r], bad);
  }

  // Per-element work through this subgroup's scratch tiles: invocation
  // `lane` owns row lr, columns [8 lh, +8) of a 16x16 tile.
  const uint scr_a = SCR_OFF + warp * 32 * SS, scr_b = scr_a + 16 * SS;
  const uint lr = lane / 2, lh = lane % 2;

  // bf16(tril_incl(q k^T * exp(gi - gj))) as fp16 into the A region.
  [[unroll]] for (uint a = 0; a < NA; ++a) {
    if (warp + a * NW >= NB) continue;
    coopMatStoreNV(acc_a[a], smem, scr_a, SS, false);
    sync_subgroup();
    const uint i = 16 * ar[a] + lr;
    const float gi = gsh[i];
    const uvec4 x0 = smem[scr_a + lr * SS + 2 * lh], x1 = smem[scr_a + lr * SS + 2 * lh + 1];
    uvec4 packed;
    [[unroll]] for (uint e = 0; e < 4; ++e) {
      vec2 x;
      [[unroll]] for (uint p = 0; p < 2; ++p) {
        const uint m = 2 * e + p;
        const uint j = 16 * ac[a] + 8 * lh + m;
        const float val = uintBitsToFloat(m < 4 ? x0[m] : x1[m - 4]) * exp(gi - gsh[j]);
        x[p] = j <= i ? round_bf16(val) : 0.0;
        bad = bad || beyond_f16(tk_f32_to_bf16(x[p]));
      }
      packed[e] = packHalf2x16(x);
    }
    smem[A_OFF + i * SA + 2 * ac[a] + lh] = packed;
    sync_subgroup();
  }
  if (bad) atomicOr(bad_flag, 1u);
  barrier();  // A, v and the flag complete
  if (bad_flag != 0u) {
    chunk_o_scalar(s, tid);
    return;
  }

  // o = scale * (exp(gi) (q h^T) + A v), one 16-column tile at a time.
  F16MAT af[WR];
  [[unroll]] for (uint j = 0; j < WR; ++j)
    if (j <= wr) coopMatLoadNV(af[j], smem, A_OFF + 16 * wr * SA + 2 * j, SA, false);
  const uint i = 16 * wr + lr;
  const float eg = exp(gsh[i]);
  const bool row_ok = t0 + i < pc.T;
  const uint orow = (((s.b * pc.T + t0 + i) * pc.H + s.ih) * VDIM + s.v0) / 8;
  [[unroll]] for (uint n = 0; n < OT; ++n) {
    const uint c16 = wc * OT + n;  // 16-column tile within the V tile
    F32MAT av = F32MAT(0.0);
    [[unroll]] for (uint j = 0; j < WR; ++j) {
      if (j <= wr) {
        F16MAT vb;
        coopMatLoadNV(vb, smem, V_OFF + 16 * j * SV + 2 * c16, SV, false);
        av = coopMatMulAddNV(af[j], vb, av);
      }
    }
    coopMatStoreNV(acc_o[n], smem, scr_a, SS, false);
    coopMatStoreNV(av, smem, scr_b, SS, false);
    sync_subgroup();
    if (row_ok) {
      uvec4 w;
      [[unroll]] for (uint half_ = 0; half_ < 2; ++half_) {
        const vec4 qh = uintBitsToFloat(smem[scr_a + lr * SS + 2 * lh + half_]);
        const vec4 a = uintBitsToFloat(smem[scr_b + lr * SS + 2 * lh + half_]);
        const vec4 y = (qh * eg + a) * pc.scale;
        w[2 * half_] = tk_f32_to_bf16(y.x) | (tk_f32_to_bf16(y.y) << 16);
        w[2 * half_ + 1] = tk_f32_to_bf16(y.z) | (tk_f32_to_bf16(y.w) << 16);
      }
      o_4[orow + 2 * c16 + lh] = w;
    }
    sync_subgroup();
  }
}
