// SPDX-License-Identifier: MIT
// Caches with centred keys (aura/paged_cache.hpp): aura::KeyCentre against
// the mean in double; decode attention over a centred cache against the
// double-precision reference, which adds <q, mu> back to every score
// (sinks, softcap, windows, lse, splits, both CUDA-core paths, sequences
// on shuffled centre rows); its quality against exact attention where the
// keys have a large mean, beside the same cache uncentred; and the errors
// and device-index guards of the centre arguments. CacheWrite's centred
// formats are in test_cache_write.cpp, the tensor-core variants' in
// test_decode_attention_tc.cpp.
#include <tilekernels/aura/key_centre.hpp>

#include <climits>
#include <cstdio>

#include "decode_attention_support.hpp"

namespace {

using namespace tktest;
using namespace tktest::aura_cache;
using aura::Rotation;

template <class Config>
class CentredAttention : public DeviceTest {};

using Centred = ::testing::Types<
    aura::DecodeAttentionConfig<aura::PagedCacheConfig<128, 16, 4, 4>::centred, DType::bf16, DType::f32>,
    aura::DecodeAttentionConfig<aura::PagedCacheConfig<96, 32, 3, 3, Rotation::dense>::centred, DType::f32, DType::f32>,
    aura::DecodeAttentionConfig<aura::PagedCacheConfig<64, 16, 8, 16, Rotation::hadamard, DType::f16>::centred,
                                DType::f16, DType::bf16>>;
TYPED_TEST_SUITE(CentredAttention, Centred);

// Every option that sees the true scores (sinks, softcap, lse) with a
// window, on the subgroup and the portable path, split and not (with a
// softcap each score gains <q, mu> before the cap).
TYPED_TEST(CentredAttention, MatchesReference) {
  std::uint64_t seed = 3100 + TypeParam::cache::dim;
  for (int variant : {0, 1})
    for (bool split : {false, true}) {
      AttentionCase c = options_case(split ? 0 : 40, seed++);
      c.key_mean = 2.0;
      c.variant = variant;
      c.workspace = split;
      SCOPED_TRACE(std::string(variant == 0 ? "subgroup" : "portable") + (split ? " split" : " window 40"));
      const AttentionRun r = run_attention<TypeParam>(c);
      expect_matches<TypeParam>(r);
    }
}

// GQA groups and new tokens: every row of a chunk gets its own <q, mu>;
// without a softcap (the CUDA-core kernels add it to the row's state, not
// to each score), with sinks and lse, split.
TYPED_TEST(CentredAttention, GroupsAndNewTokens) {
  const std::int64_t shapes[][3] = {{8, 2, 1}, {8, 1, 3}, {6, 2, 2}};
  std::uint64_t seed = 3200 + TypeParam::cache::dim;
  for (const auto& shape : shapes) {
    AttentionCase c = groups_case(shape, seed++, true);
    c.key_mean = 1.0;
    c.sinks = true;
    SCOPED_TRACE(groups_trace(shape, true));
    expect_matches<TypeParam>(run_attention<TypeParam>(c));
  }
}

// Keys with a large mean (3 per coordinate: the mean holds 90% of a key's
// squared norm) at 3 and 4 bits: the centred cache's error against exact
// attention over the original K/V is at most 0.6 of the uncentred one's
// (both printed), and the kernel matches its reference on the way.
template <class Plain>
void centred_beats_plain() {
  using Cache = typename Plain::cache;
  using CentredConfig = aura::DecodeAttentionConfig<typename Cache::centred, DType::bf16, DType::f32>;
  AttentionCase c;
  c.lens = {900, 1100};
  c.key_mean = 3.0;
  c.seed = 3300 + Cache::k_bits;
  const auto error = [](const AttentionRun& r) {
    const auto exact = ref::decode_attention_dense(r.q, r.k, r.v, r.max_len, r.seq_lens, r.shape, r.options);
    return relative_rms(r.output, exact.output);
  };
  const AttentionRun plain = run_attention<Plain>(c), centred = run_attention<CentredConfig>(c);
  expect_matches<Plain>(plain);
  expect_matches<CentredConfig>(centred);
  const double e_plain = error(plain), e_centred = error(centred);
  std::printf("[ quality  ] k%uv%u, keys of mean 3: relative error %.4f plain, %.4f centred\n", Cache::k_bits,
              Cache::v_bits, e_plain, e_centred);
  EXPECT_LE(e_centred, 0.6 * e_plain) << "centring should remove most of the mean's share of the error";
}

class CentredQuality : public DeviceTest {};

TEST_F(CentredQuality, CutsTheErrorOfKeysWithALargeMean) {
  centred_beats_plain<aura::DecodeAttentionConfig<aura::PagedCacheConfig<128, 16, 4, 8>, DType::bf16, DType::f32>>();
  centred_beats_plain<aura::DecodeAttentionConfig<aura::PagedCacheConfig<128, 16, 3, 8>, DType::bf16, DType::f32>>();
}

// aura::KeyCentre over three prompts of a batch (one empty, one on a
// negative row: both write nothing) with keys as views of a fused buffer:
// each named row is the prompt's mean (f32 sums of up to 1500 keys: within
// 1e-6 of the key scale), every other row keeps its contents (NaN), nothing
// outside k_centre is written, and a second run is bit for bit the first.
class KeyCentreTest : public DeviceTest {};

TEST_F(KeyCentreTest, SetsEachNamedRowToItsPromptsMean) {
  Context& ctx = context();
  using Cache = aura::PagedCacheConfig<128, 16, 4, 4>::centred;
  using Kernel = aura::KeyCentre<aura::CacheWriteConfig<Cache, DType::bf16>>;
  constexpr std::int64_t kHeads = 2, kRows = 5;
  const std::vector<std::int32_t> starts{0, 1500, 1500, 1537, 1600}, rows{3, 0, -1, 1};
  const std::int64_t tokens = starts.back() + 7;  // 7 tokens past the last prompt
  const std::size_t row = kHeads * Cache::dim;
  Rng rng(3400);
  std::vector<float> k(static_cast<std::size_t>(tokens) * row);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = rng.normal() + 4.0f * static_cast<float>(i % row % 5) - 8.0f;
  k = rounded(DType::bf16, k);
  FusedRows fused(ctx, DType::bf16, tokens, 3 * static_cast<std::int64_t>(row) + 1, 1);
  const TensorRef k_view = fused.view({tokens, kHeads, Cache::dim}, 1, static_cast<std::int64_t>(row));
  fused.upload(k_view, k);
  const auto ints = [&](const std::vector<std::int32_t>& v) {
    Tensor t(ctx, DType::i32, {static_cast<std::int64_t>(v.size())});
    t.upload(std::span<const std::int32_t>(v));
    return t;
  };
  const Tensor starts_gpu = ints(starts), rows_gpu = ints(rows);
  GuardedTensor centre(ctx, DType::f32, Cache::centre_shape(kRows, kHeads));  // NaN: rows not named stay so
  Kernel kernel(ctx);
  const Kernel::Args args{k_view, starts_gpu, rows_gpu, centre.ref(), starts, rows};
  kernel.run(args);
  const auto got = centre.read_floats();
  const auto got_words = centre.read_words();
  std::vector<bool> named(kRows, false);
  for (std::size_t e = 0; e < rows.size(); ++e) {
    const std::size_t n = static_cast<std::size_t>(starts[e + 1] - starts[e]);
    if (rows[e] < 0 || n == 0) continue;
    named[static_cast<std::size_t>(rows[e])] = true;
    const auto want = ref::key_mean(std::span(k).subspan(static_cast<std::size_t>(starts[e]) * row, n * row), kHeads,
                                    Cache::dim);
    for (std::size_t i = 0; i < row; ++i)
      ASSERT_NEAR(got[static_cast<std::size_t>(rows[e]) * row + i], want[i], 1e-6 * 8.0)
          << "entry " << e << " value " << i;
  }
  for (std::int64_t r = 0; r < kRows; ++r) {
    if (named[static_cast<std::size_t>(r)]) continue;
    for (std::size_t i = 0; i < row; ++i)
      ASSERT_EQ(got_words[static_cast<std::size_t>(r) * row + i], ~0u) << "row " << r << " was not named";
  }
  fused.expect_untouched_outside({k_view});
  centre.poison();
  kernel.run(args);
  EXPECT_EQ(got_words, centre.read_words()) << "moved between runs";
}

// Centre arguments: missing, given for a format without centring, of the
// wrong shape, or host copies naming no row: an Error naming the tensor.
class CentredErrors : public DeviceTest {};

TEST_F(CentredErrors, NameTheBadTensor) {
  Context& ctx = context();
  using Cache = aura::PagedCacheConfig<64, 16, 4, 4>::centred;
  using Plain = aura::PagedCacheConfig<64, 16, 4, 4>;
  const Tensor tables = aura::CacheTables::make(ctx, Cache::format, 1, 2);
  Tensor k(ctx, DType::bf16, {3, 2, 64}), slots(ctx, DType::i32, {3}), token_centres(ctx, DType::i32, {3});
  Tensor codes(ctx, DType::u32, {4, 2, 16, 8}), norms(ctx, DType::f32, {4, 2, 16});
  Tensor centre(ctx, DType::f32, {2, 2, 64}), centre_bad(ctx, DType::f32, {2, 1, 64});
  const std::vector<std::int32_t> good{0, 1, 1}, past{0, 2, 1};

  aura::CacheWrite<aura::CacheWriteConfig<Cache>> writer(ctx);
  using WArgs = aura::CacheWriteArgs;
  WArgs ok{k, k, slots, tables, codes, norms.ref(), codes, norms.ref()};
  ok.k_centre = centre.ref();
  ok.token_centres = token_centres.ref();
  ok.host_token_centres = good;
  EXPECT_TRUE(writer.can_implement(ok)) << writer.can_implement(ok).message;
  WArgs a = ok;
  a.k_centre.reset();
  expect_check_error(writer, a, ErrorCode::invalid_argument, "k_centre: a format with centred keys needs k_centre");
  a = ok;
  a.token_centres.reset();
  expect_check_error(writer, a, ErrorCode::invalid_argument, "token_centres: a format with centred keys needs");
  a = ok;
  a.k_centre = centre_bad.ref();
  expect_check_error(writer, a, ErrorCode::shape_mismatch, "k_centre: expected shape");
  a = ok;
  a.host_token_centres = past;
  expect_check_error(writer, a, ErrorCode::invalid_argument, "token_centres: entry 1 = 2 is not a row of k_centre (2 rows)");
  aura::CacheWrite<aura::CacheWriteConfig<Plain>> plain_writer(ctx);
  a = ok;
  a.token_centres.reset();
  a.host_token_centres = {};
  expect_check_error(plain_writer, a, ErrorCode::invalid_argument, "k_centre: the cache format's keys are not centred");

  using Attention = aura::DecodeAttention<aura::DecodeAttentionConfig<Cache>>;
  Attention attention(ctx);
  Tensor q(ctx, DType::bf16, {2, 1, 4, 64}), out(ctx, DType::bf16, {2, 1, 4, 64});
  Tensor block_table(ctx, DType::i32, {2, 2}), seq_lens(ctx, DType::i32, {2}), seq_centres(ctx, DType::i32, {2});
  Attention::Args d{q, codes, norms.ref(), codes, norms.ref(), block_table, seq_lens, tables, out};
  d.k_centre = centre.ref();
  d.seq_centres = seq_centres.ref();
  EXPECT_TRUE(attention.can_implement(d)) << attention.can_implement(d).message;
  Attention::Args b = d;
  b.seq_centres.reset();
  expect_check_error(attention, b, ErrorCode::invalid_argument, "seq_centres: a format with centred keys needs");
  b = d;
  b.seq_centres = token_centres.ref();
  expect_check_error(attention, b, ErrorCode::shape_mismatch, "seq_centres: expected shape [2]");
  const std::vector<std::int32_t> negative{0, -1};
  b = d;
  b.host_seq_centres = negative;
  expect_check_error(attention, b, ErrorCode::invalid_argument, "seq_centres: entry 1 = -1 is not a row of k_centre");
  aura::DecodeAttention<aura::DecodeAttentionConfig<Plain>> plain(ctx);
  expect_check_error(plain, d, ErrorCode::invalid_argument, "k_centre: the cache format's keys are not centred");

  EXPECT_THROW(aura::KeyCentreKernel(ctx, Plain::format, DType::bf16), Error);
  aura::KeyCentre<aura::CacheWriteConfig<Cache>> key_centre(ctx);
  Tensor starts(ctx, DType::i32, {3}), rows(ctx, DType::i32, {2});
  const std::vector<std::int32_t> backwards{0, 2, 1}, beyond{0, 1, 4};
  aura::KeyCentreArgs c{k, starts, rows, centre.ref()};
  EXPECT_TRUE(key_centre.can_implement(c)) << key_centre.can_implement(c).message;
  aura::KeyCentreArgs e = c;
  e.starts = rows;
  expect_check_error(key_centre, e, ErrorCode::shape_mismatch, "starts: expected shape [3]");
  e = c;
  e.host_starts = backwards;
  expect_check_error(key_centre, e, ErrorCode::invalid_argument, "starts: entry 1's tokens [2, 1) are not within [0, 3)");
  e = c;
  e.host_starts = beyond;
  expect_check_error(key_centre, e, ErrorCode::invalid_argument, "starts: entry 1's tokens [1, 4) are not within [0, 3)");
  e = c;
  e.host_rows = past;
  expect_check_error(key_centre, e, ErrorCode::shape_mismatch, "rows: the host copy holds 3 entries, expected 2");
  const std::vector<std::int32_t> none_and_past{-1, 2};
  e = c;
  e.host_rows = none_and_past;
  expect_check_error(key_centre, e, ErrorCode::invalid_argument, "rows: entry 1 = 2 is not a row of k_centre (2 rows; negative: none)");
}

}  // namespace
