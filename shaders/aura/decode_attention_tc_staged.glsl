// SPDX-License-Identifier: MIT
// The tile loop of decode_attention_tc.glsl's staged variant: statements
// included in main(), in place of the lanes variant's loop, ending with the
// subgroup's per-row states in s_wm, s_wl and its O factors in s_alpha.
// Each subgroup decodes a tile's K and V codes into its shared stage and
// multiplies there (decode_attention_tc.glsl has the geometry), its lane
// work spread over 32 virtual lanes in TK_MMA_PIECES pieces.
  // Per piece y (virtual lane v = lane + y SUBGROUP, those of the lanes
  // past 31 of a subgroup of 64 being copies that store nothing): key
  // v / 2, half v % 2 for the loads; row v / 2, keys 8 (v % 2) .. for the
  // weights, with that row's running state.
#define TK_TC_PIECES [[unroll]] for (uint y = 0; y < TK_MMA_PIECES; ++y)
  float row_qf[TK_MMA_PIECES], row_qc[TK_MMA_PIECES], m_run[TK_MMA_PIECES], mo_run[TK_MMA_PIECES], l_run[TK_MMA_PIECES];
  TK_TC_PIECES {
    row_qf[y] = s_qf[((lane + y * SUBGROUP) & 31u) / 2u];
    row_qc[y] = K_CENTRED != 0u ? s_qc[((lane + y * SUBGROUP) & 31u) / 2u] : 0.0;
    m_run[y] = mo_run[y] = TK_NEG_INF;
    l_run[y] = 0.0;
  }
  // Loads one tile ahead (page ids two ahead): tile b of this subgroup
  // starts at lo + b BT + 16 warp; keys at or past hi are loaded at hi - 1.
  uint kw[TK_MMA_PIECES][LKW], vw[TK_MMA_PIECES][LVW];
  float nrm[TK_MMA_PIECES];
  uint page_next[TK_MMA_PIECES];
  const uint hi_key = uint(max(hi - 1, 0));
  if (b0 < b1)
    TK_TC_PIECES {
      const uint v = (lane + y * SUBGROUP) & 31u, key = v / 2u, hlf = v % 2u;
      const uint t0 = min(uint(lo) + b0 * BT + warp * KT + key, hi_key);
      const uint row = (load_page(seq, t0 / PAGE_TOKENS) * pc.kv_heads + kvh) * PAGE_TOKENS + t0 % PAGE_TOKENS;
      TK_LOAD_WORDS(kw[y], LKW, KW, k_words, k_words2, k_words4, row, hlf * LKW, TK_HALF_VEC(LKW))
      TK_LOAD_WORDS(vw[y], LVW, VW, v_words, v_words2, v_words4, row, hlf * LVW, TK_HALF_VEC(LVW))
      nrm[y] = hlf == 0u ? TK_LOAD_NORM(NORM_DTYPE, k_norms, row) : TK_LOAD_NORM(NORM_DTYPE, v_norms, row);
      page_next[y] = load_page(seq, min(uint(lo) + (b0 + 1u) * BT + warp * KT + key, hi_key) / PAGE_TOKENS);
    }

  for (uint b = b0; b < b1; ++b) {
    const uint tb = uint(lo) + b * BT + warp * KT;
    uint kn_[TK_MMA_PIECES][LKW], vn_[TK_MMA_PIECES][LVW];
    float nrm_next[TK_MMA_PIECES];
    if (b + 1u < b1)
      TK_TC_PIECES {
        const uint v = (lane + y * SUBGROUP) & 31u, key = v / 2u, hlf = v % 2u;
        const uint t1 = min(tb + BT + key, hi_key);
        const uint row = (page_next[y] * pc.kv_heads + kvh) * PAGE_TOKENS + t1 % PAGE_TOKENS;
        TK_LOAD_WORDS(kn_[y], LKW, KW, k_words, k_words2, k_words4, row, hlf * LKW, TK_HALF_VEC(LKW))
        TK_LOAD_WORDS(vn_[y], LVW, VW, v_words, v_words2, v_words4, row, hlf * LVW, TK_HALF_VEC(LVW))
        nrm_next[y] = hlf == 0u ? TK_LOAD_NORM(NORM_DTYPE, k_norms, row) : TK_LOAD_NORM(NORM_DTYPE, v_norms, row);
        page_next[y] = load_page(seq, min(tb + 2u * BT + key, hi_key) / PAGE_TOKENS);
      }

    TK_MMA_SYNC();  // the previous tile's products have read the stage, its rescale s_flag
    if (lane == 0u) s_flag[warp] = 0u;
    TK_TC_PIECES if (tk_mma_piece(y, lane)) {
      const uint v = lane + y * SUBGROUP, key = v / 2u, hlf = v % 2u;
      TK_DECODE_ROW(kw[y], LKW, K_BITS, s_cbk, stage, key, hlf)
      if (hlf == 0u) s_kn[warp * KT + key] = nrm[y];
      else s_lvn[warp * KT + key] = nrm[y] > 0.0 ? log(nrm[y]) : TK_NEG_INF;
    }
    TK_MMA_SYNC();
    TK_MMA_C s[TK_MMA_PARTS];
    TK_MMA_FILL(s, 0.0);
    [[unroll]] for (uint t = 0; t < DT; ++t) {
      TK_MMA_B kb[TK_MMA_PARTS];  // K^T, dims 16t .. x keys: column n of it is key n's row
      TK_MMA_LOAD_B_COL(kb, smem, stage + 2u * t, KS);
      TK_MMA(s, qa[t], kb);
    }
    TK_MMA_SYNC();  // K is read: V takes the stage
    TK_TC_PIECES if (tk_mma_piece(y, lane)) {
      const uint v = lane + y * SUBGROUP, key = v / 2u, hlf = v % 2u;
      TK_DECODE_ROW(vw[y], LVW, V_BITS, s_cbv, stage, key, hlf)
    }
    TK_MMA_STORE_C_ROW(s, smem, stage + S_OFF, SS);
    TK_MMA_SYNC();

    // The weights: virtual lane v takes row v / 2, keys 8 (v % 2) .. + 7
    // (its partner v ^ 1, the lane's neighbour, the other half). z = S 2^e
    // norm_k (+ scale <q, centre>; capped, masked); m exact, l per virtual
    // lane (summed over the pair at the end); O's reference m_o moves only
    // when a weight would exceed e^8 (fp16 holds that), and then O is
    // rescaled by e^(old - new) (s_alpha, s_flag).
    TK_TC_PIECES {
      const uint v = (lane + y * SUBGROUP) & 31u, row = v / 2u, k0 = 8u * (v % 2u);
      const bool own = tk_mma_piece(y, lane);
      float z[8], u[8];
      float m_t = TK_NEG_INF, mo_t = TK_NEG_INF;
      [[unroll]] for (uint q4 = 0; q4 < 2u; ++q4) {
        const vec4 sv = uintBitsToFloat(smem[stage + S_OFF + row * SS + k0 / 4u + q4]);
        [[unroll]] for (uint i = 0; i < 4u; ++i) {
          const uint j = 4u * q4 + i;
          float val = sv[i] * row_qf[y] * s_kn[warp * KT + k0 + j];
          if (K_CENTRED != 0u) val += row_qc[y];
          if (pc.softcap > 0.0) {
            const float xc = val / pc.softcap;
            val = pc.softcap * sign(xc) * (1.0 - 2.0 / (exp(2.0 * abs(xc)) + 1.0));
          }
          const int t = int(tb + k0 + j);
          z[j] = t >= row_first[y] && t < row_end[y] ? val : TK_NEG_INF;
          u[j] = z[j] + s_lvn[warp * KT + k0 + j];
          m_t = max(m_t, z[j]);
          mo_t = max(mo_t, u[j]);
        }
      }
      m_t = max(m_t, subgroupShuffleXor(m_t, 1u));
      mo_t = max(mo_t, subgroupShuffleXor(mo_t, 1u));
      const float m_new = max(m_run[y], m_t);
      const bool bump = mo_t > mo_run[y] + 8.0;  // also the first weight above 0 (mo_run = -inf)
      const float mo_new = bump ? mo_t : mo_run[y];
      float l_t = 0.0;
      uint ph[4];
      [[unroll]] for (uint j = 0; j < 8u; j += 2u) {
        vec2 w;
        [[unroll]] for (uint h = 0; h < 2u; ++h) {
          l_t += z[j + h] == TK_NEG_INF ? 0.0 : exp(z[j + h] - m_new);
          w[h] = u[j + h] == TK_NEG_INF ? 0.0 : exp(u[j + h] - mo_new);
        }
        ph[j / 2u] = packHalf2x16(w);
      }
      l_run[y] = l_run[y] * tk_softmax_rescale(m_run[y], m_new) + l_t;
      const bool rescale = bump && mo_run[y] != TK_NEG_INF;  // O is still 0 while mo_run = -inf
      if (own) {
        if (v % 2u == 0u) s_alpha[warp * MR + row] = rescale ? exp(mo_run[y] - mo_new) : 1.0;
        if (rescale) s_flag[warp] = 1u;
        smem[stage + P_OFF + row * 2u + v % 2u] = uvec4(ph[0], ph[1], ph[2], ph[3]);
      }
      m_run[y] = m_new;
      mo_run[y] = mo_new;
    }
    TK_MMA_SYNC();

    if (s_flag[warp] != 0u) TK_TC_RESCALE_O();
    TK_MMA_A pa[TK_MMA_PARTS];
    TK_MMA_LOAD_A_ROW(pa, smem, stage + P_OFF, 2u);
    [[unroll]] for (uint t = 0; t < DT; ++t) {
      TK_MMA_B vb[TK_MMA_PARTS];  // V, keys x dims 16t ..
      TK_MMA_LOAD_B_ROW(vb, smem, stage + 2u * t, KS);
      TK_MMA(o_acc[t], pa, vb);
    }

    TK_TC_PIECES {
      [[unroll]] for (uint i = 0; i < LKW; ++i) kw[y][i] = kn_[y][i];
      [[unroll]] for (uint i = 0; i < LVW; ++i) vw[y][i] = vn_[y][i];
      nrm[y] = nrm_next[y];
    }
  }

  // The subgroups' states merged: M = max m, L = sum l e^(m - M); each
  // subgroup's O (maximum m_o) scaled by e^(m_o - M) and summed in shared
  // memory, subgroup after subgroup.
  TK_TC_PIECES {
    l_run[y] += subgroupShuffleXor(l_run[y], 1u);
    const uint v = lane + y * SUBGROUP;
    if (tk_mma_piece(y, lane) && v % 2u == 0u) {
      s_wm[warp * MR + v / 2u] = m_run[y];
      s_wl[warp * MR + v / 2u] = l_run[y];
    }
  }
  barrier();
  TK_TC_PIECES {
    const uint v = lane + y * SUBGROUP;
    if (tk_mma_piece(y, lane) && v % 2u == 0u) TK_TC_ROW_MERGE(v / 2u, mo_run[y])
  }
#undef TK_TC_PIECES
