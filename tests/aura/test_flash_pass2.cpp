// SPDX-License-Identifier: MIT
// aura::FlashPass2 against the double-precision reference.
#include <tilekernels/aura/flash_pass2.hpp>
#include <tilekernels/reference/aura/flash_pass2.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include "../support.hpp"

namespace {

using namespace tktest;
namespace aura = tilekernels::aura;

// Partials as pass 1 would leave them: per block a max m, a positive sum l
// and o = l * (a value vector), with a fraction of empty blocks (l = 0, m
// -inf, o garbage that must be ignored) and, for `spread`, maxima over +-80
// so that the max-shift decides which blocks count.
struct Partials {
  std::vector<float> o, m, l;
};

Partials make_partials(Rng& rng, std::size_t q, std::size_t nb, std::size_t dim, double empty_fraction,
                       bool wide_spread) {
  Partials p{std::vector<float>(q * nb * dim), std::vector<float>(q * nb), std::vector<float>(q * nb)};
  for (std::size_t i = 0; i < q * nb; ++i) {
    const bool head_wide = wide_spread && (i / nb) % 2 == 0;
    p.m[i] = head_wide ? rng.uniform(-80.0f, 80.0f) : rng.uniform(-2.0f, 2.0f);
    p.l[i] = rng.uniform(0.25f, 8.0f);
    for (std::size_t d = 0; d < dim; ++d) p.o[i * dim + d] = p.l[i] * rng.normal();
    if (rng.uniform() < empty_fraction) {
      p.l[i] = 0.0f;
      p.m[i] = rng.uniform() < 0.5 ? -std::numeric_limits<float>::infinity() : rng.uniform(-80.0f, 80.0f);
      // Garbage that must not leak: huge values, and in some blocks NaN and
      // infinities (0 * inf is NaN, so a weight of 0 alone would not do).
      const bool non_finite = rng.uniform() < 0.5;
      for (std::size_t d = 0; d < dim; ++d)
        p.o[i * dim + d] = non_finite ? (d % 3 == 0   ? std::numeric_limits<float>::quiet_NaN()
                                         : d % 3 == 1 ? std::numeric_limits<float>::infinity()
                                                      : -std::numeric_limits<float>::infinity())
                                      : 1e30f * rng.normal();
    }
  }
  return p;
}

double budget(DType out) { return out == DType::f32 ? 1e-5 : 5e-3; }

template <class Config>
class FlashPass2Test : public DeviceTest {
 protected:
  using Kernel = aura::FlashPass2<Config>;
  using Geometry = typename Kernel::Geometry;

  // Runs the kernel twice on the same inputs, with the automatic geometry
  // or `geometry`, and checks output and lse against the reference. A
  // geometry with splits gets a workspace of NaN words between sentinels:
  // the first run zero-fills its counters, the second declares them zero
  // (the first run must have left them so).
  void check_case(std::size_t q, std::size_t nb, double empty_fraction, bool wide, std::uint64_t seed,
                  const std::vector<std::size_t>& all_empty_heads = {}, std::optional<Geometry> geometry = {}) {
    SCOPED_TRACE("q_heads=" + std::to_string(q) + " num_blocks=" + std::to_string(nb) + " seed=" + std::to_string(seed));
    Context& ctx = context();
    Rng rng(seed);
    auto p = make_partials(rng, q, nb, Config::dim, empty_fraction, wide);
    for (auto h : all_empty_heads)
      for (std::size_t b = 0; b < nb; ++b) p.l[h * nb + b] = 0.0f;
    const DType pd = Config::partial_dtype;
    p.o = rounded(pd, p.o);
    p.m = rounded(pd, p.m);
    p.l = rounded(pd, p.l);
    const auto S = [](auto... d) { return Shape{static_cast<std::int64_t>(d)...}; };
    auto o = Tensor::from_floats(ctx, pd, S(q, nb, Config::dim), p.o);
    auto m = Tensor::from_floats(ctx, pd, S(q, nb), p.m);
    auto l = Tensor::from_floats(ctx, pd, S(q, nb), p.l);
    GuardedTensor out(ctx, Config::out_dtype, S(q, Config::dim));
    GuardedTensor lse(ctx, DType::f32, S(q));

    Kernel kernel(ctx);
    typename Kernel::Args args{o, m, l, out, lse.ref(), {}};
    const typename Kernel::Problem problem{static_cast<std::int64_t>(q), static_cast<std::int64_t>(nb)};
    const std::uint64_t ws_bytes = geometry ? Kernel::workspace_bytes(problem.q_heads, *geometry) : kernel.workspace_bytes(problem);
    std::optional<GuardedTensor> ws;
    if (ws_bytes) {
      ws.emplace(ctx, DType::u32, S(ws_bytes / 4));
      args.workspace = Workspace{ws->ref()};
    }
    auto plan = kernel.plan(problem, ws_bytes);
    if (geometry) {
      plan.geometry = *geometry;
      kernel.prepare(plan);
    }
    const auto run = [&] { ctx.submit_and_wait([&](vk::CommandBuffer cmd) { kernel.record(cmd, args, plan); }); };
    run();
    const auto got = out.read_floats();
    const auto got_lse = lse.read_floats();

    const auto ref = reference::aura::flash_pass2(p.o, p.m, p.l, q, nb, Config::dim);
    const double err = relative_rms(got, ref.output);
    EXPECT_LE(err, budget(Config::out_dtype)) << "output relative RMS error";
    EXPECT_LE(relative_rms(got_lse, ref.lse), 1e-5) << "lse relative RMS error";
    for (auto h : all_empty_heads) {
      EXPECT_EQ(got_lse[h], -std::numeric_limits<float>::infinity()) << "head " << h;
      for (std::size_t d = 0; d < Config::dim; ++d) ASSERT_EQ(got[h * Config::dim + d], 0.0f) << "head " << h;
    }

    // A second run must reproduce the first bit for bit.
    out.poison();
    lse.poison();
    if (ws) args.workspace->zeroed = true;
    run();
    EXPECT_EQ(0, std::memcmp(got.data(), out.read_floats().data(), got.size() * sizeof(float))) << "output moved";
    EXPECT_EQ(0, std::memcmp(got_lse.data(), lse.read_floats().data(), got_lse.size() * 4)) << "lse moved";
    if (ws) {
      EXPECT_TRUE(ws->guards_intact()) << "the kernel wrote outside its workspace";
    }
  }
};

using Configs = ::testing::Types<
    aura::FlashPass2Config<64>, aura::FlashPass2Config<80>, aura::FlashPass2Config<96>, aura::FlashPass2Config<128>,
    aura::FlashPass2Config<256>, aura::FlashPass2Config<512>,
    aura::FlashPass2Config<128, DType::f32, DType::f32>, aura::FlashPass2Config<128, DType::f32, DType::f16>,
    aura::FlashPass2Config<128, DType::f16, DType::bf16>, aura::FlashPass2Config<128, DType::f16, DType::f16>,
    aura::FlashPass2Config<128, DType::f16, DType::f32>, aura::FlashPass2Config<128, DType::bf16, DType::bf16>,
    aura::FlashPass2Config<128, DType::bf16, DType::f16>, aura::FlashPass2Config<128, DType::bf16, DType::f32>,
    aura::FlashPass2Config<80, DType::bf16, DType::f32>, aura::FlashPass2Config<512, DType::f16, DType::f16>,
    aura::FlashPass2Config<96, DType::f32, DType::f32, 3>, aura::FlashPass2Config<4, DType::f32, DType::f32>,
    aura::FlashPass2Config<1024, DType::bf16, DType::bf16>>;
TYPED_TEST_SUITE(FlashPass2Test, Configs);

TYPED_TEST(FlashPass2Test, MatchesReferenceAcrossBlockCounts) {
  std::uint64_t seed = 1000 + TypeParam::dim;
  for (std::size_t nb : {1, 2, 7, 64, 133, 1024}) {
    const std::size_t q = TypeParam::dim >= 512 ? 2 : 3;
    this->check_case(q, nb, 0.2, true, seed++);
  }
}

TYPED_TEST(FlashPass2Test, EmptyBlocksAndEmptyHeads) {
  // Head 1 has only empty blocks; most other blocks are empty too.
  this->check_case(4, 9, 0.7, true, 77, {1});
  // Every head empty: zeros and -inf everywhere.
  this->check_case(2, 5, 0.0, false, 78, {0, 1});
}

TYPED_TEST(FlashPass2Test, HeadsSplitOverWorkgroups) {
  // Splits share a workspace and a per-head counter that each dispatch must
  // leave at zero: the second run inside check_case declares it zero.
  for (std::uint32_t splits : {2u, 5u})
    for (std::size_t nb : {7, 133}) {
      typename TestFixture::Geometry g;
      g.splits = splits;
      this->check_case(3, nb, 0.3, true, 900 + splits * nb, {1}, g);
    }
}

TYPED_TEST(FlashPass2Test, HeadsSlicedOverWorkgroups) {
  // Output dimensions cut into independent slices, alone and with splits
  // (workspace states and counters per head slice), down to one vec4 slot
  // per workgroup lane group.
  std::uint64_t seed = 5000 + TypeParam::dim;
  for (std::uint32_t slices : {2u, 4u, TypeParam::chunks}) {
    if (slices < 2 || TypeParam::chunks % slices) continue;
    for (std::uint32_t splits : {1u, 3u})
      for (std::size_t nb : {7, 133}) {
        typename TestFixture::Geometry g;
        g.splits = splits;
        g.slices = slices;
        this->check_case(3, nb, 0.3, true, seed++, {1}, g);
      }
  }
}

TYPED_TEST(FlashPass2Test, ExplicitGeometries) {
  // Lane groups and blocks in flight chosen by hand, including a single
  // group replaying every block and batches larger than the block count.
  // Each with and without the next batch's loads in flight.
  const std::uint32_t geometries[][2] = {{1, 16}, {2, 16}, {4, 1}, {1, 3}};
  std::uint64_t seed = 4000 + TypeParam::dim;
  for (const auto& shape : geometries)
    for (bool prefetch : {false, true})
      for (std::size_t nb : {5, 133}) {
        typename TestFixture::Geometry g;
        g.lane_groups = shape[0];
        g.unroll = shape[1];
        g.prefetch = prefetch;
        this->check_case(3, nb, 0.3, true, seed++, {1}, g);
      }
}

class FlashPass2Errors : public DeviceTest {};

TEST_F(FlashPass2Errors, NamesTheBadTensor) {
  Context& ctx = context();
  using Config = aura::FlashPass2Config<64>;
  aura::FlashPass2<Config> kernel(ctx);
  Tensor o(ctx, DType::f32, {3, 5, 64}), m(ctx, DType::f32, {3, 5}), l(ctx, DType::f32, {3, 5});
  Tensor out(ctx, DType::bf16, {3, 64}), lse(ctx, DType::f32, {3});
  Tensor wrong_dtype(ctx, DType::f16, {3, 5}), wrong_shape(ctx, DType::f32, {3, 4});
  Tensor wrong_dim(ctx, DType::f32, {3, 5, 32}), out_f32(ctx, DType::f32, {3, 64});
  const auto expect_error = [&](const aura::FlashPass2<Config>::Args& args, ErrorCode code, const std::string& needle) {
    expect_check_error(kernel, args, code, needle);
  };
  expect_error({o, wrong_dtype, l, out, {}, {}}, ErrorCode::dtype_mismatch, "m_partials: expected dtype f32, got f16");
  expect_error({o, m, wrong_shape, out, {}, {}}, ErrorCode::shape_mismatch, "l_partials: expected shape [3, 5], got [3, 4]");
  expect_error({wrong_dim, m, l, out, {}, {}}, ErrorCode::shape_mismatch, "o_partials: expected shape [3, 5, 64]");
  expect_error({o, m, l, out_f32, {}, {}}, ErrorCode::dtype_mismatch, "output: expected dtype bf16, got f32");
  expect_error({o, m, l, out, wrong_shape.ref(), {}}, ErrorCode::shape_mismatch, "lse: expected shape [3]");
  TensorRef small = out.ref();
  small.size = 100;
  expect_error({o, m, l, small, {}, {}}, ErrorCode::buffer_too_small, "output: shape [3, 64] of bf16 needs 384 bytes");
  TensorRef no_blocks = o.ref();
  no_blocks.shape = {3, 0, 64};
  expect_error({no_blocks, m, l, out, {}, {}}, ErrorCode::shape_mismatch, "o_partials: every dimension must be > 0");
  TensorRef null_buffer = m.ref();
  null_buffer.buffer = nullptr;
  expect_error({o, null_buffer, l, out, {}, {}}, ErrorCode::invalid_argument, "m_partials: no buffer given");

  // Geometries changed by hand are checked before recording.
  using Kernel = aura::FlashPass2<Config>;
  const Kernel::Args args{o, m, l, out, {}, {}};
  const auto expect_geometry_error = [&](auto change, const std::string& needle) {
    auto plan = kernel.plan(kernel.problem(args), 0);
    change(plan.geometry);
    try {
      kernel.check(args, plan);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_geometry_error([](Kernel::Geometry& g) { g.unroll = 17; }, "unroll must be in [1, 16]");
  expect_geometry_error([](Kernel::Geometry& g) { g.lane_groups = 3; }, "lane_groups must be a power of two");
  expect_geometry_error([](Kernel::Geometry& g) { g.splits = 257; }, "splits must be in [1, 256]");
  expect_geometry_error([](Kernel::Geometry& g) { g.slices = 3; }, "slices must divide Dim / 4 = 16");
  expect_geometry_error([](Kernel::Geometry& g) { g.splits = 2; }, "workspace: splits need one");
  EXPECT_TRUE(kernel.can_implement(args));
  const Status bad = kernel.can_implement({o, wrong_dtype, l, out, {}, {}});
  EXPECT_FALSE(bad);
  EXPECT_EQ(bad.code, ErrorCode::dtype_mismatch);
  EXPECT_NE(bad.message.find("m_partials"), std::string::npos) << bad.message;
}

// More query heads than one dispatch may have workgroups: the dispatcher
// splits the grid. A Context that caps dispatches at 7 workgroups exercises
// the split on any device.
TEST(FlashPass2Split, GridLargerThanOneDispatch) {
  ContextOptions options;
  options.max_groups_per_dispatch = 7;
  options.validation = false;
  Context ctx(options);
  using Config = aura::FlashPass2Config<64, DType::f32, DType::f32>;
  const std::size_t q = 53, nb = 3;
  Rng rng(5);
  auto p = make_partials(rng, q, nb, 64, 0.1, true);
  auto o = Tensor::from_floats(ctx, DType::f32, {53, 3, 64}, p.o);
  auto m = Tensor::from_floats(ctx, DType::f32, {53, 3}, p.m);
  auto l = Tensor::from_floats(ctx, DType::f32, {53, 3}, p.l);
  GuardedTensor out(ctx, DType::f32, {53, 64});
  aura::FlashPass2<Config>(ctx).run({o, m, l, out, {}, {}});
  const auto ref = reference::aura::flash_pass2(p.o, p.m, p.l, q, nb, 64);
  EXPECT_LE(relative_rms(out.read_floats(), ref.output), 1e-5);
}

// One workspace sized for the most blocks and zeroed once serves calls with
// fewer blocks (other split counts) in any order, each with zeroed = true.
TEST(FlashPass2Split, OneWorkspaceAcrossBlockCounts) {
  using Kernel = aura::FlashPass2<aura::FlashPass2Config<128, DType::f32, DType::f32>>;
  Context& ctx = context();
  constexpr std::int64_t q = 4, most = 4096;
  Kernel kernel(ctx);
  const std::uint64_t bytes = kernel.workspace_bytes({q, most});
  ASSERT_GT(bytes, 0u);
  GuardedTensor ws(ctx, DType::u32, {static_cast<std::int64_t>(bytes / 4)});
  ws.zero();  // zeroed once, as an engine does
  Rng rng(700);
  std::set<std::uint32_t> splits_seen;
  for (const std::int64_t nb : {most, std::int64_t{512}, std::int64_t{1536}, std::int64_t{700}, most, std::int64_t{8}}) {
    SCOPED_TRACE("num_blocks " + std::to_string(nb));
    const auto p = make_partials(rng, q, static_cast<std::size_t>(nb), 128, 0.1, true);
    const auto o = Tensor::from_floats(ctx, DType::f32, {q, nb, 128}, p.o);
    const auto m = Tensor::from_floats(ctx, DType::f32, {q, nb}, p.m);
    const auto l = Tensor::from_floats(ctx, DType::f32, {q, nb}, p.l);
    GuardedTensor out(ctx, DType::f32, {q, 128});
    Kernel::Args args{o, m, l, out, {}, Workspace{ws.ref(), true}};
    const auto plan = kernel.plan(kernel.problem(args), bytes);
    EXPECT_EQ(plan.geometry.splits, kernel.geometry({q, nb}, true).splits)
        << "the workspace was too small for the fastest plan";
    splits_seen.insert(plan.geometry.splits);
    ctx.submit_and_wait([&](vk::CommandBuffer cmd) { kernel.record(cmd, args, plan); });
    const auto ref = reference::aura::flash_pass2(p.o, p.m, p.l, static_cast<std::size_t>(q), static_cast<std::size_t>(nb), 128);
    EXPECT_LE(relative_rms(out.read_floats(), ref.output), 1e-5);
    EXPECT_TRUE(ws.guards_intact()) << "the kernel wrote outside its workspace";
  }
  EXPECT_GE(splits_seen.size(), 3u) << "the block counts should differ in their split counts";
}

}  // namespace
