// The end of a decode-attention workgroup (shaders/aura/decode_attention*.comp),
// from its softmax state to the output: with splits, publish the state to the
// workspace, count in, and (the last to arrive) merge the split states; then
// the sink, o / l, lse, V's rotation undone, the output rows written.
// Statements, not a function: included at the end of main(), so that
// the including kernel compiles to what it would with them written there.
//
// The including shader declares (as decode_attention.comp does): WG, RV
// (ROWS = 4 RV rows), DIM, PAIRS (output dim pairs per invocation),
// MERGE_BATCH, MERGE_HOLD, the bindings (work, counters, sinks, tables,
// out_f32 / out_16, lse_out), the push constants pc, the shared s_scratch (at least
// max(max_splits * RV * 2, ROWS * DIM / 4) vec4) read as floats through
// SF(i), s_last, and the helpers max4, weight4, output4.
//
// main() holds inv, seq, kvh, q_heads, group, split, row0 and the state,
// the same in every invocation for m_fin, l_fin: rows
// 4v .. 4v+3 in component order; invocation inv holds dims 2p, 2p+1 of
// p = inv + n WG in o_fin[(v * PAIRS + n) * 2 + h] (rotated V domain, not
// divided by l). Every invocation of the workgroup reaches it; a
// workgroup that is not the last of its group returns from main() there
// without writing the output.
  if (pc.splits > 1u) {
    // One merge of every split state by the group's last workgroup, or, where
    // the host chose two levels (MERGE_TREE; decode_attention_merge_width:
    // more than 8 merge batches), branches of pc.merge_width consecutive
    // splits, each merged by its last workgroup into a branch state (after
    // the pass-1 states: slots the tk-run partials op does not read), then
    // the branch states by the last of those; counter 0 of the group's 1 +
    // tree_slots is the root's, 1 + b branch b's (decode_attention_types.hpp).
    const uint width = MERGE_TREE != 0u ? pc.merge_width : 0u;
    const uint branches = MERGE_TREE != 0u ? (pc.splits + width - 1u) / width : 0u;
    const uint branch = branches > 0u ? split / width : 0u;
    const uint counters_at = group * (1u + pc.tree_slots);
    // The level at hand: this workgroup's state goes to `slot`, it counts in
    // at `counter`, and the last of `count` merges states first .. first +
    // count - 1.
    uint slot = group * pc.splits + split;
    uint first = group * pc.splits + branch * width;
    uint count = branches > 0u ? min(width, pc.splits - branch * width) : pc.splits;
    uint counter = branches > 0u ? counters_at + 1u + branch : counters_at;
    // A batch's loads carry no control flow between them and their use (past
    // the end: the last state again, weighted 0), so that they are all in
    // flight together rather than one round trip per state. Only invocations
    // that hold output pairs load o (with PAIRS == 1, those below DIM / 2).
#define TK_MERGE_LOAD(s0)                                                                                \
    if (merges)                                                                                          \
      [[unroll]] for (uint u = 0; u < MERGE_BATCH; ++u) {                                                \
        const uint s = min((s0) + u, count - 1u);                                                        \
        [[unroll]] for (uint n = 0; n < PAIRS; ++n) {                                                    \
          const uint p = min(inv + n * WG, DIM / 2u - 1u);                                               \
          [[unroll]] for (uint h = 0; h < 2u; ++h)                                                       \
            [[unroll]] for (uint r = 0; r < RV; ++r)                                                     \
              os[((u * RV + r) * PAIRS + n) * 2u + h] = work[((first + s) * DIM + 2u * p + h) * RV + r];   \
        }                                                                                                \
      }
    // Where MERGE_HOLD is set, the driver would issue each load right before
    // its first use (a round trip each). A sum of them all, compared with a
    // value, makes them all needed at once; what the comparison guards is
    // harmless either way (the level's counter, all of whose states have
    // counted in, is reset to 0 below).
#define TK_MERGE_ADD(s0)                                                                                 \
    if (merges) {                                                                                        \
      if (MERGE_HOLD) {                                                                                  \
        float c = 0.0;                                                                                   \
        [[unroll]] for (uint i = 0; i < MERGE_BATCH * RV * PAIRS * 2u; ++i) c += os[i].x;                \
        if (c == -1.0e30) counters[counter] = 0u;                                                        \
      }                                                                                                  \
      [[unroll]] for (uint u = 0; u < MERGE_BATCH; ++u) {                                                \
        const uint s = min((s0) + u, count - 1u);                                                        \
        const bool real = (s0) + u < count;                                                              \
        [[unroll]] for (uint r = 0; r < RV; ++r) {                                                       \
          const uint at = (s * RV + r) * 2u;                                                             \
          const vec4 w = s_scratch[at];                                                                  \
          /* Empty states' o is never written: selected away, not multiplied. */                         \
          const bvec4 full = real ? notEqual(s_scratch[at + 1u], vec4(0.0)) : bvec4(false);              \
          [[unroll]] for (uint i = 0; i < PAIRS * 2u; ++i)                                               \
            o_fin[r * PAIRS * 2u + i] += mix(vec4(0.0), w * os[(u * RV + r) * PAIRS * 2u + i], full);    \
        }                                                                                                \
      }                                                                                                  \
    }
    // One level: publish the state, count in, and (the last to arrive) merge.
    // The first MERGE_BATCH states' o and every state's (m, l) are loaded
    // together (one round trip; with more than 4 rows, RV > 1, each batch is
    // loaded where it is added: loaded early, the 16-row batch made the merge
    // longer, bench/NOTES-aura-attention-tc.md); (m, l) staged in shared
    // memory; the maximum over the non-empty ones; each state's weight
    // computed once; then the o sums, a batch at a time. Written out twice
    // rather than as a loop over the levels, and the first only where
    // MERGE_TREE is set: a loop, or levels chosen in the shader, changed how
    // the driver compiled the pipelines that merge in one level
    // (bench/NOTES-aura-attention-widths.md).
#define TK_MERGE_LEVEL                                                                                   \
    {                                                                                                    \
      [[unroll]] for (uint n = 0; n < PAIRS; ++n) {                                                      \
        const uint p = inv + n * WG;                                                                     \
        if (p < DIM / 2u)                                                                                \
          [[unroll]] for (uint h = 0; h < 2u; ++h)                                                       \
            [[unroll]] for (uint r = 0; r < RV; ++r) work[(slot * DIM + 2u * p + h) * RV + r] = o_fin[(r * PAIRS + n) * 2u + h]; \
      }                                                                                                  \
      if (inv == 0u)                                                                                     \
        [[unroll]] for (uint r = 0; r < RV; ++r) {                                                       \
          work[pc.ml_at + (slot * RV + r) * 2u] = m_fin[r];                                              \
          work[pc.ml_at + (slot * RV + r) * 2u + 1u] = l_fin[r];                                         \
        }                                                                                                \
      memoryBarrierBuffer();                                                                             \
      barrier();                                                                                         \
      if (inv == 0u) s_last = atomicAdd(counters[counter], 1u) == count - 1u;                            \
      barrier();                                                                                         \
      if (!s_last) return;                                                                               \
      memoryBarrierBuffer();                                                                             \
      const bool merges = PAIRS > 1u || inv < DIM / 2u;                                                  \
      vec4 os[MERGE_BATCH * RV * PAIRS * 2u];                                                            \
      const bool early = RV == 1u;                                                                       \
      if (early) TK_MERGE_LOAD(0u)                                                                       \
      for (uint s = inv; s < count; s += WG)                                                             \
        [[unroll]] for (uint r = 0; r < RV; ++r) {                                                       \
          s_scratch[(s * RV + r) * 2u] = work[pc.ml_at + ((first + s) * RV + r) * 2u];                   \
          s_scratch[(s * RV + r) * 2u + 1u] = work[pc.ml_at + ((first + s) * RV + r) * 2u + 1u];         \
        }                                                                                                \
      barrier();                                                                                         \
      [[unroll]] for (uint r = 0; r < RV; ++r) {                                                         \
        vec4 m = NEG_INF4;                                                                               \
        for (uint s = 0; s < count; ++s) m = max4(m, s_scratch[(s * RV + r) * 2u], s_scratch[(s * RV + r) * 2u + 1u]); \
        m_fin[r] = m;                                                                                    \
      }                                                                                                  \
      barrier();                                                                                         \
      for (uint s = inv; s < count; s += WG)                                                             \
        [[unroll]] for (uint r = 0; r < RV; ++r)                                                         \
          s_scratch[(s * RV + r) * 2u] = weight4(s_scratch[(s * RV + r) * 2u], s_scratch[(s * RV + r) * 2u + 1u], m_fin[r]); \
      barrier();                                                                                         \
      [[unroll]] for (uint r = 0; r < RV; ++r) {                                                         \
        vec4 l = vec4(0.0);                                                                              \
        for (uint s = 0; s < count; ++s) l += s_scratch[(s * RV + r) * 2u] * s_scratch[(s * RV + r) * 2u + 1u]; \
        l_fin[r] = l;                                                                                    \
      }                                                                                                  \
      [[unroll]] for (uint i = 0; i < RV * PAIRS * 2u; ++i) o_fin[i] = vec4(0.0);                        \
      for (uint s0 = 0; s0 < count; s0 += MERGE_BATCH) {                                                 \
        if (!early || s0 > 0u) TK_MERGE_LOAD(s0)                                                         \
        TK_MERGE_ADD(s0)                                                                                 \
      }                                                                                                  \
      if (inv == 0u) counters[counter] = 0u;                                                             \
      barrier(); /* the weights in s_scratch are read before it holds rows (or states) again */          \
    }
    if (MERGE_TREE != 0u) {
      TK_MERGE_LEVEL
      // The root: the group's branch states.
      slot = pc.num_seqs * pc.kv_heads * gl_NumWorkGroups.y * pc.splits + group * pc.tree_slots + branch;
      first = slot - branch;
      count = branches;
      counter = counters_at;
    }
    TK_MERGE_LEVEL
#undef TK_MERGE_LEVEL
#undef TK_MERGE_LOAD
#undef TK_MERGE_ADD
  }

  // Finish the rows: the sink joins the denominator (a state m = sink,
  // l = 1, o = 0), then o / l and lse in the rotated domain.
  vec4 lse[RV];
  [[unroll]] for (uint r = 0; r < RV; ++r) {
    vec4 keep = vec4(1.0);
    if ((pc.flags & 2u) != 0u) {
      [[unroll]] for (uint k = 0; k < 4u; ++k) {
        const uint rg = row0 + 4u * r + k;
        if (rg < pc.gqa * pc.q_len) {
          const float sink = sinks[kvh * pc.gqa + rg % pc.gqa];
          if (sink != TK_NEG_INF) {
            const float m_new = tk_softmax_max(tk_softmax_max(TK_NEG_INF, m_fin[r][k], l_fin[r][k]), sink, 1.0);
            keep[k] = tk_softmax_weight(m_fin[r][k], l_fin[r][k], m_new);
            l_fin[r][k] = l_fin[r][k] * keep[k] + exp(sink - m_new);
            m_fin[r][k] = m_new;
          }
        }
      }
    }
    [[unroll]] for (uint k = 0; k < 4u; ++k) lse[r][k] = tk_softmax_lse(m_fin[r][k], l_fin[r][k]);
    [[unroll]] for (uint i = 0; i < PAIRS * 2u; ++i) {
      const vec4 o = o_fin[r * PAIRS * 2u + i] * keep;
      o_fin[r * PAIRS * 2u + i] = output4(o, l_fin[r]);
    }
  }

  // V's rotation undone: Hadamard x = s * (H y) / sqrt(DIM); dense x = R^T y.
  if (V_ROT != 0u) {
    [[unroll]] for (uint n = 0; n < PAIRS; ++n) {
      const uint p = inv + n * WG;
      if (p < DIM / 2u)
        [[unroll]] for (uint h = 0; h < 2u; ++h)
          [[unroll]] for (uint r = 0; r < ROWS; ++r) SF(r * DIM + 2u * p + h) = o_fin[((r / 4u) * PAIRS + n) * 2u + h][r % 4u];
    }
    barrier();
    if (V_ROT == 1u) TK_FWHT_SHARED(SF, ROWS, DIM, inv, WG)
    [[unroll]] for (uint n = 0; n < PAIRS; ++n) {
      const uint p = min(inv + n * WG, DIM / 2u - 1u);
      [[unroll]] for (uint h = 0; h < 2u; ++h) {
        const uint d = 2u * p + h;
        [[unroll]] for (uint r = 0; r < ROWS; ++r) {
          float v;
          if (V_ROT == 1u) {
            v = SF(r * DIM + d) * tables[V_ROTATION_AT + d] * pc.inv_sqrt_dim;
          } else {
            v = 0.0;
            for (uint j = 0; j < DIM; ++j) v = fma(tables[V_ROTATION_AT + j * DIM + d], SF(r * DIM + j), v);
          }
          o_fin[((r / 4u) * PAIRS + n) * 2u + h][r % 4u] = v;
        }
      }
    }
  }

  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    const uint rg = row0 + r;
    if (rg >= pc.gqa * pc.q_len) continue;
    const uint out_row = (seq * pc.q_len + rg / pc.gqa) * q_heads + kvh * pc.gqa + rg % pc.gqa;
    [[unroll]] for (uint n = 0; n < PAIRS; ++n) {
      const uint p = inv + n * WG;
      if (p >= DIM / 2u) continue;
      const float a = o_fin[((r / 4u) * PAIRS + n) * 2u][r % 4u], b = o_fin[((r / 4u) * PAIRS + n) * 2u + 1u][r % 4u];
      const uint o = out_row * DIM + 2u * p;
      if (OUT_DTYPE == TK_F32) {
        out_f32[o] = a;
        out_f32[o + 1u] = b;
      } else {
        out_16[o >> 1] = tk_narrow16(OUT_DTYPE, a) | (tk_narrow16(OUT_DTYPE, b) << 16);
      }
    }
    if ((pc.flags & 1u) != 0u && inv == r) lse_out[out_row] = lse[r / 4u][r % 4u];
  }
