// SPDX-License-Identifier: MIT
// The AURA paged-cache and decode-attention references (host only, no
// Vulkan objects): cache_write against the reference encode/decode, the
// kernel's rotated-domain attention against attention over the dequantised
// cache, the options against direct formulas, paging invariants, and the
// quality of attention over the compressed cache against exact attention
// (cosines printed per bit width). Builds alone as well:
//   g++ -std=c++20 -O2 -I include tests/aura/test_paged_cache_reference.cpp -lgtest -lgtest_main -pthread
#include <gtest/gtest.h>

#include <tilekernels/aura/rotation.hpp>
#include <tilekernels/core/splitmix.hpp>
#include <tilekernels/reference/aura/decode.hpp>
#include <tilekernels/reference/aura/decode_attention.hpp>
#include <tilekernels/reference/aura/encode.hpp>
#include <tilekernels/reference/aura/paged_cache.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

namespace {

namespace ref = tilekernels::reference::aura;
using tilekernels::DType;
using ref::RotationKind;
using ref::Side;

constexpr double kInf = std::numeric_limits<double>::infinity();

// splitmix64, with Box-Muller normals: seeded, identical on every machine
// up to libm's last bits (only test inputs depend on it).
class TestRng {
 public:
  explicit TestRng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() { return tilekernels::splitmix64(state_); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  float normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  std::vector<float> normals(std::size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = normal();
    return v;
  }
  // A random permutation of 0 .. n-1 (Fisher-Yates).
  std::vector<std::int32_t> permutation(std::size_t n) {
    std::vector<std::int32_t> p(n);
    std::iota(p.begin(), p.end(), 0);
    for (std::size_t i = n; i > 1; --i) std::swap(p[i - 1], p[next() % i]);
    return p;
  }

 private:
  std::uint64_t state_;
};

ref::SideFormat turbo(std::uint32_t bits, RotationKind rotation, std::uint64_t seed, DType norm = DType::f32) {
  return {bits, DType::bf16, norm, rotation, seed};
}
ref::SideFormat raw(DType dtype) { return {16, dtype, DType::f32, RotationKind::hadamard, 0}; }

std::string describe(const ref::SideFormat& f) {
  if (f.raw()) return std::string("raw ") + std::string(tilekernels::dtype_name(f.raw_dtype));
  return std::to_string(f.bits) + "b " + (f.rotation == RotationKind::hadamard ? "hadamard" : "dense") +
         (f.norm_dtype == DType::f16 ? " f16-norms" : "");
}

std::vector<float> to_bf16(std::vector<float> x) {
  for (auto& v : x) v = tilekernels::round_to_bf16(v);
  return x;
}

double cosine(const std::vector<double>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) ab += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
  return ab / std::sqrt(aa * bb);
}

double relative_rms(const std::vector<double>& got, const std::vector<double>& want) {
  double e = 0, n = 0;
  for (std::size_t i = 0; i < want.size(); ++i) e += (got[i] - want[i]) * (got[i] - want[i]), n += want[i] * want[i];
  return n > 0 ? std::sqrt(e / n) : std::sqrt(e);
}

// lse values agree to tol (relative to 1 + |lse|), -inf only with -inf.
void expect_lse_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << "lse " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "lse " << i;
    }
  }
}

// Sequences laid out padded, k, v [num_seqs, max_len, kv_heads, dim], and
// written into a cache through block_table [num_seqs, max_pages] in two
// appends (all but the last q_len tokens of each sequence, then those), as a
// prefill and a decode step would.
struct Batch {
  ref::DecodeShape shape;
  std::size_t max_len = 0, max_pages = 0;
  std::vector<std::int32_t> seq_lens, block_table;
  std::vector<float> q, k, v;
};

void write_batch(ref::PagedCache& cache, const Batch& b) {
  const std::size_t row = b.shape.kv_heads * b.shape.dim;
  for (int step = 0; step < 2; ++step) {
    std::vector<float> k, v;
    std::vector<std::int32_t> slots;
    for (std::size_t s = 0; s < b.shape.num_seqs; ++s) {
      const auto len = static_cast<std::size_t>(b.seq_lens[s]);
      const std::size_t split = len > b.shape.q_len ? len - b.shape.q_len : 0;
      const auto pages = std::span(b.block_table).subspan(s * b.max_pages, b.max_pages);
      for (std::size_t p = step == 0 ? 0 : split; p < (step == 0 ? split : len); ++p) {
        const std::size_t src = (s * b.max_len + p) * row;
        k.insert(k.end(), b.k.begin() + src, b.k.begin() + src + row);
        v.insert(v.end(), b.v.begin() + src, b.v.begin() + src + row);
        slots.push_back(ref::slot_of(cache.format, pages, p));
      }
    }
    ref::cache_write(cache, k, v, slots);
  }
}

// A batch with random q/K/V (bf16-rounded, as the kernel reads them) and a
// block table that hands out the pages in a shuffled order.
Batch make_batch(TestRng& rng, const ref::DecodeShape& shape, std::vector<std::int32_t> seq_lens,
                 std::size_t page_tokens, std::size_t num_pages) {
  Batch b;
  b.shape = shape;
  b.seq_lens = std::move(seq_lens);
  for (auto len : b.seq_lens) b.max_len = std::max(b.max_len, static_cast<std::size_t>(len));
  b.max_pages = (b.max_len + page_tokens - 1) / page_tokens;
  const auto order = rng.permutation(num_pages);
  b.block_table.assign(shape.num_seqs * b.max_pages, -1);  // -1 where a sequence has no page
  std::size_t next = 0;
  for (std::size_t s = 0; s < shape.num_seqs; ++s)
    for (std::size_t i = 0; i * page_tokens < static_cast<std::size_t>(b.seq_lens[s]); ++i)
      b.block_table[s * b.max_pages + i] = order.at(next++);
  b.q = to_bf16(rng.normals(shape.num_seqs * shape.q_len * shape.q_heads * shape.dim));
  b.k = to_bf16(rng.normals(shape.num_seqs * b.max_len * shape.kv_heads * shape.dim));
  b.v = to_bf16(rng.normals(shape.num_seqs * b.max_len * shape.kv_heads * shape.dim));
  return b;
}

ref::PagedCacheFormat format_of(std::uint32_t dim, std::uint32_t page_tokens, std::uint32_t kv_heads,
                                std::uint32_t num_pages, ref::SideFormat k, ref::SideFormat v) {
  return {dim, page_tokens, kv_heads, num_pages, k, v};
}

// ---- cache_write ------------------------------------------------------------

TEST(AuraPagedCacheReference, WriteThenDequantizeMatchesReferenceDecode) {
  struct Case {
    std::uint32_t dim;
    ref::SideFormat k, v;
  };
  const Case cases[] = {
      {128, turbo(4, RotationKind::hadamard, 11), turbo(3, RotationKind::hadamard, 12)},
      {128, turbo(2, RotationKind::dense, 13), turbo(8, RotationKind::hadamard, 14, DType::f16)},
      {64, turbo(6, RotationKind::hadamard, 15), raw(DType::bf16)},
      {96, turbo(3, RotationKind::dense, 16, DType::f16), raw(DType::f16)},
      {80, turbo(6, RotationKind::dense, 17), turbo(4, RotationKind::dense, 18)},
      {256, turbo(4, RotationKind::hadamard, 19, DType::f16), turbo(2, RotationKind::hadamard, 20)},
  };
  TestRng rng(100);
  for (const Case& c : cases) {
    SCOPED_TRACE("dim " + std::to_string(c.dim) + " K " + describe(c.k) + " V " + describe(c.v));
    const auto f = format_of(c.dim, 16, 2, 4, c.k, c.v);
    ref::PagedCache cache(f);
    // Rotations and codebooks are those of rotation.hpp and codebook.hpp.
    for (Side s : {Side::k, Side::v}) {
      const auto& sf = f.side(s);
      if (sf.raw()) continue;
      EXPECT_EQ(cache.quantizer(s).rotation, sf.rotation == RotationKind::hadamard
                                                 ? tilekernels::aura::hadamard_rotation(c.dim, sf.seed)
                                                 : tilekernels::aura::dense_rotation(c.dim, sf.seed));
      EXPECT_EQ(cache.quantizer(s).codebook, tilekernels::aura::lloyd_max_codebook(c.dim, sf.bits).codebook);
    }
    const std::size_t tokens = 40, row = f.kv_heads * c.dim;
    const auto perm = rng.permutation(f.slots());
    const std::vector<std::int32_t> slots(perm.begin(), perm.begin() + tokens);
    std::vector<float> k = rng.normals(tokens * row), v = rng.normals(tokens * row);
    for (std::size_t r = 0; r < tokens * f.kv_heads; ++r) {  // magnitudes over 1e-2 .. 1e2
      const auto scale = static_cast<float>(std::pow(10.0, 4 * rng.uniform() - 2));
      for (std::size_t d = 0; d < c.dim; ++d) k[r * c.dim + d] *= scale, v[r * c.dim + d] *= scale;
    }
    std::fill_n(k.begin() + 3 * row, c.dim, 0.0f);  // a zero row: norm 0, decodes to zeros
    ref::cache_write(cache, k, v, slots);

    for (Side s : {Side::k, Side::v}) {
      const auto& sf = f.side(s);
      const auto& input = s == Side::k ? k : v;
      const auto& store = cache.store(s);
      const auto& q = cache.quantizer(s);
      for (std::size_t t = 0; t < tokens; ++t)
        for (std::size_t h = 0; h < f.kv_heads; ++h) {
          const std::size_t page = slots[t] / f.page_tokens, slot = slots[t] % f.page_tokens;
          const std::vector<float> x(input.begin() + t * row + h * c.dim, input.begin() + t * row + (h + 1) * c.dim);
          const auto got = ref::dequantize_token(cache, s, page, h, slot);
          if (sf.raw()) {
            for (std::size_t d = 0; d < c.dim; ++d) ASSERT_EQ(got[d], tilekernels::round_to(sf.raw_dtype, x[d]));
            continue;
          }
          const auto enc = ref::encode(x, 1, c.dim, sf.bits, q.rotation, q.boundaries, q.codebook);
          const std::size_t words = f.words_per_token(s), at = f.token_index(page, h, slot);
          const std::vector<std::uint32_t> stored(store.codes.begin() + at * words,
                                                  store.codes.begin() + (at + 1) * words);
          ASSERT_EQ(stored, enc.packed) << "token " << t << " head " << h;
          const float norm = tilekernels::round_to(sf.norm_dtype, static_cast<float>(enc.norms[0]));
          ASSERT_EQ(store.norms[at], norm);
          const std::vector<float> norms{norm};
          const auto want = ref::decode(enc.packed, norms, 1, c.dim, sf.bits, q.rotation, q.codebook);
          ASSERT_LE(relative_rms(got, want), 1e-12);
          if (t == 3 && s == Side::k && h == 0) {
            for (double g : got) ASSERT_EQ(g, 0.0) << "zero row";
          }
        }
      // Slots nobody wrote are still poisoned.
      std::vector<bool> written(f.slots(), false);
      for (auto slot : slots) written[static_cast<std::size_t>(slot)] = true;
      for (std::size_t i = 0; i < f.slots(); ++i) {
        if (written[i]) continue;
        const std::size_t at = f.token_index(i / f.page_tokens, 1, i % f.page_tokens);
        if (sf.raw()) {
          ASSERT_EQ(store.raw[at * c.dim], 0xffffu);
        } else {
          ASSERT_TRUE(std::isnan(store.norms[at]));
        }
      }
    }
  }
}

TEST(AuraPagedCacheReference, NegativeSlotsAreSkipped) {
  const auto f = format_of(64, 16, 2, 2, turbo(4, RotationKind::hadamard, 1), raw(DType::bf16));
  ref::PagedCache cache(f);
  TestRng rng(200);
  const std::size_t row = f.kv_heads * f.dim;
  const std::vector<std::int32_t> slots{-1, 5, -7, 0, 31};
  std::vector<float> k = rng.normals(slots.size() * row), v = rng.normals(slots.size() * row);
  // Skipped tokens hold NaN: reading them would poison what is written.
  for (std::size_t t : {0u, 2u})
    for (std::size_t i = 0; i < row; ++i)
      k[t * row + i] = v[t * row + i] = std::numeric_limits<float>::quiet_NaN();
  ref::cache_write(cache, k, v, slots);
  std::size_t written_k = 0, written_v = 0;
  for (float n : cache.k.norms) written_k += std::isnan(n) ? 0 : 1;
  for (std::size_t i = 0; i < cache.v.raw.size(); i += f.dim) written_v += cache.v.raw[i] == 0xffffu ? 0 : 1;
  EXPECT_EQ(written_k, 3 * f.kv_heads);
  EXPECT_EQ(written_v, 3 * f.kv_heads);
  for (std::size_t t : {1u, 3u, 4u})
    for (std::size_t h = 0; h < f.kv_heads; ++h) {
      const auto slot = static_cast<std::size_t>(slots[t]);
      const auto x = ref::dequantize_token(cache, Side::v, slot / 16, h, slot % 16);
      for (std::size_t d = 0; d < f.dim; ++d) ASSERT_EQ(x[d], tilekernels::round_to_bf16(v[t * row + h * f.dim + d]));
      for (double value : ref::dequantize_token(cache, Side::k, slot / 16, h, slot % 16))
        ASSERT_TRUE(std::isfinite(value));
    }
  // A slot named twice, or past the cache, is an error.
  const std::vector<std::int32_t> twice{4, 4}, past{32, -1};
  const std::vector<float> two(2 * row, 1.0f);
  EXPECT_THROW(ref::cache_write(cache, two, two, twice), tilekernels::Error);
  EXPECT_THROW(ref::cache_write(cache, two, two, past), tilekernels::Error);
}

// ---- attention ---------------------------------------------------------------

struct Results {
  ref::AttentionResult paged, rotated;
};

Results attend_paged(const ref::PagedCache& cache, const Batch& b, const std::vector<std::int32_t>& table,
                     const ref::AttentionOptions& opt) {
  return {ref::decode_attention_paged(b.q, cache, table, b.max_pages, b.seq_lens, b.shape, opt),
          ref::decode_attention_paged_rotated(b.q, cache, table, b.max_pages, b.seq_lens, b.shape, opt)};
}

std::vector<float> random_sinks(TestRng& rng, std::size_t heads) {
  std::vector<float> sinks(heads);
  for (auto& x : sinks) x = static_cast<float>(4 * rng.uniform() - 1);
  sinks[1] = -std::numeric_limits<float>::infinity();  // the same as no sink for that head
  return sinks;
}

TEST(AuraPagedCacheReference, RotatedDomainEqualsDequantised) {
  struct Case {
    std::uint32_t dim;
    ref::SideFormat k, v;
  };
  const Case cases[] = {
      {128, turbo(4, RotationKind::hadamard, 31), turbo(3, RotationKind::dense, 32)},
      {64, raw(DType::bf16), turbo(8, RotationKind::hadamard, 33, DType::f16)},
      {96, turbo(2, RotationKind::dense, 34), raw(DType::f16)},
      {128, turbo(6, RotationKind::dense, 35), turbo(4, RotationKind::hadamard, 36)},
  };
  TestRng rng(300);
  for (const Case& c : cases) {
    SCOPED_TRACE("dim " + std::to_string(c.dim) + " K " + describe(c.k) + " V " + describe(c.v));
    const ref::DecodeShape shape{4, 3, 8, 2, c.dim};
    // Lengths: several pages with a partial last one, one page, an inactive
    // entry, and fewer tokens than q_len (its first query sees nothing).
    const Batch b = make_batch(rng, shape, {37, 5, 0, 2}, 16, 8);
    ref::PagedCache cache(format_of(c.dim, 16, 2, 8, c.k, c.v));
    write_batch(cache, b);
    std::vector<ref::AttentionOptions> options(4);
    options[1] = {0.2, 7, random_sinks(rng, 8), 4.0};
    options[2].window = 1;
    options[3].sinks = random_sinks(rng, 8);
    options[3].scale = 0.5;
    for (std::size_t o = 0; o < options.size(); ++o) {
      SCOPED_TRACE("options " + std::to_string(o));
      const auto r = attend_paged(cache, b, b.block_table, options[o]);
      EXPECT_LE(relative_rms(r.rotated.output, r.paged.output), 1e-12);
      expect_lse_near(r.rotated.lse, r.paged.lse, 1e-12);
      // The entry with seq_len 0 attends to nothing: zeros, and lse -inf or the sink.
      for (std::size_t i = 0; i < shape.q_len * shape.q_heads; ++i) {
        const std::size_t qi = 2 * shape.q_len * shape.q_heads + i, h = i % shape.q_heads;
        const double sink = options[o].sinks.empty() ? -kInf : double(options[o].sinks[h]);
        EXPECT_EQ(r.paged.lse[qi], sink);
        EXPECT_EQ(r.rotated.lse[qi], sink);
        for (std::size_t d = 0; d < c.dim; ++d) ASSERT_EQ(r.rotated.output[qi * c.dim + d], 0.0);
      }
    }
  }
}

// Attention written out from its definition, without the max shift (the
// logits of the tiny case are small): sum_t e^z_t v_t / (sum_t e^z_t + e^sink)
// over t <= pos, t > pos - window.
ref::AttentionResult direct_formula(const Batch& b, const ref::AttentionOptions& opt) {
  const auto& sh = b.shape;
  const double scale = opt.scale ? *opt.scale : 1 / std::sqrt(double(sh.dim));
  ref::AttentionResult r{std::vector<double>(b.q.size(), 0.0), std::vector<double>(b.q.size() / sh.dim)};
  for (std::size_t s = 0; s < sh.num_seqs; ++s)
    for (std::size_t i = 0; i < sh.q_len; ++i)
      for (std::size_t h = 0; h < sh.q_heads; ++h) {
        const std::size_t qi = (s * sh.q_len + i) * sh.q_heads + h, kvh = h / (sh.q_heads / sh.kv_heads);
        const long pos = long(b.seq_lens[s]) - long(sh.q_len) + long(i);
        double den = opt.sinks.empty() ? 0.0 : std::exp(double(opt.sinks[h]));
        for (long t = 0; t < b.seq_lens[s]; ++t) {
          if (t > pos || (opt.window && t <= pos - long(opt.window))) continue;
          const std::size_t kv = ((s * b.max_len + std::size_t(t)) * sh.kv_heads + kvh) * sh.dim;
          double z = 0;
          for (std::size_t d = 0; d < sh.dim; ++d) z += double(b.q[qi * sh.dim + d]) * b.k[kv + d];
          z *= scale;
          if (opt.softcap > 0) z = opt.softcap * std::tanh(z / opt.softcap);
          den += std::exp(z);
          for (std::size_t d = 0; d < sh.dim; ++d) r.output[qi * sh.dim + d] += std::exp(z) * b.v[kv + d];
        }
        for (std::size_t d = 0; d < sh.dim; ++d) r.output[qi * sh.dim + d] /= den;
        r.lse[qi] = std::log(den);
      }
  return r;
}

// A tiny batch whose q, K and V are multiples of 1/4 in [-2, 2] (exact in
// bf16, so a raw bf16 cache holds them exactly).
Batch tiny_batch(TestRng& rng, std::vector<std::int32_t> seq_lens, std::size_t q_len, std::size_t num_pages) {
  const ref::DecodeShape shape{seq_lens.size(), q_len, 2, 1, 4};
  Batch b = make_batch(rng, shape, std::move(seq_lens), 2, num_pages);
  for (auto* x : {&b.q, &b.k, &b.v})
    for (auto& value : *x) value = static_cast<float>(std::floor(rng.uniform() * 17) / 4 - 2);
  return b;
}

TEST(AuraPagedCacheReference, OptionsFollowTheFormula) {
  TestRng rng(400);
  const Batch b = tiny_batch(rng, {5, 4}, 2, 6);
  ref::PagedCache cache(format_of(4, 2, 1, 6, raw(DType::bf16), raw(DType::bf16)));
  write_batch(cache, b);
  const auto check = [&](const ref::AttentionOptions& opt, const char* what) {
    SCOPED_TRACE(what);
    const auto want = direct_formula(b, opt);
    const auto dense = ref::decode_attention_dense(b.q, b.k, b.v, b.max_len, b.seq_lens, b.shape, opt);
    const auto r = attend_paged(cache, b, b.block_table, opt);
    for (const auto* got : {&dense, &r.paged, &r.rotated}) {
      EXPECT_LE(relative_rms(got->output, want.output), 1e-13);
      expect_lse_near(got->lse, want.lse, 1e-13);
    }
    return dense;
  };
  const auto none = check({}, "no options");
  const auto window2 = check({std::nullopt, 2, {}, 0}, "window 2");
  const auto window1 = check({std::nullopt, 1, {}, 0}, "window 1");
  const std::vector<float> sinks{0.5f, -1.0f};
  const auto sunk = check({std::nullopt, 0, sinks, 0}, "sinks");
  const auto scaled = check({2.0, 0, {}, 0}, "scale 2");
  const auto capped = check({2.0, 0, {}, 0.5}, "scale 2, softcap 0.5");
  check({1.5, 3, sinks, 0.75}, "everything");
  EXPECT_GT(relative_rms(window2.output, none.output), 1e-3) << "the window changes the output";
  EXPECT_GT(relative_rms(capped.output, scaled.output), 1e-3) << "the cap changes the output";

  const std::size_t dim = 4, heads = 2;
  for (std::size_t s = 0; s < 2; ++s)
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t h = 0; h < heads; ++h) {
        const std::size_t qi = (s * 2 + i) * heads + h;
        // Window 1: the query's own token alone, weight 1.
        const std::size_t pos = std::size_t(b.seq_lens[s]) - 2 + i, kv = (s * b.max_len + pos) * dim;
        double z = 0;
        for (std::size_t d = 0; d < dim; ++d) z += double(b.q[qi * dim + d]) * b.k[kv + d] / 2;  // scale 1/sqrt(4)
        EXPECT_NEAR(window1.lse[qi], z, 1e-15);
        for (std::size_t d = 0; d < dim; ++d) EXPECT_NEAR(window1.output[qi * dim + d], b.v[kv + d], 1e-15);
        // A sink adds e^sink to the denominator and nothing to the numerator.
        const double l_none = std::exp(none.lse[qi]), l_sunk = l_none + std::exp(double(sinks[h]));
        EXPECT_NEAR(sunk.lse[qi], std::log(l_sunk), 1e-13);
        for (std::size_t d = 0; d < dim; ++d)
          EXPECT_NEAR(sunk.output[qi * dim + d], none.output[qi * dim + d] * l_none / l_sunk, 1e-13);
      }
}

TEST(AuraPagedCacheReference, EmptyAttentionIsZeroWithLseMinusInfinity) {
  TestRng rng(500);
  // Sequence 0 is inactive (no page at all); sequence 1 has one token, so its
  // first query (position -1) sees nothing and its second sees token 0.
  Batch b = tiny_batch(rng, {0, 1}, 2, 2);
  ASSERT_EQ(b.block_table[0], -1);
  ref::PagedCache cache(format_of(4, 2, 1, 2, raw(DType::bf16), raw(DType::bf16)));
  write_batch(cache, b);
  const std::vector<float> sinks{0.25f, -std::numeric_limits<float>::infinity()};
  for (bool with_sinks : {false, true}) {
    SCOPED_TRACE(with_sinks ? "sinks" : "no sinks");
    ref::AttentionOptions opt;
    if (with_sinks) opt.sinks = sinks;
    const auto dense = ref::decode_attention_dense(b.q, b.k, b.v, b.max_len, b.seq_lens, b.shape, opt);
    const auto r = attend_paged(cache, b, b.block_table, opt);
    for (const auto* got : {&dense, &r.paged, &r.rotated})
      for (std::size_t qi = 0; qi < 8; ++qi) {
        const std::size_t h = qi % 2;
        const bool sees_token = qi >= 6;  // sequence 1, query 1
        const double sink = with_sinks ? double(sinks[h]) : -kInf;
        double z = 0;
        for (std::size_t d = 0; d < 4; ++d) z += double(b.q[qi * 4 + d]) * b.k[4 + d] / 2;
        const double l = std::exp(z) + std::exp(sink);
        if (sees_token) {
          EXPECT_NEAR(got->lse[qi], std::log(l), 1e-14) << qi;
        } else {
          EXPECT_EQ(got->lse[qi], sink) << qi;
        }
        for (std::size_t d = 0; d < 4; ++d)
          EXPECT_NEAR(got->output[qi * 4 + d], sees_token ? b.v[4 + d] * std::exp(z) / l : 0.0, 1e-14) << qi;
      }
  }
}

TEST(AuraPagedCacheReference, ShuffledPagesMatchTheIdentityTable) {
  TestRng rng(600);
  const ref::DecodeShape shape{3, 4, 4, 2, 128};
  const auto f = format_of(128, 16, 2, 12, turbo(4, RotationKind::hadamard, 41), turbo(3, RotationKind::dense, 42));
  Batch shuffled = make_batch(rng, shape, {70, 33, 16}, 16, 12);
  Batch identity = shuffled;  // same tokens; sequence s in consecutive pages
  std::int32_t next = 0;
  for (std::size_t i = 0; i < identity.block_table.size(); ++i)
    identity.block_table[i] = shuffled.block_table[i] < 0 ? -1 : next++;
  ASSERT_NE(identity.block_table, shuffled.block_table);
  ref::PagedCache a(f), b(f);
  write_batch(a, identity);
  write_batch(b, shuffled);
  for (std::size_t s = 0; s < shape.num_seqs; ++s)
    for (Side side : {Side::k, Side::v}) {
      const auto len = static_cast<std::size_t>(shuffled.seq_lens[s]);
      const auto row = [&](const Batch& x) { return std::span(x.block_table).subspan(s * x.max_pages, x.max_pages); };
      EXPECT_EQ(ref::gather(a, side, row(identity), 0, len), ref::gather(b, side, row(shuffled), 0, len));
    }
  ref::AttentionOptions opt{std::nullopt, 0, random_sinks(rng, 4), 0};
  for (bool windowed : {false, true}) {
    SCOPED_TRACE(windowed ? "window 20" : "full");
    opt.window = windowed ? 20 : 0;
    const auto want = attend_paged(a, identity, identity.block_table, opt);
    auto table = shuffled.block_table;
    if (windowed) {
      // Pages wholly before every query's window are never read: unmap them.
      for (std::size_t s = 0; s < shape.num_seqs; ++s) {
        const long first = long(shuffled.seq_lens[s]) - long(shape.q_len) + 1 - long(opt.window);
        for (long p = 0; (p + 1) * 16 <= first; ++p) table[s * shuffled.max_pages + std::size_t(p)] = -1;
      }
      ASSERT_EQ(table[0], -1);
      ASSERT_EQ(table[1], -1);
      ASSERT_NE(table[2], -1);
    }
    const auto got = attend_paged(b, shuffled, table, opt);
    EXPECT_EQ(got.paged.output, want.paged.output);
    EXPECT_EQ(got.paged.lse, want.paged.lse);
    EXPECT_EQ(got.rotated.output, want.rotated.output);
    EXPECT_EQ(got.rotated.lse, want.rotated.lse);
  }
}

// ---- quality ------------------------------------------------------------------

// Attention over the dequantised cache against exact attention on the same
// (bf16) K/V, Gaussian, Dim 128, Hadamard rotations: K and V both at `bits`,
// and each alone (the other raw bf16, i.e. exact) to show where the error
// comes from. Scores of Gaussian q and K have unit spread, so the softmax is
// flat and the output is an average: both the K error (through the weights)
// and the V error enter it with their full relative size, sqrt(distortion).
TEST(AuraPagedCacheReference, QualityAgainstExactAttention) {
  TestRng rng(700);
  const ref::DecodeShape shape{1, 4, 8, 2, 128};
  const std::size_t len = 1024;
  Batch b = make_batch(rng, shape, {std::int32_t(len)}, 64, len / 64);
  const auto exact = ref::decode_attention_dense(b.q, b.k, b.v, b.max_len, b.seq_lens, shape, {});
  const auto cosines = [&](const ref::SideFormat& k, const ref::SideFormat& v, double& worst) {
    ref::PagedCache cache(format_of(128, 64, 2, len / 64, k, v));
    write_batch(cache, b);
    const auto got = ref::decode_attention_paged(b.q, cache, b.block_table, b.max_pages, b.seq_lens, shape, {});
    worst = 1;
    for (std::size_t qi = 0; qi < shape.q_len * shape.q_heads; ++qi) {
      const auto part = [&](const std::vector<double>& x) {
        return std::vector<double>(x.begin() + qi * 128, x.begin() + (qi + 1) * 128);
      };
      worst = std::min(worst, cosine(part(got.output), part(exact.output)));
    }
    return cosine(got.output, exact.output);
  };
  for (std::uint32_t bits : {2u, 3u, 4u, 6u, 8u}) {
    const auto k = turbo(bits, RotationKind::hadamard, 51), v = turbo(bits, RotationKind::hadamard, 52);
    double worst = 0, unused = 0;
    const double both = cosines(k, v, worst);
    const double k_only = cosines(k, raw(DType::bf16), unused), v_only = cosines(raw(DType::bf16), v, unused);
    std::printf("aura paged cache, Dim 128, %zu keys, %u bits: cosine K+V %.5f (worst head %.5f), K only %.5f, "
                "V only %.5f\n", len, bits, both, worst, k_only, v_only);
    if (bits == 4) {
      EXPECT_GE(both, 0.99);
    } else if (bits >= 6) {
      EXPECT_GE(both, 0.999);
    }
    EXPECT_GE(std::min(k_only, v_only), both);
  }
}

// One key aligned with q (with the norm of a typical key) among 4096 random
// ones: its value must dominate the output of attention over the cache.
TEST(AuraPagedCacheReference, RetrievalOfAnAlignedKey) {
  TestRng rng(800);
  const std::size_t len = 4096, dim = 128, planted = 1234;
  const ref::DecodeShape shape{1, 1, 1, 1, dim};
  Batch b = make_batch(rng, shape, {std::int32_t(len)}, 256, len / 256);
  double qq = 0;
  for (float x : b.q) qq += double(x) * x;
  for (std::size_t d = 0; d < dim; ++d)
    b.k[planted * dim + d] = tilekernels::round_to_bf16(static_cast<float>(b.q[d] / std::sqrt(qq) * std::sqrt(double(dim))));
  const std::vector<double> target(b.v.begin() + planted * dim, b.v.begin() + (planted + 1) * dim);
  const auto exact = ref::decode_attention_dense(b.q, b.k, b.v, b.max_len, b.seq_lens, shape, {});
  double z = 0;
  for (std::size_t d = 0; d < dim; ++d) z += double(b.q[d]) * b.k[planted * dim + d] / std::sqrt(double(dim));
  std::printf("aura retrieval, %zu keys: exact attention weight of the planted key %.4f, cosine to its value %.5f\n",
              len, std::exp(z - exact.lse[0]), cosine(exact.output, target));
  EXPECT_GE(cosine(exact.output, target), 0.9);
  for (std::uint32_t bits : {2u, 3u, 4u}) {
    ref::PagedCache cache(format_of(dim, 256, 1, len / 256, turbo(bits, RotationKind::hadamard, 61),
                                    turbo(bits, RotationKind::hadamard, 62)));
    write_batch(cache, b);
    const auto got = ref::decode_attention_paged(b.q, cache, b.block_table, b.max_pages, b.seq_lens, shape, {});
    const double cos = cosine(got.output, target);
    std::printf("aura retrieval, %zu keys, K and V at %u bits: cosine to the planted value %.5f\n", len, bits, cos);
    if (bits >= 3) {
      EXPECT_GE(cos, 0.9);
    }
  }
}

}  // namespace
