// SPDX-License-Identifier: MIT
#version 460
// AURA decode attention over the paged, compressed KV cache: one dispatch
// per step, two where it splits the keys
// (include/tilekernels/aura/decode_attention.hpp has the math and the
// layouts). Scores come from the rotated query and the codes,
//   z = scale * norm_k * <R_k q, codebook_k[codes]>   (raw K: scale * <q, k>),
// values are accumulated in V's rotated domain, p * norm_v * codebook_v[codes],
// and V's rotation is undone once per output row.
//
// Geometry (invariants the host relies on):
// - workgroup (x = (seq * kv_heads + kv_head) * splits + split, y = row
//   chunk) owns query rows chunk * ROWS .. + ROWS of one KV head, row
//   r = i * gqa + g (new token i, query head kv_head * gqa + g); ROWS =
//   4 * ROW_VECS and rows past gqa * q_len are padding (masked, never
//   written). All query heads of a KV head share each code load.
// - the keys some row of the chunk sees, [lo, hi), are cut into blocks of
//   BT = WG * TPI keys counted from lo; split s takes blocks
//   [nb * s / splits, nb * (s + 1) / splits) of the nb blocks.
// - per block, all code loads are issued first: invocation i reads whole code
//   rows of keys i, i + WG, ... (TPI keys; 16-byte loads where a row is whole
//   16-byte units); lane (tg, c) of the value phase reads the words of dims
//   8c .. 8c + 7 of keys tg, tg + TG, ... (TG = WG / (DIM / 8) key groups).
//   Then invocation i scores its keys against every row (codebook in shared
//   memory, queries broadcast from shared memory); the block maximum per
//   row is reduced over the workgroup (subgroup reductions in the subgroup
//   variant, a shared-memory tree in the portable one); the weights
//   e^(z - m) * norm_v go to shared memory; lane (tg, c) folds its keys'
//   values into its rows x 8 dims. Three barriers per block.
// - after the last block, the value groups' partial outputs and the
//   invocations' sums l are added in a fixed order. splits == 1: the
//   workgroup finishes its rows (sink, o / l, V's rotation undone, output,
//   lse). splits > 1 (PUBLISH): it publishes its softmax state (o, m, l;
//   rotated domain) to the workspace, and the call's second dispatch
//   (decode_attention_merge.comp) merges the split states and finishes
//   the rows.
// - seq_lens are clamped to [0, max_pages * PAGE_TOKENS] and block-table
//   entries to [0, num_pages): nothing outside the cache or the table is
//   read, whatever they hold. Keys outside a row's view are still loaded
//   (at a clamped position), so no load waits behind a branch.
//! variant subgroup -DTK_SUBGROUP=1
//! variant compact -DTK_COMPACT=1
//! variant subgroup_compact -DTK_SUBGROUP=1 -DTK_COMPACT=1
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_memory_scope_semantics : require
#ifdef TK_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#include "tilekernels/aura/decode_attention_abi.h"
#include "../common/convert.glsl"
#include "../common/softmax_state.glsl"
#include "../common/aura_cache.glsl"

TK_DECLARE_SPEC(TK_DECODE_ATTENTION_SPEC)
TK_DECLARE_PUSH(TK_DECODE_ATTENTION_PUSH)

// The long loops (over a key's code chunks, over a value lane's keys) are
// unrolled so that their loads issue together; the compact modules leave
// them to the driver (for CPU devices, whose compilers take tens of seconds
// over the unrolled code).
#ifdef TK_COMPACT
#define TK_UNROLL_LONG
#else
#define TK_UNROLL_LONG [[unroll]]
#endif

const uint WG = gl_WorkGroupSize.x;
const uint RV = ROW_VECS;
const uint ROWS = 4u * RV;
const uint BT = WG * TPI;  // keys per block
const bool K_RAW = K_BITS == 16u;
const bool V_RAW = V_BITS == 16u;
// Split keys: the first K_HI_DIMS coordinates at K_HI_BITS, their codes
// in the row's first KW_HI words, their codebook after K's in s_cbk.
const bool K_SPLIT = K_HI_DIMS != 0u;
const uint K_HI_BITS = K_BITS + 1u;
const uint KW_HI = K_HI_DIMS * K_HI_BITS / 32u;
const uint KW = K_RAW ? DIM / 2u : KW_HI + (DIM - K_HI_DIMS) * K_BITS / 32u;  // words per key row
const uint VW = V_RAW ? DIM / 2u : DIM * V_BITS / 32u;
const uint K_LEVELS = K_RAW ? 1u : 1u << K_BITS;
const uint K_HI_LEVELS = K_SPLIT ? 1u << K_HI_BITS : 0u;
const uint V_LEVELS = V_RAW ? 1u : 1u << V_BITS;
// K code rows are read a chunk of words at a time, a chunk holding whole
// codes (3 words at 3 and 6 bits): 16-byte loads where the row and both
// parts of a split row are whole 16-byte units.
const uint K_WHOLE = (KW | KW_HI) % 4u == 0u ? 4u : ((KW | KW_HI) % 2u == 0u ? 2u : 1u);  // both multiples
const uint KCW = K_BITS == 3u || K_BITS == 6u ? 3u : K_WHOLE;
const uint KCW_HI = K_HI_BITS == 3u ? 3u : K_WHOLE;
const uint LPT = DIM / 8u;              // value lanes per key
const uint TG = WG / LPT;               // value key groups
const uint VJ = (BT + TG - 1u) / TG;    // keys per value lane per block
// Words a value lane loads per key: 8 dims of 4-, 8- or 16-bit values are
// whole words at a fixed offset; other widths take the two words holding
// their 8 * V_BITS bits.
const bool V_ALIGNED = (8u * V_BITS) % 32u == 0u;
const uint VWL = V_ALIGNED ? 8u * V_BITS / 32u : 2u;
const uint PAGES = BT / PAGE_TOKENS + 2u;  // table entries one block can touch
const uint PAIRS = TK_DECODE_ATTENTION_PAIRS(DIM, WG);  // output dim pairs per invocation
const uint CPI = (DIM + WG - 1u) / WG;                  // centre dims per invocation (K_CENTRED)

#include "../common/decode_attention_io.glsl"

shared vec4 s_q[DIM * RV];       // s_q[d * RV + v]: rows 4v .. 4v+3 of the scaled, rotated queries at dim d
// The scratch: the block's weights [BT][RV] (the host checks they fit);
// the rows as floats; the value groups' sums, O_GROUPS groups at a time;
// the merge's states.
const uint SCRATCH = TK_DECODE_ATTENTION_SCRATCH(WG);
const uint O_GROUPS = SCRATCH / (LPT * 8u);
shared vec4 s_scratch[SCRATCH];
shared vec4 s_red[(WG + WG / 8u) * RV];  // workgroup reductions
shared float s_cbk[K_LEVELS + K_HI_LEVELS];
shared float s_cbv[V_LEVELS];
shared uint s_page[2u * PAGES];  // two blocks' page ids (clamped)
shared vec4 s_qc[RV];            // K_CENTRED: per row, scale * <q, centre>

// The scores z of my keys over one part of their code rows: words
// [W0, W0 + NW) of a row holding the codes of dims D0 .. at PB bits each
// (raw: two values per word), PCW words (whole codes) per load, the
// codebook at s_cbk[CB0 ..].
#define TK_SCORE_PART(W0, NW, D0, PB, PCW, CB0)                                                        \
  TK_UNROLL_LONG for (uint ch = 0; ch < (NW) / (PCW); ++ch) {                                          \
    uint w[TPI * (PCW)];                                                                               \
    [[unroll]] for (uint k = 0; k < TPI; ++k) {                                                        \
      const uint at = krow[k] * KW + (W0) + ch * (PCW);                                                \
      if ((PCW) == 4u) {                                                                               \
        const uvec4 v = k_words4[at / 4u];                                                             \
        w[k * (PCW)] = v.x;                                                                            \
        w[k * (PCW) + 1u] = v.y;                                                                       \
        w[k * (PCW) + 2u] = v.z;                                                                       \
        w[k * (PCW) + 3u] = v.w;                                                                       \
      } else if ((PCW) == 2u) {                                                                        \
        const uvec2 v = k_words2[at / 2u];                                                             \
        w[k * (PCW)] = v.x;                                                                            \
        w[k * (PCW) + 1u] = v.y;                                                                       \
      } else {                                                                                         \
        [[unroll]] for (uint i = 0; i < (PCW); ++i) w[k * (PCW) + i] = k_words[at + i];                \
      }                                                                                                \
    }                                                                                                  \
    [[unroll]] for (uint e = 0; e < (PCW) * 32u / (PB); ++e) {                                         \
      vec4 qd[RV];                                                                                     \
      [[unroll]] for (uint r = 0; r < RV; ++r) qd[r] = s_q[((D0) + ch * ((PCW) * 32u / (PB)) + e) * RV + r]; \
      [[unroll]] for (uint k = 0; k < TPI; ++k) {                                                      \
        float kv;                                                                                      \
        if (K_RAW) {                                                                                   \
          kv = tk_raw_value(RAW_DTYPE, w[k * (PCW) + e / 2u], e % 2u);                                 \
        } else {                                                                                       \
          const uint bit = e * (PB), wi = bit >> 5, o = bit & 31u;                                     \
          uint code;                                                                                   \
          if (o + (PB) <= 32u)                                                                         \
            code = (w[k * (PCW) + wi] >> o) & ((1u << (PB)) - 1u);                                     \
          else /* a chunk holds whole codes: the next word is in it */                                 \
            code = tk_code_window(w[k * (PCW) + wi], w[k * (PCW) + min(wi + 1u, (PCW) - 1u)], o, (PB)); \
          kv = s_cbk[(CB0) + code];                                                                    \
        }                                                                                              \
        [[unroll]] for (uint r = 0; r < RV; ++r) z[k * RV + r] = fma(vec4(kv), qd[r], z[k * RV + r]);  \
      }                                                                                                \
    }                                                                                                  \
  }

// The cache row (page * kv_heads + kv_head) * PAGE_TOKENS + slot of position
// t, the block's page ids in s_page[buf ..] starting at table index fp.
uint cache_row(uint t, uint fp, uint buf, uint kvh) {
  return (s_page[buf + t / PAGE_TOKENS - fp] * pc.kv_heads + kvh) * PAGE_TOKENS + t % PAGE_TOKENS;
}

// The workgroup's maximum (or sum) of every invocation's v, returned to all.
void wg_reduce(inout vec4 v[RV], bool is_max) {
  const uint inv = gl_LocalInvocationID.x;
#ifdef TK_SUBGROUP
  [[unroll]] for (uint r = 0; r < RV; ++r) v[r] = is_max ? subgroupMax(v[r]) : subgroupAdd(v[r]);
  if (subgroupElect()) {
    [[unroll]] for (uint r = 0; r < RV; ++r) s_red[gl_SubgroupID * RV + r] = v[r];
  }
  barrier();
  [[unroll]] for (uint r = 0; r < RV; ++r) {
    vec4 a = s_red[r];
    for (uint s = 1; s < gl_NumSubgroups; ++s) a = is_max ? max(a, s_red[s * RV + r]) : a + s_red[s * RV + r];
    v[r] = a;
  }
#else
  // Two levels: eight invocations' values per group, then the WG / 8 groups'.
  [[unroll]] for (uint r = 0; r < RV; ++r) s_red[inv * RV + r] = v[r];
  barrier();
  if (inv < WG / 8u)
    [[unroll]] for (uint r = 0; r < RV; ++r) {
      vec4 a = s_red[8u * inv * RV + r];
      [[unroll]] for (uint i = 1u; i < 8u; ++i) {
        const vec4 b = s_red[(8u * inv + i) * RV + r];
        a = is_max ? max(a, b) : a + b;
      }
      s_red[(WG + inv) * RV + r] = a;
    }
  barrier();
  [[unroll]] for (uint r = 0; r < RV; ++r) {
    vec4 a = s_red[WG * RV + r];
    for (uint g = 1u; g < WG / 8u; ++g) a = is_max ? max(a, s_red[(WG + g) * RV + r]) : a + s_red[(WG + g) * RV + r];
    v[r] = a;
  }
#endif
}

// cap * tanh(z / cap) without overflow: 1 - 2 / (e^(2|x|) + 1) saturates to 1.
vec4 softcap4(vec4 z, float cap) {
  const vec4 x = z / cap;
  const vec4 t = 1.0 - 2.0 / (exp(2.0 * abs(x)) + 1.0);
  return cap * sign(x) * t;
}

// The 8 value dims 8c .. 8c+7 of one key from its lane words w[0 .. VWL).
void value_dims(uint c, uint w0, uint w1, uint w2, uint w3, out float val[8]) {
  if (V_RAW) {
    const uint w[4] = uint[4](w0, w1, w2, w3);
    [[unroll]] for (uint e = 0; e < 8u; ++e) val[e] = tk_raw_value(RAW_DTYPE, w[e / 2u], e % 2u);
  } else if (V_ALIGNED) {
    [[unroll]] for (uint e = 0; e < 8u; ++e) {
      const uint bit = e * V_BITS;
      const uint word = bit < 32u ? w0 : w1;
      val[e] = s_cbv[(word >> (bit & 31u)) & (V_LEVELS - 1u)];
    }
  } else {
    const uint off = (8u * c * V_BITS) & 31u;
    [[unroll]] for (uint e = 0; e < 8u; ++e) val[e] = s_cbv[tk_code_window64(w0, w1, off + e * V_BITS, V_BITS)];
  }
}

void main() {
  const uint inv = gl_LocalInvocationID.x;
  const uint x = gl_WorkGroupID.x + pc.group_offset;
  const uint unit = x / pc.splits, split = x % pc.splits;
  const uint seq = unit / pc.kv_heads, kvh = unit % pc.kv_heads;
  const uint chunk = gl_WorkGroupID.y;
  const uint group = unit * gl_NumWorkGroups.y + chunk;
  const uint q_heads = pc.kv_heads * pc.gqa;
  const uint row0 = chunk * ROWS;
  const int seq_len = seq_lens[seq];
  // The queries (padding rows load row 0, which every workgroup's sequence
  // has, and keep 0) and the codebooks' entries (at clamped indices) are
  // loaded in straight-line code ahead of every loop and every store that
  // waits on a load, so that their round trips run with seq_len's rather
  // than after it and the page ids'. Stored below.
  const uint QPI = (ROWS * DIM + WG - 1u) / WG;
  float qv[QPI];
  [[unroll]] for (uint k = 0; k < QPI; ++k) {
    const uint e = min(inv + k * WG, ROWS * DIM - 1u), rg = row0 + e / DIM, d = e % DIM;
    const bool live = rg < pc.gqa * pc.q_len;
    const float v = load_q(q_element(seq, live ? rg : 0u, kvh, d));
    qv[k] = (live ? v : 0.0) * (K_ROT == 1u ? tables[K_ROTATION_AT + d] : 1.0);
  }
  const uint CBK_PI = K_RAW ? 0u : (K_LEVELS + K_HI_LEVELS + WG - 1u) / WG;
  const uint CBV_PI = V_RAW ? 0u : (V_LEVELS + WG - 1u) / WG;
  float cbk[CBK_PI > 0u ? CBK_PI : 1u], cbv[CBV_PI > 0u ? CBV_PI : 1u];
  [[unroll]] for (uint k = 0; k < CBK_PI; ++k) {
    const uint i = min(inv + k * WG, K_LEVELS + K_HI_LEVELS - 1u);
    cbk[k] = i < K_LEVELS ? tables[K_CODEBOOK_AT + i] : tables[K_HI_CODEBOOK_AT + i - K_LEVELS];
  }
  [[unroll]] for (uint k = 0; k < CBV_PI; ++k) cbv[k] = tables[V_CODEBOOK_AT + min(inv + k * WG, V_LEVELS - 1u)];
  const int len = clamp(seq_len, 0, int(pc.max_pages * PAGE_TOKENS));

  // Each row's visible keys [first, end): causal among the q_len new tokens,
  // within the window; empty for padding rows.
  ivec4 first[RV], end[RV];
  int lo = len, hi = 0;
  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    const uint rg = row0 + r;
    int f = 0, e = 0;
    if (rg < pc.gqa * pc.q_len) {
      const int pos1 = len - int(pc.q_len) + int(rg / pc.gqa) + 1;
      e = clamp(pos1, 0, len);
      f = pc.window != 0u ? clamp(pos1 - int(pc.window), 0, e) : 0;
    }
    first[r / 4u][r % 4u] = f;
    end[r / 4u][r % 4u] = e;
    if (f < e) {
      lo = min(lo, f);
      hi = max(hi, e);
    }
  }
  if (lo >= hi) lo = hi = 0;
  const uint nb = (uint(hi - lo) + BT - 1u) / BT;
  const uint b0 = nb * split / pc.splits, b1 = nb * (split + 1u) / pc.splits;

  [[unroll]] for (uint k = 0; k < CBK_PI; ++k)
    if (inv + k * WG < K_LEVELS + K_HI_LEVELS) s_cbk[inv + k * WG] = cbk[k];
  [[unroll]] for (uint k = 0; k < CBV_PI; ++k)
    if (inv + k * WG < V_LEVELS) s_cbv[inv + k * WG] = cbv[k];
  if (b0 < b1 && inv < PAGES) s_page[inv] = load_page(seq, (uint(lo) + b0 * BT) / PAGE_TOKENS + inv);
  // Centred keys: the centre at my dims, times K's Hadamard signs (the
  // scratch holds the queries with them), loaded with the queries.
  float cmu[CPI];
  if (K_CENTRED != 0u) {
    const uint at = centre_at(seq, kvh);
    [[unroll]] for (uint i = 0; i < CPI; ++i) {
      const uint d = min(inv + i * WG, DIM - 1u);
      cmu[i] = k_centre[at + d] * (K_ROT == 1u ? tables[K_ROTATION_AT + d] : 1.0);
    }
  }

  // The queries, rotated once (Hadamard: signs, transform, 1/sqrt(DIM);
  // dense: R q) and scaled by `scale`, into s_q. Unrotated and uncentred
  // (Q_DIRECT) they go there straight from the registers; else through
  // the scratch.
  const bool Q_DIRECT = K_ROT == 0u && K_CENTRED == 0u;
  const float q_scale = K_ROT == 1u ? pc.scale * pc.inv_sqrt_dim : pc.scale;
  if (Q_DIRECT) {
    [[unroll]] for (uint k = 0; k < QPI; ++k) {
      const uint e = inv + k * WG, r = e / DIM, d = e % DIM;
      if (e < ROWS * DIM) s_q[d * RV + r / 4u][r % 4u] = qv[k] * q_scale;
    }
  } else {
    [[unroll]] for (uint k = 0; k < QPI; ++k)
      if (inv + k * WG < ROWS * DIM) SF(inv + k * WG) = qv[k];
    barrier();
    // Centred keys: each row's scores gain c = scale * <q, centre>, summed
    // over the workgroup (padding rows hold 0) before the transform changes
    // the scratch (wg_reduce's barrier follows every read of it). Without a
    // softcap c is added to the state's maximum at the end (every score of
    // the row moves by c: the weights do not change); with one, to each
    // score before the cap.
    if (K_CENTRED != 0u) {
      vec4 qc[RV];
      [[unroll]] for (uint r = 0; r < RV; ++r) qc[r] = vec4(0.0);
      [[unroll]] for (uint i = 0; i < CPI; ++i) {
        const uint d = inv + i * WG;
        if (d < DIM)
          [[unroll]] for (uint r = 0; r < ROWS; ++r) qc[r / 4u][r % 4u] = fma(SF(r * DIM + d), cmu[i], qc[r / 4u][r % 4u]);
      }
      wg_reduce(qc, false);
      if (inv == 0u)
        [[unroll]] for (uint r = 0; r < RV; ++r) s_qc[r] = qc[r] * pc.scale;
    }
    if (K_ROT == 1u) TK_FWHT_SHARED(SF, ROWS, DIM, inv, WG)
    for (uint e = inv; e < ROWS * DIM; e += WG) {
      const uint d = e / ROWS, r = e % ROWS;
      float v = 0.0;
      if (K_ROT == 2u) {
        for (uint j = 0; j < DIM; ++j) v = fma(tables[K_ROTATION_AT + d * DIM + j], SF(r * DIM + j), v);
      } else {
        v = SF(r * DIM + d);
      }
      s_q[d * RV + r / 4u][r % 4u] = v * q_scale;
    }
  }
  barrier();

  vec4 m_run[RV], l_own[RV];
  [[unroll]] for (uint r = 0; r < RV; ++r) {
    m_run[r] = NEG_INF4;
    l_own[r] = vec4(0.0);
  }
  const uint tg = inv / LPT, c = inv % LPT;
  const bool v_lane = tg < TG;
  vec4 o_acc[RV * 8u];  // value lanes: rows 4v .. 4v+3 at dim 8c + e in o_acc[v * 8 + e]
  [[unroll]] for (uint i = 0; i < RV * 8u; ++i) o_acc[i] = vec4(0.0);

  for (uint b = b0; b < b1; ++b) {
    const uint buf = ((b - b0) & 1u) * PAGES;
    const uint t_base = uint(lo) + b * BT;
    const uint t_last = min(t_base + BT, uint(hi)) - 1u;
    const uint fp = t_base / PAGE_TOKENS;
    // The next block's page ids travel with this block's loads.
    uint next_page = 0u;
    if (b + 1u < b1 && inv < PAGES) next_page = load_page(seq, (t_base + BT) / PAGE_TOKENS + inv);
    uint krow[TPI];
    float kn[TPI], vn[TPI];
    [[unroll]] for (uint k = 0; k < TPI; ++k) {
      krow[k] = cache_row(min(t_base + inv + k * WG, t_last), fp, buf, kvh);
      kn[k] = K_RAW ? 1.0 : TK_LOAD_NORM(NORM_DTYPE, k_norms, krow[k]);
      vn[k] = V_RAW ? 1.0 : TK_LOAD_NORM(NORM_DTYPE, v_norms, krow[k]);
    }

    // The value lane's words of the block's keys, loaded with the keys' codes.
    uvec4 vw[VJ];
    TK_UNROLL_LONG for (uint j = 0; j < VJ; ++j) {
      const uint tl = tg + j * TG;
      const uint row = cache_row(min(t_base + tl, t_last), fp, buf, kvh);
      uint w0 = 0u, w1 = 0u, w2 = 0u, w3 = 0u;
      if (V_RAW) {
        const uvec4 v = v_words4[row * (VW / 4u) + c];
        w0 = v.x;
        w1 = v.y;
        w2 = v.z;
        w3 = v.w;
      } else if (V_ALIGNED && VWL == 2u) {
        const uvec2 v = v_words2[row * (VW / 2u) + c];
        w0 = v.x;
        w1 = v.y;
      } else if (V_ALIGNED) {
        w0 = v_words[row * VW + c];
      } else {
        const uint wi = (8u * c * V_BITS) >> 5;
        w0 = v_words[row * VW + wi];
        w1 = v_words[row * VW + min(wi + 1u, VW - 1u)];
      }
      vw[j] = uvec4(w0, w1, w2, w3);
    }

    // Scores of my keys against every row, code rows taken a chunk at a
    // time: split keys in two parts (first the part above the split).
    vec4 z[TPI * RV];
    [[unroll]] for (uint i = 0; i < TPI * RV; ++i) z[i] = vec4(0.0);
    if (K_SPLIT) {
      TK_SCORE_PART(0u, KW_HI, 0u, K_HI_BITS, KCW_HI, K_LEVELS)
      TK_SCORE_PART(KW_HI, KW - KW_HI, K_HI_DIMS, K_BITS, KCW, 0u)
    } else {
      TK_SCORE_PART(0u, KW, 0u, K_BITS, KCW, 0u)
    }
    vec4 m_blk[RV];
    [[unroll]] for (uint r = 0; r < RV; ++r) m_blk[r] = NEG_INF4;
    [[unroll]] for (uint k = 0; k < TPI; ++k) {
      const int t = int(t_base + inv + k * WG);
      [[unroll]] for (uint r = 0; r < RV; ++r) {
        vec4 s = z[k * RV + r] * kn[k];
        if (K_CENTRED != 0u && pc.softcap > 0.0) s += s_qc[r];
        if (pc.softcap > 0.0) s = softcap4(s, pc.softcap);
        const bvec4 seen = bvec4(uvec4(greaterThanEqual(ivec4(t), first[r])) & uvec4(lessThan(ivec4(t), end[r])));
        s = mix(NEG_INF4, s, seen);
        z[k * RV + r] = s;
        m_blk[r] = max(m_blk[r], s);
      }
    }
    wg_reduce(m_blk, true);
    vec4 alpha[RV];
    [[unroll]] for (uint r = 0; r < RV; ++r) {
      const vec4 m_new = max(m_run[r], m_blk[r]);
      alpha[r] = rescale4(m_run[r], m_new);
      m_run[r] = m_new;
      l_own[r] *= alpha[r];
    }
    [[unroll]] for (uint k = 0; k < TPI; ++k) {
      const uint tl = inv + k * WG;
      [[unroll]] for (uint r = 0; r < RV; ++r) {
        const vec4 s = z[k * RV + r];
        // Masked keys weigh 0 by selection, so that a non-finite V norm of
        // a key a row does not see cannot reach that row (0 * NaN).
        const bvec4 masked = equal(s, NEG_INF4);
        const vec4 p = mix(exp(s - m_run[r]), vec4(0.0), masked);
        l_own[r] += p;
        s_scratch[tl * RV + r] = mix(p * vn[k], vec4(0.0), masked);
      }
    }
    barrier();

    // Values: my lane's 8 dims of my key group's keys (keys past the block,
    // where TG does not divide BT, are loaded at a clamped position and
    // weighted 0).
    if (v_lane) {
      [[unroll]] for (uint r = 0; r < RV; ++r)
        [[unroll]] for (uint e = 0; e < 8u; ++e) o_acc[r * 8u + e] *= alpha[r];
      TK_UNROLL_LONG for (uint j = 0; j < VJ; ++j) {
        const uint tl = tg + j * TG;
        const uint w0 = vw[j].x, w1 = vw[j].y, w2 = vw[j].z, w3 = vw[j].w;
        float val[8];
        value_dims(c, w0, w1, w2, w3, val);
        const bool in_block = tl < BT;
        [[unroll]] for (uint r = 0; r < RV; ++r) {
          const vec4 wt = in_block ? s_scratch[min(tl, BT - 1u) * RV + r] : vec4(0.0);
          [[unroll]] for (uint e = 0; e < 8u; ++e) o_acc[r * 8u + e] = fma(wt, vec4(val[e]), o_acc[r * 8u + e]);
        }
      }
    }
    if (b + 1u < b1 && inv < PAGES) s_page[(PAGES - buf) + inv] = next_page;
    barrier();
  }

  // The workgroup's state: l summed over the invocations, o over the value
  // key groups (in group order, O_GROUPS of them through the scratch at a
  // time); invocation i keeps dims 2p, 2p+1 of p = i, i + WG, ... in
  // o_fin[(v * PAIRS + n) * 2 + h]. Group g's dim 8c + e sits at
  // TK_OSUM_AT(g, e, c): the lanes' columns rotate by 2 (e / 2), so that
  // neither a subgroup's stores of one e (consecutive c) nor the sums'
  // loads of one group (c = p / 4, e = 2 (p % 4) + h) meet in a bank.
#define TK_OSUM_AT(g, e, c) ((g) * 8u * LPT + (e) * LPT + ((c) + 2u * ((e) / 2u)) % LPT)
  wg_reduce(l_own, false);
  vec4 o_fin[RV * PAIRS * 2u];
  [[unroll]] for (uint i = 0; i < RV * PAIRS * 2u; ++i) o_fin[i] = vec4(0.0);
  [[unroll]] for (uint r = 0; r < RV; ++r)
    for (uint g0 = 0; g0 < TG; g0 += O_GROUPS) {
      if (v_lane && tg >= g0 && tg < g0 + O_GROUPS)
        [[unroll]] for (uint e = 0; e < 8u; ++e) s_scratch[TK_OSUM_AT(tg - g0, e, c)] = o_acc[r * 8u + e];
      barrier();
      [[unroll]] for (uint n = 0; n < PAIRS; ++n) {
        const uint p = min(inv + n * WG, DIM / 2u - 1u);
        [[unroll]] for (uint h = 0; h < 2u; ++h) {
          const uint d = 2u * p + h;
          vec4 s = o_fin[(r * PAIRS + n) * 2u + h];
          for (uint g = g0; g < min(TG, g0 + O_GROUPS); ++g) s += s_scratch[TK_OSUM_AT(g - g0, d % 8u, d / 8u)];
          o_fin[(r * PAIRS + n) * 2u + h] = s;
        }
      }
      barrier();
    }
#undef TK_OSUM_AT
  vec4 m_fin[RV], l_fin[RV];
  [[unroll]] for (uint r = 0; r < RV; ++r) {
    m_fin[r] = m_run[r];
    if (K_CENTRED != 0u && !(pc.softcap > 0.0)) m_fin[r] += s_qc[r];  // -inf stays -inf
    l_fin[r] = l_own[r];
  }

  // Publish, merge the splits, finish the rows (shared with decode_attention_tc.glsl).
#include "../common/decode_attention_finish.glsl"
}
