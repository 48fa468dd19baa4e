// SPDX-License-Identifier: MIT
// aura::FaReduceHadamard against the double-precision reference, and the
// reference's own rotation identities.
#include <tilekernels/aura/fa_reduce_hadamard.hpp>
#include <tilekernels/reference/aura/fa_reduce_hadamard.hpp>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "../support.hpp"

namespace {

using namespace tktest;
namespace aura = tilekernels::aura;
namespace ref = tilekernels::reference::aura;

// Split-K partials as an attention pass 1 leaves them: per block a max m
// (spread over +-60 on odd rows so the max shift matters), a sum l > 0 and
// o = l * (a value vector). A fraction of blocks is empty: l = 0, m -inf or
// arbitrary, o huge garbage that must not leak into the output.
struct Partials {
  std::vector<float> o, m, l;
};

Partials random_partials(Rng& rng, std::size_t rows, std::size_t nwg, std::size_t dim, double empty_fraction) {
  Partials p{std::vector<float>(rows * nwg * dim), std::vector<float>(rows * nwg), std::vector<float>(rows * nwg)};
  for (std::size_t i = 0; i < rows * nwg; ++i) {
    const bool wide = (i / nwg) % 2 == 1;
    p.m[i] = wide ? rng.uniform(-60.0f, 60.0f) : rng.uniform(-3.0f, 3.0f);
    p.l[i] = rng.uniform(0.5f, 16.0f);
    for (std::size_t d = 0; d < dim; ++d) p.o[i * dim + d] = p.l[i] * rng.normal();
    if (rng.uniform() < empty_fraction) {
      p.l[i] = 0.0f;
      p.m[i] = rng.uniform() < 0.5 ? -std::numeric_limits<float>::infinity() : rng.uniform(-60.0f, 90.0f);
      for (std::size_t d = 0; d < dim; ++d) p.o[i * dim + d] = 1e30f * rng.normal();
    }
  }
  return p;
}

std::vector<float> random_signs(Rng& rng, std::size_t dim) {
  std::vector<float> s(dim);
  for (auto& v : s) v = (rng.next() & 1) ? 1.0f : -1.0f;
  return s;
}

double budget(DType out) { return out == DType::f32 ? 1e-5 : 5e-3; }

Shape S(std::size_t a) { return {static_cast<std::int64_t>(a)}; }
Shape S(std::size_t a, std::size_t b) { return {static_cast<std::int64_t>(a), static_cast<std::int64_t>(b)}; }
Shape S(std::size_t a, std::size_t b, std::size_t c) {
  return {static_cast<std::int64_t>(a), static_cast<std::int64_t>(b), static_cast<std::int64_t>(c)};
}

// A forced geometry: lane groups and rows per workgroup (0: automatic).
struct Forced {
  std::uint32_t lane_groups = 0, rows_per_workgroup = 0;
};

// Runs every variant of the kernel this device has twice on one input set
// and checks it against the reference; `empty_rows` get only empty blocks
// and must come out as zeros.
template <class Config>
void check_case(Context& ctx, std::size_t rows, std::size_t nwg, double empty_fraction, std::uint64_t seed,
                const std::vector<std::size_t>& empty_rows = {}, Forced forced = {}) {
  using Kernel = aura::FaReduceHadamard<Config>;
  constexpr std::size_t dim = Config::head_dim;
  SCOPED_TRACE("head_dim=" + std::to_string(dim) + " rows=" + std::to_string(rows) + " nwg=" + std::to_string(nwg) +
               " seed=" + std::to_string(seed));
  Rng rng(seed);
  auto p = random_partials(rng, rows, nwg, dim, empty_fraction);
  for (auto r : empty_rows)
    for (std::size_t b = 0; b < nwg; ++b) p.l[r * nwg + b] = 0.0f;
  const auto signs = random_signs(rng, dim);
  const DType pd = Config::partial_dtype;
  p.o = rounded(pd, p.o);
  p.m = rounded(pd, p.m);
  p.l = rounded(pd, p.l);
  auto o = Tensor::from_floats(ctx, pd, S(rows, nwg, dim), p.o);
  auto m = Tensor::from_floats(ctx, pd, S(rows, nwg), p.m);
  auto l = Tensor::from_floats(ctx, pd, S(rows, nwg), p.l);
  auto s = Tensor::from_floats(ctx, DType::f32, S(dim), signs);
  GuardedTensor out(ctx, Config::out_dtype, S(rows, dim));
  const auto expect = ref::fa_reduce_hadamard(p.o, p.m, p.l, signs, rows, nwg, dim);

  Kernel kernel(ctx);
  const typename Kernel::Args args{o, m, l, s, out};
  auto plan = kernel.plan(args);
  if (forced.lane_groups) {
    plan.geometry.groups = forced.lane_groups;
    plan.geometry.blocks_per_group = std::bit_ceil((static_cast<std::uint32_t>(nwg) + forced.lane_groups - 1) /
                                                   forced.lane_groups);
    plan.geometry.rows_per_workgroup = std::max<std::uint32_t>(1, 64 / (forced.lane_groups * Config::chunks));
  }
  if (forced.rows_per_workgroup) plan.geometry.rows_per_workgroup = forced.rows_per_workgroup;
  for (const auto* v : eligible_variants<Kernel>(ctx, {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(nwg)})) {
    SCOPED_TRACE("variant " + std::string(v->name));
    plan.variant = v;
    if (v->path == Path::subgroup && !ctx.info().whole_subgroups(plan.geometry.invocations())) continue;
    kernel.prepare(plan);
    const auto run = [&] { ctx.submit_and_wait([&](vk::CommandBuffer cmd) { kernel.record(cmd, args, plan); }); };
    out.poison();
    run();
    const auto got = out.read_floats();
    const double err = relative_rms(got, expect);
    EXPECT_LE(err, budget(Config::out_dtype)) << "relative RMS error";
    for (auto r : empty_rows)
      for (std::size_t d = 0; d < dim; ++d) ASSERT_EQ(got[r * dim + d], 0.0f) << "empty row " << r << " slot " << d;
    out.poison();
    run();
    const auto again = out.read_floats();
    EXPECT_EQ(0, std::memcmp(got.data(), again.data(), got.size() * sizeof(float))) << "output moved between runs";
  }
}

template <class Config>
class FaReduceHadamardTest : public DeviceTest {};

using Configs = ::testing::Types<aura::FaReduceHadamardConfig<64>, aura::FaReduceHadamardConfig<128>,
                                 aura::FaReduceHadamardConfig<256>, aura::FaReduceHadamardConfig<512>,
                                 aura::FaReduceHadamardConfig<64, DType::f16, DType::f32>,
                                 aura::FaReduceHadamardConfig<128, DType::bf16, DType::f32>,
                                 aura::FaReduceHadamardConfig<256, DType::f32, DType::bf16>,
                                 aura::FaReduceHadamardConfig<512, DType::f16, DType::f16>>;
TYPED_TEST_SUITE(FaReduceHadamardTest, Configs);

// nwg in {1, 2, 5, 32} and neighbours; few rows (one lane group, 1..32
// blocks per group) and, for some, more than 256 rows (the automatic 2 and 4
// lane groups); a row count that leaves a partial workgroup where rows are
// packed; row 2 empty in every case.
TYPED_TEST(FaReduceHadamardTest, MatchesReferenceAcrossNwg) {
  std::uint64_t seed = 300 + TypeParam::head_dim + 7 * static_cast<std::uint32_t>(TypeParam::partial_dtype);
  for (std::size_t nwg : {1, 2, 5, 32, 3, 8, 9, 17}) {
    const std::size_t rows = TypeParam::head_dim >= 256 ? 5 : 11;
    check_case<TypeParam>(context(), rows, nwg, nwg == 1 ? 0.0 : 0.25, seed++, {2});
  }
  for (std::size_t nwg : {9, 32}) check_case<TypeParam>(context(), 261, nwg, 0.25, seed++, {2});
}

TYPED_TEST(FaReduceHadamardTest, AllRowsEmpty) { check_case<TypeParam>(context(), 3, 4, 0.0, 91, {0, 1, 2}); }

class FaReduceHadamardGeometryTest : public DeviceTest {};

// Forced geometries: lane-group counts that are not powers of two or exceed
// nwg, several rows per workgroup with a tail.
TEST_F(FaReduceHadamardGeometryTest, ForcedGeometries) {
  using C128 = aura::FaReduceHadamardConfig<128>;
  using C64 = aura::FaReduceHadamardConfig<64>;
  using C512 = aura::FaReduceHadamardConfig<512>;
  check_case<C128>(context(), 6, 5, 0.3, 11, {1}, {3, 0});
  check_case<C128>(context(), 6, 2, 0.3, 12, {4}, {4, 0});
  check_case<C128>(context(), 7, 9, 0.3, 13, {}, {2, 3});
  check_case<C64>(context(), 13, 32, 0.3, 14, {12}, {1, 8});
  check_case<C64>(context(), 5, 32, 0.3, 15, {}, {32, 0});
  check_case<C512>(context(), 3, 6, 0.3, 16, {}, {2, 1});
}

TEST_F(FaReduceHadamardGeometryTest, ChoosesDocumentedGeometry) {
  using K512 = aura::FaReduceHadamard<aura::FaReduceHadamardConfig<512>>;
  using K64 = aura::FaReduceHadamard<aura::FaReduceHadamardConfig<64>>;
  const auto& info = context().info();
  EXPECT_EQ(K512::geometry(info, 32).groups, 4u);
  EXPECT_EQ(K512::geometry(info, 32).blocks_per_group, 8u);
  EXPECT_EQ(K512::geometry(info, 8).groups, 1u);
  EXPECT_EQ(K512::geometry(info, 5).blocks_per_group, 8u);
  EXPECT_EQ(K512::geometry(info, 32, 1024).groups, 4u);
  EXPECT_EQ(K512::geometry(info, 32, 256).groups, 1u);  // few rows: one group of 32-deep loads
  EXPECT_EQ(K512::geometry(info, 32, 256).blocks_per_group, 32u);
  EXPECT_EQ(K512::geometry(info, 32, 257).groups, 4u);
  EXPECT_EQ(K64::geometry(info, 1).rows_per_workgroup, 4u);
  EXPECT_EQ(K64::geometry(info, 1).invocations(), 64u);
  EXPECT_EQ(K64::geometry(info, 32).groups, 4u);
  EXPECT_EQ(K64::geometry(info, 32).rows_per_workgroup, 1u);
  // The subgroup variant is the automatic choice exactly where the device's
  // subgroups are as reported and shuffle; a portable Context never takes it.
  const K64::Problem p{3, 3};
  const bool subgroup = info.subgroup_shuffle && info.subgroup_arithmetic && info.whole_subgroups(64) &&
                        !context().force_portable();
  EXPECT_EQ(select_variant(context(), K64::name, K64::variants, p).path == Path::subgroup, subgroup);
}

// More workgroups than one dispatch may have: the dispatcher splits the grid
// (a Context capped at 7 workgroups per dispatch exercises it anywhere).
TEST(FaReduceHadamardSplit, GridLargerThanOneDispatch) {
  ContextOptions options;
  options.max_groups_per_dispatch = 7;
  options.validation = false;
  Context ctx(options);
  check_case<aura::FaReduceHadamardConfig<64>>(ctx, 61, 3, 0.2, 21, {40});
  check_case<aura::FaReduceHadamardConfig<256>>(ctx, 23, 5, 0.2, 22, {});
}

class FaReduceHadamardErrors : public DeviceTest {};

TEST_F(FaReduceHadamardErrors, NamesTheBadTensor) {
  Context& ctx = context();
  using Config = aura::FaReduceHadamardConfig<64>;
  using Kernel = aura::FaReduceHadamard<Config>;
  Kernel kernel(ctx);
  Tensor o(ctx, DType::f32, {3, 5, 64}), m(ctx, DType::f32, {3, 5}), l(ctx, DType::f32, {3, 5});
  Tensor signs(ctx, DType::f32, {64}), out(ctx, DType::f32, {3, 64});
  Tensor m16(ctx, DType::f16, {3, 5}), l_short(ctx, DType::f32, {3, 4}), o_dim(ctx, DType::f32, {3, 5, 128});
  Tensor signs_short(ctx, DType::f32, {32}), signs_bf16(ctx, DType::bf16, {64}), out_bf16(ctx, DType::bf16, {3, 64});
  Tensor o33(ctx, DType::f32, {3, 33, 64}), o2d(ctx, DType::f32, {3, 64});
  const auto expect_error = [](const Kernel& k, const Kernel::Args& args, ErrorCode code, const std::string& needle) {
    expect_check_error(k, args, code, needle);
  };
  expect_error(kernel, {o, m16, l, signs, out}, ErrorCode::dtype_mismatch, "m_partials: expected dtype f32, got f16");
  expect_error(kernel, {o, m, l_short, signs, out}, ErrorCode::shape_mismatch,
               "l_partials: expected shape [3, 5], got [3, 4]");
  expect_error(kernel, {o_dim, m, l, signs, out}, ErrorCode::shape_mismatch, "o_partials: expected shape [3, 5, 64]");
  expect_error(kernel, {o2d, m, l, signs, out}, ErrorCode::shape_mismatch, "o_partials: expected 3 dimensions");
  expect_error(kernel, {o33, m, l, signs, out}, ErrorCode::invalid_argument,
               "o_partials: nwg (dimension 1) must be in [1, 32], got 33");
  expect_error(kernel, {o, m, l, signs_short, out}, ErrorCode::shape_mismatch, "signs: expected shape [64], got [32]");
  expect_error(kernel, {o, m, l, signs_bf16, out}, ErrorCode::dtype_mismatch, "signs: expected dtype f32, got bf16");
  expect_error(kernel, {o, m, l, signs, out_bf16}, ErrorCode::dtype_mismatch, "output: expected dtype f32, got bf16");
  TensorRef small = out.ref();
  small.size = 512;
  expect_error(kernel, {o, m, l, signs, small}, ErrorCode::buffer_too_small,
               "output: shape [3, 64] of f32 needs 768 bytes");
  TensorRef no_blocks = o.ref();
  no_blocks.shape = {3, 0, 64};
  expect_error(kernel, {no_blocks, m, l, signs, out}, ErrorCode::shape_mismatch,
               "o_partials: every dimension must be > 0");
  TensorRef null_buffer = signs.ref();
  null_buffer.buffer = nullptr;
  expect_error(kernel, {o, m, l, null_buffer, out}, ErrorCode::invalid_argument, "signs: no buffer given");
  // A geometry changed by hand is checked too: 64 groups of 16 lanes are
  // 1024 invocations, past the 512 the kernel builds.
  auto plan = kernel.plan({o, m, l, signs, out});
  plan.geometry.groups = 64;
  plan.geometry.blocks_per_group = 1;
  try {
    kernel.check({o, m, l, signs, out}, plan);
    ADD_FAILURE() << "no error for 1024 invocations";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("invocations"), std::string::npos) << e.what();
  }
}

// The reference itself: the FWHT equals the explicit normalised Hadamard
// matrix, and undo(rotate(v)) == v.
TEST(FaReduceHadamardReference, TransformAndRoundTrip) {
  Rng rng(7);
  for (std::size_t n : {64, 128, 256, 512}) {
    std::vector<double> v(n);
    for (auto& x : v) x = rng.normal();
    std::vector<double> fast = v;
    ref::normalised_fwht(fast);
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double direct = 0;
      for (std::size_t j = 0; j < n; ++j) direct += (std::popcount(i & j) % 2 ? -1.0 : 1.0) * v[j];
      worst = std::max(worst, std::abs(direct / std::sqrt(double(n)) - fast[i]));
    }
    EXPECT_LE(worst, 1e-12) << "n=" << n;
    const auto signs = random_signs(rng, n);
    const auto back = ref::hadamard_undo(ref::hadamard_rotate(v, signs), signs);
    for (std::size_t i = 0; i < n; ++i) ASSERT_NEAR(back[i], v[i], 1e-12) << "n=" << n << " i=" << i;
  }
}

// End to end: rows rotated on the host and merged as a single block come
// back as the original vectors.
TEST_F(FaReduceHadamardGeometryTest, UndoesTheRotation) {
  Context& ctx = context();
  constexpr std::size_t dim = 256, rows = 4;
  Rng rng(8);
  const auto signs = random_signs(rng, dim);
  std::vector<double> original(rows * dim);
  std::vector<float> o(rows * dim), m(rows, 0.5f), l(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<double> v(dim);
    for (auto& x : v) x = rng.normal();
    std::copy(v.begin(), v.end(), original.begin() + static_cast<std::ptrdiff_t>(r * dim));
    const auto y = ref::hadamard_rotate(v, signs);
    l[r] = 2.0f + static_cast<float>(r);
    for (std::size_t d = 0; d < dim; ++d) o[r * dim + d] = static_cast<float>(y[d] * l[r]);
  }
  auto to = Tensor::from_floats(ctx, DType::f32, S(rows, 1, dim), o);
  auto tm = Tensor::from_floats(ctx, DType::f32, S(rows, 1), m);
  auto tl = Tensor::from_floats(ctx, DType::f32, S(rows, 1), l);
  auto ts = Tensor::from_floats(ctx, DType::f32, S(dim), signs);
  GuardedTensor out(ctx, DType::f32, S(rows, dim));
  aura::FaReduceHadamard<aura::FaReduceHadamardConfig<256>>(ctx).run({to, tm, tl, ts, out});
  EXPECT_LE(relative_rms(out.read_floats(), original), 1e-6);
}

}  // namespace
