// SPDX-License-Identifier: MIT
// aura::DecodeAttention's tensor-core variants (shaders/aura/decode_attention_tc.glsl,
// staged and lanes) against the double-precision reference, on devices with
// fp16 cooperative matrices (the staged one on any tile the device lists:
// lavapipe's 8x8x8 at subgroups of 8 in CI): lengths around tile and block
// edges, splits, GQA and new tokens up to 128 rows, windows, sinks,
// softcap, empty attention, centred keys, formats.
// The variant takes no calls with lse (f32, budget 1e-5; its scores carry
// fp16 operands' ~1e-4), so these ask for none. Besides the bf16 budget
// (5e-3), f16 outputs are held to 1e-3: the
// variant's own error (fp16 operands) is ~1e-4, and the bf16 budget alone
// would let a wrong weight or a lost rescale through.
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "decode_attention_support.hpp"

namespace {

using namespace tktest;
using namespace tktest::aura_cache;

using K4V4 = aura::PagedCacheConfig<128, 16, 4, 4>;
using Bf16Out = aura::DecodeAttentionConfig<K4V4, DType::bf16, DType::bf16>;
using F16Out = aura::DecodeAttentionConfig<K4V4, DType::f32, DType::f16>;
using Problem = aura::DecodeAttentionProblem;

template <class Config>
void expect_tight(const AttentionRun& r) {
  EXPECT_NE(r.variant.find("tensor_core_fp16"), std::string::npos) << "ran " << r.variant;
  expect_matches<Config>(r);
  if (Config::out_dtype == DType::f16) {
    EXPECT_LE(relative_rms(r.output, r.reference.output), 1e-3) << "f16 output: the variant's own accuracy";
  }
}

// One new token of 16 query heads over one KV head: what the automatic
// choice takes the staged variant for.
template <class Config>
Problem sixteen_rows() {
  Problem p;
  p.q_heads = 16;
  p.kv_heads = 1;
  p.q_len = 1;
  p.dim = Config::cache::dim;
  p.k_bits = Config::cache::k_bits;
  p.v_bits = Config::cache::v_bits;
  p.out_dtype = Config::out_dtype;
  return p;
}

// Whether variant `v` can run on this device, its rule reduced to what the
// variant can do for the staged one (the automatic choice takes it only
// from 16 rows per KV head on, and not on a CPU device).
template <class Config>
Status can_run(const Variant<Problem>& v) {
  Variant<Problem> able = v;
  if (v.name != aura::DecodeAttentionKernel::lanes_name) able.applies = &aura::DecodeAttentionRules::tensor_core_capable;
  return eligibility(context(), able, sixteen_rows<Config>());
}

// The tensor-core variants the device can run (forced in the tests).
template <class Config>
std::vector<const Variant<Problem>*> tensor_cores() {
  std::vector<const Variant<Problem>*> found;
  for (const auto& v : aura::DecodeAttention<Config>::variants)
    if (v.path == Path::tensor_core_fp16 && can_run<Config>(v)) found.push_back(&v);
  return found;
}

// On a CPU device each of the staged variant's pipelines takes minutes to
// compile (decode_attention_types.hpp), so there the tests keep to one:
// f16 outputs of split calls. The output dtype changes only the final
// store, and an unsplit call the finish of decode_attention_finish.glsl,
// which the CUDA-core variants' tests cover.
bool every_pipeline() { return !context().info().is_cpu(); }

class DecodeAttentionTensorCore : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (tensor_cores<Bf16Out>().empty()) {
      std::string why;
      for (const auto& v : aura::DecodeAttentionKernel::variants)
        if (v.path == Path::tensor_core_fp16) why += "; " + std::string(v.name) + ": " + can_run<Bf16Out>(v).message;
      GTEST_SKIP() << "no tensor-core variant runs here" << why;
    }
  }
};

TEST_F(DecodeAttentionTensorCore, LengthsSplitsAndOutputs) {
  for (const Variant<Problem>* tc : tensor_cores<Bf16Out>()) {
    SCOPED_TRACE(std::string(tc->name));
    const std::vector<std::int32_t> lens{1, 15, 16, 17, 63, 64, 65, 1000, 4097};
    std::uint64_t seed = 1100;
    for (std::uint32_t splits : {0u, 1u, 3u, 7u}) {
      if (!every_pipeline() && splits < 3) continue;
      AttentionCase c;
      c.lens = lens;
      c.seed = seed++;
      c.key_mean = 0.5;
      c.forced = tc;
      c.lse = false;
      c.workspace = splits != 1;
      if (splits > 1) c.geometry = {0, 1, 4, splits};
      SCOPED_TRACE("splits " + std::to_string(splits));
      if (every_pipeline()) expect_tight<Bf16Out>(run_attention<Bf16Out>(c));
      c.seed = seed++;
      expect_tight<F16Out>(run_attention<F16Out>(c));
    }
  }
}

TEST_F(DecodeAttentionTensorCore, GroupsAndNewTokens) {
  for (const Variant<Problem>* tc : tensor_cores<Bf16Out>()) {
    SCOPED_TRACE(std::string(tc->name));
    // (q_heads, kv_heads, q_len): 1 to 128 rows of a KV head (1 to 8 chunks of 16).
    const std::int64_t shapes[][3] = {{2, 2, 1}, {8, 2, 1}, {8, 2, 4}, {8, 1, 4}, {8, 2, 16}, {16, 2, 16}};
    std::uint64_t seed = 1200;
    for (const auto& sh : shapes)
      for (bool split : {false, true}) {
        if (!every_pipeline() && !split) continue;
        AttentionCase c = groups_case(sh, seed++, split);
        c.forced = tc;
        c.lse = false;
        if (split) c.geometry = {0, 1, 4, 3};
        SCOPED_TRACE(groups_trace(sh, split));
        expect_tight<F16Out>(run_attention<F16Out>(c));
      }
  }
}

TEST_F(DecodeAttentionTensorCore, WindowSinksSoftcapScaleLargeQueries) {
  for (const Variant<Problem>* tc : tensor_cores<Bf16Out>()) {
    SCOPED_TRACE(std::string(tc->name));
    std::uint64_t seed = 1300;
    for (std::uint32_t window : {1u, 7u, 100u}) {
      AttentionCase c = options_case(window, seed++);
      c.forced = tc;
      c.lse = false;
      c.geometry = {0, 1, 4, 2};
      c.q_scale = window == 100u ? 3e5f : 1.0f;  // beyond fp16's range: the per-row scaling must hold it
      SCOPED_TRACE("window " + std::to_string(window));
      expect_tight<F16Out>(run_attention<F16Out>(c));
    }
  }
}

TEST_F(DecodeAttentionTensorCore, EmptyAttention) {
  for (const Variant<Problem>* tc : tensor_cores<Bf16Out>()) {
    SCOPED_TRACE(std::string(tc->name));
    for (bool sinks : {false, true})
      for (std::uint32_t splits : {1u, 4u}) {
        if (!every_pipeline() && splits == 1) continue;
        AttentionCase c;
        c.lens = {0, 5, 0};
        c.sinks = sinks;
        c.forced = tc;
        c.lse = false;
        c.geometry = {0, 1, 4, splits};
        c.seed = 1400 + splits + (sinks ? 10 : 0);
        const auto r = run_attention<F16Out>(c);
        expect_tight<F16Out>(r);
        const std::size_t per_seq = static_cast<std::size_t>(c.q_len * c.q_heads);
        for (std::size_t i = 0; i < per_seq; ++i) {
          for (std::size_t d = 0; d < 128; ++d) ASSERT_EQ(r.output[i * 128 + d], 0.0f) << "row " << i;
        }
      }
  }
}

// The one-dispatch split (the last workgroup to arrive merges): the output
// of two dispatches (expect_fused_merge_same's bounds), at 4 and 16 rows
// per KV head.
TEST_F(DecodeAttentionTensorCore, FusedMerge) {
  for (const Variant<Problem>* tc : tensor_cores<F16Out>()) {
    SCOPED_TRACE(std::string(tc->name));
    std::uint64_t seed = 1450;
    for (std::int64_t q_len : {1, 4}) {
      AttentionCase c;
      c.lens = {5, 300, 1100};
      c.q_len = q_len;
      c.sinks = true;
      c.forced = tc;
      c.lse = false;
      c.geometry = {0, 1, 4, 7};
      c.seed = seed++;
      SCOPED_TRACE("q_len " + std::to_string(q_len));
      expect_fused_merge_same<F16Out>(c, [](const AttentionRun& r) { expect_tight<F16Out>(r); });
    }
  }
}

TEST_F(DecodeAttentionTensorCore, LongSequence) {
  for (const Variant<Problem>* tc : tensor_cores<Bf16Out>()) {
    SCOPED_TRACE(std::string(tc->name));
    AttentionCase c;
    c.lens = {20000};
    c.kv_heads = 1;
    c.q_heads = 4;
    c.seed = 1500;
    c.forced = tc;
    c.lse = false;
    expect_tight<F16Out>(run_attention<F16Out>(c));
  }
}

// Centred keys (each row's scores gain scale <q, mu>, before the softcap;
// the sinks see the true scores): a window, sinks and softcap, split, 4
// and 16 rows per KV head.
TEST_F(DecodeAttentionTensorCore, CentredKeys) {
  using Out = aura::DecodeAttentionConfig<K4V4::centred, DType::f32, DType::f16>;
  for (const Variant<Problem>* tc : tensor_cores<Out>()) {
    SCOPED_TRACE(std::string(tc->name));
    std::uint64_t seed = 1600;
    for (std::int64_t q_len : {1, 4}) {
      AttentionCase c = options_case(50, seed++);
      c.q_len = q_len;
      c.key_mean = 2.0;
      c.forced = tc;
      c.lse = false;
      c.geometry = {0, 1, 4, 2};
      SCOPED_TRACE("q_len " + std::to_string(q_len));
      expect_tight<Out>(run_attention<Out>(c));
    }
  }
}

template <class Config>
const Variant<Problem>* lanes_variant() {
  for (const Variant<Problem>* v : tensor_cores<Config>())
    if (v->name == aura::DecodeAttentionKernel::lanes_name) return v;
  return nullptr;
}

// The lanes variant at Dim 64 (one word of V codes per lane and key, two of
// K), pages of 32, around tile edges, with and without splits.
TEST_F(DecodeAttentionTensorCore, LanesDim64) {
  using K4V4d64 = aura::PagedCacheConfig<64, 32, 4, 4>;
  using Out = aura::DecodeAttentionConfig<K4V4d64, DType::f32, DType::f16>;
  const Variant<Problem>* lanes = lanes_variant<Out>();
  if (!lanes) GTEST_SKIP() << "no lanes variant on this device";
  std::uint64_t seed = 1700;
  for (std::uint32_t splits : {1u, 5u}) {
    AttentionCase c;
    c.lens = {4, 16, 17, 47, 300};
    c.q_len = 4;
    c.seed = seed++;
    c.key_mean = 0.5;
    c.forced = lanes;
    c.lse = false;
    c.workspace = splits > 1;
    c.geometry = {128, 1, 4, splits};
    SCOPED_TRACE("splits " + std::to_string(splits));
    expect_tight<Out>(run_attention<Out>(c));
  }
}

// The lanes variant's states merged by the second dispatch: 16 rows at Dim
// 128 (4 row quads per state, 20 splits) and 8 rows at Dim 256 in pairs
// (2 quads, 40 splits), with splits that saw no keys (the short sequence).
TEST_F(DecodeAttentionTensorCore, LanesManySplitsMerged) {
  const auto run = [](auto cache_tag, std::uint32_t row_vecs, std::uint32_t splits, std::uint64_t seed) {
    using Out = aura::DecodeAttentionConfig<typename decltype(cache_tag)::type, DType::f32, DType::f16>;
    const Variant<Problem>* lanes = lanes_variant<Out>();
    ASSERT_NE(lanes, nullptr);
    AttentionCase c;
    c.lens = {3000, 100};
    c.q_len = row_vecs;  // GQA 4: 4 * q_len rows
    c.seed = seed;
    c.forced = lanes;
    c.lse = false;
    c.geometry = {256, 1, row_vecs, splits};
    SCOPED_TRACE("row vecs " + std::to_string(row_vecs) + ", splits " + std::to_string(splits));
    expect_tight<Out>(run_attention<Out>(c));
  };
  if (!lanes_variant<Bf16Out>()) GTEST_SKIP() << "no lanes variant on this device";
  run(std::type_identity<aura::PagedCacheConfig<128, 16, 4, 4>>{}, 4, 20, 1950);
  run(std::type_identity<aura::PagedCacheConfig<256, 16, 4, 4>>{}, 2, 40, 1960);
}

// The lanes variant at every coded width: one table for both sides or one
// each (K's in the scratch), pairs of codes per lookup up to 4 bits and
// single codes at 6 and 8, shares that start inside a word (3 bits; at Dim
// 64 also V at 2 and 6 bits), dense rotations and f16 norms once, around
// tile edges, 4, 8 and 16 rows per KV head (row chunks of 4, 8 and 16; at
// Dim 256, whose subgroups work in pairs, chunks of at most 8), with and
// without splits.
template <class Cache>
void expect_lanes_format(const char* name, std::uint64_t seed) {
  const std::uint32_t max_chunk = aura::decode_attention_lanes_pairs(Cache::dim) ? 2 : 4;  // row_vecs
  SCOPED_TRACE(name);
  using Out = aura::DecodeAttentionConfig<Cache, DType::f32, DType::f16>;
  const Variant<Problem>* lanes = lanes_variant<Out>();
  ASSERT_NE(lanes, nullptr) << "the lanes variant takes every coded width";
  for (std::int64_t q_len : {1, 2, 4})
    for (std::uint32_t splits : {1u, 3u}) {
      AttentionCase c;
      c.lens = {4, 16, 17, 300, 1100};
      c.q_len = q_len;
      c.seed = seed++;
      c.key_mean = 0.5;
      c.forced = lanes;
      c.lse = false;
      c.workspace = splits > 1;
      c.geometry = {256, 1, std::min(static_cast<std::uint32_t>(q_len), max_chunk), splits};  // GQA 4: 4 * q_len rows
      SCOPED_TRACE("q_len " + std::to_string(q_len) + ", splits " + std::to_string(splits));
      expect_tight<Out>(run_attention<Out>(c));
    }
}

TEST_F(DecodeAttentionTensorCore, LanesWidths) {
  if (!lanes_variant<Bf16Out>()) GTEST_SKIP() << "no lanes variant on this device";
  expect_lanes_format<aura::PagedCacheConfig<128, 16, 8, 4>>("k8v4", 1800);
  expect_lanes_format<aura::PagedCacheConfig<128, 16, 4, 8>>("k4v8", 1810);
  expect_lanes_format<aura::PagedCacheConfig<128, 16, 8, 8>>("k8v8", 1820);
  expect_lanes_format<aura::PagedCacheConfig<128, 16, 4, 3>>("k4v3", 1830);
  expect_lanes_format<aura::PagedCacheConfig<128, 16, 3, 3>>("k3v3", 1840);
  expect_lanes_format<aura::PagedCacheConfig<128, 16, 2, 2>>("k2v2", 1850);
  expect_lanes_format<aura::PagedCacheConfig<128, 16, 6, 6>>("k6v6", 1860);
  expect_lanes_format<aura::PagedCacheConfig<128, 16, 3, 6, aura::Rotation::dense, DType::f16>>(
      "k3v6, dense rotations, f16 norms", 1870);
  expect_lanes_format<aura::PagedCacheConfig<64, 32, 3, 3>>("k3v3, Dim 64, pages of 32", 1880);
  expect_lanes_format<aura::PagedCacheConfig<64, 32, 8, 2>>("k8v2, Dim 64, pages of 32", 1890);
  expect_lanes_format<aura::PagedCacheConfig<64, 32, 2, 6>>("k2v6, Dim 64, pages of 32", 1900);
  expect_lanes_format<aura::PagedCacheConfig<256, 16, 4, 4>>("k4v4, Dim 256", 1910);
  expect_lanes_format<aura::PagedCacheConfig<256, 16, 8, 4>>("k8v4, Dim 256", 1920);
  expect_lanes_format<aura::PagedCacheConfig<256, 32, 3, 6, aura::Rotation::dense, DType::f16>>(
      "k3v6, Dim 256, dense rotations, f16 norms, pages of 32", 1930);
}

}  // namespace
