// SPDX-License-Identifier: MIT
// gdn::ChunkO against the double-precision reference, on every variant the
// device has (portable everywhere; the tensor-core ones where available).
#include <tilekernels/gdn/chunk_o.hpp>
#include <tilekernels/reference/gdn/chunk_o.hpp>
#include <tilekernels/spirv/features.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "../support.hpp"

namespace {

using namespace tktest;
namespace gdn = tilekernels::gdn;
namespace ref = tilekernels::reference::gdn;

constexpr double kBudget = 5e-3;  // relative RMS of a bf16 output (docs/DESIGN.md)

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

// Where o goes: a dense tensor, or a view into wider bf16 rows (FusedRows;
// every element outside it NaN) whose heads lie further apart than V, at an
// offset and strides that are multiples of 8 elements (rows on 16-byte
// boundaries) or even ones that are not (written by words).
enum class OLayout { dense, view_aligned, view_even };

template <class Config>
ref::ChunkOShape shape_of(const Case& c) {
  return {c.B, c.T, c.Hg, c.H, Config::K, Config::V, Config::BT};
}

// Runs `variant` of the kernel (null: the automatic choice) on `in` (twice:
// the second run must match bit for bit), checks the sentinels and returns
// the output. `workgroups`: the bf16 persistent grid (0: automatic).
template <class Config>
std::vector<float> run_kernel(Context& ctx, const Inputs& in, const ref::ChunkOShape& s, float scale,
                              const tilekernels::Variant<typename gdn::ChunkO<Config>::Problem>* variant = nullptr,
                              std::uint32_t workgroups = 0, OLayout layout = OLayout::dense) {
  const auto I = [](std::size_t x) { return static_cast<std::int64_t>(x); };
  auto q = Tensor::from_floats(ctx, DType::bf16, {I(s.B), I(s.T), I(s.Hg), I(s.K)}, in.q);
  auto k = Tensor::from_floats(ctx, DType::bf16, {I(s.B), I(s.T), I(s.Hg), I(s.K)}, in.k);
  auto v = Tensor::from_floats(ctx, DType::bf16, {I(s.B), I(s.T), I(s.H), I(s.V)}, in.v);
  auto h = Tensor::from_floats(ctx, DType::bf16, {I(s.B), I(s.NT()), I(s.H), I(s.V), I(s.K)}, in.h);
  auto g = Tensor::from_floats(ctx, DType::f32, {I(s.B), I(s.T), I(s.H)}, in.g);
  GuardedTensor o(ctx, DType::bf16, {I(s.B), I(s.T), I(s.H), I(s.V)});
  std::optional<FusedRows> o_rows;
  TensorRef o_ref = o;
  if (layout != OLayout::dense) {
    const std::int64_t gap = layout == OLayout::view_even ? 2 : 8;  // elements between heads, and the offset
    o_rows.emplace(ctx, DType::bf16, I(s.B * s.T), I(s.H) * (I(s.V) + gap) + gap, gap);
    o_ref = o_rows->view({I(s.B), I(s.T), I(s.H), I(s.V)}, 2, gap);
    o_ref.strides[2] = I(s.V) + gap;
  }
  const auto read_o = [&] {
    if (!o_rows) return o.read_floats();
    o_rows->expect_untouched_outside({o_ref});
    return o_rows->read(o_ref);
  };
  gdn::ChunkO<Config> kernel(ctx);
  const typename gdn::ChunkO<Config>::Args args{q, k, v, h, g, o_ref, scale, {}, {}, {}};
  auto plan = kernel.plan(args);
  if (variant) {
    plan.variant = variant;
    kernel.prepare(plan);
  }
  plan.workgroups = workgroups;
  const auto run = [&] { ctx.submit_and_wait([&](vk::CommandBuffer cmd) { kernel.record(cmd, args, plan); }); };
  run();
  const auto first = read_o();
  o.poison();
  if (o_rows) o_rows->upload(o_ref, std::vector<float>(first.size(), std::numeric_limits<float>::quiet_NaN()));
  run();
  const auto second = read_o();
  EXPECT_EQ(0, std::memcmp(first.data(), second.data(), first.size() * sizeof(float))) << "output moved between runs";
  return first;
}

template <class Config>
typename gdn::ChunkO<Config>::Problem problem_of(const ref::ChunkOShape& s) {
  return {static_cast<std::int64_t>(s.B), static_cast<std::int64_t>(s.T), static_cast<std::int64_t>(s.Hg),
          static_cast<std::int64_t>(s.H)};
}

template <class Config>
class ChunkOTest : public DeviceTest {
 protected:
  // Every variant this device has; the bf16 one also with one workgroup
  // walking every tile.
  void check(const Case& c, std::uint64_t seed, OLayout layout = OLayout::dense) {
    const auto s = shape_of<Config>(c);
    SCOPED_TRACE("BT=" + std::to_string(s.BT) + " K=" + std::to_string(s.K) + " V=" + std::to_string(s.V) +
                 " B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " Hg=" + std::to_string(c.Hg) +
                 " H=" + std::to_string(c.H) + " seed=" + std::to_string(seed));
    Rng rng(seed);
    const Inputs in = make_inputs(rng, s);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.K));
    const auto want = ref::chunk_o(in.q, in.k, in.v, in.h, in.g, scale, s);
    const auto variants = eligible_variants<gdn::ChunkO<Config>>(context(), problem_of<Config>(s));
    ASSERT_FALSE(variants.empty());
    EXPECT_EQ(variants.back()->path, Path::portable);
    for (const auto* v : variants)
      for (std::uint32_t workgroups : {0u, 1u}) {
        if (workgroups && v->path != Path::tensor_core_bf16) continue;
        const auto got = run_kernel<Config>(context(), in, s, scale, v, workgroups, layout);
        const double err = relative_rms(got, want);
        EXPECT_LE(err, kBudget) << "variant " << v->name << " workgroups " << workgroups << " o layout "
                                << int(layout);
        std::printf("[chunk_o] %-16s grid %u BT=%u K=%u V=%u B=%zu T=%zu Hg=%zu H=%zu o %s rel_rms=%.3g\n",
                    std::string(v->name).c_str(), workgroups, Config::BT, Config::K, Config::V, c.B, c.T, c.Hg, c.H,
                    layout == OLayout::dense ? "dense" : layout == OLayout::view_aligned ? "view/8" : "view/2", err);
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

// o as a view into wider rows, on 16-byte boundaries and at even elements
// off them, on every variant (with a tail chunk and grouped heads).
TYPED_TEST(ChunkOTest, OAsAView) {
  using C = TypeParam;
  std::uint64_t seed = 100 * C::BT + C::K + C::V + 50;
  this->check({2, 70, 1, 2}, seed++, OLayout::view_aligned);
  this->check({1, 70, 2, 4}, seed++, OLayout::view_even);
}

// Values the fp16 tensor-core operands cannot hold: an input beyond 65504
// and, separately, a q k^T block whose bf16 value exceeds it. The
// tensor-core path must fall back for those tiles, not return Inf.
class ChunkORange : public DeviceTest {};

TEST_F(ChunkORange, BeyondHalfRangeDoesNotOverflow) {
  using Config = gdn::ChunkOConfig<64, 64, 64>;
  const Case c{1, 130, 1, 2};
  const auto s = shape_of<Config>(c);
  // Cases 0 and 1 on every variant (bf16: nothing to fall back from, but
  // the same values must come out).
  for (int variant = 0; variant < 2; ++variant) {
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
    // o dense, and a view at even elements (the fp16 variant's fallback writes it too)
    for (const OLayout layout : {OLayout::dense, OLayout::view_even})
      for (const auto* v : eligible_variants<gdn::ChunkO<Config>>(context(), problem_of<Config>(s))) {
        const auto got = run_kernel<Config>(context(), in, s, scale, v, 0, layout);
        for (float x : got) ASSERT_TRUE(std::isfinite(x)) << "case " << variant << " variant " << v->name;
        EXPECT_LE(relative_rms(got, want), kBudget) << "case " << variant << " variant " << v->name;
        std::printf("[chunk_o] range case %d on %s, o %s: rel_rms=%.3g\n", variant, std::string(v->name).c_str(),
                    layout == OLayout::dense ? "dense" : "view/2", relative_rms(got, want));
      }
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
  for (const auto* v : eligible_variants<gdn::ChunkO<Config>>(context(), problem_of<Config>(s))) {
    const auto got = run_kernel<Config>(context(), in, s, scale, v);
    SCOPED_TRACE("variant " + std::string(v->name));
    expect_inf_contained(got, want, s.T, s.H, s.V, s.BT, t_inf, h_inf, c_inf, kBudget);
  }
}

// The automatic choice is the fastest path the device and the build have:
// bf16 tensor cores (subgroups of 32), else fp16 cooperative matrices on the
// device's own tile (on a CPU device chunks of 16 only), else portable; a
// Context that forces the portable path gets the portable variant.
TEST(ChunkOVariantChoice, FastestPathTheDeviceHas) {
  const auto& info = context().info();
  const bool sg32 = info.allows_subgroup_size(32);
  const char* want = "portable";
  if (info.cooperative_matrix_bf16 && sg32 && TILEKERNELS_HAS_GDN_CHUNK_O_BF16)
    want = "tensor_core_bf16";
  else if (info.cooperative_matrix_fp16 && info.subgroups_as_reported && !info.is_cpu() &&
           gdn::ChunkOConfig<>::fp16_shared_bytes <= info.max_shared_memory && TILEKERNELS_HAS_GDN_CHUNK_O_FP16)
    want = "tensor_core_fp16";
  expect_automatic_choice<gdn::ChunkO<gdn::ChunkOConfig<>>>({1, 64, 1, 1}, want);
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
  EXPECT_NO_THROW(kernel.check({q, k, v, h, g, o, 1.0f, {}, {}, {}}));
  expect_error({q, k, v, h, g_bf16, o, 1.0f, {}, {}, {}}, ErrorCode::dtype_mismatch, "g: expected dtype f32, got bf16");
  expect_error({q, k, v, h, g, o_f32, 1.0f, {}, {}, {}}, ErrorCode::dtype_mismatch, "o: expected dtype bf16, got f32");
  expect_error({q, k, v, h_one_chunk, g, o, 1.0f, {}, {}, {}}, ErrorCode::shape_mismatch,
               "h: expected shape [1, 2, 4, 64, 64], got [1, 1, 4, 64, 64]");
  expect_error({q_k128, k, v, h, g, o, 1.0f, {}, {}, {}}, ErrorCode::shape_mismatch, "q: expected shape [1, 70, 2, 64]");
  expect_error({q, k_short, v, h, g, o, 1.0f, {}, {}, {}}, ErrorCode::shape_mismatch, "k: expected shape [1, 70, 2, 64]");
  expect_error({q, k, v_three_heads, h, g, o, 1.0f, {}, {}, {}}, ErrorCode::shape_mismatch,
               "v: expected shape [1, 70, 4, 64], got [1, 70, 3, 64]");
  TensorRef empty = q.ref();
  empty.shape = {1, 0, 2, 64};
  expect_error({empty, k, v, h, g, o, 1.0f, {}, {}, {}}, ErrorCode::shape_mismatch, "q: every dimension must be > 0");
  TensorRef small = o.ref();
  small.size = 1000;
  expect_error({q, k, v, h, g, small, 1.0f, {}, {}, {}}, ErrorCode::buffer_too_small, "o: shape [1, 70, 4, 64] of bf16 needs");
  TensorRef null_h = h.ref();
  null_h.buffer = nullptr;
  expect_error({q, k, v, null_h, g, o, 1.0f, {}, {}, {}}, ErrorCode::invalid_argument, "h: no buffer given");
}

// More workgroups than one dispatch may have: the dispatcher splits the grid.
TEST(ChunkOSplit, GridLargerThanOneDispatch) {
  ContextOptions options;
  options.max_groups_per_dispatch = 5;
  options.validation = false;
  Context ctx(options);
  using Config = gdn::ChunkOConfig<16, 64, 128>;
  const Case c{2, 40, 1, 2};  // 2 * 3 * 2 * (1 or 2 V tiles) tiles
  const auto s = shape_of<Config>(c);
  Rng rng(31);
  const Inputs in = make_inputs(rng, s);
  const auto want = ref::chunk_o(in.q, in.k, in.v, in.h, in.g, 0.5, s);
  for (const auto* v : eligible_variants<gdn::ChunkO<Config>>(ctx, problem_of<Config>(s)))
    EXPECT_LE(relative_rms(run_kernel<Config>(ctx, in, s, 0.5f, v), want), kBudget) << "variant " << v->name;
}

}  // namespace
