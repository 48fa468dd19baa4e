// gdn::ChunkO against the double-precision reference, on every path the
// device has (portable everywhere; NV cooperative matrix where available).
#include <tilekernels/gdn/chunk_o.hpp>
#include <tilekernels/reference/gdn/chunk_o.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "../support.hpp"

namespace {

using namespace tktest;
namespace gdn = tilekernels::gdn;
namespace ref = tilekernels::reference::gdn;

constexpr double kBudget = 5e-3;  // relative RMS of a bf16 output (DESIGN.md)

struct Case {
  std::size_t B, T, Hg, H;
};

struct Inputs {
  std::vector<float> q, k, v, h, g;
};

// bf16-exact inputs; g is a chunk-local cumulative log gate that falls from
// about 0 to about -20 across each chunk.
Inputs make_inputs(Rng& rng, const ref::ChunkOShape& s) {
  Inputs in;
  const float qk_scale = 1.0f / std::sqrt(static_cast<float>(s.K)) * 3.0f;
  in.q = rounded(DType::bf16, rng.normals(s.B * s.T * s.Hg * s.K, qk_scale));
  in.k = rounded(DType::bf16, rng.normals(s.B * s.T * s.Hg * s.K, qk_scale));
  in.v = rounded(DType::bf16, rng.normals(s.B * s.T * s.H * s.V));
  in.h = rounded(DType::bf16, rng.normals(s.B * s.NT() * s.H * s.V * s.K, 0.5f));
  in.g.resize(s.B * s.T * s.H);
  for (std::size_t b = 0; b < s.B; ++b)
    for (std::size_t ih = 0; ih < s.H; ++ih) {
      float acc = 0;
      for (std::size_t t = 0; t < s.T; ++t) {
        if (t % s.BT == 0) {
          acc = -rng.uniform(0.0f, 0.5f);
        } else {
          acc -= rng.uniform(0.0f, 40.0f / static_cast<float>(s.BT));
        }
        in.g[(b * s.T + t) * s.H + ih] = acc;
      }
    }
  return in;
}

template <class Config>
ref::ChunkOShape shape_of(const Case& c) {
  return {c.B, c.T, c.Hg, c.H, Config::K, Config::V, Config::BT};
}

// Runs the kernel on `in` (twice: the second run must match bit for bit),
// checks the sentinels and returns the output.
template <class Config>
std::vector<float> run_kernel(Context& ctx, const Inputs& in, const ref::ChunkOShape& s, float scale,
                              gdn::ChunkOOptions options, gdn::ChunkOPath* path = nullptr) {
  const auto I = [](std::size_t x) { return static_cast<std::int64_t>(x); };
  auto q = Tensor::from_floats(ctx, DType::bf16, {I(s.B), I(s.T), I(s.Hg), I(s.K)}, in.q);
  auto k = Tensor::from_floats(ctx, DType::bf16, {I(s.B), I(s.T), I(s.Hg), I(s.K)}, in.k);
  auto v = Tensor::from_floats(ctx, DType::bf16, {I(s.B), I(s.T), I(s.H), I(s.V)}, in.v);
  auto h = Tensor::from_floats(ctx, DType::bf16, {I(s.B), I(s.NT()), I(s.H), I(s.V), I(s.K)}, in.h);
  auto g = Tensor::from_floats(ctx, DType::f32, {I(s.B), I(s.T), I(s.H)}, in.g);
  GuardedTensor o(ctx, DType::bf16, {I(s.B), I(s.T), I(s.H), I(s.V)});
  gdn::ChunkO<Config> kernel(ctx, options);
  if (path) *path = kernel.path();
  kernel.run({q, k, v, h, g, o, scale});
  const auto first = o.read_floats();
  o.poison();
  kernel.run({q, k, v, h, g, o, scale});
  const auto second = o.read_floats();
  EXPECT_EQ(0, std::memcmp(first.data(), second.data(), first.size() * sizeof(float))) << "output moved between runs";
  return first;
}

template <class Config>
class ChunkOTest : public DeviceTest {
 protected:
  // Every path this device has: automatic and forced portable.
  void check(const Case& c, std::uint64_t seed) {
    const auto s = shape_of<Config>(c);
    SCOPED_TRACE("BT=" + std::to_string(s.BT) + " K=" + std::to_string(s.K) + " V=" + std::to_string(s.V) +
                 " B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " Hg=" + std::to_string(c.Hg) +
                 " H=" + std::to_string(c.H) + " seed=" + std::to_string(seed));
    Rng rng(seed);
    const Inputs in = make_inputs(rng, s);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.K));
    const auto want = ref::chunk_o(in.q, in.k, in.v, in.h, in.g, scale, s);
    // fp16 tensor-core versions 1, 2 and 3, the automatic choice (the bf16
    // path where the device and build have it), the bf16 path with one
    // workgroup walking every tile (5), then the portable path.
    for (int version : {1, 2, 3, 4, 5, 0}) {
      const bool portable = version == 0;
      gdn::ChunkOOptions options;
      options.force_portable = portable;
      options.nv_version = version >= 4 ? 0 : version;
      if (version == 5) {
        options.bf16_workgroups = 1;
        if (gdn::ChunkO<Config>(context(), options).path() != gdn::ChunkOPath::bf16_cooperative_matrix) continue;
      }
      gdn::ChunkOPath path{};
      const auto got = run_kernel<Config>(context(), in, s, scale, options, &path);
      const double err = relative_rms(got, want);
      EXPECT_LE(err, kBudget) << "path " << gdn::to_string(path) << " version " << version;
      std::printf("[chunk_o] %-22s v%d BT=%u K=%u V=%u B=%zu T=%zu Hg=%zu H=%zu rel_rms=%.3g\n",
                  gdn::to_string(path), version, Config::BT, Config::K, Config::V, c.B, c.T, c.Hg, c.H, err);
      if (portable) {
        EXPECT_EQ(path, gdn::ChunkOPath::portable);
      }
      if (!portable && path == gdn::ChunkOPath::portable) break;  // no tensor-core path on this device
    }
  }
};

using Configs = ::testing::Types<gdn::ChunkOConfig<64, 128, 128>, gdn::ChunkOConfig<64, 64, 64>,
                                 gdn::ChunkOConfig<64, 64, 128>, gdn::ChunkOConfig<64, 128, 64>,
                                 gdn::ChunkOConfig<32, 128, 128>, gdn::ChunkOConfig<16, 64, 64>,
                                 gdn::ChunkOConfig<64, 256, 256>>;
TYPED_TEST_SUITE(ChunkOTest, Configs);

TYPED_TEST(ChunkOTest, MatchesReference) {
  using C = TypeParam;
  std::uint64_t seed = 100 * C::BT + C::K + C::V;
  if (C::K == 256) {  // the large head sizes: one small case with a tail
    this->check({1, 70, 1, 2}, seed);
    return;
  }
  this->check({1, 1, 2, 2}, seed++);
  this->check({2, 63, 1, 2}, seed++);
  this->check({1, 64, 1, 4}, seed++);
  this->check({1, 65, 2, 2}, seed++);
  if (C::BT == 64 && C::K == 128 && C::V == 128) {
    this->check({2, 200, 2, 4}, seed++);
    this->check({1, 200, 1, 1}, seed++);
  } else {
    this->check({2, 100, 1, 2}, seed++);
  }
}

// Values the fp16 tensor-core operands cannot hold: an input beyond 65504
// and, separately, a q k^T block whose bf16 value exceeds it. The
// tensor-core path must fall back for those tiles, not return Inf.
class ChunkORange : public DeviceTest {};

TEST_F(ChunkORange, BeyondHalfRangeDoesNotOverflow) {
  using Config = gdn::ChunkOConfig<64, 64, 64>;
  const Case c{1, 130, 1, 2};
  const auto s = shape_of<Config>(c);
  // tensor-core version 1 + variant / 2; variants 6 and 7: the automatic
  // path (bf16 where available: nothing to fall back from, but the same
  // values must come out)
  for (int variant = 0; variant < 8; ++variant) {
    Rng rng(900 + variant % 2);
    Inputs in = make_inputs(rng, s);
    if (variant % 2 == 0) {
      // One q element of chunk 1 at 1.5e5 (finite in bf16, Inf in fp16).
      in.q[(70 * s.Hg + 0) * s.K + 5] = 150016.0f;
    } else {
      // Chunk 2 rows scaled so that q k^T is about 1e5.
      for (std::size_t t = 128; t < 130; ++t)
        for (std::size_t x = 0; x < s.K; ++x) {
          in.q[t * s.K + x] = round_to(DType::bf16, 40.0f * (x % 2 ? 1.0f : 0.75f));
          in.k[t * s.K + x] = round_to(DType::bf16, 40.0f * (x % 3 ? 1.0f : 0.5f));
        }
    }
    const float scale = 0.125f;
    const auto want = ref::chunk_o(in.q, in.k, in.v, in.h, in.g, scale, s);
    gdn::ChunkOPath path{};
    gdn::ChunkOOptions options;
    options.nv_version = variant < 6 ? 1 + variant / 2 : 0;
    const auto got = run_kernel<Config>(context(), in, s, scale, options, &path);
    for (float x : got) ASSERT_TRUE(std::isfinite(x)) << "variant " << variant << " path " << gdn::to_string(path);
    EXPECT_LE(relative_rms(got, want), kBudget) << "variant " << variant << " path " << gdn::to_string(path);
    std::printf("[chunk_o] range variant %d on %s: rel_rms=%.3g\n", variant, gdn::to_string(path),
                relative_rms(got, want));
  }
}

// An infinite v element: the outputs that use it (its chunk, head and
// column, rows from its own on) come out Inf or NaN on every path; rows
// above it may too (0 * Inf where a full product meets the mask); every other
// output stays finite and matches the reference. (The bf16 path turns Inf in
// P v's result into NaN, include/tilekernels/gdn/chunk_o.hpp.)
TEST_F(ChunkORange, InfiniteInputStaysContained) {
  using Config = gdn::ChunkOConfig<64, 64, 64>;
  const Case c{1, 130, 1, 2};
  const auto s = shape_of<Config>(c);
  Rng rng(950);
  Inputs in = make_inputs(rng, s);
  const std::size_t t_inf = 80, h_inf = 1, c_inf = 9;  // chunk 1 (rows 64..127)
  in.v[(t_inf * s.H + h_inf) * s.V + c_inf] = std::numeric_limits<float>::infinity();
  const float scale = 0.125f;
  const auto want = ref::chunk_o(in.q, in.k, in.v, in.h, in.g, scale, s);
  // the fp16 tensor-core versions 1-3, the automatic path, the portable path
  for (int variant = 0; variant < 5; ++variant) {
    gdn::ChunkOOptions options;
    options.nv_version = variant < 3 ? 1 + variant : 0;
    options.force_portable = variant == 4;
    gdn::ChunkOPath path{};
    const auto got = run_kernel<Config>(context(), in, s, scale, options, &path);
    SCOPED_TRACE(std::string("path ") + gdn::to_string(path) + " variant " + std::to_string(variant));
    expect_inf_contained(got, want, s.T, s.H, s.V, s.BT, t_inf, h_inf, c_inf, kBudget);
  }
}

TEST(ChunkOPathChoice, FollowsDeviceAndOptions) {
  Context& ctx = context();
  using Config = gdn::ChunkOConfig<>;
  gdn::ChunkOOptions portable;
  portable.force_portable = true;
  EXPECT_EQ(gdn::ChunkO<Config>(ctx, portable).path(), gdn::ChunkOPath::portable);
  const auto automatic = gdn::ChunkO<Config>(ctx).path();
  const bool bf16 = TILEKERNELS_GDN_CHUNK_O_BF16 && ctx.info().cooperative_matrix_bf16 && !ctx.force_portable();
  const bool nv = !bf16 && TILEKERNELS_GLSLC_HAS_GL_NV_COOPERATIVE_MATRIX && ctx.info().cooperative_matrix_nv &&
                  !ctx.force_portable();
  EXPECT_EQ(automatic == gdn::ChunkOPath::bf16_cooperative_matrix, bf16) << ctx.info().name;
  EXPECT_EQ(automatic == gdn::ChunkOPath::nv_cooperative_matrix, nv) << ctx.info().name;
  gdn::ChunkOOptions fp16;
  fp16.bf16 = false;
  if (TILEKERNELS_GLSLC_HAS_GL_NV_COOPERATIVE_MATRIX && ctx.info().cooperative_matrix_nv && !ctx.force_portable()) {
    EXPECT_EQ(gdn::ChunkO<Config>(ctx, fp16).path(), gdn::ChunkOPath::nv_cooperative_matrix);
  }
  std::printf("[chunk_o] device %s: automatic path %s\n", ctx.info().name.c_str(), gdn::to_string(automatic));
}

// The tensor-core tilings the benchmark compares, on a case with a tail and
// GQA (skipped where the device has no tensor-core path).
class ChunkOTilings : public DeviceTest {};

TEST_F(ChunkOTilings, AllMatchReference) {
  using Config = gdn::ChunkOConfig<64, 128, 128>;
  if (gdn::ChunkO<Config>(context()).path() == gdn::ChunkOPath::portable) GTEST_SKIP() << "no tensor-core path";
  const Case c{2, 200, 2, 4};
  const auto s = shape_of<Config>(c);
  Rng rng(4242);
  const Inputs in = make_inputs(rng, s);
  const auto want = ref::chunk_o(in.q, in.k, in.v, in.h, in.g, 0.1, s);
  // Per version: bv, wc, kc and the version's own knob (1: v_early, 2:
  // stage buffers, 3: tiles per workgroup; with 32 tiles here, 1, 3, 5 and
  // 16 leave partial last workgroups or several tiles each).
  struct Tiling {
    int version;
    std::uint32_t bv, wc, kc, knob;
  };
  const Tiling tilings[] = {
      {1, 128, 2, 64, 1}, {1, 128, 2, 64, 0}, {1, 128, 4, 64, 1}, {1, 128, 4, 64, 0}, {1, 128, 2, 32, 1},
      {1, 128, 4, 32, 1}, {1, 128, 1, 32, 0}, {1, 64, 2, 64, 1},  {1, 64, 1, 64, 1},  {1, 64, 1, 32, 0},
      {2, 128, 1, 32, 2}, {2, 128, 1, 16, 2}, {2, 128, 1, 64, 1}, {2, 128, 2, 32, 2}, {2, 128, 2, 64, 1},
      {2, 128, 2, 16, 2}, {2, 64, 1, 32, 2},  {2, 64, 2, 16, 1},  {3, 128, 4, 64, 1}, {3, 128, 4, 64, 16},
      {3, 128, 4, 64, 3}, {3, 128, 2, 64, 5}, {3, 128, 4, 32, 1}, {3, 64, 4, 64, 3},  {3, 128, 1, 16, 2}};
  const char* knob_name[] = {"", "v_early", "nbuf", "upw"};
  for (const auto& t : tilings) {
    gdn::ChunkOOptions o;
    o.nv_version = t.version;
    o.nv_bv = t.bv;
    o.nv_wc = t.wc;
    o.nv_kc = t.kc;
    if (t.version == 1) o.nv_v_early = static_cast<int>(t.knob);
    if (t.version == 2) o.nv_nbuf = t.knob;
    if (t.version == 3) o.nv_upw = t.knob;
    const double err = relative_rms(run_kernel<Config>(context(), in, s, 0.1f, o), want);
    EXPECT_LE(err, kBudget) << "v" << t.version << " bv=" << t.bv << " wc=" << t.wc << " kc=" << t.kc << " "
                            << knob_name[t.version] << "=" << t.knob;
    std::printf("[chunk_o] v%d tiling bv=%u wc=%u kc=%u %s=%u rel_rms=%.3g\n", t.version, t.bv, t.wc, t.kc,
                knob_name[t.version], t.knob, err);
  }
}

class ChunkOErrors : public DeviceTest {};

TEST_F(ChunkOErrors, NamesTheBadTensor) {
  Context& ctx = context();
  using Config = gdn::ChunkOConfig<64, 64, 64>;
  gdn::ChunkO<Config> kernel(ctx);
  // B=1, T=70 (NT=2), Hg=2, H=4.
  Tensor q(ctx, DType::bf16, {1, 70, 2, 64}), k(ctx, DType::bf16, {1, 70, 2, 64});
  Tensor v(ctx, DType::bf16, {1, 70, 4, 64}), h(ctx, DType::bf16, {1, 2, 4, 64, 64});
  Tensor g(ctx, DType::f32, {1, 70, 4}), o(ctx, DType::bf16, {1, 70, 4, 64});
  Tensor g_bf16(ctx, DType::bf16, {1, 70, 4}), o_f32(ctx, DType::f32, {1, 70, 4, 64});
  Tensor h_one_chunk(ctx, DType::bf16, {1, 1, 4, 64, 64}), q_k128(ctx, DType::bf16, {1, 70, 2, 128});
  Tensor v_three_heads(ctx, DType::bf16, {1, 70, 3, 64}), k_short(ctx, DType::bf16, {1, 69, 2, 64});
  using Args = gdn::ChunkO<Config>::Args;
  const auto expect_error = [&](const Args& args, ErrorCode code, const std::string& needle) {
    expect_check_error(kernel, args, code, needle);
  };
  EXPECT_NO_THROW(kernel.check({q, k, v, h, g, o, 1.0f}));
  expect_error({q, k, v, h, g_bf16, o, 1.0f}, ErrorCode::dtype_mismatch, "g: expected dtype f32, got bf16");
  expect_error({q, k, v, h, g, o_f32, 1.0f}, ErrorCode::dtype_mismatch, "o: expected dtype bf16, got f32");
  expect_error({q, k, v, h_one_chunk, g, o, 1.0f}, ErrorCode::shape_mismatch,
               "h: expected shape [1, 2, 4, 64, 64], got [1, 1, 4, 64, 64]");
  expect_error({q_k128, k, v, h, g, o, 1.0f}, ErrorCode::shape_mismatch, "q: expected shape [1, 70, 2, 64]");
  expect_error({q, k_short, v, h, g, o, 1.0f}, ErrorCode::shape_mismatch, "k: expected shape [1, 70, 2, 64]");
  expect_error({q, k, v_three_heads, h, g, o, 1.0f}, ErrorCode::shape_mismatch,
               "v: H = 3 heads is not a multiple of Hg = 2");
  TensorRef empty = q.ref();
  empty.shape = {1, 0, 2, 64};
  expect_error({empty, k, v, h, g, o, 1.0f}, ErrorCode::shape_mismatch, "q: every dimension must be > 0");
  TensorRef small = o.ref();
  small.size = 1000;
  expect_error({q, k, v, h, g, small, 1.0f}, ErrorCode::buffer_too_small, "o: shape [1, 70, 4, 64] of bf16 needs");
  TensorRef null_h = h.ref();
  null_h.buffer = nullptr;
  expect_error({q, k, v, null_h, g, o, 1.0f}, ErrorCode::invalid_argument, "h: no buffer given");
  EXPECT_THROW(gdn::ChunkO<Config>(ctx, gdn::ChunkOOptions{false, 48, 2, 32, -1}), Error);  // 48 is not a multiple of 32
  EXPECT_THROW(gdn::ChunkO<Config>(ctx, gdn::ChunkOOptions{false, 0, 0, 0, -1, 4, 0, 0}), Error);  // no version 4
  EXPECT_THROW(gdn::ChunkO<Config>(ctx, gdn::ChunkOOptions{false, 0, 0, 0, -1, 2, 3}), Error);   // 3 stage buffers
  EXPECT_THROW(gdn::ChunkO<Config>(ctx, gdn::ChunkOOptions{false, 0, 0, 16, -1, 1, 0}), Error);  // kc 16 is version 2 only
}

// More workgroups than one dispatch may have: the dispatcher splits the grid.
TEST(ChunkOSplit, GridLargerThanOneDispatch) {
  ContextOptions options;
  options.max_groups_per_dispatch = 5;
  options.validation = false;
  Context ctx(options);
  using Config = gdn::ChunkOConfig<16, 64, 128>;
  const Case c{2, 40, 1, 2};  // 2 * 3 * 2 * (1 or 2 V tiles) workgroups
  const auto s = shape_of<Config>(c);
  Rng rng(31);
  const Inputs in = make_inputs(rng, s);
  const auto want = ref::chunk_o(in.q, in.k, in.v, in.h, in.g, 0.5, s);
  for (int version : {1, 2, 3, 0}) {  // 0: portable
    gdn::ChunkOOptions o;
    o.force_portable = version == 0;
    o.nv_version = version;
    o.nv_upw = 2;  // version 3: 6 workgroups of 2 tiles (or 12 of 1 where V is split)
    EXPECT_LE(relative_rms(run_kernel<Config>(ctx, in, s, 0.5f, o), want), kBudget) << "version=" << version;
  }
}

}  // namespace
