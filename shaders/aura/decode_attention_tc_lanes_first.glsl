// SPDX-License-Identifier: MIT
// The first loads of decode_attention_tc.glsl's lanes variant
// (decode_attention_tc_lanes.glsl, whose layout they follow): statements
// in main(), placed where the workgroup's keys are known and before the
// query's prologue (rotation, scaling, fragments), which they do not
// depend on: the first tiles' page ids, K's shares of the first two
// tiles and V's shares and the norms of the first, in flight while the
// prologue runs (LANES_EARLY; else the tile loop issues them,
// TK_TC_LANES_FIRST_LOADS). Leaves in main()'s scope the lane's place in
// the tiles (g, j4, slot, k_at, k_sh, v_at, v_sh), the load macros, the
// loop's carried loads (kc0, kc, vc, kn, vn, page1, page2; kc_nn, vc_n,
// kn_n, vn_n for the loop) and base, the first tile's key.
  const uint g = lane / 4u, j4 = lane % 4u;
  const uint slot = warp / HALVES;
  // Where the lane's shares start: word (past the other half's words) and bit.
  const uint k_at = half_ * (DL * K_BITS / 32u) + j4 * K_SHARE / 32u, k_sh = j4 * K_SHARE % 32u;
  const uint v_at = half_ * (DL * V_BITS / 32u) + g * V_SHARE / 32u, v_sh = g * V_SHARE % 32u;
  // K's words are loaded two tiles ahead (S is formed one tile ahead), V's
  // and the norms one tile ahead: kc, the next tile's K shares (keys g and
  // g + 8), kc_nn the one after; vc, kn, vn this tile's V shares and norms
  // of its keys, vc_n, kn_n, vn_n the next tile's.
  uint kc[2u * LKR], kc_nn[2u * LKR], vc[4u * LVR], vc_n[4u * LVR];
  float kn[4], vn[4], kn_n[4], vn_n[4];
  [[unroll]] for (uint i = 0; i < 2u * LKR; ++i) kc[i] = kc_nn[i] = 0u;  // defined before the first copy
  // The widest load of a share of SHARE bits (starting on a word boundary
  // when SHARE is a multiple of 32).
#define TK_TC_SHARE_VEC(SHARE) ((SHARE) % 128u == 0u ? 4u : (SHARE) % 64u == 0u ? 2u : 1u)
#define TK_TC_ROW_BASE(page, tile) (((page) * pc.kv_heads + kvh) * PAGE_TOKENS + (tile) % PAGE_TOKENS)
#define TK_TC_LANES_LOAD_K(KC, page, tile)                                                           \
  [[unroll]] for (uint h = 0; h < 2u; ++h) {                                                          \
    uint d_[LKR];                                                                                     \
    TK_LOAD_WORDS(d_, LKR, KW, k_words, k_words2, k_words4, TK_TC_ROW_BASE(page, tile) + g + 8u * h, k_at, TK_TC_SHARE_VEC(K_SHARE)) \
    [[unroll]] for (uint i = 0; i < LKR; ++i) KC[h * LKR + i] = d_[i];                                \
  }
#define TK_TC_LANES_LOAD_V(VC, KN, VN, page, tile)                                                   \
  [[unroll]] for (uint c = 0; c < 4u; ++c) {                                                          \
    const uint row_ = TK_TC_ROW_BASE(page, tile) + 2u * j4 + (c & 1u) + 8u * (c >> 1);                \
    uint d_[LVR];                                                                                     \
    TK_LOAD_WORDS(d_, LVR, VW, v_words, v_words2, v_words4, row_, v_at, TK_TC_SHARE_VEC(V_SHARE))       \
    [[unroll]] for (uint i = 0; i < LVR; ++i) VC[c * LVR + i] = d_[i];                                \
    KN[c] = TK_LOAD_NORM(NORM_DTYPE, k_norms, row_);                                                  \
    VN[c] = TK_LOAD_NORM(NORM_DTYPE, v_norms, row_);                                                  \
  }
  const uint base = uint(lo) & ~15u;
  uint page1 = 0u, page2 = 0u;  // the page ids of the next two tiles
  uint kc0[2u * LKR];           // the first tile's K shares
#define TK_TC_LANES_FIRST_LOADS()                                             \
  if (b0 < b1) {                                                              \
    const uint t0 = base + b0 * BT + slot * KT;                               \
    const uint page0 = load_page(seq, t0 / PAGE_TOKENS);                      \
    page1 = load_page(seq, (t0 + BT) / PAGE_TOKENS); /* one round trip */     \
    TK_TC_LANES_LOAD_K(kc0, page0, t0)                                        \
    TK_TC_LANES_LOAD_V(vc, kn, vn, page0, t0)                                 \
    if (b0 + 1u < b1) TK_TC_LANES_LOAD_K(kc, page1, t0 + BT)                  \
    page2 = load_page(seq, (t0 + 2u * BT) / PAGE_TOKENS);                     \
  }
  // Early only for the short steps' pipeline (one dispatch: PUBLISH 2),
  // whose first tile is most of its loop, and while the held words are few
  // (K at 4 bits or less): at longer loops, and with 8-bit K's 16 words a
  // lane, the registers held across the prologue cost more than the round
  // trips hidden (bench/notes/2026-12-aura-short-context.md).
  const bool LANES_EARLY = PUBLISH == 2u && 4u * LKR + 4u * LVR <= 24u;
  const bool LANES_LATE = PUBLISH != 2u || 4u * LKR + 4u * LVR > 24u;  // not early (spelt out for glslang)
  if (LANES_EARLY) TK_TC_LANES_FIRST_LOADS()
