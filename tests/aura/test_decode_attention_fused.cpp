// SPDX-License-Identifier: MIT
// aura::DecodeAttention's one-dispatch split (Geometry::fused_merge): each
// group's last workgroup to arrive at its counter (Args::arrivals) merges
// the split states. On the CUDA-core variants (forced here: a CPU device's
// plan keeps two dispatches): the reference, the two-dispatch result
// (lse to an ulp, the output to an ulp plus the bound on summing the
// states in the teams' order: expect_fused_merge_same), the counters
// left at the tag by every call, counters that were never initialised or
// were overwritten (every row NaN, never a hang or a silent result), and
// the checks before recording. The tensor-core variants' fused merge is
// in test_decode_attention_tc.cpp.
#include <cmath>
#include <cstring>
#include <string>

#include "decode_attention_support.hpp"

namespace {

using namespace tktest;
using namespace tktest::aura_cache;

using K4V4 = aura::PagedCacheConfig<128, 16, 4, 4>;
using Bf16 = aura::DecodeAttentionConfig<K4V4, DType::bf16, DType::bf16>;
using F32 = aura::DecodeAttentionConfig<K4V4, DType::bf16, DType::f32>;
using K3V2Dense =
    aura::DecodeAttentionConfig<aura::PagedCacheConfig<96, 32, 3, 2, aura::Rotation::dense>, DType::f32, DType::f32>;
using RawBf16 = aura::DecodeAttentionConfig<aura::PagedCacheConfig<64, 16, 16, 16>, DType::bf16, DType::bf16>;

class DecodeAttentionFusedMerge : public DeviceTest {};

template <class Config>
void expect_same_as_two_dispatches(const AttentionCase& c) {
  expect_fused_merge_same<Config>(c, [](const AttentionRun& r) { expect_matches<Config>(r); });
}

TEST_F(DecodeAttentionFusedMerge, SplitsGroupsAndVariants) {
  // (variant, workgroup, keys per invocation, row vecs, splits): 2 to the
  // most splits (128: more than keys, so most states are empty), 1 and 2
  // row quads, on both CUDA-core paths.
  const std::array<std::uint32_t, 5> runs[] = {{0, 64, 1, 1, 2},    {0, 128, 2, 2, 5},  {1, 64, 4, 2, 3},
                                               {0, 128, 1, 1, 128}, {1, 128, 1, 2, 17}, {0, 256, 1, 1, 6},
                                               {1, 256, 2, 2, 3}};
  std::uint64_t seed = 3000;
  for (const auto& run : runs) {
    AttentionCase c;
    c.lens = {2, 16, 17, 700, 2049};
    c.q_heads = 8;
    c.kv_heads = 2;
    c.q_len = run[3] == 2 ? 2 : 1;
    c.variant = static_cast<int>(run[0]);
    c.geometry = {run[1], run[2], run[3], run[4]};
    c.seed = seed++;
    SCOPED_TRACE("variant " + std::to_string(run[0]) + " workgroup " + std::to_string(run[1]) + " row vecs " +
                 std::to_string(run[3]) + " splits " + std::to_string(run[4]));
    expect_same_as_two_dispatches<F32>(c);
  }
}

TEST_F(DecodeAttentionFusedMerge, WindowSinksSoftcapScale) {
  std::uint64_t seed = 3100;
  for (std::uint32_t window : {0u, 7u, 100u}) {
    AttentionCase c = options_case(window, seed++);
    c.geometry = {0, 0, 0, 6};
    SCOPED_TRACE("window " + std::to_string(window));
    expect_same_as_two_dispatches<F32>(c);
  }
}

TEST_F(DecodeAttentionFusedMerge, Formats) {
  // Dense rotations (V's undone by R^T in the merging workgroup), raw
  // values, 16-bit outputs, empty sequences.
  AttentionCase c;
  c.lens = {0, 90, 200};
  c.q_len = 4;
  c.geometry = {0, 0, 0, 4};
  c.sinks = true;
  c.seed = 3200;
  {
    SCOPED_TRACE("K3V2 dense, Dim 96");
    expect_same_as_two_dispatches<K3V2Dense>(c);
  }
  c.lse = false;
  {
    SCOPED_TRACE("raw bf16, Dim 64");
    expect_same_as_two_dispatches<RawBf16>(c);
  }
  {
    SCOPED_TRACE("K4V4, bf16 output");
    expect_same_as_two_dispatches<Bf16>(c);
  }
}

// Counters that do not hold the tag (never initialised, or overwritten by
// other work): every row of every group is NaN, in both calls, and nothing
// outside the output is written.
TEST_F(DecodeAttentionFusedMerge, CountersWithoutTheTagGiveNaN) {
  for (const std::uint32_t fill : {0u, 0xffffffffu, aura::DecodeAttentionKernel::arrival_tag + 3u}) {
    SCOPED_TRACE("counters filled with " + std::to_string(fill));
    AttentionCase c;
    c.lens = {40, 300};
    c.geometry = {0, 0, 0, 3};
    c.fused_merge = 1;
    c.arrivals_fill = fill;
    c.reference = false;
    c.seed = 3300;
    const AttentionRun r = run_attention<F32>(c);
    std::size_t finite = 0;
    for (const float x : r.output) finite += std::isfinite(x) ? 1 : 0;
    for (const float x : r.lse) finite += std::isfinite(x) ? 1 : 0;
    EXPECT_EQ(finite, 0u) << "rows written from counters that were not a call's";
  }
}

TEST_F(DecodeAttentionFusedMerge, Errors) {
  Context& ctx = context();
  using Kernel = aura::DecodeAttention<F32>;
  Kernel kernel(ctx, {.max_num_seqs = 2, .max_q_len = 1, .q_heads = 8, .kv_heads = 2, .lse = false});
  const Tensor tables = aura::CacheTables::make(ctx, K4V4::format, 1, 2);
  Tensor q(ctx, DType::bf16, {2, 1, 8, 128}), k(ctx, DType::u32, {6, 2, 16, 16}), kn(ctx, DType::f32, {6, 2, 16});
  Tensor v(ctx, DType::u32, {6, 2, 16, 16}), vn(ctx, DType::f32, {6, 2, 16});
  Tensor table(ctx, DType::i32, {2, 3}), lens(ctx, DType::i32, {2}), out(ctx, DType::f32, {2, 1, 8, 128});
  Tensor few(ctx, DType::u32, {3}), enough(ctx, DType::u32, {4}), wrong(ctx, DType::i32, {4}),
      square(ctx, DType::u32, {4, 4}), eight(ctx, DType::u32, {8});
  Kernel::Args ok{q, k, kn.ref(), v, vn.ref(), table, lens, tables, out};
  EXPECT_EQ(Kernel::arrival_slots(kernel.problem(ok)), 4) << "2 sequences x 2 KV heads x 1 row chunk";
  Kernel::Args a = ok;
  a.arrivals = few.ref();
  expect_check_error(kernel, a, ErrorCode::shape_mismatch,
                     "arrivals: expected at least 4 counters in one dimension, got shape [3]");
  a.arrivals = square.ref();
  expect_check_error(kernel, a, ErrorCode::shape_mismatch,
                     "arrivals: expected at least 4 counters in one dimension, got shape [4, 4]");
  a.arrivals = wrong.ref();
  expect_check_error(kernel, a, ErrorCode::dtype_mismatch, "arrivals: expected dtype u32, got i32");
  TensorRef strided = eight.ref();  // every other word
  strided.shape = {4};
  strided.strides = {2};
  a.arrivals = strided;
  expect_check_error(kernel, a, ErrorCode::invalid_argument, "arrivals: must be dense");
  a.arrivals = enough.ref();
  EXPECT_TRUE(kernel.can_implement(a)) << kernel.can_implement(a).message;
  // fused_merge by hand needs the counters and a split.
  auto plan = kernel.plan(kernel.problem(ok), 0);
  plan.geometry.fused_merge = true;
  const auto expect_plan_error = [&](const Kernel::Args& args, const Kernel::Plan& p) {
    try {
      kernel.check(args, p);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("fused_merge needs splits > 1 and the arrival counters"), std::string::npos)
          << e.what();
    }
  };
  expect_plan_error(a, plan);  // one split
  Tensor ws(ctx, DType::u32, {1 << 16});
  a.workspace = Workspace{ws.ref()};
  plan.geometry.splits = 2;
  a.arrivals.reset();
  expect_plan_error(a, plan);
  a.arrivals = enough.ref();
  EXPECT_NO_THROW(kernel.check(a, plan));
}

}  // namespace
