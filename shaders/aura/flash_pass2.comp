#version 460
// AURA flash pass 2: merges the split-K partial attention results of each
// query head into its output, o = sum_b e^(m_b - M) o_b / sum_b e^(m_b - M) l_b
// with M the largest m_b of the blocks that have l_b != 0.
//
// Geometry (invariants the host relies on):
// - one workgroup per query head (gl_WorkGroupID.x + group_offset);
// - the workgroup is GROUPS lane groups of DIM/4 invocations; invocation c of
//   a group owns the four output slots 4c..4c+3 of the head;
// - group g replays blocks g, g + GROUPS, ..., UNROLL at a time so that the
//   loads of UNROLL blocks are in flight together, then the groups' states
//   are merged through shared memory by group 0.
// No subgroup operation is used: correct for any subgroup size.
#include "../common/convert.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DIM = 128;
layout(constant_id = 2) const uint GROUPS = 1;
layout(constant_id = 3) const uint PARTIAL_DTYPE = 0;  // TK_F32, TK_F16, TK_BF16
layout(constant_id = 4) const uint OUT_DTYPE = 2;
layout(constant_id = 5) const uint WRITE_LSE = 0;
layout(constant_id = 6) const uint UNROLL = 4;  // blocks whose loads a group has in flight together

const uint CHUNKS = DIM / 4;  // invocations per group

layout(push_constant) uniform Push {
  uint group_offset;  // first query head of this dispatch slice
  uint q_heads;
  uint num_blocks;
} pc;

// Each binding is declared once per storage view: 32-bit floats, or 16-bit
// values packed in words.
layout(std430, binding = 0) readonly buffer OPartialsF { vec4 o_f32[]; };
layout(std430, binding = 0) readonly buffer OPartialsH { uvec2 o_16[]; };
layout(std430, binding = 1) readonly buffer MPartialsF { float m_f32[]; };
layout(std430, binding = 1) readonly buffer MPartialsH { uint m_16[]; };
layout(std430, binding = 2) readonly buffer LPartialsF { float l_f32[]; };
layout(std430, binding = 2) readonly buffer LPartialsH { uint l_16[]; };
layout(std430, binding = 3) writeonly buffer OutputF { vec4 out_f32[]; };
layout(std430, binding = 3) writeonly buffer OutputH { uvec2 out_16[]; };
layout(std430, binding = 4) writeonly buffer Lse { float lse[]; };

shared vec4 s_o[GROUPS * CHUNKS];
shared float s_m[GROUPS];
shared float s_l[GROUPS];

float load_scalar(bool is_m, uint i) {
  if (PARTIAL_DTYPE == TK_F32) return is_m ? m_f32[i] : l_f32[i];
  return tk_load16(PARTIAL_DTYPE, is_m ? m_16[i >> 1] : l_16[i >> 1], i);
}

vec4 load_chunk(uint i) {
  if (PARTIAL_DTYPE == TK_F32) return o_f32[i];
  return tk_unpack4(PARTIAL_DTYPE, o_16[i]);
}

// Folds one state (m, l, o) into the running one, rescaling whichever has
// the smaller maximum so that only one exponential is evaluated.
void merge(inout float m_acc, inout float l_acc, inout vec4 o_acc, float m, float l, vec4 o) {
  if (m > m_acc) {
    float a = exp(m_acc - m);
    o_acc = o_acc * a + o;
    l_acc = l_acc * a + l;
    m_acc = m;
  } else {
    float b = exp(m - m_acc);
    o_acc += o * b;
    l_acc += l * b;
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint group = tid / CHUNKS;
  const uint c = tid % CHUNKS;
  const uint q = gl_WorkGroupID.x + pc.group_offset;
  const uint nb = pc.num_blocks;
  const uint row = q * nb;  // first (q, block) index of this head

  float m_acc = uintBitsToFloat(0xff800000u);  // -inf
  float l_acc = 0.0;
  vec4 o_acc = vec4(0.0);

  for (uint b0 = group; b0 < nb; b0 += UNROLL * GROUPS) {
    float mb[UNROLL];
    float lb[UNROLL];
    vec4 ob[UNROLL];
    for (uint u = 0; u < UNROLL; ++u) {
      uint b = b0 + u * GROUPS;
      lb[u] = 0.0;
      if (b < nb) {
        mb[u] = load_scalar(true, row + b);
        lb[u] = load_scalar(false, row + b);
        ob[u] = load_chunk((row + b) * CHUNKS + c);
      }
    }
    for (uint u = 0; u < UNROLL; ++u)
      if (lb[u] != 0.0) merge(m_acc, l_acc, o_acc, mb[u], lb[u], ob[u]);
  }

  if (GROUPS > 1) {
    s_o[tid] = o_acc;
    if (c == 0) {
      s_m[group] = m_acc;
      s_l[group] = l_acc;
    }
    barrier();
    if (group != 0) return;
    for (uint g = 1; g < GROUPS; ++g)
      if (s_l[g] != 0.0) merge(m_acc, l_acc, o_acc, s_m[g], s_l[g], s_o[g * CHUNKS + c]);
  }

  // A head whose blocks are all empty has l = 0: it gets zeros, never NaN.
  const float inv_l = l_acc > 0.0 ? 1.0 / l_acc : 0.0;
  const vec4 result = o_acc * inv_l;
  const uint out_index = q * CHUNKS + c;
  if (OUT_DTYPE == TK_F32)
    out_f32[out_index] = result;
  else
    out_16[out_index] = tk_pack4(OUT_DTYPE, result);
  if (WRITE_LSE != 0 && c == 0) lse[q] = l_acc > 0.0 ? m_acc + log(l_acc) : uintBitsToFloat(0xff800000u);
}
