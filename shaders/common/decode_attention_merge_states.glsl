// SPDX-License-Identifier: MIT
// One row quad's merge over the split states of its group: statements
// (in a block of their own, so they may be included once per quad), used
// by the merge kernel (decode_attention_merge.comp) and by the first
// dispatch's last-arriving workgroup (decode_attention_finish.glsl,
// PUBLISH 2).
//
// The includer holds inv, WG, PAIRS, group (its states are group * splits
// .. + splits - 1, each with ROW_VECS row quads) and s_scratch (at least
// 2 * splits vec4, free; with teams also (TK_MERGE_TEAMS - 1) DIM +
// TK_MERGE_TEAMS vec4),
// and defines
// - TK_MERGE_QUAD: the quad merged (rows 4 q .. 4 q + 3 of each state);
// - TK_MERGE_M, TK_MERGE_L, TK_MERGE_O(i): where the merged maximum, sum
//   and o go (o_fin's 2 PAIRS vec4 of the quad: i = 2 n + h for dim
//   2 (inv + n WG) + h), the same in every invocation for m and l;
// - TK_MERGE_TEAMS: 1, or (only with PAIRS == 1 and WG at least that many
//   times DIM / 2) the teams of DIM / 2 invocations that share the states.
//   Team t = inv / (DIM / 2) weighs states t MS_BATCH .. of each batch
//   and sums their o and l; team 0 adds the other teams' o, and every
//   invocation sums the teams' l in team order: a batch of the same 16
//   states holds 1 / TK_MERGE_TEAMS of the registers, and no stage of
//   weights waits between the maximum and the sums.
// - TK_MERGE_FLAT: 0, or up to this many states, every
//   invocation loads each state's (m, l) (the same words across the
//   workgroup) with its o and merges them in its registers, in state order
//   as one team would: no shared memory and no barrier between the loads
//   and the sums.
// Every invocation reaches it; it ends with a barrier pending: the
// includer barriers before it writes s_scratch again.
if (TK_MERGE_FLAT > 0u && pc.splits <= TK_MERGE_FLAT) {
  const uint MF = max(TK_MERGE_FLAT, 1u);
  const uint mf_first = group * pc.splits, mf_count = pc.splits;
  // Past the last state: the last again, its l taken as 0 (empty).
  vec4 mf_m[MF], mf_l[MF], mf_o[MF * PAIRS * 2u];
  // With PAIRS == 1, only the first DIM / 2 invocations hold output pairs.
  const bool mf_holds = PAIRS > 1u || inv < DIM / 2u;
  [[unroll]] for (uint s = 0; s < MF; ++s) {
    const uint st = mf_first + min(s, mf_count - 1u);
    mf_m[s] = work[pc.ml_at + (st * ROW_VECS + TK_MERGE_QUAD) * 2u];
    mf_l[s] = s < mf_count ? work[pc.ml_at + (st * ROW_VECS + TK_MERGE_QUAD) * 2u + 1u] : vec4(0.0);
  }
  if (mf_holds)
    [[unroll]] for (uint s = 0; s < MF; ++s) {
      const uint st = mf_first + min(s, mf_count - 1u);
      [[unroll]] for (uint n = 0; n < PAIRS; ++n) {
        const uint p = min(inv + n * WG, DIM / 2u - 1u);
        [[unroll]] for (uint h = 0; h < 2u; ++h)
          mf_o[(s * PAIRS + n) * 2u + h] = work[(st * DIM + 2u * p + h) * ROW_VECS + TK_MERGE_QUAD];
      }
    }
  TK_MERGE_M = NEG_INF4;
  [[unroll]] for (uint s = 0; s < MF; ++s) TK_MERGE_M = max4(TK_MERGE_M, mf_m[s], mf_l[s]);
  TK_MERGE_L = vec4(0.0);
  [[unroll]] for (uint i = 0; i < PAIRS * 2u; ++i) TK_MERGE_O(i) = vec4(0.0);
  [[unroll]] for (uint s = 0; s < MF; ++s) {
    const vec4 w = weight4(mf_m[s], mf_l[s], TK_MERGE_M);
    TK_MERGE_L += w * mf_l[s];
    // Empty states' o is never written: selected away, not multiplied.
    const bvec4 full = notEqual(mf_l[s], vec4(0.0));
    if (mf_holds)
      [[unroll]] for (uint i = 0; i < PAIRS * 2u; ++i) TK_MERGE_O(i) += mix(vec4(0.0), w * mf_o[s * PAIRS * 2u + i], full);
  }
} else {
  const uint ms_first = group * pc.splits, ms_count = pc.splits;
  const uint MS_TEAMS = TK_MERGE_TEAMS;
  // States whose o loads are in flight together, per team (32 vec4 per
  // output pair, shared among its teams).
  const uint MS_BATCH = TK_DECODE_ATTENTION_MERGE_BATCH(DIM, WG) / MS_TEAMS;
  const uint ms_team = MS_TEAMS > 1u ? inv / (DIM / 2u) : 0u;
  const uint ms_inv = MS_TEAMS > 1u ? inv % (DIM / 2u) : inv;  // the invocation of team 0 with the same pairs
  // The states' o, a batch at a time (past the last state: the last again,
  // weighted 0), with no control flow between the loads and their use, so
  // that a batch is one round trip. Only invocations that hold output pairs
  // (or a team's copy of them) load: with PAIRS == 1, those below
  // MS_TEAMS DIM / 2.
  const bool merges = PAIRS > 1u || inv < MS_TEAMS * (DIM / 2u);
  vec4 os[MS_BATCH * PAIRS * 2u];
#define TK_MERGE_LOAD(s0)                                                                                    \
  if (merges)                                                                                                \
    [[unroll]] for (uint u = 0; u < MS_BATCH; ++u) {                                                         \
      const uint s = min((s0) + ms_team * MS_BATCH + u, ms_count - 1u);                                      \
      [[unroll]] for (uint n = 0; n < PAIRS; ++n) {                                                          \
        const uint p = min(ms_inv + n * WG, DIM / 2u - 1u);                                                  \
        [[unroll]] for (uint h = 0; h < 2u; ++h)                                                             \
          os[(u * PAIRS + n) * 2u + h] = work[((ms_first + s) * DIM + 2u * p + h) * ROW_VECS + TK_MERGE_QUAD]; \
      }                                                                                                      \
    }
  // The first batch's o and every state's (m, l) in one round trip; the
  // maximum over the non-empty states. One team: each state's weight once
  // into the scratch, and l over them in state order.
  TK_MERGE_LOAD(0u)
  for (uint s = inv; s < ms_count; s += WG) {
    s_scratch[2u * s] = work[pc.ml_at + ((ms_first + s) * ROW_VECS + TK_MERGE_QUAD) * 2u];
    s_scratch[2u * s + 1u] = work[pc.ml_at + ((ms_first + s) * ROW_VECS + TK_MERGE_QUAD) * 2u + 1u];
  }
  barrier();
  TK_MERGE_M = NEG_INF4;
  for (uint s = 0; s < ms_count; ++s) TK_MERGE_M = max4(TK_MERGE_M, s_scratch[2u * s], s_scratch[2u * s + 1u]);
  TK_MERGE_L = vec4(0.0);
  if (MS_TEAMS == 1u) {
    barrier();
    for (uint s = inv; s < ms_count; s += WG) s_scratch[2u * s] = weight4(s_scratch[2u * s], s_scratch[2u * s + 1u], TK_MERGE_M);
    barrier();
    for (uint s = 0; s < ms_count; ++s) TK_MERGE_L += s_scratch[2u * s] * s_scratch[2u * s + 1u];
  }
  vec4 ms_l = vec4(0.0);  // teams: the team's part of l
  [[unroll]] for (uint i = 0; i < PAIRS * 2u; ++i) TK_MERGE_O(i) = vec4(0.0);
  for (uint s0 = 0; s0 < ms_count; s0 += MS_BATCH * MS_TEAMS) {
    if (s0 > 0u) TK_MERGE_LOAD(s0)
    if (merges)
      [[unroll]] for (uint u = 0; u < MS_BATCH; ++u) {
        const uint at = s0 + ms_team * MS_BATCH + u, s = min(at, ms_count - 1u);
        const vec4 l = s_scratch[2u * s + 1u];
        const vec4 w = MS_TEAMS == 1u ? s_scratch[2u * s] : weight4(s_scratch[2u * s], l, TK_MERGE_M);
        // Empty states' o is never written: selected away, not multiplied.
        const bvec4 full = at < ms_count ? notEqual(l, vec4(0.0)) : bvec4(false);
        if (MS_TEAMS > 1u) ms_l += mix(vec4(0.0), w * l, full);
        [[unroll]] for (uint i = 0; i < PAIRS * 2u; ++i) TK_MERGE_O(i) += mix(vec4(0.0), w * os[u * PAIRS * 2u + i], full);
      }
  }
  if (MS_TEAMS > 1u) {
    // Team t's o at 2 (t - 1) Dim / 2 .., its l at (MS_TEAMS - 1) Dim + t.
    barrier();  // the states' (m, l) are read
    if (merges && ms_team > 0u)
      [[unroll]] for (uint i = 0; i < 2u; ++i) s_scratch[((ms_team - 1u) * 2u + i) * (DIM / 2u) + ms_inv] = TK_MERGE_O(i);
    if (merges && ms_inv == 0u) s_scratch[(MS_TEAMS - 1u) * DIM + ms_team] = ms_l;
    barrier();
    if (ms_team == 0u)
      for (uint t = 1u; t < MS_TEAMS; ++t)
        [[unroll]] for (uint i = 0; i < 2u; ++i) TK_MERGE_O(i) += s_scratch[((t - 1u) * 2u + i) * (DIM / 2u) + inv];
    for (uint t = 0; t < MS_TEAMS; ++t) TK_MERGE_L += s_scratch[(MS_TEAMS - 1u) * DIM + t];
  }
#undef TK_MERGE_LOAD
}
