// SPDX-License-Identifier: MIT
// Double-precision CPU reference of AURA decode attention over the paged KV
// cache (reference/aura/paged_cache.hpp), and the same attention over plain
// K/V arrays for quality comparisons.
//
// Shapes: q [num_seqs, q_len, q_heads, dim], output the same, lse
// [num_seqs, q_len, q_heads] (natural log). The q_len new tokens of sequence
// s are already in the cache: query i sits at position
//   pos = seq_lens[s] - q_len + i
// and sees the keys at positions t with
//   t <= pos  and  (window == 0  or  t > pos - window)     (t >= 0 always).
// GQA: query head h reads KV head h / (q_heads / kv_heads).
// Per query head, over its visible keys:
//   z_t  = scale * <q, k_t>                     (k_t dequantised: norm * R_k^T codebook[codes],
//                                                plus the sequence's centre mu where the cache
//                                                stores centred keys: <q, k_t> gains <q, mu>)
//   z_t  = softcap * tanh(z_t / softcap)        (only where softcap > 0)
//   l    = sum_t exp(z_t) + exp(sink_h)         (the sink term only with sinks; the sink is a logit
//                                                as given: not scaled, not capped, and it carries no value)
//   out  = sum_t exp(z_t) v_t / l,   lse = log l
// computed with the maximum subtracted. Empty attention (no visible key:
// seq_len 0, an inactive batch entry, or pos < 0 where seq_len < q_len) gives
// out = 0 and lse = -inf; with a sink, out = 0 and lse = sink. A sink of
// -inf is the same as none. Outputs are doubles, before narrowing to the
// kernel's output dtype.
//
// decode_attention_paged_rotated computes the same numbers the way the
// kernel will: scores from the rotated query, z_t = scale * norm_t *
// <R_k q, codebook[codes_t]>, values accumulated in the rotated V domain
// (sum_t p_t norm_t codebook[codes_t]), one page at a time with an online
// softmax merge (m, l, o) of per-page partials, and R_v^T applied once at the
// end. Both agree to rounding (~1e-15) because R enters linearly on both
// sides; the tests hold them to 1e-12.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tilekernels/core/error.hpp"
#include "tilekernels/reference/aura/paged_cache.hpp"

namespace tilekernels::reference::aura {

struct DecodeShape {
  std::size_t num_seqs = 1, q_len = 1, q_heads = 1, kv_heads = 1, dim = 128;
};

struct AttentionOptions {
  std::optional<double> scale;  // default 1 / sqrt(dim)
  std::size_t window = 0;       // sliding window W: keys at positions > pos - W; 0 = off
  std::vector<float> sinks;     // [q_heads] sink logits; empty = none
  double softcap = 0;           // cap * tanh(z / cap) after scaling; 0 = off
  // Centred keys: [num_seqs, kv_heads, dim], each sequence's centre (the
  // paged cache holds k - mu; attention over it adds <q, mu> back); empty =
  // none. Not read by decode_attention_dense (its keys are the originals).
  std::vector<float> k_centre = {};
};

struct AttentionResult {
  std::vector<double> output;  // [num_seqs, q_len, q_heads, dim]
  std::vector<double> lse;     // [num_seqs, q_len, q_heads], natural log
};

namespace impl {

inline void attention_fail(const std::string& what) {
  throw Error(ErrorCode::invalid_argument, "aura.decode_attention: " + what);
}

inline void check_attention(std::span<const float> q, std::span<const std::int32_t> seq_lens, const DecodeShape& sh,
                            const AttentionOptions& opt) {
  if (sh.num_seqs == 0 || sh.q_len == 0 || sh.q_heads == 0 || sh.kv_heads == 0 || sh.dim == 0)
    attention_fail("num_seqs, q_len, q_heads, kv_heads and dim must be positive");
  if (sh.q_heads % sh.kv_heads != 0)
    attention_fail("q_heads (" + std::to_string(sh.q_heads) + ") must be a multiple of kv_heads (" +
                   std::to_string(sh.kv_heads) + ")");
  if (q.size() != sh.num_seqs * sh.q_len * sh.q_heads * sh.dim)
    attention_fail("q must hold num_seqs * q_len * q_heads * dim values, got " + std::to_string(q.size()));
  if (seq_lens.size() != sh.num_seqs)
    attention_fail("seq_lens must hold num_seqs = " + std::to_string(sh.num_seqs) + " values, got " +
                   std::to_string(seq_lens.size()));
  for (auto len : seq_lens)
    if (len < 0) attention_fail("a seq_len is negative: " + std::to_string(len));
  if (!opt.sinks.empty() && opt.sinks.size() != sh.q_heads)
    attention_fail("sinks must be empty or hold q_heads values, got " + std::to_string(opt.sinks.size()));
  if (opt.scale && !std::isfinite(*opt.scale)) attention_fail("scale must be finite");
  if (!(opt.softcap >= 0)) attention_fail("softcap must be >= 0 (0 = off)");
  if (!opt.k_centre.empty() && opt.k_centre.size() != sh.num_seqs * sh.kv_heads * sh.dim)
    attention_fail("k_centre must be empty or hold num_seqs * kv_heads * dim values, got " +
                   std::to_string(opt.k_centre.size()));
}

// <q, mu> of a query row against its sequence's centre (0 without centres).
inline double centre_dot(const AttentionOptions& opt, const float* q, std::size_t seq, std::size_t kvh,
                         const DecodeShape& sh) {
  if (opt.k_centre.empty()) return 0;
  const float* mu = opt.k_centre.data() + (seq * sh.kv_heads + kvh) * sh.dim;
  double dot = 0;
  for (std::size_t d = 0; d < sh.dim; ++d) dot += double(q[d]) * mu[d];
  return dot;
}

inline double scale_of(const DecodeShape& sh, const AttentionOptions& opt) {
  return opt.scale ? *opt.scale : 1.0 / std::sqrt(static_cast<double>(sh.dim));
}

// The visible key positions [first, end) of the query at `pos` (may be
// negative) of a sequence of `len` tokens; first == end when none.
struct Visible {
  std::int64_t first, end;
};

inline Visible visible(std::int64_t pos, std::int64_t len, std::size_t window) {
  const std::int64_t end = std::clamp<std::int64_t>(pos + 1, 0, len);
  const std::int64_t first = window ? std::clamp<std::int64_t>(pos + 1 - static_cast<std::int64_t>(window), 0, end) : 0;
  return {first, end};
}

// The first position any query of a sequence can see: keys before it are
// never read (their pages may hold anything).
inline std::size_t first_needed(std::size_t len, std::size_t q_len, std::size_t window) {
  return static_cast<std::size_t>(visible(static_cast<std::int64_t>(len) - static_cast<std::int64_t>(q_len),
                                          static_cast<std::int64_t>(len), window)
                                      .first);
}

inline double logit(double dot, double scale, double softcap) {
  const double z = scale * dot;
  return softcap > 0 ? softcap * std::tanh(z / softcap) : z;
}

inline double sink_of(const AttentionOptions& opt, std::size_t head) {
  return opt.sinks.empty() ? -std::numeric_limits<double>::infinity() : double(opt.sinks[head]);
}

// Attention of every query of one sequence (the call's sequence `seq`) over
// keys / values [positions first.., kv_heads, dim] (double, original
// domain; `centred`: the keys lack the sequence's centre), by the direct
// two-pass softmax. Writes output and lse of that sequence.
inline void attend_sequence(std::span<const float> q_seq, std::span<const double> keys, std::span<const double> values,
                            std::size_t first, std::size_t len, const DecodeShape& sh, const AttentionOptions& opt,
                            std::span<double> out_seq, std::span<double> lse_seq, bool centred, std::size_t seq) {
  const double scale = scale_of(sh, opt);
  const std::size_t group = sh.q_heads / sh.kv_heads, dim = sh.dim, row = sh.kv_heads * dim;
  std::vector<double> z;
  for (std::size_t i = 0; i < sh.q_len; ++i) {
    const auto pos = static_cast<std::int64_t>(len) - static_cast<std::int64_t>(sh.q_len) + static_cast<std::int64_t>(i);
    const Visible vis = visible(pos, static_cast<std::int64_t>(len), opt.window);
    for (std::size_t h = 0; h < sh.q_heads; ++h) {
      const std::size_t kvh = h / group, qi = i * sh.q_heads + h;
      const float* qv = q_seq.data() + qi * dim;
      double* o = out_seq.data() + qi * dim;
      std::fill(o, o + dim, 0.0);
      z.clear();
      double m = sink_of(opt, h);
      const double shift = centred ? centre_dot(opt, qv, seq, kvh, sh) : 0.0;
      for (std::int64_t t = vis.first; t < vis.end; ++t) {
        const double* k = keys.data() + (static_cast<std::size_t>(t) - first) * row + kvh * dim;
        double dot = shift;
        for (std::size_t d = 0; d < dim; ++d) dot += double(qv[d]) * k[d];
        z.push_back(logit(dot, scale, opt.softcap));
        m = std::max(m, z.back());
      }
      if (m == -std::numeric_limits<double>::infinity()) {  // empty, and no (finite) sink
        lse_seq[qi] = m;
        continue;
      }
      double l = std::exp(sink_of(opt, h) - m);
      for (std::int64_t t = vis.first; t < vis.end; ++t) {
        const double p = std::exp(z[static_cast<std::size_t>(t - vis.first)] - m);
        const double* v = values.data() + (static_cast<std::size_t>(t) - first) * row + kvh * dim;
        l += p;
        for (std::size_t d = 0; d < dim; ++d) o[d] += p * v[d];
      }
      for (std::size_t d = 0; d < dim; ++d) o[d] /= l;
      lse_seq[qi] = m + std::log(l);
    }
  }
}

inline AttentionResult empty_result(const DecodeShape& sh) {
  return {std::vector<double>(sh.num_seqs * sh.q_len * sh.q_heads * sh.dim, 0.0),
          std::vector<double>(sh.num_seqs * sh.q_len * sh.q_heads, -std::numeric_limits<double>::infinity())};
}

inline void check_paged(const PagedCache& cache, std::span<const std::int32_t> block_table, std::size_t max_pages,
                        std::span<const std::int32_t> seq_lens, const DecodeShape& sh) {
  const PagedCacheFormat& f = cache.format;
  if (sh.kv_heads != f.kv_heads || sh.dim != f.dim)
    attention_fail("shape (kv_heads " + std::to_string(sh.kv_heads) + ", dim " + std::to_string(sh.dim) +
                   ") does not match the cache (kv_heads " + std::to_string(f.kv_heads) + ", dim " +
                   std::to_string(f.dim) + ")");
  if (block_table.size() != sh.num_seqs * max_pages)
    attention_fail("block_table must hold num_seqs * max_pages = " + std::to_string(sh.num_seqs * max_pages) +
                   " entries, got " + std::to_string(block_table.size()));
  for (std::size_t s = 0; s < sh.num_seqs; ++s)
    if (static_cast<std::size_t>(seq_lens[s]) > max_pages * f.page_tokens)
      attention_fail("seq_len " + std::to_string(seq_lens[s]) + " of sequence " + std::to_string(s) +
                     " needs more than max_pages = " + std::to_string(max_pages) + " pages");
}

// The online-softmax state of one query head: running max m, sum l and
// unnormalised output o; l == 0 means nothing seen yet (o is then zero).
struct SoftmaxState {
  double m = -std::numeric_limits<double>::infinity();
  double l = 0;
  std::vector<double> o;

  void merge(const SoftmaxState& other) {
    if (other.l == 0) return;
    if (l == 0) {
      *this = other;
      return;
    }
    const double m_new = std::max(m, other.m);
    const double a = std::exp(m - m_new), b = std::exp(other.m - m_new);
    for (std::size_t d = 0; d < o.size(); ++d) o[d] = a * o[d] + b * other.o[d];
    l = a * l + b * other.l;
    m = m_new;
  }
};

}  // namespace impl

// (b) Over plain K/V arrays in the original domain: k, v
// [num_seqs, max_len, kv_heads, dim], sequence s using its first seq_lens[s]
// positions (seq_lens[s] <= max_len).
inline AttentionResult decode_attention_dense(std::span<const float> q, std::span<const float> k,
                                              std::span<const float> v, std::size_t max_len,
                                              std::span<const std::int32_t> seq_lens, const DecodeShape& sh,
                                              const AttentionOptions& opt) {
  impl::check_attention(q, seq_lens, sh, opt);
  const std::size_t row = sh.kv_heads * sh.dim, per_seq = max_len * row;
  if (k.size() != sh.num_seqs * per_seq || v.size() != sh.num_seqs * per_seq)
    impl::attention_fail("k and v must hold num_seqs * max_len * kv_heads * dim = " +
                         std::to_string(sh.num_seqs * per_seq) + " values");
  AttentionResult r = impl::empty_result(sh);
  const std::size_t q_per_seq = sh.q_len * sh.q_heads;
  for (std::size_t s = 0; s < sh.num_seqs; ++s) {
    const auto len = static_cast<std::size_t>(seq_lens[s]);
    if (len > max_len) impl::attention_fail("seq_len " + std::to_string(len) + " exceeds max_len");
    const std::vector<double> ks(k.begin() + s * per_seq, k.begin() + s * per_seq + len * row);
    const std::vector<double> vs(v.begin() + s * per_seq, v.begin() + s * per_seq + len * row);
    impl::attend_sequence(q.subspan(s * q_per_seq * sh.dim, q_per_seq * sh.dim), ks, vs, 0, len, sh, opt,
                          std::span(r.output).subspan(s * q_per_seq * sh.dim, q_per_seq * sh.dim),
                          std::span(r.lse).subspan(s * q_per_seq, q_per_seq), false, s);
  }
  return r;
}

// (a) Over the dequantised paged cache: block_table [num_seqs, max_pages];
// sequence s's position p in page block_table[s, p / page_tokens]. Entries
// of pages no query can see (past seq_len, or wholly before every query's
// window) are not read.
inline AttentionResult decode_attention_paged(std::span<const float> q, const PagedCache& cache,
                                              std::span<const std::int32_t> block_table, std::size_t max_pages,
                                              std::span<const std::int32_t> seq_lens, const DecodeShape& sh,
                                              const AttentionOptions& opt) {
  impl::check_attention(q, seq_lens, sh, opt);
  impl::check_paged(cache, block_table, max_pages, seq_lens, sh);
  AttentionResult r = impl::empty_result(sh);
  const std::size_t q_per_seq = sh.q_len * sh.q_heads;
  for (std::size_t s = 0; s < sh.num_seqs; ++s) {
    const auto len = static_cast<std::size_t>(seq_lens[s]);
    const std::size_t first = impl::first_needed(len, sh.q_len, opt.window);
    const auto pages = block_table.subspan(s * max_pages, max_pages);
    const auto ks = gather(cache, Side::k, pages, first, len), vs = gather(cache, Side::v, pages, first, len);
    impl::attend_sequence(q.subspan(s * q_per_seq * sh.dim, q_per_seq * sh.dim), ks, vs, first, len, sh, opt,
                          std::span(r.output).subspan(s * q_per_seq * sh.dim, q_per_seq * sh.dim),
                          std::span(r.lse).subspan(s * q_per_seq, q_per_seq), true, s);
  }
  return r;
}

// The kernel's form of decode_attention_paged (see the top of this file).
inline AttentionResult decode_attention_paged_rotated(std::span<const float> q, const PagedCache& cache,
                                                      std::span<const std::int32_t> block_table,
                                                      std::size_t max_pages, std::span<const std::int32_t> seq_lens,
                                                      const DecodeShape& sh, const AttentionOptions& opt) {
  impl::check_attention(q, seq_lens, sh, opt);
  impl::check_paged(cache, block_table, max_pages, seq_lens, sh);
  const PagedCacheFormat& f = cache.format;
  const SideQuantizer &kq = cache.k_quantizer, &vq = cache.v_quantizer;
  const double scale = impl::scale_of(sh, opt);
  const std::size_t dim = sh.dim, group = sh.q_heads / sh.kv_heads, pt = f.page_tokens;
  AttentionResult r = impl::empty_result(sh);

  // One stored token of a side in the rotated domain, without its norm:
  // codebook[codes] (TurboQuant) or the widened raw values; and its norm (1 for raw).
  const auto rotated_unit = [&](Side s, std::size_t page, std::size_t head, std::size_t slot) {
    std::vector<double> y(dim);
    if (f.side(s).raw()) {
      const std::size_t base = f.token_index(page, head, slot) * dim;
      for (std::size_t d = 0; d < dim; ++d) y[d] = widen(f.side(s).raw_dtype, cache.store(s).raw[base + d]);
    } else {
      const auto codes = token_codes(cache, s, page, head, slot);
      const SideQuantizer& sq = s == Side::k ? kq : vq;
      for (std::size_t d = 0; d < dim; ++d) y[d] = sq.codebook_at(d)[codes[d]];
    }
    return y;
  };
  const auto norm_of = [&](Side s, std::size_t page, std::size_t head, std::size_t slot) {
    return f.side(s).raw() ? 1.0 : token_norm(cache, s, page, head, slot);
  };

  for (std::size_t s = 0; s < sh.num_seqs; ++s) {
    const auto len = static_cast<std::int64_t>(seq_lens[s]);
    for (std::size_t i = 0; i < sh.q_len; ++i) {
      const std::int64_t pos = len - static_cast<std::int64_t>(sh.q_len) + static_cast<std::int64_t>(i);
      const impl::Visible vis = impl::visible(pos, len, opt.window);
      for (std::size_t h = 0; h < sh.q_heads; ++h) {
        const std::size_t kvh = h / group, qi = (s * sh.q_len + i) * sh.q_heads + h;
        const std::vector<double> qd(q.begin() + qi * dim, q.begin() + (qi + 1) * dim);
        const auto q_rot = rotate(cache, Side::k, qd);  // R_k q (q itself for a raw K)
        const double shift = impl::centre_dot(opt, q.data() + qi * dim, s, kvh, sh);
        impl::SoftmaxState total;
        total.o.assign(dim, 0.0);
        // Pages in order, each giving a partial state over its visible slots
        // (never empty: the loop starts at the page holding vis.first).
        for (std::int64_t p0 = vis.first / static_cast<std::int64_t>(pt) * static_cast<std::int64_t>(pt);
             vis.first < vis.end && p0 < vis.end; p0 += static_cast<std::int64_t>(pt)) {
          const std::int32_t page_id = block_table[s * max_pages + static_cast<std::size_t>(p0) / pt];
          if (page_id < 0 || static_cast<std::size_t>(page_id) >= f.num_pages)
            impl::attention_fail("block_table entry " + std::to_string(page_id) + " is not a page");
          const auto page = static_cast<std::size_t>(page_id);
          const std::int64_t lo = std::max(p0, vis.first), hi = std::min(p0 + static_cast<std::int64_t>(pt), vis.end);
          std::vector<double> z;
          for (std::int64_t t = lo; t < hi; ++t) {
            const auto slot = static_cast<std::size_t>(t - p0);
            const auto c = rotated_unit(Side::k, page, kvh, slot);
            double dot = 0;
            for (std::size_t d = 0; d < dim; ++d) dot += q_rot[d] * c[d];
            z.push_back(impl::logit(norm_of(Side::k, page, kvh, slot) * dot + shift, scale, opt.softcap));
          }
          impl::SoftmaxState part;
          part.o.assign(dim, 0.0);
          part.m = *std::max_element(z.begin(), z.end());
          for (std::int64_t t = lo; t < hi; ++t) {
            const auto slot = static_cast<std::size_t>(t - p0);
            const double w = std::exp(z[static_cast<std::size_t>(t - lo)] - part.m);
            const double wn = w * norm_of(Side::v, page, kvh, slot);
            const auto c = rotated_unit(Side::v, page, kvh, slot);
            part.l += w;
            for (std::size_t d = 0; d < dim; ++d) part.o[d] += wn * c[d];
          }
          total.merge(part);
        }
        // The sink joins the denominator only: a state with l = exp(0) at m = sink and o = 0.
        const double sink = impl::sink_of(opt, h);
        if (sink != -std::numeric_limits<double>::infinity()) {
          impl::SoftmaxState sink_state{sink, 1.0, std::vector<double>(dim, 0.0)};
          total.merge(sink_state);
        }
        if (total.l == 0) continue;  // empty: output 0, lse -inf (already there)
        for (auto& x : total.o) x /= total.l;
        const auto o = unrotate(cache, Side::v, total.o);  // R_v^T (identity for a raw V)
        std::copy(o.begin(), o.end(), r.output.begin() + static_cast<std::ptrdiff_t>(qi * dim));
        r.lse[qi] = total.m + std::log(total.l);
      }
    }
  }
  return r;
}

}  // namespace tilekernels::reference::aura
