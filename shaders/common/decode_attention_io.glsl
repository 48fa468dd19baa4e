// SPDX-License-Identifier: MIT
// The bindings of the decode-attention kernels (decode_attention.comp on
// CUDA cores, decode_attention_tc.glsl on tensor cores, the split merge
// decode_attention_merge.comp: one interface,
// include/tilekernels/aura/decode_attention.hpp) and helpers they share.
// The including shader declares the specialization and push constants
// first, and its shared vec4 s_scratch (SF) before using SF.
layout(std430, binding = 0) readonly buffer QF { float q_f32[]; };
layout(std430, binding = 0) readonly buffer QH { uint q_16[]; };
layout(std430, binding = 1) readonly buffer KWords { uint k_words[]; };
layout(std430, binding = 1) readonly buffer KWords2 { uvec2 k_words2[]; };
layout(std430, binding = 1) readonly buffer KWords4 { uvec4 k_words4[]; };
layout(std430, binding = 2) readonly buffer KNorms { uint k_norms[]; };
layout(std430, binding = 3) readonly buffer VWords { uint v_words[]; };
layout(std430, binding = 3) readonly buffer VWords2 { uvec2 v_words2[]; };
layout(std430, binding = 3) readonly buffer VWords4 { uvec4 v_words4[]; };
layout(std430, binding = 4) readonly buffer VNorms { uint v_norms[]; };
layout(std430, binding = 5) readonly buffer BlockTable { int block_table[]; };
layout(std430, binding = 6) readonly buffer SeqLens { int seq_lens[]; };
layout(std430, binding = 7) readonly buffer Tables { float tables[]; };
layout(std430, binding = 8) readonly buffer Sinks { float sinks[]; };
layout(std430, binding = 9) writeonly buffer OutF { float out_f32[]; };
layout(std430, binding = 9) writeonly buffer OutH { uint out_16[]; };
layout(std430, binding = 10) writeonly buffer Lse { float lse_out[]; };
// Workspace (PUBLISH): per state (group * splits + split) o [DIM] x RV vec4,
// and at ml_at (m, l) x RV vec4 (decode_attention_finish.glsl). Coherent in
// the first dispatch: with PUBLISH 2 its last-arriving workgroup reads
// what the group's other workgroups wrote.
#ifdef TK_DECODE_ATTENTION_MERGE
layout(std430, binding = 11) buffer Work { vec4 work[]; };
#else
layout(std430, binding = 11) coherent buffer Work { vec4 work[]; };
#endif
// Centred keys (K_CENTRED): the centres [centres, kv_heads, DIM] and each
// sequence's row of them.
layout(std430, binding = 12) readonly buffer KCentre { float k_centre[]; };
layout(std430, binding = 13) readonly buffer SeqCentres { int seq_centres[]; };
// Arrival counters (PUBLISH 2): one per group, TK_DECODE_ATTENTION_ARRIVAL_TAG
// between calls (decode_attention_finish.glsl).
layout(std430, binding = 14) buffer Arrivals { uint arrivals[]; };
#ifndef TK_DECODE_ATTENTION_MERGE
shared uint s_arrival;  // what the workgroup's arrival found
#endif

#define SF(i) s_scratch[(i) >> 2][(i) & 3u]
#define NEG_INF4 vec4(TK_NEG_INF)

// V's Hadamard signs of an invocation's output dims (PAIRS pairs, dims
// 2 (inv + n WG) + h) into float v_sign[PAIRS * 2] (0 where V has no
// Hadamard rotation or `need` is false), for decode_attention_finish.glsl's
// TK_V_SIGN: loaded ahead of the transform, so that their round trip runs
// under earlier work rather than after it.
#define TK_LOAD_V_SIGNS(v_sign, need)                                                                         \
  float v_sign[PAIRS * 2u];                                                                                 \
  [[unroll]] for (uint n_ = 0; n_ < PAIRS; ++n_)                                                            \
    [[unroll]] for (uint h_ = 0; h_ < 2u; ++h_)                                                             \
      v_sign[n_ * 2u + h_] = V_ROT == 1u && (need) ? tables[V_ROTATION_AT + 2u * min(inv + n_ * WG, DIM / 2u - 1u) + h_] : 0.0;

float load_q(uint i) { return Q_DTYPE == TK_F32 ? q_f32[i] : tk_load16(Q_DTYPE, q_16[i >> 1], i); }

// Where dim d of query row rg (new token rg / gqa, query head kvh * gqa +
// rg % gqa) of sequence seq is in the q view, and its row in the output
// view.
uint q_element(uint seq, uint rg, uint kvh, uint d) {
  return pc.q_at + (seq * pc.q_len + rg / pc.gqa) * pc.q_token + (kvh * pc.gqa + rg % pc.gqa) * pc.q_head + d;
}
uint out_element(uint seq, uint rg, uint kvh) {
  return pc.o_at + (seq * pc.q_len + rg / pc.gqa) * pc.o_token + (kvh * pc.gqa + rg % pc.gqa) * pc.o_head;
}

// Where the centre of (seq, kvh) starts in k_centre: the sequence's row,
// clamped to the rows there are.
uint centre_at(uint seq, uint kvh) {
  const int c = clamp(seq_centres[seq], 0, int(pc.centres) - 1);
  return (uint(c) * pc.kv_heads + kvh) * DIM;
}

uint load_page(uint seq, uint index) {
  const int p = block_table[seq * pc.max_pages + min(index, pc.max_pages - 1u)];
  return uint(clamp(p, 0, int(pc.num_pages) - 1));
}

// Softmax-state helpers of softmax_state.glsl, for 4 rows at once.
vec4 max4(vec4 m_acc, vec4 m, vec4 l) {
  return vec4(tk_softmax_max(m_acc.x, m.x, l.x), tk_softmax_max(m_acc.y, m.y, l.y), tk_softmax_max(m_acc.z, m.z, l.z),
              tk_softmax_max(m_acc.w, m.w, l.w));
}
vec4 weight4(vec4 m, vec4 l, vec4 m_new) {
  return vec4(tk_softmax_weight(m.x, l.x, m_new.x), tk_softmax_weight(m.y, l.y, m_new.y),
              tk_softmax_weight(m.z, l.z, m_new.z), tk_softmax_weight(m.w, l.w, m_new.w));
}
vec4 rescale4(vec4 m_acc, vec4 m_new) {
  return vec4(tk_softmax_rescale(m_acc.x, m_new.x), tk_softmax_rescale(m_acc.y, m_new.y),
              tk_softmax_rescale(m_acc.z, m_new.z), tk_softmax_rescale(m_acc.w, m_new.w));
}

// o / l per row; 0 where l == 0.
vec4 output4(vec4 o, vec4 l) {
  return vec4(tk_softmax_output(vec4(o.x), l.x).x, tk_softmax_output(vec4(o.y), l.y).x,
              tk_softmax_output(vec4(o.z), l.z).x, tk_softmax_output(vec4(o.w), l.w).x);
}
