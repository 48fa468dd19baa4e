#version 460
//! requires GL_NV_cooperative_matrix
// Gated DeltaNet WY representation on NVIDIA tensor cores
// (VK_NV_cooperative_matrix, fp16 x fp16 -> fp32, 16x16x16 tiles):
//   u = A bf16(v * beta),   w = A bf16((k * beta) * exp(g)).
//
// Geometry (the host relies on it):
// - one workgroup of WG = 128 or 256 invocations (4 or 8 subgroups of 32)
//   per (batch, chunk, head), the head fastest (GQA heads sharing k run side
//   by side);
// - the output columns are cut into passes of at most 128 columns, first
//   the passes of u, then those of w. Invocation (rr, cc) = (tid / 16,
//   tid % 16) loads, stages and writes the 8 columns 8cc..8cc+7 of rows
//   rr, rr + WG/16, ... < BT; the 16 lanes of one row are one half-subgroup.
//   Subgroup s owns the 8 / (WG / 32) column tiles (16 columns each) from
//   s * 8 / (WG / 32) on, for every row tile of the chunk;
// - the next pass's operand rows are loaded into registers before the
//   current pass is multiplied, so loads stay in flight.
//
// fp16 range (no silent overflow): both fp16 operands are scaled by powers
// of two, which is exact. Operand row j (a row of bf16(v * beta) or of
// bf16(k * beta * e^g)) is multiplied by 2^s_j so that its largest
// magnitude lies in [2^14, 2^15); column j of A is divided by 2^s_j, then
// row i of A is multiplied by 2^r_i so that its largest magnitude lies in
// [2^14, 2^15) too. Then sum_j A'_ij x'_j = 2^r_i sum_j A_ij x_j: the
// accumulator row is divided by 2^r_i before rounding to bf16. Every fp16
// value is below 2^15 < 65504, the bf16 operands convert exactly, and only
// A loses precision (fp16 keeps 11 bits; SPLIT = 1 adds a second MMA with
// the residual A - fp16(A), about 22 bits). Shifts are clamped to
// [-64, 64]: rows whose largest magnitude lies outside [2^-49, 2^79] are
// not fully normalised (they may underflow, or saturate to Inf).
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
#include "../common/convert.glsl"

layout(local_size_x_id = 5) in;
layout(constant_id = 0) const uint BT = 64;
layout(constant_id = 1) const uint K = 128;
layout(constant_id = 2) const uint V = 128;
layout(constant_id = 3) const uint SPLIT = 0;         // 1: A as hi + lo fp16 parts
layout(constant_id = 4) const uint SMEM_VEC4 = 2112;  // shared uvec4s, computed by the host
layout(constant_id = 5) const uint WG = 256;          // invocations: 128 or 256 (4 or 8 subgroups of 32)
layout(constant_id = 6) const uint A_DTYPE = 0;       // TK_F32 or TK_BF16

const uint NC = 128;                    // columns per pass
const uint RT = BT / 16;                // row tiles per chunk
const uint NSG = WG / 32;               // subgroups
const uint CT = 8 / NSG;                // column tiles per subgroup and pass
const uint RS = BT / (WG / 16);         // rows per invocation (16 lanes per row)
const uint NPV = (V + NC - 1) / NC;     // passes of u
const uint NP = NPV + (K + NC - 1) / NC;
const uint OP_STRIDE = NC / 8 + 1;      // uvec4 per staged fp16 operand row (+1: bank skew)
const uint A_STRIDE = BT / 8 + 1;       // uvec4 per staged fp16 A row
const uint SCR_STRIDE = NC / 4 + 1;     // uvec4 per f32 accumulator row
const uint AH_BASE = BT * OP_STRIDE;
const uint AL_BASE = AH_BASE + BT * A_STRIDE;
const uint A_LANES = BT / 4;            // invocations per A row (a vec4 each)
const uint A_ROWS = WG / A_LANES;      // A rows per sweep of the workgroup
const uint A_SWEEPS = (BT + A_ROWS - 1) / A_ROWS;

// Every loop below has a literal bound (the largest value over the allowed
// specialisations) and [[unroll]], with the specialised bound as a guard:
// glslc then unrolls them, every small array is indexed by constants and
// lives in registers, and the driver folds the guards. (Loops bounded by
// specialisation constants stay loops in SPIR-V, and their arrays may be
// placed in local memory.)
const uint MAX_RS = 8;      // RS for BT = 64, WG = 128
const uint MAX_SWEEPS = 8;  // A_SWEEPS for BT = 64, WG = 128
const uint MAX_RT = 4;
const uint MAX_CT = 2;
const uint MAX_NP = 4;      // K = V = 256

layout(push_constant) uniform Push {
  uint group_offset;
  uint batch;
  uint T;
  uint Hg;
  uint H;
  uint chunks;
} pc;

layout(std430, binding = 0) readonly buffer KBuf { uvec4 k8[]; };
layout(std430, binding = 1) readonly buffer VBuf { uvec4 v8[]; };
layout(std430, binding = 2) readonly buffer BetaBuf { float beta[]; };
layout(std430, binding = 3) readonly buffer GBuf { float gate[]; };
layout(std430, binding = 4) readonly buffer ABuf { vec4 a4[]; };
layout(std430, binding = 4) readonly buffer ABufH { uvec2 a4h[]; };  // 4 bf16 values
layout(std430, binding = 5) writeonly buffer WBuf { uvec4 w8[]; };
layout(std430, binding = 6) writeonly buffer UBuf { uvec4 u8[]; };

// One region, used twice per pass: while multiplying it holds the fp16
// operand rows [BT][OP_STRIDE] then A (hi, and lo when SPLIT) [BT][A_STRIDE];
// afterwards the f32 accumulators [BT][SCR_STRIDE].
shared uvec4 smem[SMEM_VEC4];
shared int s_col_shift[BT];  // s_j of the current pass
shared int s_row_shift[BT];  // r_i of the current pass

int normalising_shift(float m) {
  if (!(m > 0.0) || isinf(m)) return 0;
  int e;
  frexp(m, e);
  return clamp(15 - e, -64, 64);
}

// Largest value over the `lanes` (4, 8 or 16) consecutive lanes of an
// aligned group; `lanes` is a specialisation constant, so every branch is
// uniform.
float group_max(float x, uint lanes) {
  x = max(x, subgroupShuffleXor(x, 1u));
  x = max(x, subgroupShuffleXor(x, 2u));
  if (lanes > 4) x = max(x, subgroupShuffleXor(x, 4u));
  if (lanes > 8) x = max(x, subgroupShuffleXor(x, 8u));
  return x;
}

uint pack_half(vec2 x) { return packHalf2x16(x); }

vec4 round_bf16(vec4 x) {
  return vec4(tk_bf16_to_f32(tk_f32_to_bf16(x.x)), tk_bf16_to_f32(tk_f32_to_bf16(x.y)),
              tk_bf16_to_f32(tk_f32_to_bf16(x.z)), tk_bf16_to_f32(tk_f32_to_bf16(x.w)));
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint group = gl_WorkGroupID.x + pc.group_offset;
  const uint H = pc.H, T = pc.T;
  const uint h = group % H;
  const uint chunk = (group / H) % pc.chunks;
  const uint b = group / H / pc.chunks;
  const uint kh = h / (H / pc.Hg);
  const uint t0 = chunk * BT;
  const uint rows = min(BT, T - t0);
  const uint cc = tid % 16, rr = tid / 16;
  const uint row_step = WG / 16;

  // Loads first: A, the per-row scalars, the first pass's operand rows.
  const uint a_lane = tid % A_LANES, a_row0 = tid / A_LANES;
  vec4 a_reg[MAX_SWEEPS];
  [[unroll]] for (uint n = 0; n < MAX_SWEEPS; ++n) {
    a_reg[n] = vec4(0.0);
    const uint r = a_row0 + n * A_ROWS;
    if (n < A_SWEEPS && r < rows) {
      const uint e4 = (((b * T + t0 + r) * H + h) * BT) / 4 + a_lane;
      if (A_DTYPE == TK_F32)  // a branch, not ?:, so that only the view of the stored dtype is read
        a_reg[n] = a4[e4];
      else
        a_reg[n] = tk_unpack4(TK_BF16, a4h[e4]);
      const uint c = 4 * a_lane;
      a_reg[n] = vec4(c < rows ? a_reg[n].x : 0.0, c + 1 < rows ? a_reg[n].y : 0.0, c + 2 < rows ? a_reg[n].z : 0.0,
                      c + 3 < rows ? a_reg[n].w : 0.0);  // columns past the tail
    }
  }
  float row_beta[MAX_RS], row_decay[MAX_RS];
  [[unroll]] for (uint n = 0; n < MAX_RS; ++n) {
    row_beta[n] = 0.0;
    row_decay[n] = 0.0;
    const uint r = rr + row_step * n;
    if (n < RS && r < rows) {
      const uint bh = (b * T + t0 + r) * H + h;
      row_beta[n] = beta[bh];
      row_decay[n] = exp(gate[bh]);
    }
  }

  uvec4 cur[MAX_RS], nxt[MAX_RS];
  [[unroll]] for (uint n = 0; n < MAX_RS; ++n) {
    cur[n] = uvec4(0u);
    nxt[n] = uvec4(0u);
  }
  [[unroll]] for (uint p = 0; p < MAX_NP; ++p) {
    if (p < NP) {
      const bool is_u = p < NPV;
      const uint dim = is_u ? V : K;
      const uint c0 = (is_u ? p : p - NPV) * NC;
      const uint width = min(NC, dim - c0);
      const uint col = c0 + 8 * cc;

      if (p == 0) {
        [[unroll]] for (uint n = 0; n < MAX_RS; ++n) {
          const uint r = rr + row_step * n, t = t0 + r;
          if (n < RS && r < rows && 8 * cc < width) {
            if (is_u)
              cur[n] = v8[(((b * T + t) * H + h) * V + col) / 8];
            else
              cur[n] = k8[(((b * T + t) * pc.Hg + kh) * K + col) / 8];
          }
        }
      } else {
        [[unroll]] for (uint n = 0; n < MAX_RS; ++n) cur[n] = nxt[n];
      }
      if (p + 1 < NP) {  // prefetch the next pass
        const bool next_u = p + 1 < NPV;
        const uint next_dim = next_u ? V : K;
        const uint next_c0 = (next_u ? p + 1 : p + 1 - NPV) * NC;
        const uint next_col = next_c0 + 8 * cc;
        [[unroll]] for (uint n = 0; n < MAX_RS; ++n) {
          const uint r = rr + row_step * n, t = t0 + r;
          nxt[n] = uvec4(0u);
          if (n < RS && r < rows && next_col < next_dim) {
            if (next_u)
              nxt[n] = v8[(((b * T + t) * H + h) * V + next_col) / 8];
            else
              nxt[n] = k8[(((b * T + t) * pc.Hg + kh) * K + next_col) / 8];
          }
        }
      }

      // Operand rows: round to bf16 as FLA does, normalise each row, stage fp16.
      if (p > 0) barrier();  // the previous pass is done reading smem
      [[unroll]] for (uint n = 0; n < MAX_RS; ++n) {
        if (n < RS) {
          const uint r = rr + row_step * n;
          const float f = row_beta[n], d = is_u ? 1.0 : row_decay[n];
          const uvec4 wv = cur[n];
          vec4 lo = vec4(tk_bf16_to_f32(wv.x & 0xffffu), tk_bf16_to_f32(wv.x >> 16), tk_bf16_to_f32(wv.y & 0xffffu),
                         tk_bf16_to_f32(wv.y >> 16)) * f;
          vec4 hi = vec4(tk_bf16_to_f32(wv.z & 0xffffu), tk_bf16_to_f32(wv.z >> 16), tk_bf16_to_f32(wv.w & 0xffffu),
                         tk_bf16_to_f32(wv.w >> 16)) * f;
          if (!is_u) {
            lo *= d;
            hi *= d;
          }
          lo = round_bf16(lo);
          hi = round_bf16(hi);
          const vec4 mag = max(tk_finite_abs(lo), tk_finite_abs(hi));
          const int s = normalising_shift(group_max(max(max(mag.x, mag.y), max(mag.z, mag.w)), 16));
          if (cc == 0) s_col_shift[r] = s;
          const vec4 lo_s = ldexp(lo, ivec4(s)), hi_s = ldexp(hi, ivec4(s));
          const uvec4 packed = uvec4(pack_half(lo_s.xy), pack_half(lo_s.zw), pack_half(hi_s.xy), pack_half(hi_s.zw));
          smem[r * OP_STRIDE + cc] = packed;
        }
      }
      barrier();

      // A: divide column j by 2^s_j, normalise each row, stage fp16 (hi, lo).
      [[unroll]] for (uint n = 0; n < MAX_SWEEPS; ++n) {
        const uint r = a_row0 + n * A_ROWS;
        if (n < A_SWEEPS && r < BT) {  // uniform per subgroup
          const ivec4 sj = ivec4(s_col_shift[4 * a_lane], s_col_shift[4 * a_lane + 1], s_col_shift[4 * a_lane + 2],
                                 s_col_shift[4 * a_lane + 3]);
          const vec4 a1 = ldexp(a_reg[n], -sj);
          const vec4 mag = tk_finite_abs(a1);
          const int ri = normalising_shift(group_max(max(max(mag.x, mag.y), max(mag.z, mag.w)), A_LANES));
          if (a_lane == 0) s_row_shift[r] = ri;
          const vec4 a2 = ldexp(a1, ivec4(ri));
          const uvec2 hi = uvec2(pack_half(a2.xy), pack_half(a2.zw));
          // Two lanes share one uvec4 slot: store scalars, never the whole vector.
          const uint slot = r * A_STRIDE + a_lane / 2, e = 2 * (a_lane % 2);
          smem[AH_BASE + slot][e] = hi.x;
          smem[AH_BASE + slot][e + 1] = hi.y;
          if (SPLIT != 0) {
            const vec4 rest = a2 - vec4(unpackHalf2x16(hi.x), unpackHalf2x16(hi.y));
            smem[AL_BASE + slot][e] = pack_half(rest.xy);
            smem[AL_BASE + slot][e + 1] = pack_half(rest.zw);
          }
        }
      }
      barrier();

      // Subgroup s owns column tiles s * CT .. s * CT + CT - 1 and every row tile.
      const uint ct0 = gl_SubgroupID * CT;
      const bool tile_live = ct0 * 16 < width;  // a partial group is live from its first tile
      fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[MAX_RT * MAX_CT];
      if (tile_live) {
        [[unroll]] for (uint i = 0; i < MAX_RT * MAX_CT; ++i) acc[i] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
        // One flat loop over (k tile, row tile) so that glslc unrolls it and
        // every accumulator index is a constant (nested loops stay loops).
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> xb0, xb1, am;
        [[unroll]] for (uint q = 0; q < MAX_RT * MAX_RT; ++q) {
          const uint kk = q / MAX_RT, i = q % MAX_RT;
          if (kk < RT && i < RT) {
            if (i == 0) {
              coopMatLoadNV(xb0, smem, kk * 16 * OP_STRIDE + ct0 * 2, OP_STRIDE, false);
              if (CT > 1) coopMatLoadNV(xb1, smem, kk * 16 * OP_STRIDE + (ct0 + 1) * 2, OP_STRIDE, false);
            }
            coopMatLoadNV(am, smem, AH_BASE + i * 16 * A_STRIDE + kk * 2, A_STRIDE, false);
            acc[i * MAX_CT] = coopMatMulAddNV(am, xb0, acc[i * MAX_CT]);
            if (CT > 1) acc[i * MAX_CT + 1] = coopMatMulAddNV(am, xb1, acc[i * MAX_CT + 1]);
            if (SPLIT != 0) {
              coopMatLoadNV(am, smem, AL_BASE + i * 16 * A_STRIDE + kk * 2, A_STRIDE, false);
              acc[i * MAX_CT] = coopMatMulAddNV(am, xb0, acc[i * MAX_CT]);
              if (CT > 1) acc[i * MAX_CT + 1] = coopMatMulAddNV(am, xb1, acc[i * MAX_CT + 1]);
            }
          }
        }
      }
      barrier();  // every subgroup is done reading the staged operands
      if (tile_live) {
        [[unroll]] for (uint q = 0; q < MAX_RT * MAX_CT; ++q) {
          const uint i = q / MAX_CT, c = q % MAX_CT;
          if (i < RT && c < CT)
            coopMatStoreNV(acc[q], smem, i * 16 * SCR_STRIDE + (ct0 + c) * 4, SCR_STRIDE, false);
        }
      }
      barrier();

      // Undo the row normalisation, round to bf16, write 16 bytes per invocation.
      [[unroll]] for (uint n = 0; n < MAX_RS; ++n) {
        const uint r = rr + row_step * n;
        if (n < RS) {
          if (r < rows && 8 * cc < width) {
            const int shift = -s_row_shift[r];
            const vec4 lo = ldexp(uintBitsToFloat(smem[r * SCR_STRIDE + 2 * cc]), ivec4(shift));
            const vec4 hi = ldexp(uintBitsToFloat(smem[r * SCR_STRIDE + 2 * cc + 1]), ivec4(shift));
            const uvec2 p0 = tk_pack4(TK_BF16, lo), p1 = tk_pack4(TK_BF16, hi);
            const uint bh = (b * T + t0 + r) * H + h;
            if (is_u)
              u8[(bh * V + col) / 8] = uvec4(p0, p1);
            else
              w8[(bh * K + col) / 8] = uvec4(p0, p1);
          }
        }
      }
    }
  }
}
