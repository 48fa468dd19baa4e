// SPDX-License-Identifier: MIT
// gdn::RecomputeWU against the double-precision reference, on every path the
// device has (portable always; the NV tensor-core path where available, with
// A in one fp16 part and split in hi + lo).
#include <tilekernels/gdn/recompute_wu.hpp>
#include <tilekernels/reference/gdn/recompute_wu.hpp>
#include <tilekernels/spirv/features.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <algorithm>

#include "../support.hpp"

namespace {

using namespace tktest;
namespace gdn = tilekernels::gdn;

constexpr double kBudget = 5e-3;  // bf16 outputs (docs/DESIGN.md, FLA's bar)

struct Shape5 {
  std::size_t B, T, Hg, H;
};

// Inputs as the chunked GDN pipeline produces them: beta in (0, 1), g the
// chunk-local cumulative log gate falling from 0 to about -20 across a
// chunk, A lower triangular with a unit diagonal (the solved inverse blocks,
// zeros above the diagonal). In the tail chunk the columns of A past the
// last valid row hold NaN: the kernel must ignore them.
struct Inputs {
  std::vector<float> k, v, beta, g, A;
};

Inputs make_inputs(Rng& rng, const Shape5& s, std::size_t K, std::size_t V, std::size_t BT, float kv_scale = 1.0f) {
  Inputs in;
  in.k = rounded(DType::bf16, rng.normals(s.B * s.T * s.Hg * K, kv_scale));
  in.v = rounded(DType::bf16, rng.normals(s.B * s.T * s.H * V, kv_scale));
  in.beta.resize(s.B * s.T * s.H);
  in.g.resize(s.B * s.T * s.H);
  in.A.assign(s.B * s.T * s.H * BT, 0.0f);
  for (auto& x : in.beta) x = rng.uniform(0.02f, 0.98f);
  for (std::size_t b = 0; b < s.B; ++b)
    for (std::size_t h = 0; h < s.H; ++h) {
      float g = 0.0f;
      for (std::size_t t = 0; t < s.T; ++t) {
        if (t % BT == 0) g = 0.0f;
        g -= rng.uniform(0.0f, 40.0f / static_cast<float>(BT));
        in.g[(b * s.T + t) * s.H + h] = std::max(g, -20.0f);
        const std::size_t i = t % BT, rows = std::min(BT, s.T - (t - i));
        float* row = &in.A[((b * s.T + t) * s.H + h) * BT];
        for (std::size_t j = 0; j < i; ++j) row[j] = 0.4f * rng.normal();
        row[i] = 1.0f;
        for (std::size_t j = rows; j < BT; ++j) row[j] = std::numeric_limits<float>::quiet_NaN();
      }
    }
  return in;
}

// Where v is read from: a dense tensor, or a view of fused rows (FusedRows;
// every element outside it NaN) whose heads lie further apart than V, at an
// offset and strides that are multiples of 8 elements (rows on 16-byte
// boundaries) or odd ones (read by words).
enum class VLayout { dense, view_aligned, view_odd };

// One way to run the kernel: a variant of its table and, for the bf16
// variants, the persistent grid (0: automatic; 2: two workgroups, or one
// pair, walk every tile).
template <class Config>
struct PathCase {
  const tilekernels::Variant<typename gdn::RecomputeWU<Config>::Problem>* variant;
  std::uint32_t workgroups;
  std::string label;
};

// Every variant this device can run for `s`, the bf16 ones also on a grid of 2.
template <class Config>
std::vector<PathCase<Config>> paths(const Shape5& s) {
  const typename gdn::RecomputeWU<Config>::Problem p{static_cast<std::int64_t>(s.B), static_cast<std::int64_t>(s.T),
                                                     static_cast<std::int64_t>(s.Hg), static_cast<std::int64_t>(s.H)};
  std::vector<PathCase<Config>> out;
  for (const auto* v : eligible_variants<gdn::RecomputeWU<Config>>(context(), p)) {
    out.push_back({v, 0, std::string(v->name)});
    if (v->path == Path::tensor_core_bf16) out.push_back({v, 2, std::string(v->name) + "-grid2"});
  }
  return out;
}

template <class Config>
class RecomputeWUTest : public DeviceTest {
 protected:
  // One run's outputs, and whether the sentinels around them survived.
  struct Outputs {
    std::vector<float> w, u;
    bool w_guards, u_guards;
  };

  // Uploads `in` (A rounded to its stored dtype, which is what the reference
  // sees), computes the reference, and calls check(label, run, ref) for every
  // path, where run() runs that path on NaN-poisoned outputs.
  template <class Check>
  void on_every_path(const Shape5& s, Inputs in, Check&& check, VLayout layout = VLayout::dense) {
    constexpr std::size_t K = Config::k, V = Config::v, BT = Config::bt;
    Context& ctx = context();
    in.A = rounded(Config::a_dtype, in.A);
    const auto S = [](auto... d) { return Shape{static_cast<std::int64_t>(d)...}; };
    auto k = Tensor::from_floats(ctx, DType::bf16, S(s.B, s.T, s.Hg, K), in.k);
    auto v = Tensor::from_floats(ctx, DType::bf16, S(s.B, s.T, s.H, V), in.v);
    std::optional<FusedRows> v_rows;
    TensorRef v_ref = v;
    if (layout != VLayout::dense) {
      const bool odd = layout == VLayout::view_odd;
      const std::int64_t gap = odd ? 1 : 8;  // elements between heads
      const auto H = static_cast<std::int64_t>(s.H);
      v_rows.emplace(ctx, DType::bf16, static_cast<std::int64_t>(s.B * s.T), H * (V + gap) + (odd ? 3 : 8),
                     odd ? 5 : 8);
      v_ref = v_rows->view(S(s.B, s.T, s.H, V), 2, 0);
      v_ref.strides[2] = static_cast<std::int64_t>(V) + gap;
      v_rows->upload(v_ref, in.v);
    }
    auto beta = Tensor::from_floats(ctx, DType::f32, S(s.B, s.T, s.H), in.beta);
    auto g = Tensor::from_floats(ctx, DType::f32, S(s.B, s.T, s.H), in.g);
    auto A = Tensor::from_floats(ctx, Config::a_dtype, S(s.B, s.T, s.H, BT), in.A);
    GuardedTensor w(ctx, DType::bf16, S(s.B, s.T, s.H, K));
    GuardedTensor u(ctx, DType::bf16, S(s.B, s.T, s.H, V));
    const auto ref = tilekernels::reference::gdn::recompute_wu(in.k, in.v, in.beta, in.g, in.A, s.B, s.T, s.Hg, s.H,
                                                               K, V, BT);
    const auto cases = paths<Config>(s);
    ASSERT_FALSE(cases.empty());
    EXPECT_EQ(cases.back().variant->path, Path::portable);
    for (const auto& pc : cases) {
      SCOPED_TRACE(pc.label);
      gdn::RecomputeWU<Config> kernel(ctx);
      const typename gdn::RecomputeWU<Config>::Args args{k, v_ref, beta, g, A, w, u, {}, {}, {}};
      const typename gdn::RecomputeWU<Config>::Plan plan{pc.variant, pc.workgroups};
      kernel.prepare(plan);
      const auto run = [&] {
        w.poison();
        u.poison();
        ctx.submit_and_wait([&](vk::CommandBuffer cmd) { kernel.record(cmd, args, plan); });
        return Outputs{w.read_floats(), u.read_floats(), w.guards_intact(), u.guards_intact()};
      };
      check(std::string(pc.label), run, ref);
    }
    if (v_rows) v_rows->expect_untouched_outside({v_ref});
  }

  // Runs every path twice; checks w and u against the reference, guards and
  // bit-exact repeatability, and keeps the worst error seen per path label.
  void check_case(const Shape5& s, std::uint64_t seed, float kv_scale = 1.0f, Inputs* custom = nullptr,
                  VLayout layout = VLayout::dense) {
    SCOPED_TRACE("B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " Hg=" + std::to_string(s.Hg) +
                 " H=" + std::to_string(s.H) + " seed=" + std::to_string(seed));
    Rng rng(seed);
    const Inputs in = custom ? *custom : make_inputs(rng, s, Config::k, Config::v, Config::bt, kv_scale);
    on_every_path(s, in, [&](const std::string& label, const auto& run, const auto& ref) {
      const Outputs got = run();
      EXPECT_TRUE(got.w_guards);
      EXPECT_TRUE(got.u_guards);
      const double ew = relative_rms(got.w, ref.w), eu = relative_rms(got.u, ref.u);
      EXPECT_LE(ew, kBudget) << "w relative RMS error";
      EXPECT_LE(eu, kBudget) << "u relative RMS error";
      auto& worst = worst_[label];
      worst = std::max({worst, ew, eu});
      const Outputs again = run();
      EXPECT_EQ(0, std::memcmp(got.w.data(), again.w.data(), got.w.size() * 4)) << "w moved";
      EXPECT_EQ(0, std::memcmp(got.u.data(), again.u.data(), got.u.size() * 4)) << "u moved";
    }, layout);
  }

  void TearDown() override {
    for (const auto& [label, e] : worst_)
      std::printf("[recompute_wu] BT=%u K=%u V=%u A=%s %-14s worst relative RMS %.3e\n", Config::bt, Config::k,
                  Config::v, std::string(dtype_name(Config::a_dtype)).c_str(), label.c_str(), e);
    DeviceTest::TearDown();
  }

  std::map<std::string, double> worst_;
};

using Configs = ::testing::Types<gdn::RecomputeWUConfig<64, 128, 128>, gdn::RecomputeWUConfig<64, 64, 64>,
                                 gdn::RecomputeWUConfig<64, 64, 128>, gdn::RecomputeWUConfig<64, 128, 64>,
                                 gdn::RecomputeWUConfig<32, 64, 64>, gdn::RecomputeWUConfig<16, 128, 64>,
                                 gdn::RecomputeWUConfig<64, 256, 256>, gdn::RecomputeWUConfig<64, 80, 48>,
                                 gdn::RecomputeWUConfig<64, 128, 128, DType::bf16>,
                                 gdn::RecomputeWUConfig<64, 64, 128, DType::bf16>,
                                 gdn::RecomputeWUConfig<64, 80, 48, DType::bf16>,
                                 gdn::RecomputeWUConfig<32, 64, 64, DType::bf16>>;
TYPED_TEST_SUITE(RecomputeWUTest, Configs);

TYPED_TEST(RecomputeWUTest, MatchesReference) {
  // B {1, 2}, T {1, 63, 64, 65, 200}, GQA ratios 1, 2, 4.
  const bool big = TypeParam::k + TypeParam::v > 256;
  std::uint64_t seed = 100 + TypeParam::bt + TypeParam::k * 3 + TypeParam::v;
  this->check_case({1, 1, 1, 1}, seed++);
  this->check_case({1, 63, 2, 2}, seed++);
  this->check_case({2, 64, 1, 2}, seed++);
  this->check_case({1, 65, 1, 4}, seed++);
  if (!big) this->check_case({2, 200, 2, 4}, seed++);
  if (big) this->check_case({1, 130, 1, 2}, seed++);
}

// v as a view of fused rows, on 16-byte boundaries and at odd elements, on
// every path (tails, grouped heads).
TYPED_TEST(RecomputeWUTest, VAsAView) {
  std::uint64_t seed = 600 + TypeParam::bt + TypeParam::k * 3 + TypeParam::v;
  this->check_case({2, 70, 1, 2}, seed++, 1.0f, nullptr, VLayout::view_aligned);
  this->check_case({1, 65, 2, 4}, seed++, 1.0f, nullptr, VLayout::view_odd);
}

// Operands beyond the fp16 range (|x| up to ~1e6 > 65504) and tiny ones: the
// tensor-core path must scale, not overflow or flush.
TYPED_TEST(RecomputeWUTest, OperandsBeyondHalfRange) {
  if (TypeParam::k + TypeParam::v > 256 || TypeParam::bt != 64) GTEST_SKIP() << "covered by the main configs";
  // (with A in bf16 too: the large A rows are rounded by check_case)
  const Shape5 s{1, 100, 1, 2};
  Rng rng(4242);
  Inputs in = make_inputs(rng, s, TypeParam::k, TypeParam::v, TypeParam::bt, 1.0f);
  // Rows of k and v scaled from 1e-20 to 3e5; some A rows large.
  for (std::size_t t = 0; t < s.T; ++t) {
    const float f = t % 3 == 0 ? 3.0e5f : t % 3 == 1 ? 1.0f : 1.0e-20f;
    for (std::size_t c = 0; c < TypeParam::k; ++c) in.k[t * TypeParam::k + c] *= f;
    for (std::size_t h = 0; h < s.H; ++h)
      for (std::size_t c = 0; c < TypeParam::v; ++c) in.v[(t * s.H + h) * TypeParam::v + c] *= f;
  }
  in.k = rounded(DType::bf16, in.k);
  in.v = rounded(DType::bf16, in.v);
  for (std::size_t t = 0; t < s.T; t += 7)
    for (std::size_t h = 0; h < s.H; ++h)
      for (std::size_t j = 0; j < TypeParam::bt; ++j) {
        float& a = in.A[(t * s.H + h) * TypeParam::bt + j];
        if (!std::isnan(a)) a *= 7.0e4f;
      }
  this->check_case(s, 0, 1.0f, &in);
}

// An infinite v element: the outputs that use it (u in its chunk, head and
// column, rows from its own on) come out Inf or NaN on every path; rows
// above it may too (0 * Inf in a full product); every other output stays
// finite and matches the reference (expect_inf_contained).
// (The bf16 path turns the Inf operand into NaN, include/.../recompute_wu.hpp.)
TYPED_TEST(RecomputeWUTest, InfiniteInputStaysContained) {
  if (TypeParam::k + TypeParam::v > 256 || TypeParam::bt != 64) GTEST_SKIP() << "covered by the main configs";
  constexpr std::size_t K = TypeParam::k, V = TypeParam::v, BT = TypeParam::bt;
  const Shape5 s{1, 100, 1, 2};
  Rng rng(777);
  Inputs in = make_inputs(rng, s, K, V, BT, 1.0f);
  const std::size_t t_inf = 70, h_inf = 1, c_inf = 5;  // second chunk (rows 64..99)
  in.v[(t_inf * s.H + h_inf) * V + c_inf] = std::numeric_limits<float>::infinity();
  this->on_every_path(s, in, [&](const std::string&, const auto& run, const auto& ref) {
    const auto got = run();
    EXPECT_TRUE(got.w_guards);
    EXPECT_TRUE(got.u_guards);
    EXPECT_LE(relative_rms(got.w, ref.w), kBudget) << "w relative RMS error";
    SCOPED_TRACE("u");
    expect_inf_contained(got.u, ref.u, s.T, s.H, V, BT, t_inf, h_inf, c_inf, kBudget);
  });
}

class RecomputeWUErrors : public DeviceTest {};

TEST_F(RecomputeWUErrors, NamesTheBadTensor) {
  Context& ctx = context();
  using Config = gdn::RecomputeWUConfig<64, 64, 64>;
  gdn::RecomputeWU<Config> kernel(ctx);
  Tensor k(ctx, DType::bf16, {1, 10, 2, 64}), v(ctx, DType::bf16, {1, 10, 4, 64});
  Tensor beta(ctx, DType::f32, {1, 10, 4}), g(ctx, DType::f32, {1, 10, 4}), A(ctx, DType::f32, {1, 10, 4, 64});
  Tensor w(ctx, DType::bf16, {1, 10, 4, 64}), u(ctx, DType::bf16, {1, 10, 4, 64});
  Tensor v3(ctx, DType::bf16, {1, 10, 3, 64}), beta_bf16(ctx, DType::bf16, {1, 10, 4});
  Tensor A32(ctx, DType::f32, {1, 10, 4, 32}), w_f32(ctx, DType::f32, {1, 10, 4, 64});
  Tensor g_short(ctx, DType::f32, {1, 9, 4}), k_wide(ctx, DType::bf16, {1, 10, 2, 128});
  using Args = gdn::RecomputeWU<Config>::Args;
  const auto expect_error = [&](const Args& args, ErrorCode code, const std::string& needle) {
    expect_check_error(kernel, args, code, needle);
  };
  EXPECT_NO_THROW(kernel.check({k, v, beta, g, A, w, u, {}, {}, {}}));
  expect_error({k_wide, v, beta, g, A, w, u, {}, {}, {}}, ErrorCode::shape_mismatch, "k: expected shape [1, 10, 2, 64]");
  expect_error({k, v3, beta, g, A, w, u, {}, {}, {}}, ErrorCode::shape_mismatch, "must be a multiple of the key heads Hg = 2");
  expect_error({k, v, beta_bf16, g, A, w, u, {}, {}, {}}, ErrorCode::dtype_mismatch, "beta: expected dtype f32, got bf16");
  expect_error({k, v, beta, g_short, A, w, u, {}, {}, {}}, ErrorCode::shape_mismatch, "g: expected shape [1, 10, 4], got [1, 9, 4]");
  expect_error({k, v, beta, g, A32, w, u, {}, {}, {}}, ErrorCode::shape_mismatch, "A: expected shape [1, 10, 4, 64]");
  Tensor A_bf16(ctx, DType::bf16, {1, 10, 4, 64});
  expect_error({k, v, beta, g, A_bf16, w, u, {}, {}, {}}, ErrorCode::dtype_mismatch, "A: expected dtype f32, got bf16");
  expect_error({k, v, beta, g, A, w_f32, u, {}, {}, {}}, ErrorCode::dtype_mismatch, "w: expected dtype bf16, got f32");
  TensorRef small = u.ref();
  small.size = 100;
  expect_error({k, v, beta, g, A, w, small, {}, {}, {}}, ErrorCode::buffer_too_small, "u: shape [1, 10, 4, 64] of bf16 needs");
  TensorRef empty = k.ref();
  empty.shape = {1, 0, 2, 64};
  expect_error({empty, v, beta, g, A, w, u, {}, {}, {}}, ErrorCode::shape_mismatch, "k: every dimension must be > 0");
  TensorRef null_buffer = v.ref();
  null_buffer.buffer = nullptr;
  expect_error({k, null_buffer, beta, g, A, w, u, {}, {}, {}}, ErrorCode::invalid_argument, "v: no buffer given");
}

// The automatic choice is the fastest path the device and the build have:
// for A in bf16 at BT 64, K = V = 128, bf16 tensor cores with u and w in one
// workgroup (subgroups of 32), else fp16 cooperative matrices on the
// device's own tile (subgroups of 8 to 64; on a CPU device chunks of 16
// only), else portable; a Context that forces the portable path gets the
// portable variant.
TEST(RecomputeWUVariantChoice, FastestPathTheDeviceHas) {
  const auto& info = context().info();
  const bool sg32 = info.allows_subgroup_size(32);
  const char* want = "portable";
  if (info.cooperative_matrix_bf16 && sg32 && TILEKERNELS_HAS_GDN_RECOMPUTE_WU_BF16_JOINT)
    want = "tensor_core_bf16_joint";
  else if (info.cooperative_matrix_bf16 && sg32 && TILEKERNELS_HAS_GDN_RECOMPUTE_WU_BF16)
    want = "tensor_core_bf16";
  else if (info.cooperative_matrix_fp16 && info.subgroups_as_reported && info.subgroup_size >= 8 &&
           info.subgroup_size <= 64 && !info.is_cpu() && TILEKERNELS_HAS_GDN_RECOMPUTE_WU_FP16)
    want = "tensor_core_fp16";
  expect_automatic_choice<gdn::RecomputeWU<gdn::RecomputeWUConfig<64, 128, 128, DType::bf16>>>({1, 64, 1, 1}, want);
}

// More workgroups than one dispatch may have: the dispatcher splits the grid.
TEST(RecomputeWUSplit, GridLargerThanOneDispatch) {
  ContextOptions options;
  options.max_groups_per_dispatch = 5;
  options.validation = false;
  Context ctx(options);
  using Config = gdn::RecomputeWUConfig<32, 64, 64>;
  const Shape5 s{2, 70, 1, 3};  // 2 * 3 chunks * 3 heads = 18 workgroups
  Rng rng(9);
  Inputs in = make_inputs(rng, s, 64, 64, 32);
  auto k = Tensor::from_floats(ctx, DType::bf16, {2, 70, 1, 64}, in.k);
  auto v = Tensor::from_floats(ctx, DType::bf16, {2, 70, 3, 64}, in.v);
  auto beta = Tensor::from_floats(ctx, DType::f32, {2, 70, 3}, in.beta);
  auto g = Tensor::from_floats(ctx, DType::f32, {2, 70, 3}, in.g);
  auto A = Tensor::from_floats(ctx, DType::f32, {2, 70, 3, 32}, in.A);
  GuardedTensor w(ctx, DType::bf16, {2, 70, 3, 64}), u(ctx, DType::bf16, {2, 70, 3, 64});
  gdn::RecomputeWU<Config>(ctx).run({k, v, beta, g, A, w, u, {}, {}, {}});
  const auto ref = tilekernels::reference::gdn::recompute_wu(in.k, in.v, in.beta, in.g, in.A, 2, 70, 1, 3, 64, 64, 32);
  EXPECT_LE(relative_rms(w.read_floats(), ref.w), kBudget);
  EXPECT_LE(relative_rms(u.read_floats(), ref.u), kBudget);
}

}  // namespace
