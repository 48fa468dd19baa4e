#version 460
//! requires GL_NV_cooperative_matrix
// Gated DeltaNet chunk_fwd_o on NVIDIA tensor cores (VK_NV_cooperative_matrix,
// fp16 x fp16 -> fp32 16x16x16). Same math and rounding points as the
// portable path (gdn_chunk_o.glsl).
//
// One workgroup per (batch, chunk, head, V tile of BV columns), WR x WC
// subgroups of 32 (WR = BT / 16). Subgroup (wr, wc) owns rows [16 wr, +16) of
// the chunk and o columns [wc * BV / WC, +BV / WC) of the tile, and computes
// the 16x16 blocks (wr, c) of q k^T for c <= wr, c = wc mod WC.
//
// K loop in stages of KC columns: each stage of q, k (BT x KC) and h
// (BV x KC) is read from global memory into registers one stage ahead,
// converted bf16 -> fp16 and stored in shared memory, then multiplied. v
// (BT x BV) is read with the first stage (V_EARLY) or the last, and takes
// the place of the stages after the loop, next to the scratch tiles. Per-element work
// (gates, causal mask, bf16 rounding of q k^T, final bf16 output) goes
// through a 16x16 f32 scratch tile per subgroup, since the element layout of
// a cooperative matrix is opaque.
//
// fp16 range: bf16 -> fp16 is exact for 2^-17 <= |x| <= 65504 (smaller
// values lose bits, absolute error <= 2^-25). A finite input or bf16(q k^T)
// element beyond 65504 would turn into Inf; instead the workgroup raises a
// flag and recomputes its tile with the scalar f32 algorithm of the portable
// path (chunk_o_scalar), so results never overflow silently.
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
layout(constant_id = 5) const uint WG = 256;  // equal to local_size_x = 32 * WR * WC
layout(constant_id = 6) const uint WC = 2;    // subgroups along V
layout(constant_id = 7) const uint KC = 64;   // K columns per stage
layout(constant_id = 8) const uint V_EARLY = 1;  // 1: issue the loads of v with the first stage

// The fallback does 4 columns per pass so that its registers do not cap the
// occupancy of the tensor-core code.
#define CHUNK_O_GROUP 4u
#include "../common/gdn_chunk_o.glsl"

#define F16MAT fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F32MAT fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

const uint WR = BT / 16;
const uint OT = BV / WC / 16;        // o blocks per subgroup
const uint NA = (WR + WC - 1) / WC;  // q k^T blocks per subgroup, at most
const uint PAD = 4;                  // words of row padding against bank conflicts
const uint SQ = KC / 2 + PAD;        // stage row stride (32-bit words = 2 halves)
const uint SV = BV / 2 + PAD;
const uint SA = BT / 2 + PAD;
const uint Q_OFF = 0;
const uint K_OFF = BT * SQ;
const uint H_OFF = 2 * BT * SQ;
// Region 0 holds the K stages during the loop, then v and the scratch tiles.
const uint STAGE_WORDS = (2 * BT + BV) * SQ;
const uint V_WORDS = BT * SV;
const uint SCR_OFF = V_WORDS;
const uint TAIL_WORDS = V_WORDS + WR * WC * 256;
const uint A_OFF = STAGE_WORDS > TAIL_WORDS ? STAGE_WORDS : TAIL_WORDS;
const uint G_OFF = A_OFF + BT * SA;
const uint FLAG_OFF = G_OFF + BT;
shared uint smem[FLAG_OFF + 1];

// uvec4 loads (8 bf16) per invocation and stage.
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
      const uint e = ((s.b * pc.T + t0 + row) * pc.Hg + s.kh) * KDIM + kc * KC;
      rq[r] = q_4[e / 8 + c8];
      rk[r] = k_4[e / 8 + c8];
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

bool to_f16_words(uvec4 w, out uvec4 h) {
  bool bad = false;
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    bad = bad || beyond_f16(w[i]) || beyond_f16(w[i] >> 16);
    h[i] = packHalf2x16(vec2(bf16_lo(w[i]), bf16_hi(w[i])));
  }
  return bad;
}

void store_rows(uvec4 w, uint base, uint stride, uint row, uint c8, inout bool bad) {
  uvec4 h;
  bad = to_f16_words(w, h) || bad;
  const uint o = base + row * stride + c8 * 4;
  smem[o] = h.x;
  smem[o + 1] = h.y;
  smem[o + 2] = h.z;
  smem[o + 3] = h.w;
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

  if (tid < BT) smem[G_OFF + tid] = floatBitsToUint(t0 + tid < pc.T ? g_f[(s.b * pc.T + t0 + tid) * pc.H + s.ih] : 0.0);
  if (tid == 0) smem[FLAG_OFF] = 0;

  F32MAT acc_o[OT];
  F32MAT acc_a[NA];
  [[unroll]] for (uint n = 0; n < OT; ++n) acc_o[n] = F32MAT(0.0);
  [[unroll]] for (uint a = 0; a < NA; ++a) acc_a[a] = F32MAT(0.0);

  bool bad = false;
  load_stage(s, tid, 0);
  if (V_EARLY != 0) load_v(s, tid);
  [[unroll]] for (uint kc = 0; kc < KDIM / KC; ++kc) {
    barrier();  // the previous stage is consumed
    [[unroll]] for (uint r = 0; r < RQ; ++r) {
      const uint u = tid + r * WG;
      if (u < QN) {
        store_rows(rq[r], Q_OFF, SQ, u / (KC / 8), u % (KC / 8), bad);
        store_rows(rk[r], K_OFF, SQ, u / (KC / 8), u % (KC / 8), bad);
      }
    }
    [[unroll]] for (uint r = 0; r < RH; ++r) {
      const uint u = tid + r * WG;
      if (u < HN) store_rows(rh[r], H_OFF, SQ, u / (KC / 8), u % (KC / 8), bad);
    }
    barrier();
    if (kc + 1 < KDIM / KC)
      load_stage(s, tid, kc + 1);
    else if (V_EARLY == 0)
      load_v(s, tid);
    [[unroll]] for (uint ks = 0; ks < KC / 16; ++ks) {
      F16MAT qa;
      coopMatLoadNV(qa, smem, Q_OFF + 16 * wr * SQ + ks * 8, SQ, false);
      [[unroll]] for (uint n = 0; n < OT; ++n) {
        F16MAT hb;  // h^T block: column n of it is row n of h
        coopMatLoadNV(hb, smem, H_OFF + (wc * OT + n) * 16 * SQ + ks * 8, SQ, true);
        acc_o[n] = coopMatMulAddNV(qa, hb, acc_o[n]);
      }
      [[unroll]] for (uint a = 0; a < NA; ++a) {
        const uint c = wc + a * WC;
        if (c <= wr) {
          F16MAT kb;
          coopMatLoadNV(kb, smem, K_OFF + 16 * c * SQ + ks * 8, SQ, true);
          acc_a[a] = coopMatMulAddNV(qa, kb, acc_a[a]);
        }
      }
    }
  }
  barrier();  // every stage consumed: v takes their place
  [[unroll]] for (uint r = 0; r < RV; ++r) {
    const uint u = tid + r * WG;
    if (u < VN) store_rows(rv[r], 0, SV, u / (BV / 8), u % (BV / 8), bad);
  }

  // Per-element passes through this subgroup's scratch tile: invocation
  // `lane` owns row lr, columns lc..lc+7 of it.
  const uint scr = SCR_OFF + warp * 256;
  const uint lr = lane / 2, lc = (lane % 2) * 8;
  const uint i = 16 * wr + lr;
  const float gi = uintBitsToFloat(smem[G_OFF + i]);

  // bf16(tril_incl(q k^T * exp(gi - gj))) as fp16 into the A region.
  [[unroll]] for (uint a = 0; a < NA; ++a) {
    const uint c = wc + a * WC;
    if (c > wr) continue;
    coopMatStoreNV(acc_a[a], smem, scr, 16, false);
    sync_subgroup();
    [[unroll]] for (uint e = 0; e < 8; e += 2) {
      vec2 x;
      [[unroll]] for (uint p = 0; p < 2; ++p) {
        const uint j = 16 * c + lc + e + p;
        const float val = uintBitsToFloat(smem[scr + lr * 16 + lc + e + p]) * exp(gi - uintBitsToFloat(smem[G_OFF + j]));
        x[p] = j <= i ? round_bf16(val) : 0.0;
        bad = bad || beyond_f16(tk_f32_to_bf16(x[p]));
      }
      smem[A_OFF + i * SA + (16 * c + lc + e) / 2] = packHalf2x16(x);
    }
    sync_subgroup();
  }
  // Gate the inter-chunk part: (q h^T) row i times exp(gi).
  const float eg = exp(gi);
  [[unroll]] for (uint n = 0; n < OT; ++n) {
    coopMatStoreNV(acc_o[n], smem, scr, 16, false);
    sync_subgroup();
    [[unroll]] for (uint e = 0; e < 8; ++e) {
      const uint o = scr + lr * 16 + lc + e;
      smem[o] = floatBitsToUint(uintBitsToFloat(smem[o]) * eg);
    }
    sync_subgroup();
    coopMatLoadNV(acc_o[n], smem, scr, 16, false);
    sync_subgroup();
  }
  if (bad) atomicOr(smem[FLAG_OFF], 1u);
  barrier();  // A, v and the flag complete
  if (smem[FLAG_OFF] != 0u) {
    chunk_o_scalar(s, tid);
    return;
  }

  // Intra-chunk part: o += A v over the blocks j <= wr.
  [[unroll]] for (uint jt = 0; jt <= wr; ++jt) {
    F16MAT aa;
    coopMatLoadNV(aa, smem, A_OFF + 16 * wr * SA + jt * 8, SA, false);
    [[unroll]] for (uint n = 0; n < OT; ++n) {
      F16MAT vb;
      coopMatLoadNV(vb, smem, 16 * jt * SV + (wc * OT + n) * 8, SV, false);
      acc_o[n] = coopMatMulAddNV(aa, vb, acc_o[n]);
    }
  }

  // o = scale * acc as bf16, 8 columns (one uvec4) per invocation and block.
  const bool row_ok = t0 + i < pc.T;
  [[unroll]] for (uint n = 0; n < OT; ++n) {
    coopMatStoreNV(acc_o[n], smem, scr, 16, false);
    sync_subgroup();
    if (row_ok) {
      uvec4 w;
      [[unroll]] for (uint e = 0; e < 4; ++e) {
        const float lo = uintBitsToFloat(smem[scr + lr * 16 + lc + 2 * e]) * pc.scale;
        const float hi = uintBitsToFloat(smem[scr + lr * 16 + lc + 2 * e + 1]) * pc.scale;
        w[e] = tk_f32_to_bf16(lo) | (tk_f32_to_bf16(hi) << 16);
      }
      o_4[(((s.b * pc.T + t0 + i) * pc.H + s.ih) * VDIM + s.v0 + (wc * OT + n) * 16 + lc) / 8] = w;
    }
    sync_subgroup();
  }
}
