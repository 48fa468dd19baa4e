// SPDX-License-Identifier: MIT
// Caches with split keys (aura/paged_cache.hpp: the first k_hi_dims
// rotated coordinates of K at one bit more): decode attention against the
// double-precision reference over the cache CacheWrite wrote (options,
// windows, splits, both CUDA-core paths, centred and not); the automatic
// choice, which never takes a tensor-core variant for them; the error of
// K at 3.5 bits against exact attention, between 3 and 4 bits; and the
// format's errors. CacheWrite's split formats are in test_cache_write.cpp.
#include <cstdio>

#include "decode_attention_support.hpp"

namespace {

using namespace tktest;
using namespace tktest::aura_cache;
using aura::Rotation;

template <class Config>
class SplitKeysAttention : public DeviceTest {};

using Split = ::testing::Types<
    aura::DecodeAttentionConfig<aura::PagedCacheConfig<128, 16, 3, 4>::split_keys<64>, DType::bf16, DType::f32>,
    aura::DecodeAttentionConfig<aura::PagedCacheConfig<96, 32, 2, 3, Rotation::dense>::split_keys<32>, DType::f32,
                                DType::f32>,
    aura::DecodeAttentionConfig<
        aura::PagedCacheConfig<64, 16, 2, 2, Rotation::hadamard, DType::f16>::split_keys<32>::centred, DType::f16,
        DType::bf16>>;
TYPED_TEST_SUITE(SplitKeysAttention, Split);

// Sinks, softcap, lse and a window on the subgroup and the portable path,
// split and not.
TYPED_TEST(SplitKeysAttention, MatchesReference) {
  std::uint64_t seed = 3600 + TypeParam::cache::dim;
  for (int variant : {0, 1})
    for (bool split : {false, true}) {
      AttentionCase c = options_case(split ? 0 : 40, seed++);
      c.key_mean = TypeParam::cache::k_centred ? 2.0 : 0.0;
      c.variant = variant;
      c.workspace = split;
      SCOPED_TRACE(std::string(variant == 0 ? "subgroup" : "portable") + (split ? " split" : " window 40"));
      expect_matches<TypeParam>(run_attention<TypeParam>(c));
    }
}

// 16 rows per KV head (where a tensor-core variant would be taken for the
// same format unsplit, on a device that has one): the automatic choice is
// a CUDA-core variant, and it matches the reference.
TYPED_TEST(SplitKeysAttention, AutomaticChoiceReadsThem) {
  AttentionCase c;
  c.lens = {700};
  c.q_heads = 16;
  c.kv_heads = 1;
  c.key_mean = TypeParam::cache::k_centred ? 1.0 : 0.0;
  c.seed = 3700 + TypeParam::cache::dim;
  const AttentionRun r = run_attention<TypeParam>(c);
  EXPECT_EQ(r.variant.find("tensor_core"), std::string::npos) << r.variant;
  expect_matches<TypeParam>(r);
}

// K at 3.5 bits (3 bits, half the coordinates at 4) and V at 8 bits,
// Gaussian keys: the error against exact attention over the original K/V
// lies well between K at 3 and at 4 bits (for a Gaussian source the
// Lloyd-Max errors at 3, 3.5 and 4 bits are in the ratio 1.9 : 1.5 : 1).
class SplitKeysQuality : public DeviceTest {};

TEST_F(SplitKeysQuality, LiesBetweenTheWholeWidths) {
  using K4 = aura::PagedCacheConfig<128, 16, 4, 8>;
  using K3 = aura::PagedCacheConfig<128, 16, 3, 8>;
  using K35 = K3::split_keys<64>;
  AttentionCase c;
  c.lens = {900, 1100};
  c.seed = 3800;
  const auto error = [&]<class Cache>() {
    using Config = aura::DecodeAttentionConfig<Cache, DType::bf16, DType::f32>;
    const AttentionRun r = run_attention<Config>(c);
    expect_matches<Config>(r);
    const auto exact = ref::decode_attention_dense(r.q, r.k, r.v, r.max_len, r.seq_lens, r.shape, r.options);
    return relative_rms(r.output, exact.output);
  };
  const double e4 = error.template operator()<K4>(), e35 = error.template operator()<K35>(),
               e3 = error.template operator()<K3>();
  std::printf("[ quality  ] k4v8 %.4f, k3.5v8 %.4f, k3v8 %.4f (relative error against exact attention)\n", e4, e35, e3);
  EXPECT_LT(e35, 0.9 * e3) << "half the coordinates at 4 bits should cut K's error below 3 bits'";
  EXPECT_GT(e35, 1.15 * e4) << "half the coordinates at 3 bits should leave K's error above 4 bits'";
}

// The format's rules at run time (the compile-time ones are
// tests/compile_fail/paged_cache_split_keys.cpp), a uniform K store given
// for a split format, and the tables' layout.
class SplitKeysErrors : public DeviceTest {};

TEST_F(SplitKeysErrors, NameTheBadFormatOrTensor) {
  Context& ctx = context();
  aura::CacheFormat f{128, 16, 3, 4};
  f.k_hi_dims = 48;
  EXPECT_NE(f.problem().find("split keys need k_bits 2 or 3 and k_hi_dims a multiple of 32 below dim"),
            std::string::npos)
      << f.problem();
  f.k_hi_dims = 128;
  EXPECT_FALSE(f.problem().empty());
  f.k_bits = 4;
  f.k_hi_dims = 64;
  EXPECT_FALSE(f.problem().empty());
  try {
    aura::CacheWriteKernel kernel(ctx, f, DType::bf16);
    ADD_FAILURE() << "a split K at 4 bits was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("aura.cache_write: cache format: split keys need"), std::string::npos)
        << e.what();
  }

  using Cache = aura::PagedCacheConfig<128, 16, 3, 4>::split_keys<64>;
  static_assert(Cache::k_words == 14 && Cache::bytes_per_token == 4 * (14 + 16) + 8);
  const aura::CacheFormat& g = Cache::format;
  EXPECT_EQ(g.k_hi_codebook_at(), g.v_rotation_at() + 128);
  EXPECT_EQ(g.table_floats(), g.k_hi_codebook_at() + 2 * 16 + 1);
  const auto t = aura::CacheTables::values(g, 1, 2);
  const auto hi = aura::lloyd_max_codebook(128, 4);
  for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(t[g.k_hi_codebook_at() + i], hi.codebook[i]) << i;
  EXPECT_TRUE(std::isinf(t[g.k_hi_boundaries_at() + 15]));

  const Tensor tables = aura::CacheTables::make(ctx, g, 1, 2);
  Tensor k(ctx, DType::bf16, {3, 2, 128}), slots(ctx, DType::i32, {3});
  Tensor uniform(ctx, DType::u32, Cache::store_shape(3, 4, 2)),
      k_codes(ctx, DType::u32, Cache::side_store_shape(true, 4, 2));
  Tensor v_codes(ctx, DType::u32, Cache::side_store_shape(false, 4, 2)),
      norms(ctx, DType::f32, Cache::norm_shape(4, 2));
  aura::CacheWrite<aura::CacheWriteConfig<Cache>> writer(ctx);
  aura::CacheWriteArgs ok{k, k, slots, tables, k_codes, norms.ref(), v_codes, norms.ref()};
  EXPECT_TRUE(writer.can_implement(ok)) << writer.can_implement(ok).message;
  aura::CacheWriteArgs a = ok;
  a.k_codes = uniform;
  expect_check_error(writer, a, ErrorCode::shape_mismatch, "k_codes: expected shape [4, 2, 16, 14]");

  using Attention = aura::DecodeAttention<aura::DecodeAttentionConfig<Cache>>;
  Attention attention(ctx);
  Tensor q(ctx, DType::bf16, {2, 1, 4, 128}), out(ctx, DType::bf16, {2, 1, 4, 128});
  Tensor block_table(ctx, DType::i32, {2, 2}), seq_lens(ctx, DType::i32, {2});
  Attention::Args d{q, k_codes, norms.ref(), v_codes, norms.ref(), block_table, seq_lens, tables, out};
  EXPECT_TRUE(attention.can_implement(d)) << attention.can_implement(d).message;
  d.k_codes = uniform;
  expect_check_error(attention, d, ErrorCode::shape_mismatch, "k_codes: expected shape [4, 2, 16, 14]");
}

}  // namespace
