// SPDX-License-Identifier: MIT
// The tile loop of decode_attention_tc.glsl's lanes variant (TK_TC_LANES):
// statements included in main(), in place of the staged loop, ending with
// the subgroup's per-row states in s_wm, s_wl and its O factors in s_alpha.
//
// The operands are built in registers, never staged, as single tiles of
// 16x16x16 (the host requires that tile and subgroups of 32: qa[t][0] and
// o_acc[t][0] are the prologue's whole fragments): the fragment layout is
// mma.sync's m16n8k16, which the host requires the Context to have read
// back from the device (aura::decode_attention_lanes_layout), lane
// l = 4 g + j holding element i of
// - A and the accumulator at row g + 8 (i >> 2), column
//   2 j + (i & 1) + 8 ((i >> 1) & 1);
// - B at row 2 j + (i & 1) + 8 ((i >> 1) & 1), column g + 8 (i >> 2).
// So in a tile's S (rows x keys) and P the lane holds rows g and g + 8 and
// keys 2 j, 2 j + 1, 2 j + 8, 2 j + 9 ("its keys" c = 0..3), element
// 4 h + c at row g + 8 h and key c; in K^T the keys g and g + 8; in V its
// keys.
// Dot products do not care in which order the dims are summed, so each
// operand takes the dim order that makes a lane's share of a code row
// contiguous (K_SHARE, V_SHARE: decode_attention_tc.glsl); dims count
// within the subgroup's DL (all of them below Dim 256):
// - K: column k of Q's tile t (and row k of K^T's) is dim
//   (DL / 4) ((k % 8) / 2) + 4 t + 2 (k / 8) + k % 2 (the prologue stages Q so), so
//   lane j's dims of a key are the DL / 4 from (DL / 4) j, tile t's
//   four of them the share's codes 4 t .. 4 t + 3;
// - V: column n of O's tile t is dim (DL / 8) (n % 8) + 2 t + n / 8
//   (TK_TC_OCOL is its inverse), so lane g's dims of a key are the DL / 8 from
//   (DL / 8) g, tile t's two of them the share's codes 2 t, 2 t + 1.
// Codes become fp16 values through a 256-entry table (decode_attention_tc.glsl;
// up to 4 bits two codes per lookup), held in 16 copies (lane l reads copy
// l % 16, word 16 e + l % 16: lanes l and l + 16 meet in a bank only on
// different entries of the same parity).
// Tiles start at multiples of 16 (so a tile lies in one page: page_tokens
// is a multiple of 16); keys outside a row's [first, end) are masked, their
// norms never used.
// In pairs (HALVES 2, Dim 256) subgroups 2 s and 2 s + 1 take the same
// keys (slot s of the block), each its half of the dims: the shares above
// are of the half's codes, S of the half's dims; each puts its partial S
// into the dead query area (one uvec4 per lane: at most 8 rows, elements
// 0 .. 3), and after a barrier adds its partner's, so both hold the same S
// (a + b = b + a) and go through the same softmax.
// The lane's place in the tiles, the load macros and the first tiles'
// loads come from decode_attention_tc_lanes_first.glsl (included before
// the prologue).
{
  // Two codes (a pair, up to 4 bits) or one, from the lane's copy of V's
  // table and of K's: BITS-bit field `f` of the share in w[0 .. n).
#define TK_TC_FIELD(w, n, f, BITS) TK_CODE(w, n, f, (BITS) <= 4u ? 2u * (BITS) : (BITS))
#define TK_TC_LUT(w, n, f) unpackFloat2x16(s_lut[TK_TC_FIELD(w, n, f, V_BITS)][lane % 16u])
#define TK_TC_KLUT(w, n, f)                                                                                        \
  unpackFloat2x16(K_OWN_LUT ? floatBitsToUint(s_scratch[4u * TK_TC_FIELD(w, n, f, K_BITS) + (lane % 16u) / 4u][lane % 4u]) \
                            : s_lut[TK_TC_FIELD(w, n, f, K_BITS)][lane % 16u])
  // Word i of a share whose R loaded words are W[o ..], shifted down by sh
  // bits unless every share starts on a word (GRAIN 32).
#define TK_TC_WORD(W, o, i, R, GRAIN, sh)                                                            \
  ((GRAIN) == 32u ? W[(o) + (i)] : (W[(o) + (i)] >> (sh)) | ((W[(o) + min((i) + 1u, (R) - 1u)] << 1u) << (31u - (sh))))
  // Rows g and g + 8 when the chunk has more than 8 (uniform).
  const bool two = ROWS > 8u && row0 + 8u < pc.gqa * pc.q_len;
  const float qf[2] = float[2](s_qf[g], s_qf[g + 8u]);
  const float qc[2] = K_CENTRED != 0u ? float[2](s_qc[g], s_qc[g + 8u]) : float[2](0.0, 0.0);
  float m_r[2] = float[2](TK_NEG_INF, TK_NEG_INF), mo_r[2] = float[2](TK_NEG_INF, TK_NEG_INF);
  float l_r[2] = float[2](0.0, 0.0);
  // S = Q K^T over a tile from its K shares KC: K^T's tile t from keys g
  // and g + 8's codes of it. The shares' words, each share from its word 0,
  // bit 0 (a word past a share's last loaded one repeats it: those bits are
  // past the share).
#define TK_TC_LANES_S(S, KC)                                                                          \
  {                                                                                                   \
    uint kw_[2u * LKC];                                                                               \
    [[unroll]] for (uint i = 0; i < 2u * LKC; ++i) kw_[i] = TK_TC_WORD(KC, i / LKC * LKR, i % LKC, LKR, K_GRAIN, k_sh); \
    S = TK_MMA_C(0.0);                                                                                 \
    [[unroll]] for (uint t = 0; t < DT; ++t) {                                                        \
      TK_MMA_B kb;                                                                                    \
      [[unroll]] for (uint h = 0; h < 2u; ++h) {                                                      \
        uint w_[LKC];                                                                                 \
        [[unroll]] for (uint i = 0; i < LKC; ++i) w_[i] = kw_[h * LKC + i];                           \
        if (K_BITS <= 4u) {                                                                           \
          const f16vec2 d01 = TK_TC_KLUT(w_, LKC, 2u * t);                                            \
          const f16vec2 d23 = TK_TC_KLUT(w_, LKC, 2u * t + 1u);                                       \
          kb[4u * h] = d01.x;                                                               \
          kb[4u * h + 1u] = d01.y;                                                          \
          kb[4u * h + 2u] = d23.x;                                                          \
          kb[4u * h + 3u] = d23.y;                                                          \
        } else {                                                                                      \
          [[unroll]] for (uint i = 0; i < 4u; ++i) kb[4u * h + i] = TK_TC_KLUT(w_, LKC, 4u * t + i).x; \
        }                                                                                             \
      }                                                                                               \
      S = coopMatMulAdd(qa[t][0], kb, S);                                                                 \
    }                                                                                                 \
  }
#define TK_TC_SX_PUT(S, buf)                                                                           \
  smem[(warp * 2u + (buf)) * 32u + lane] = uvec4(floatBitsToUint(S[0]), floatBitsToUint(S[1]), \
                                                 floatBitsToUint(S[2]), floatBitsToUint(S[3]));
#define TK_TC_SX_ADD(S, buf)                                                                           \
  {                                                                                                    \
    const vec4 p_ = uintBitsToFloat(smem[((warp ^ 1u) * 2u + (buf)) * 32u + lane]);                   \
    [[unroll]] for (uint i = 0; i < 4u; ++i) S[i] += p_[i];                                  \
  }
  if (LANES_LATE) TK_TC_LANES_FIRST_LOADS()
  TK_MMA_C s_cur;  // this tile's S
  if (b0 < b1) {
    TK_TC_LANES_S(s_cur, kc0)
    if (HALVES > 1u) {
      TK_TC_SX_PUT(s_cur, b0 & 1u)
      barrier();
      TK_TC_SX_ADD(s_cur, b0 & 1u)
    }
  }

  for (uint b = b0; b < b1; ++b) {
    const uint tb = base + b * BT + slot * KT;
    if (b + 1u < b1) TK_TC_LANES_LOAD_V(vc_n, kn_n, vn_n, page1, tb + BT)
    if (b + 2u < b1) TK_TC_LANES_LOAD_K(kc_nn, page2, tb + 2u * BT)
    const uint page3 = load_page(seq, (tb + 3u * BT) / PAGE_TOKENS);
    float lvn[4];
    [[unroll]] for (uint c = 0; c < 4u; ++c) lvn[c] = vn[c] > 0.0 ? log(vn[c]) : TK_NEG_INF;
    // The next tile's S depends on nothing below, so its lookups and
    // products are in flight during this tile's softmax.
    TK_MMA_C s_next;
    if (b + 1u < b1) {
      TK_TC_LANES_S(s_next, kc)
      if (HALVES > 1u) TK_TC_SX_PUT(s_next, (b + 1u) & 1u)
    }
    uint vw[4u * LVC];
    [[unroll]] for (uint i = 0; i < 4u * LVC; ++i) vw[i] = TK_TC_WORD(vc, i / LVC * LVR, i % LVC, LVR, V_GRAIN, v_sh);

    // The weights, as the staged loop computes them, per row (h: row g + 8h)
    // over the quad of lanes 4g .. 4g + 3.
    float w8[8];
    float alpha[2] = float[2](1.0, 1.0);
    [[unroll]] for (uint h = 0; h < 2u; ++h) {
      float z[4], u[4];
      float m_t = TK_NEG_INF, mo_t = TK_NEG_INF;
      [[unroll]] for (uint c = 0; c < 4u; ++c) {
        float v = s_cur[4u * h + c] * qf[h] * kn[c];
        if (K_CENTRED != 0u) v += qc[h];
        if (pc.softcap > 0.0) {
          const float xc = v / pc.softcap;
          v = pc.softcap * sign(xc) * (1.0 - 2.0 / (exp(2.0 * abs(xc)) + 1.0));
        }
        const int t = int(tb + 2u * j4 + (c & 1u) + 8u * (c >> 1));
        const bool live = (h == 0u || two) && t >= rf[h] && t < re[h];
        z[c] = live ? v : TK_NEG_INF;
        u[c] = live ? v + lvn[c] : TK_NEG_INF;
        m_t = max(m_t, z[c]);
        mo_t = max(mo_t, u[c]);
      }
      m_t = max(m_t, subgroupShuffleXor(m_t, 1u));
      m_t = max(m_t, subgroupShuffleXor(m_t, 2u));
      mo_t = max(mo_t, subgroupShuffleXor(mo_t, 1u));
      mo_t = max(mo_t, subgroupShuffleXor(mo_t, 2u));
      const float m_new = max(m_r[h], m_t);
      const bool bump = mo_t > mo_r[h] + 8.0;  // also the first weight above 0 (mo = -inf)
      const float mo_new = bump ? mo_t : mo_r[h];
      float l_t = 0.0;
      [[unroll]] for (uint e = 0; e < 4u; ++e) {
        l_t += z[e] == TK_NEG_INF ? 0.0 : exp(z[e] - m_new);
        w8[4u * h + e] = u[e] == TK_NEG_INF ? 0.0 : exp(u[e] - mo_new);
      }
      l_r[h] = l_r[h] * tk_softmax_rescale(m_r[h], m_new) + l_t;
      if (bump && mo_r[h] != TK_NEG_INF) alpha[h] = exp(mo_r[h] - mo_new);
      m_r[h] = m_new;
      mo_r[h] = mo_new;
    }
    if (alpha[0] != 1.0 || alpha[1] != 1.0)
      [[unroll]] for (uint t = 0; t < DT; ++t)
        [[unroll]] for (uint i = 0; i < 8u; ++i) o_acc[t][0][i] *= alpha[i >> 2];
    TK_MMA_A pa;
    [[unroll]] for (uint i = 0; i < 8u; ++i) pa[i] = float16_t(w8[i]);

    // O += P V: V's tile t from its keys' codes of it.
    [[unroll]] for (uint t = 0; t < DT; ++t) {
      TK_MMA_B vb;
      [[unroll]] for (uint c = 0; c < 4u; ++c) {
        uint w_[LVC];
        [[unroll]] for (uint i = 0; i < LVC; ++i) w_[i] = vw[c * LVC + i];
        if (V_BITS <= 4u) {
          const f16vec2 dd = TK_TC_LUT(w_, LVC, t);
          vb[c] = dd.x;
          vb[4u + c] = dd.y;
        } else {
          vb[c] = TK_TC_LUT(w_, LVC, 2u * t).x;
          vb[4u + c] = TK_TC_LUT(w_, LVC, 2u * t + 1u).x;
        }
      }
      o_acc[t][0] = coopMatMulAdd(pa, vb, o_acc[t][0]);
    }

    if (HALVES > 1u) {
      barrier();  // the partners' S of the next tile are in place; the slots of the previous one are read
      if (b + 1u < b1) TK_TC_SX_ADD(s_next, (b + 1u) & 1u)
    }
    s_cur = s_next;
    [[unroll]] for (uint i = 0; i < 2u * LKR; ++i) kc[i] = kc_nn[i];
    [[unroll]] for (uint i = 0; i < 4u * LVR; ++i) vc[i] = vc_n[i];
    [[unroll]] for (uint c = 0; c < 4u; ++c) {
      kn[c] = kn_n[c];
      vn[c] = vn_n[c];
    }
    page1 = page2;
    page2 = page3;
  }
#undef TK_TC_LANES_S
#undef TK_TC_LANES_FIRST_LOADS
#undef TK_TC_SX_ADD
#undef TK_TC_SX_PUT
#undef TK_TC_LANES_LOAD_V
#undef TK_TC_LANES_LOAD_K
#undef TK_TC_ROW_BASE
#undef TK_TC_SHARE_VEC
#undef TK_TC_WORD
#undef TK_TC_KLUT
#undef TK_TC_LUT
#undef TK_TC_FIELD

  // Per row: l summed over the quad; the subgroup's (m, l), then its O factor
  // e^(m_o - M) against the workgroup's maximum M.
  [[unroll]] for (uint h = 0; h < 2u; ++h) {
    l_r[h] += subgroupShuffleXor(l_r[h], 1u);
    l_r[h] += subgroupShuffleXor(l_r[h], 2u);
  }
  if (j4 == 0u)
    [[unroll]] for (uint h = 0; h < 2u; ++h) {
      s_wm[warp * MR + g + 8u * h] = m_r[h];
      s_wl[warp * MR + g + 8u * h] = l_r[h];
    }
  barrier();
  if (j4 == 0u)
    [[unroll]] for (uint h = 0; h < 2u; ++h) TK_TC_ROW_MERGE(g + 8u * h, mo_r[h])
}
