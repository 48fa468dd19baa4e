// SPDX-License-Identifier: MIT
// aura::DecodeAttention over every cache format family against the
// double-precision reference (raw bf16 / f16, asymmetric K/V widths, 3- and
// 6-bit codes that straddle words, dense rotations, Dim 64 / 80 / 96 / 256,
// pages of 16 to 256 tokens, f16 norms, every q and output dtype); its
// quality against exact attention on the original K/V; retrieval of one
// planted key among 32K; and a whole decode step (append, barrier,
// attention) under synchronization validation.
#include <cstdio>

#include "decode_attention_support.hpp"

namespace {

using namespace tktest;
using namespace tktest::aura_cache;
using aura::Rotation;

template <class Config>
class DecodeAttentionFormats : public DeviceTest {};

using Formats = ::testing::Types<
    // raw bf16 K and V: the uncompressed baseline
    aura::DecodeAttentionConfig<aura::PagedCacheConfig<128, 16, 16, 16>, DType::bf16, DType::f32>,
    // k8v4, bf16 output
    aura::DecodeAttentionConfig<aura::PagedCacheConfig<128, 16, 8, 4>, DType::bf16, DType::bf16>,
    // k4v3 (3-bit values straddle words), f16 norms, f16 q and output, 32-token pages
    aura::DecodeAttentionConfig<aura::PagedCacheConfig<128, 32, 4, 3, Rotation::hadamard, DType::f16>, DType::f16,
                                DType::f16>,
    // raw K with 4-bit V
    aura::DecodeAttentionConfig<aura::PagedCacheConfig<128, 16, 16, 4>, DType::bf16, DType::f32>,
    // k3v3 with dense rotations at Dim 96
    aura::DecodeAttentionConfig<aura::PagedCacheConfig<96, 16, 3, 3, Rotation::dense>, DType::f32, DType::f32>,
    // k2v6 at Dim 64, 64-token pages
    aura::DecodeAttentionConfig<aura::PagedCacheConfig<64, 64, 2, 6>, DType::bf16, DType::f32>,
    // Dim 256, bf16 output
    aura::DecodeAttentionConfig<aura::PagedCacheConfig<256, 16, 4, 4>, DType::bf16, DType::bf16>,
    // raw f16 at Dim 80
    aura::DecodeAttentionConfig<aura::PagedCacheConfig<80, 16, 16, 16, Rotation::dense, DType::f32, DType::f16>,
                                DType::f32, DType::f32>,
    // k6v4 coded at Dim 80 (dense rotations), 128-token pages, f16 q
    aura::DecodeAttentionConfig<aura::PagedCacheConfig<80, 128, 6, 4, Rotation::dense>, DType::f16, DType::f32>,
    // k4v4 in 256-token pages (the largest)
    aura::DecodeAttentionConfig<aura::PagedCacheConfig<128, 256, 4, 4>, DType::bf16, DType::f32>>;
TYPED_TEST_SUITE(DecodeAttentionFormats, Formats);

TYPED_TEST(DecodeAttentionFormats, MatchesReference) {
  // Two new tokens over sequences around a page edge and a few blocks, with
  // sinks: unsplit, then split through the workspace.
  for (bool split : {false, true}) {
    AttentionCase c;
    c.lens = {17, 700};
    c.q_len = 2;
    c.q_heads = 4;
    c.sinks = true;
    c.workspace = split;
    c.key_mean = 0.3;
    c.seed = 600 + TypeParam::cache::dim + (split ? 1 : 0);
    SCOPED_TRACE(split ? "split" : "unsplit");
    expect_matches<TypeParam>(run_attention<TypeParam>(c));
  }
}

// Quality: attention over the cache against exact attention over the
// original Gaussian K/V (Dim 128, Hadamard), K and V at the same width; the
// cosine of the outputs printed for every width; required: >= 0.99 at 4
// bits, >= 0.999 at 6 and 8, and (about 0.01 below what this seed gives)
// >= 0.95 at 3 and >= 0.85 at 2. The kernel's own error is checked on the way.
template <std::uint32_t Bits>
double quality(double& worst) {
  using Config = aura::DecodeAttentionConfig<aura::PagedCacheConfig<128, 16, Bits, Bits>, DType::bf16, DType::f32>;
  AttentionCase c;
  c.lens = {1024, 1024};
  c.q_heads = 8;
  c.kv_heads = 2;
  c.seed = 700 + Bits;
  const AttentionRun r = run_attention<Config>(c);
  expect_matches<Config>(r);
  const auto exact = ref::decode_attention_dense(r.q, r.k, r.v, r.max_len, r.seq_lens, r.shape, r.options);
  worst = 1;
  for (std::size_t i = 0; i < r.output.size() / 128; ++i) {
    const std::vector<float> got(r.output.begin() + static_cast<std::ptrdiff_t>(i * 128),
                                 r.output.begin() + static_cast<std::ptrdiff_t>((i + 1) * 128));
    worst = std::min(worst, cosine(got, std::vector<double>(exact.output.begin() + static_cast<std::ptrdiff_t>(i * 128),
                                                            exact.output.begin() + static_cast<std::ptrdiff_t>((i + 1) * 128))));
  }
  const double all = cosine(r.output, exact.output);
  std::printf("[aura decode attention] Dim 128, 2 x 1024 keys, K%uV%u: cosine to exact attention %.5f (worst row %.5f)\n",
              Bits, Bits, all, worst);
  return all;
}

class DecodeAttentionQuality : public DeviceTest {};

TEST_F(DecodeAttentionQuality, AgainstExactAttention) {
  double worst = 0;
  EXPECT_GE(quality<4>(worst), 0.99);
  EXPECT_GE(quality<8>(worst), 0.999);
  EXPECT_GE(quality<6>(worst), 0.999);
  EXPECT_GE(quality<3>(worst), 0.95);
  EXPECT_GE(quality<2>(worst), 0.85);
}

// One key aligned with the query (with a typical key's norm) among 32768
// random ones: its value must dominate the output. Queries are 1.5x unit
// Gaussians, so the planted score (~17) stands ~5.5 above the log-sum of the
// others (~11.5).
template <std::uint32_t Bits>
void retrieval() {
  using Config = aura::DecodeAttentionConfig<aura::PagedCacheConfig<128, 16, Bits, Bits>, DType::bf16, DType::f32>;
  constexpr std::size_t keys = 32768, planted = 20000, dim = 128;
  AttentionCase c;
  c.lens = {static_cast<std::int32_t>(keys)};
  c.q_heads = 4;
  c.kv_heads = 1;
  c.q_scale = 1.5f;
  c.reference = false;
  c.seed = 800 + Bits;
  c.edit = [&](std::vector<float>& q, std::vector<float>& k, std::vector<float>&, std::size_t) {
    double qq = 0;
    for (std::size_t d = 0; d < dim; ++d) qq += double(q[d]) * q[d];
    for (std::size_t d = 0; d < dim; ++d)
      k[planted * dim + d] = static_cast<float>(q[d] / std::sqrt(qq) * std::sqrt(double(dim)));
  };
  const AttentionRun r = run_attention<Config>(c);
  const std::vector<double> target(r.v.begin() + planted * dim, r.v.begin() + (planted + 1) * dim);
  const std::vector<float> head0(r.output.begin(), r.output.begin() + dim);
  const double cos = cosine(head0, target);
  std::printf("[aura decode attention] retrieval among %zu keys, K%uV%u: cosine of the output to the planted value %.4f\n",
              keys, Bits, Bits, cos);
  EXPECT_GE(cos, 0.9);
}

TEST_F(DecodeAttentionQuality, RetrievalAmong32KKeys) {
  retrieval<4>();
  retrieval<3>();
}

// A whole decode step recorded in one command buffer on the Context with
// synchronization validation: each sequence's new tokens appended by
// CacheWrite, a barrier, then the attention (with splits its two dispatches
// and the barrier between them), against the reference over the final cache.
TEST_F(DecodeAttentionQuality, WholeDecodeStepUnderSynchronizationValidation) {
  using Config = aura::DecodeAttentionConfig<aura::PagedCacheConfig<128, 16, 4, 4>, DType::bf16, DType::f32>;
  for (std::int64_t q_len : {1, 4}) {
    AttentionCase c;
    c.lens = {40, 333, 7};
    c.q_len = q_len;
    c.step = true;
    c.seed = 900 + static_cast<std::uint64_t>(q_len);
    c.geometry = q_len == 1 ? std::array<std::uint32_t, 4>{64, 1, 1, 3} : std::array<std::uint32_t, 4>{128, 2, 2, 3};
    expect_matches<Config>(run_attention<Config>(c, sync_context()));
  }
}

}  // namespace
