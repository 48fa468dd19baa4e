// SPDX-License-Identifier: MIT
// gdn::KKTSolve (gate, cumsum, beta, A = (I + M)^-1) against the
// reference stages (reference/gdn/chunk_forward.hpp: gate_cumsum,
// prepare_beta, kkt_solve under Rounding::fla), on every variant the device
// can run; the fp16 matrix kernel also at every chunk length on a CPU
// device (lavapipe's cooperative matrices), and on values beyond fp16.
#include <tilekernels/gdn/kkt_solve.hpp>

#include <algorithm>
#include <cstring>

#include "gdn_cases.hpp"

namespace {

using namespace gdntest;

constexpr double kBudgetA = 5e-3;    // bf16 A against the reference's bf16 A
constexpr double kBudgetF32 = 2e-6;  // f32 g cumsum (tree order) and beta

template <std::uint32_t BT, std::uint32_t K>
struct KKTCase {
  using Config = gdn::KKTSolveConfig<BT, K>;
  using Kernel = gdn::KKTSolve<Config>;

  // Runs `variant` (null: the automatic choice) twice and checks every output.
  static void run(const Case& c, const Variant<typename Kernel::Problem>* variant, Context& ctx = context()) {
    const ref::GatedDeltaRuleProblem& p = c.p;
    const gdn::Chunking ch = chunking_of(c, BT);
    const std::int64_t S = ch.slots();
    const auto q = ref::prepare_qk(p, c.k, ref::Rounding::fla);  // k as the stage reads it
    auto k = Tensor::from_floats(ctx, DType::bf16, dims({p.B, p.T, p.Hg, p.K}), floats(q));
    auto g = Tensor::from_floats(ctx, DType::f32, dims({p.B, p.T, p.H}), c.g);
    auto beta = Tensor::from_floats(ctx, DType::f32, dims({p.B, p.T, p.H}), c.beta);
    std::optional<Tensor> a_log, dt_bias;
    if (p.gate_in_kernel) a_log.emplace(Tensor::from_floats(ctx, DType::f32, dims({p.H}), c.A_log));
    if (!c.dt_bias.empty()) dt_bias.emplace(Tensor::from_floats(ctx, DType::f32, dims({p.H}), c.dt_bias));
    GuardedTensor g_out(ctx, DType::f32, {S, std::int64_t(p.H)});
    GuardedTensor beta_out(ctx, DType::f32, {S, std::int64_t(p.H)});
    GuardedTensor A(ctx, DType::bf16, {S, std::int64_t(p.H), BT});
    const DeviceVarlen varlen = device_varlen(ctx, ch, p.cu_seqlens);

    Kernel kernel(ctx, gdn::GdnEnvelope{gdn_options(c.o)});
    typename Kernel::Args args;
    args.k = k;
    args.g = g;
    args.beta = beta;
    if (a_log) args.A_log = a_log->ref();
    if (dt_bias) args.dt_bias = dt_bias->ref();
    args.g_cumsum = g_out;
    args.beta_out = beta_out;
    args.A = A;
    args.options = gdn_options(c.o);
    args.cu_seqlens_host = p.cu_seqlens;
    varlen.set(args);
    auto plan = kernel.plan(args);
    if (variant) {
      plan.variant = variant;
      kernel.prepare(plan);
    }
    SCOPED_TRACE(std::string("variant ") + std::string(plan.variant->name));
    const auto run = [&] { ctx.submit_and_wait([&](vk::CommandBuffer cmd) { kernel.record(cmd, args, plan); }); };
    run();
    const auto got_g = g_out.read_floats(), got_beta = beta_out.read_floats(), got_A = A.read_floats();

    const auto ref_beta = ref::prepare_beta(p, c.in(), ref::Rounding::fla);
    const auto ref_g = ref::gate_cumsum(p, c.in(), BT, ref::Rounding::fla);
    const auto ref_A = ref::kkt_solve(p, q, ref_beta, ref_g, BT, ref::Rounding::fla);
    EXPECT_LE(relative_rms(tokens_from_slots(ch, got_g, p.H), ref_g), kBudgetF32) << "g cumsum";
    EXPECT_LE(relative_rms(tokens_from_slots(ch, got_beta, p.H), ref_beta), kBudgetF32) << "beta";
    EXPECT_LE(relative_rms(tokens_from_slots(ch, got_A, p.H * BT), ref_A), kBudgetA) << "A";
    // Padding slots: A zero, beta zero (they must not add to any later sum).
    for (std::int64_t s = 0; s < S; ++s) {
      bool padding = true;
      ch.for_each_sequence([&](std::int64_t, std::int64_t, std::int64_t len, std::int64_t first) {
        if (s >= first * BT && s < first * BT + len) padding = false;
      });
      if (!padding) continue;
      for (std::size_t h = 0; h < p.H; ++h) {
        ASSERT_EQ(got_beta[std::size_t(s) * p.H + h], 0.0f) << "slot " << s;
        for (std::uint32_t j = 0; j < BT; ++j) ASSERT_EQ(got_A[(std::size_t(s) * p.H + h) * BT + j], 0.0f);
      }
    }
    g_out.poison();
    beta_out.poison();
    A.poison();
    run();
    EXPECT_EQ(0, std::memcmp(got_A.data(), A.read_floats().data(), got_A.size() * 4)) << "A moved between runs";
    EXPECT_EQ(0, std::memcmp(got_g.data(), g_out.read_floats().data(), got_g.size() * 4)) << "g moved";
  }

  // Every variant of the table that the device can run.
  static void run_all(const Case& c) {
    typename Kernel::Problem prob{};
    for (const auto& v : Kernel::variants)
      if (eligibility(context(), v, prob)) run(c, &v);
  }

  // The fp16 matrix kernel, also where the automatic choice leaves it out
  // for compile time (a CPU device at chunks of more than 16).
  static void run_fp16(const Case& c) {
    std::string why;
    const auto* forced = forced_fp16<Kernel>(why);
    if (!forced) GTEST_SKIP() << why;
    run(c, forced);
  }
};

class KKTSolveTest : public DeviceTest {};

TEST_F(KKTSolveTest, FixedLengthAcrossShapes) {
  std::uint64_t seed = 100;
  for (std::size_t T : {1, 63, 64, 65, 130}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    KKTCase<64, 64>::run_all(make_case(1, T, 1, 2, 64, 64, {}, kPlain, seed++));
  }
  KKTCase<64, 128>::run_all(make_case(2, 100, 2, 4, 128, 64, {}, kPlain, seed++));
  KKTCase<32, 128>::run_all(make_case(2, 70, 1, 2, 128, 64, {}, kPlain, seed++));
  KKTCase<16, 64>::run_all(make_case(1, 40, 2, 2, 64, 64, {}, kPlain, seed++));
  KKTCase<64, 256>::run_all(make_case(1, 70, 1, 1, 256, 64, {}, kPlain, seed++));
}

TEST_F(KKTSolveTest, VariableLength) {
  std::uint64_t seed = 200;
  KKTCase<64, 64>::run_all(make_case(1, 15, 1, 2, 64, 64, {0, 15}, kPlain, seed++));
  KKTCase<64, 64>::run_all(make_case(1, 300, 2, 4, 64, 64, {0, 15, 16, 100, 100, 300}, kPlain, seed++));
  KKTCase<32, 128>::run_all(make_case(1, 130, 1, 1, 128, 64, {0, 1, 64, 130}, kPlain, seed++));
}

TEST_F(KKTSolveTest, GateAndBetaOptions) {
  std::uint64_t seed = 300;
  for (const Opts& o : kOptionSets) {
    if (o.l2) continue;  // the forward normalises k before this stage
    SCOPED_TRACE(o.name);
    KKTCase<64, 64>::run_all(make_case(1, 80, 1, 2, 64, 64, {0, 17, 80}, o, seed++));
  }
}

// BT = 64 has four subgroups and three distances of the solve, BT = 32
// two and one, BT = 16 one and none.
TEST_F(KKTSolveTest, Fp16TilesAtEveryChunkLength) {
  KKTCase<64, 64>::run_fp16(make_case(1, 100, 1, 2, 64, 64, {0, 30, 100}, kPlain, 400));
  KKTCase<32, 128>::run_fp16(make_case(2, 40, 1, 1, 128, 64, {}, kPlain, 401));
  KKTCase<16, 64>::run_fp16(make_case(1, 20, 1, 1, 64, 64, {}, kPlain, 402));
}

// Chunk 1 holds a k element fp16 cannot hold, chunk 2 two equal keys of
// norm 400 with no decay between them (M = 0.9 * 1.6e5); the fp16 kernel
// must solve both chunks in f32 (fp16 arithmetic would give Inf or NaN).
TEST_F(KKTSolveTest, ValuesBeyondFp16) {
  Case c = make_case(1, 200, 1, 1, 64, 64, {}, kPlain, 403);
  c.k[70 * 64 + 5] = 1.0e5f;
  for (std::size_t i = 0; i < 64; ++i) c.k[150 * 64 + i] = c.k[151 * 64 + i] = tilekernels::round_to_bf16(400.0f * c.k[150 * 64 + i]);
  for (std::size_t t : {150, 151}) {
    c.g[t] = -0.01f;
    c.beta[t] = 0.9f;
  }
  KKTCase<64, 64>::run_all(c);
  KKTCase<64, 64>::run_fp16(c);  // last: it skips where the device has no fp16 tiles
}

TEST_F(KKTSolveTest, ChecksArguments) {
  Context& ctx = context();
  using Kernel = gdn::KKTSolve<gdn::KKTSolveConfig<64, 64>>;
  Tensor k(ctx, DType::bf16, {1, 10, 1, 64}), g(ctx, DType::f32, {1, 10, 2}), beta(ctx, DType::f32, {1, 10, 2});
  Tensor g_out(ctx, DType::f32, {64, 2}), b_out(ctx, DType::f32, {64, 2}), A(ctx, DType::bf16, {64, 2, 64});
  Kernel kernel(ctx);
  Kernel::Args args;
  args.k = k, args.g = g, args.beta = beta, args.g_cumsum = g_out, args.beta_out = b_out, args.A = A;
  EXPECT_TRUE(kernel.can_implement(args));
  Tensor A_short(ctx, DType::bf16, {63, 2, 64});
  args.A = A_short;
  expect_check_error(kernel, args, ErrorCode::shape_mismatch, "A: expected shape [64, 2, 64]");
  args.A = A;
  args.options.gate_in_kernel = true;
  expect_check_error(kernel, args, ErrorCode::invalid_argument, "A_log");
  args.options = {};
  const std::vector<std::int32_t> cu{0, 4, 9};
  Tensor cu_dev(ctx, DType::i32, {3});
  args.cu_seqlens = cu_dev.ref();
  args.cu_seqlens_host = cu;
  expect_check_error(kernel, args, ErrorCode::invalid_argument, "must end at T = 10");
}

}  // namespace
