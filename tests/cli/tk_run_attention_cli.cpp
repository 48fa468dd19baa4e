// SPDX-License-Identifier: MIT
// tk-run end to end for the paged AURA cache: aura.cache_write into a fresh
// cache and into an existing one (raw K, dense V), aura.decode_attention
// over it against the double reference over the cache tk-run wrote,
// aura.decode_attention_partials merged on the host into the same output,
// a centred cache (aura.key_centre, then the writer and the attention with
// each token's and sequence's centre row), a cache with split keys, and
// bad input refused with one line. TK_RUN is the
// path of the tk-run binary.
#include <gtest/gtest.h>

#include <tilekernels/core/dtype.hpp>
#include <tilekernels/reference/aura/decode_attention.hpp>
#include <tilekernels/reference/softmax_state.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_fixture.hpp"

namespace {

namespace fs = std::filesystem;
namespace ref = tilekernels::reference::aura;

using tktest::cli::Result;

class TkRunAttention : public tktest::cli::TkRunFixture {
 protected:
  TkRunAttention() : TkRunFixture("tk_run_attention_") {}
};

// Seeded values in [-2, 2).
std::vector<float> values(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  for (auto& x : v) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>((seed >> 40) * (1.0 / (1ull << 24))) * 4.0f - 2.0f;
  }
  return v;
}

// A reference cache format of 16-token pages.
ref::PagedCacheFormat cache_format(std::uint32_t dim, std::size_t heads, std::size_t pages, ref::SideFormat k,
                                   ref::SideFormat v) {
  ref::PagedCacheFormat f;
  f.dim = dim;
  f.page_tokens = 16;
  f.kv_heads = heads;
  f.num_pages = pages;
  f.k = k;
  f.v = v;
  return f;
}

// ||out - want|| / ||want||.
double relative_rms(const std::vector<float>& out, const std::vector<double>& want) {
  double e2 = 0, r2 = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    e2 += (out[i] - want[i]) * (out[i] - want[i]);
    r2 += want[i] * want[i];
  }
  return std::sqrt(e2 / r2);
}

TEST_F(TkRunAttention, CacheWriteThenAttentionMatchesTheReference) {
  // Dim 128, K4V3, 16-token pages; two sequences of 37 and 20 keys over
  // shuffled pages; 8 query heads over 2 KV heads, 2 new tokens.
  const std::int64_t dim = 128, heads = 2, q_heads = 8, q_len = 2, pages = 6, max_pages = 3;
  const std::vector<std::int32_t> lens{37, 20};
  const std::vector<std::int32_t> table{4, 0, 2, 5, 1, -1};
  std::vector<std::int32_t> slots;
  for (std::size_t s = 0; s < lens.size(); ++s)
    for (std::int32_t p = 0; p < lens[s]; ++p) slots.push_back(table[s * max_pages + p / 16] * 16 + p % 16);
  slots.push_back(-1);  // a padding row
  const auto tokens = static_cast<std::int64_t>(slots.size());
  const auto k = values(static_cast<std::size_t>(tokens * heads * dim), 1), v = values(k.size(), 2);
  write("k.npy", {tokens, heads, dim}, k);
  write("v.npy", {tokens, heads, dim}, v);
  write_ints("slots.npy", {tokens}, slots);
  const std::string format = "dim=128 k_bits=4 v_bits=3 page_tokens=16 k_seed=5 v_seed=6";
  const std::string cache_out = " --out k_codes=" + path("kc.npy") + " --out k_norms=" + path("kn.npy") +
                                " --out v_codes=" + path("vc.npy") + " --out v_norms=" + path("vn.npy");
  const Result w = run("aura.cache_write " + format + " num_pages=6 --in k=" + path("k.npy") + " --in v=" +
                       path("v.npy") + " --in slot_mapping=" + path("slots.npy") + cache_out);
  ASSERT_EQ(w.code, 0) << w.err;

  // The reference cache holds what tk-run wrote; its codes must agree with
  // the reference encode of the same rows (boundary cases aside).
  using tilekernels::DType;
  const auto f = cache_format(128, heads, pages, {4, DType::bf16, DType::f32, ref::RotationKind::hadamard, 5},
                              {3, DType::bf16, DType::f32, ref::RotationKind::hadamard, 6});
  ref::PagedCache want(f), got(f);
  ref::cache_write(want, k, v, slots);
  got.k.codes = tkrun::read_npy(path("kc.npy")).words;
  got.v.codes = tkrun::read_npy(path("vc.npy")).words;
  got.k.norms = tkrun::read_npy(path("kn.npy")).floats;
  got.v.norms = tkrun::read_npy(path("vn.npy")).floats;
  ASSERT_EQ(got.k.codes.size(), want.k.codes.size());
  ASSERT_EQ(got.v.norms.size(), want.v.norms.size());
  std::size_t differ = 0;
  for (auto s : slots) {
    if (s < 0) continue;
    for (std::size_t h = 0; h < heads; ++h) {
      const auto page = static_cast<std::size_t>(s) / 16, slot = static_cast<std::size_t>(s) % 16;
      const auto a = ref::token_codes(want, ref::Side::k, page, h, slot), b = ref::token_codes(got, ref::Side::k, page, h, slot);
      for (std::size_t d = 0; d < 128; ++d) differ += a[d] != b[d];
    }
  }
  EXPECT_LE(differ, 3u) << "K codes differing from the reference encode";

  const auto q = values(static_cast<std::size_t>(2 * q_len * q_heads * dim), 3);
  const std::vector<float> sinks{0.5f, -1.0f, 2.0f, 0.0f, 1.0f, -3.0f, 0.25f, 4.0f};
  write("q.npy", {2, q_len, q_heads, dim}, q);
  write_ints("table.npy", {2, max_pages}, table);
  write_ints("lens.npy", {2}, lens);
  write("sinks.npy", {q_heads}, sinks);
  const std::string attention_in = " --in q=" + path("q.npy") + " --in k_codes=" + path("kc.npy") + " --in k_norms=" +
                                   path("kn.npy") + " --in v_codes=" + path("vc.npy") + " --in v_norms=" +
                                   path("vn.npy") + " --in block_table=" + path("table.npy") + " --in seq_lens=" +
                                   path("lens.npy") + " --in sinks=" + path("sinks.npy");
  const std::string options = " window=30 softcap=20";
  const Result a = run("aura.decode_attention " + format + options + attention_in + " --out output=" + path("out.npy") +
                       " --out lse=" + path("lse.npy"));
  ASSERT_EQ(a.code, 0) << a.err;
  const ref::DecodeShape shape{2, q_len, q_heads, heads, 128};
  ref::AttentionOptions opt;
  opt.window = 30;
  opt.softcap = 20;
  opt.sinks = sinks;
  const auto expect = ref::decode_attention_paged_rotated(q, got, table, max_pages, lens, shape, opt);
  const auto out = tkrun::read_npy(path("out.npy")).floats, lse = tkrun::read_npy(path("lse.npy")).floats;
  ASSERT_EQ(out.size(), expect.output.size());
  double e2 = 0, r2 = 0, lse_err = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    e2 += (out[i] - expect.output[i]) * (out[i] - expect.output[i]);
    r2 += expect.output[i] * expect.output[i];
  }
  for (std::size_t i = 0; i < lse.size(); ++i) lse_err = std::max(lse_err, std::abs(lse[i] - expect.lse[i]));
  EXPECT_LE(std::sqrt(e2 / r2), 1e-5) << "output relative RMS";
  EXPECT_LE(lse_err, 1e-4);

  // The partials, merged as softmax states and un-rotated on the host, give
  // the same output (sinks join the denominator only).
  const Result p = run("aura.decode_attention_partials " + format + options + " splits=3" + attention_in +
                       " --out o_partials=" + path("o.npy") + " --out m_partials=" + path("m.npy") +
                       " --out l_partials=" + path("l.npy"));
  ASSERT_EQ(p.code, 0) << p.err;
  const auto o = tkrun::read_npy(path("o.npy")), m = tkrun::read_npy(path("m.npy")), l = tkrun::read_npy(path("l.npy"));
  ASSERT_EQ(o.shape, (std::vector<std::int64_t>{2, q_len, q_heads, 3, dim}));
  double p2 = 0;
  for (std::size_t row = 0; row < static_cast<std::size_t>(2 * q_len * q_heads); ++row) {
    tilekernels::reference::SoftmaxState state(128);
    for (std::size_t s = 0; s < 3; ++s)
      state.merge(std::span<const float>(o.floats.data() + (row * 3 + s) * 128, 128), m.floats[row * 3 + s],
                  l.floats[row * 3 + s]);
    const std::vector<double> zero(128, 0.0);
    state.merge(std::span<const double>(zero), sinks[row % q_heads], 1.0);
    const auto y = state.output();
    const auto x = ref::unrotate(got, ref::Side::v, y);
    for (std::size_t d = 0; d < 128; ++d) p2 += (x[d] - out[row * 128 + d]) * (x[d] - out[row * 128 + d]);
  }
  EXPECT_LE(std::sqrt(p2 / r2), 1e-5) << "merged partials against the output";
}

TEST_F(TkRunAttention, AppendsToAnExistingCacheRawKDenseV) {
  // Dim 96, raw bf16 K, 4-bit V under a dense rotation: 20 keys into a fresh
  // cache, then 5 more (and a padding row) into the cache that the first
  // call wrote; attention over all 25 without lse.
  const std::int64_t dim = 96, heads = 2, q_heads = 4, pages = 4, max_pages = 2;
  const std::vector<std::int32_t> table{3, 1};
  const auto slot = [&](std::int32_t pos) { return table[static_cast<std::size_t>(pos / 16)] * 16 + pos % 16; };
  std::vector<std::int32_t> first, second;
  for (std::int32_t p = 0; p < 20; ++p) first.push_back(slot(p));
  for (std::int32_t p = 20; p < 25; ++p) second.push_back(slot(p));
  second.push_back(-1);
  const auto k1 = values(first.size() * heads * dim, 11), v1 = values(k1.size(), 12);
  const auto k2 = values(second.size() * heads * dim, 13), v2 = values(k2.size(), 14);
  const auto rows = [&](const std::vector<std::int32_t>& s) { return static_cast<std::int64_t>(s.size()); };
  write("k1.npy", {rows(first), heads, dim}, k1);
  write("v1.npy", {rows(first), heads, dim}, v1);
  write("k2.npy", {rows(second), heads, dim}, k2);
  write("v2.npy", {rows(second), heads, dim}, v2);
  write_ints("s1.npy", {rows(first)}, first);
  write_ints("s2.npy", {rows(second)}, second);
  const std::string format = "dim=96 k_bits=16 v_bits=4 page_tokens=16 rotation=dense k_seed=7 v_seed=8";
  const auto cache_out = [&](const std::string& tag) {
    return " --out k_codes=" + path("kc" + tag + ".npy") + " --out v_codes=" + path("vc" + tag + ".npy") +
           " --out v_norms=" + path("vn" + tag + ".npy");
  };
  const Result w1 = run("aura.cache_write " + format + " num_pages=4 --in k=" + path("k1.npy") + " --in v=" +
                        path("v1.npy") + " --in slot_mapping=" + path("s1.npy") + cache_out("1"));
  ASSERT_EQ(w1.code, 0) << w1.err;
  const Result w2 = run("aura.cache_write " + format + " --in k=" + path("k2.npy") + " --in v=" + path("v2.npy") +
                        " --in slot_mapping=" + path("s2.npy") + " --in k_codes=" + path("kc1.npy") +
                        " --in v_codes=" + path("vc1.npy") + " --in v_norms=" + path("vn1.npy") + cache_out("2"));
  ASSERT_EQ(w2.code, 0) << w2.err;

  using tilekernels::DType;
  const auto f = cache_format(96, heads, pages, {16, DType::bf16, DType::f32, ref::RotationKind::dense, 7},
                              {4, DType::bf16, DType::f32, ref::RotationKind::dense, 8});
  ref::PagedCache want(f), got(f);
  ref::cache_write(want, k1, v1, first);
  ref::cache_write(want, k2, v2, second);
  const auto kc1 = tkrun::read_npy(path("kc1.npy")), kc2 = tkrun::read_npy(path("kc2.npy"));
  const auto vc1 = tkrun::read_npy(path("vc1.npy")), vc2 = tkrun::read_npy(path("vc2.npy"));
  ASSERT_EQ(kc2.shape, (std::vector<std::int64_t>{pages, heads, 16, dim}));
  got.k.raw.resize(kc2.floats.size());
  for (std::size_t i = 0; i < kc2.floats.size(); ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &kc2.floats[i], 4);
    got.k.raw[i] = static_cast<std::uint16_t>(bits >> 16);  // raw bf16 values, widened exactly by tk-run
  }
  got.v.codes = vc2.words;
  got.v.norms = tkrun::read_npy(path("vn2.npy")).floats;
  // Token (page, head, slot) of slot s and head h, in cache order.
  const auto at_of = [&](std::int32_t s, std::size_t h) {
    return (static_cast<std::size_t>(s / 16) * heads + h) * 16 + static_cast<std::size_t>(s % 16);
  };
  std::size_t k_differ = 0, v_differ = 0, kept = 0;
  for (const auto& batch : {first, second}) {
    for (auto s : batch) {
      if (s < 0) continue;
      for (std::size_t h = 0; h < heads; ++h) {
        const std::size_t at = at_of(s, h);
        for (std::size_t d = 0; d < dim; ++d) k_differ += got.k.raw[at * dim + d] != want.k.raw[at * dim + d];
        const auto a = ref::token_codes(want, ref::Side::v, s / 16, h, s % 16);
        const auto b = ref::token_codes(got, ref::Side::v, s / 16, h, s % 16);
        for (std::size_t d = 0; d < dim; ++d) v_differ += a[d] != b[d];
      }
    }
  }
  // The second call kept what the first wrote.
  const std::size_t v_words = 96 * 4 / 32;
  for (auto s : first) {
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t at = at_of(s, h);
      kept += std::equal(vc1.words.begin() + at * v_words, vc1.words.begin() + (at + 1) * v_words, vc2.words.begin() + at * v_words) &&
              std::equal(kc1.floats.begin() + at * dim, kc1.floats.begin() + (at + 1) * dim, kc2.floats.begin() + at * dim);
    }
  }
  EXPECT_EQ(k_differ, 0u) << "raw K values differing from their bf16 rounding";
  EXPECT_LE(v_differ, 3u) << "V codes differing from the reference encode";
  EXPECT_EQ(kept, first.size() * heads) << "tokens of the first call changed by the second";

  const std::vector<std::int32_t> lens{25};
  const auto q = values(static_cast<std::size_t>(q_heads * dim), 15);
  write("q.npy", {1, 1, q_heads, dim}, q);
  write_ints("table.npy", {1, max_pages}, table);
  write_ints("lens.npy", {1}, lens);
  const Result a = run("aura.decode_attention " + format + " --in q=" + path("q.npy") + " --in k_codes=" +
                       path("kc2.npy") + " --in v_codes=" + path("vc2.npy") + " --in v_norms=" + path("vn2.npy") +
                       " --in block_table=" + path("table.npy") + " --in seq_lens=" + path("lens.npy") +
                       " --out output=" + path("out.npy"));
  ASSERT_EQ(a.code, 0) << a.err;
  const auto expect = ref::decode_attention_paged_rotated(q, got, table, max_pages, lens,
                                                          ref::DecodeShape{1, 1, q_heads, heads, 96}, {});
  const auto out = tkrun::read_npy(path("out.npy")).floats;
  ASSERT_EQ(out.size(), expect.output.size());
  EXPECT_LE(relative_rms(out, expect.output), 1e-5) << "output relative RMS";
}

TEST_F(TkRunAttention, CentredKeysFromKeyCentreThroughAttention) {
  // Dim 64, K4V4, keys of mean 2: two prompts (37 and 20 keys) set centre
  // rows 1 and 0, the writer stores each key minus its sequence's row, and
  // attention (softcap and sinks: the true scores matter) over the cache
  // matches the reference that adds q . mu back.
  const std::int64_t dim = 64, heads = 2, q_heads = 4, pages = 5, max_pages = 3;
  const std::vector<std::int32_t> lens{37, 20}, table{4, 0, 2, 3, 1, -1}, rows{1, 0}, seq_centres{1, 0};
  const std::vector<std::int32_t> starts{0, 37, 57};
  std::vector<std::int32_t> slots, token_centres;
  for (std::size_t s = 0; s < lens.size(); ++s)
    for (std::int32_t p = 0; p < lens[s]; ++p) {
      slots.push_back(table[s * max_pages + p / 16] * 16 + p % 16);
      token_centres.push_back(seq_centres[s]);
    }
  const auto tokens = static_cast<std::int64_t>(slots.size());
  auto k = values(static_cast<std::size_t>(tokens * heads * dim), 21);
  for (auto& x : k) x += 2.0f;
  const auto v = values(k.size(), 22);
  write("k.npy", {tokens, heads, dim}, k);
  write("v.npy", {tokens, heads, dim}, v);
  write("c0.npy", {2, heads, dim}, std::vector<float>(static_cast<std::size_t>(2 * heads * dim), 0.0f));
  write_ints("starts.npy", {3}, starts);
  write_ints("rows.npy", {2}, rows);
  write_ints("slots.npy", {tokens}, slots);
  write_ints("tc.npy", {tokens}, token_centres);
  const std::string format = "dim=64 k_bits=4 v_bits=4 k_seed=3 v_seed=4 centred=1";
  const Result c = run("aura.key_centre " + format + " --in k=" + path("k.npy") + " --in starts=" + path("starts.npy") +
                       " --in rows=" + path("rows.npy") + " --in k_centre=" + path("c0.npy") +
                       " --out k_centre=" + path("centre.npy"));
  ASSERT_EQ(c.code, 0) << c.err;
  const auto centre = tkrun::read_npy(path("centre.npy")).floats;
  const std::size_t row = heads * dim;
  ASSERT_EQ(centre.size(), 2 * row);
  for (std::size_t e = 0; e < 2; ++e) {
    const auto mean = ref::key_mean(std::span(k).subspan(static_cast<std::size_t>(starts[e]) * row,
                                                         static_cast<std::size_t>(starts[e + 1] - starts[e]) * row),
                                    heads, dim);
    for (std::size_t i = 0; i < row; ++i)
      ASSERT_NEAR(centre[static_cast<std::size_t>(rows[e]) * row + i], mean[i], 1e-5) << "prompt " << e;
  }

  const Result w = run("aura.cache_write " + format + " num_pages=5 --in k=" + path("k.npy") + " --in v=" +
                       path("v.npy") + " --in slot_mapping=" + path("slots.npy") + " --in k_centre=" +
                       path("centre.npy") + " --in token_centres=" + path("tc.npy") + " --out k_codes=" +
                       path("kc.npy") + " --out k_norms=" + path("kn.npy") + " --out v_codes=" + path("vc.npy") +
                       " --out v_norms=" + path("vn.npy"));
  ASSERT_EQ(w.code, 0) << w.err;
  using tilekernels::DType;
  const auto f = cache_format(64, heads, pages, {4, DType::bf16, DType::f32, ref::RotationKind::hadamard, 3},
                              {4, DType::bf16, DType::f32, ref::RotationKind::hadamard, 4});
  ref::PagedCache want(f), got(f);
  ref::cache_write(want, ref::centred_keys(k, token_centres, centre, heads, dim), v, slots);
  got.k.codes = tkrun::read_npy(path("kc.npy")).words;
  got.v.codes = tkrun::read_npy(path("vc.npy")).words;
  got.k.norms = tkrun::read_npy(path("kn.npy")).floats;
  got.v.norms = tkrun::read_npy(path("vn.npy")).floats;
  std::size_t differ = 0;
  for (auto s : slots)
    for (std::size_t h = 0; h < heads; ++h) {
      const auto a = ref::token_codes(want, ref::Side::k, s / 16, h, s % 16);
      const auto b = ref::token_codes(got, ref::Side::k, s / 16, h, s % 16);
      for (std::size_t d = 0; d < 64; ++d) differ += a[d] != b[d];
    }
  EXPECT_LE(differ, 3u) << "K codes differing from the reference encode of the centred keys";

  const auto q = values(static_cast<std::size_t>(2 * q_heads * dim), 23);
  const std::vector<float> sinks{0.5f, -1.0f, 2.0f, 0.0f};
  write("q.npy", {2, 1, q_heads, dim}, q);
  write_ints("table.npy", {2, max_pages}, table);
  write_ints("lens.npy", {2}, lens);
  write("sinks.npy", {q_heads}, sinks);
  write_ints("sc.npy", {2}, seq_centres);
  const Result a = run("aura.decode_attention " + format + " softcap=5 --in q=" + path("q.npy") + " --in k_codes=" +
                       path("kc.npy") + " --in k_norms=" + path("kn.npy") + " --in v_codes=" + path("vc.npy") +
                       " --in v_norms=" + path("vn.npy") + " --in block_table=" + path("table.npy") +
                       " --in seq_lens=" + path("lens.npy") + " --in sinks=" + path("sinks.npy") + " --in k_centre=" +
                       path("centre.npy") + " --in seq_centres=" + path("sc.npy") + " --out output=" +
                       path("out.npy") + " --out lse=" + path("lse.npy"));
  ASSERT_EQ(a.code, 0) << a.err;
  ref::AttentionOptions opt;
  opt.softcap = 5;
  opt.sinks = sinks;
  for (auto r : seq_centres) opt.k_centre.insert(opt.k_centre.end(), centre.begin() + r * row, centre.begin() + (r + 1) * row);
  const auto expect = ref::decode_attention_paged_rotated(q, got, table, max_pages, lens,
                                                          ref::DecodeShape{2, 1, q_heads, heads, 64}, opt);
  EXPECT_LE(relative_rms(tkrun::read_npy(path("out.npy")).floats, expect.output), 1e-5) << "output relative RMS";
  EXPECT_LE(relative_rms(tkrun::read_npy(path("lse.npy")).floats, expect.lse), 1e-5) << "lse relative RMS";
}

// Split keys (k_bits=3 k_hi_dims=64: 3.5 bits) through tk-run: the
// cache it writes has the split layout (14 words a token) and the codes
// of the reference encode, and the attention over it matches the
// reference over the same cache.
TEST_F(TkRunAttention, SplitKeysWriteThenAttention) {
  const std::int64_t dim = 128, heads = 2, q_heads = 4, pages = 4, max_pages = 2;
  const std::vector<std::int32_t> lens{30, 19};
  const std::vector<std::int32_t> table{3, 1, 0, 2};
  std::vector<std::int32_t> slots;
  for (std::size_t s = 0; s < lens.size(); ++s)
    for (std::int32_t p = 0; p < lens[s]; ++p) slots.push_back(table[s * max_pages + p / 16] * 16 + p % 16);
  const auto tokens = static_cast<std::int64_t>(slots.size());
  const auto k = values(static_cast<std::size_t>(tokens * heads * dim), 31), v = values(k.size(), 32);
  write("k.npy", {tokens, heads, dim}, k);
  write("v.npy", {tokens, heads, dim}, v);
  write_ints("slots.npy", {tokens}, slots);
  const std::string format = "dim=128 k_bits=3 k_hi_dims=64 v_bits=4 k_seed=7 v_seed=8";
  const Result w =
      run("aura.cache_write " + format + " num_pages=4 --in k=" + path("k.npy") + " --in v=" + path("v.npy") +
          " --in slot_mapping=" + path("slots.npy") + " --out k_codes=" + path("kc.npy") +
          " --out k_norms=" + path("kn.npy") + " --out v_codes=" + path("vc.npy") + " --out v_norms=" + path("vn.npy"));
  ASSERT_EQ(w.code, 0) << w.err;
  using tilekernels::DType;
  ref::SideFormat ks{3, DType::bf16, DType::f32, ref::RotationKind::hadamard, 7};
  ks.hi_dims = 64;
  const auto f = cache_format(128, heads, pages, ks, {4, DType::bf16, DType::f32, ref::RotationKind::hadamard, 8});
  ref::PagedCache want(f), got(f);
  ref::cache_write(want, k, v, slots);
  const auto kc = tkrun::read_npy(path("kc.npy"));
  EXPECT_EQ(kc.shape, (std::vector<std::int64_t>{pages, heads, 16, 14}));
  got.k.codes = kc.words;
  got.v.codes = tkrun::read_npy(path("vc.npy")).words;
  got.k.norms = tkrun::read_npy(path("kn.npy")).floats;
  got.v.norms = tkrun::read_npy(path("vn.npy")).floats;
  ASSERT_EQ(got.k.codes.size(), want.k.codes.size());
  std::size_t differ = 0;
  for (auto s : slots)
    for (std::size_t h = 0; h < heads; ++h) {
      const auto a = ref::token_codes(want, ref::Side::k, s / 16, h, s % 16);
      const auto b = ref::token_codes(got, ref::Side::k, s / 16, h, s % 16);
      for (std::size_t d = 0; d < 128; ++d) differ += a[d] != b[d];
    }
  EXPECT_LE(differ, 3u) << "K codes differing from the reference encode";

  const auto q = values(static_cast<std::size_t>(2 * q_heads * dim), 33);
  write("q.npy", {2, 1, q_heads, dim}, q);
  write_ints("table.npy", {2, max_pages}, table);
  write_ints("lens.npy", {2}, lens);
  const Result a =
      run("aura.decode_attention " + format + " --in q=" + path("q.npy") + " --in k_codes=" + path("kc.npy") +
          " --in k_norms=" + path("kn.npy") + " --in v_codes=" + path("vc.npy") + " --in v_norms=" + path("vn.npy") +
          " --in block_table=" + path("table.npy") + " --in seq_lens=" + path("lens.npy") +
          " --out output=" + path("out.npy"));
  ASSERT_EQ(a.code, 0) << a.err;
  const auto expect = ref::decode_attention_paged_rotated(q, got, table, max_pages, lens,
                                                          ref::DecodeShape{2, 1, q_heads, heads, 128}, {});
  EXPECT_LE(relative_rms(tkrun::read_npy(path("out.npy")).floats, expect.output), 1e-5) << "output relative RMS";
}

TEST_F(TkRunAttention, RefusesBadInputWithOneLine) {
  write("k.npy", {3, 1, 64}, values(192, 1));
  write_ints("slots.npy", {3}, {0, 1, 40});
  const std::string in = " --in k=" + path("k.npy") + " --in v=" + path("k.npy") + " --in slot_mapping=" + path("slots.npy");
  const std::string out = " --out k_codes=" + path("out.npy");
  const auto refused = [&](const std::string& args, const std::string& needle) {
    SCOPED_TRACE(args);
    const Result r = run(args);
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line expected: " << r.err;
    EXPECT_FALSE(fs::exists(path("out.npy"))) << "an output file was written";
  };
  refused("aura.cache_write dim=64 num_pages=2" + in + out, "slot 40 of token 2 is past the cache (32 slots)");
  refused("aura.cache_write dim=80 num_pages=2" + in + out, "a Hadamard rotation needs dim a power of two");
  refused("aura.cache_write dim=64 k_bits=5 num_pages=2" + in + out, "parameter 'k_bits' must be 2, 3, 4, 6, 8 or 16");
  refused("aura.cache_write dim=64 v_bits=0 num_pages=2" + in + out, "parameter 'v_bits' must be 2, 3, 4, 6, 8 or 16");
  refused("aura.cache_write dim=64" + in + out, "'num_pages' must be > 0 for a fresh cache");
  refused("aura.cache_write dim=128 num_pages=2" + in + out, "input 'k': expected shape [num_tokens, kv_heads, 128]");
  refused("aura.cache_write dim=64 k_bits=16 num_pages=3" + in + " --out k_norms=" + path("out.npy"),
          "output 'k_norms' exists only for a coded side");
  refused("aura.cache_write dim=64 k_bits=4 k_hi_dims=32 num_pages=3" + in + out,
          "split keys need k_bits 2 or 3 and k_hi_dims a multiple of 32 below dim");
  write("centre.npy", {1, 1, 64}, values(64, 2));
  const std::string centre = " --in k_centre=" + path("centre.npy");
  refused("aura.cache_write dim=64 num_pages=3 centred=1" + in + out, "missing input 'k_centre' (centred=1)");
  refused("aura.cache_write dim=64 num_pages=3" + in + centre + out, "input 'k_centre' exists only with centred=1");
  refused("aura.cache_write dim=64 num_pages=3 centred=1 k_bits=16" + in + centre + out,
          "centred keys need a coded K");
  refused("aura.key_centre dim=64 --in k=" + path("k.npy") + " --in starts=" + path("slots.npy") + " --in rows=" +
              path("slots.npy") + centre + " --out k_centre=" + path("out.npy"),
          "aura.key_centre needs centred=1");
}

}  // namespace
