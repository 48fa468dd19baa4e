// SPDX-License-Identifier: MIT
// gdn::RecurrentStep, the decode step, against the double-precision
// token-by-token recurrence (reference/gdn/gated_delta_rule.hpp), which is
// its exact math: the kernel keeps everything in f32 and rounds only o to
// v's dtype. Every eligible variant runs every case; the state is copied
// into a guarded buffer (sentinels around it) and updated in place there;
// o and the per-token states start as NaN inside sentinels; each case runs
// twice, bit for bit the same, on the synchronization-validation Context.
//
// Budgets (relative RMS): the f32 state, per-token states and f32 o 1e-5
// (docs/DESIGN.md's f32 bar). A step's error is a few f32 roundings per
// element (sums of K products, the exp of the gate, the L2 norms); seen
// values are ~1e-7 to 1e-6, so 1e-5 leaves room for the GPU's exp and
// division (a few ulp) but not for a wrong term. o stored in bf16 or f16
// carries its own rounding, half an ulp at most: RMS about 2^-9 / sqrt(3)
// = 1.1e-3 (bf16) and 2^-12 / sqrt(3) = 1.4e-4 (f16); the budgets are
// 4e-3 and 5e-4.
#include <tilekernels/gdn/recurrent_step.hpp>

#include <algorithm>
#include <cstring>

#include "gdn_cases.hpp"

namespace {

using namespace gdntest;

constexpr double kBudgetF32 = 1e-5;

double o_budget(DType dt) { return dt == DType::f32 ? kBudgetF32 : dt == DType::f16 ? 5e-4 : 4e-3; }

// Copies `src` into `dst` (another buffer's range) ahead of the dispatches
// recorded after it.
void copy_into(Context& ctx, vk::CommandBuffer cmd, const Tensor& src, const TensorRef& dst) {
  cmd.copyBuffer(src.buffer().handle(), dst.buffer, vk::BufferCopy(0, dst.offset, dst.bytes()), ctx.dispatcher());
  const vk::MemoryBarrier b(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite);
  cmd.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eComputeShader, {}, b, {}, {},
                      ctx.dispatcher());
}

// A decode-step case: every option set with a state (the step always has
// one), the inputs as stored in `dt` (bf16 values from make_case; f16
// rounds them; f32 perturbs them off the bf16 grid).
Case step_case(std::size_t B, std::size_t T, std::size_t Hg, std::size_t H, std::size_t K, std::size_t V,
               std::vector<std::int32_t> cu, Opts o, std::uint64_t seed, DType dt = DType::bf16) {
  o.h0 = true;
  Case c = make_case(B, T, Hg, H, K, V, std::move(cu), o, seed);
  if (dt == DType::f16) {
    c.q = rounded(DType::f16, c.q), c.k = rounded(DType::f16, c.k), c.v = rounded(DType::f16, c.v);
  } else if (dt == DType::f32) {
    Rng rng(seed ^ 0x5eedu);
    for (auto* x : {&c.q, &c.k, &c.v})
      for (float& e : *x) e *= 1.0f + 0x1p-10f * rng.uniform(-1.0f, 1.0f);
  }
  return c;
}

template <std::uint32_t K, std::uint32_t V>
struct StepCase {
  using Kernel = gdn::RecurrentStep<gdn::RecurrentStepConfig<K, V>>;
  using Plan = typename Kernel::Plan;
  using Var = Variant<typename Kernel::Problem>;

  // Runs `c` with q, k, v in `dt`; `variant`, `bv`, `kpi` replace the plan's where given.
  // `fused`: q, k and v are views of one fused row per token, g and beta
  // of another, and o a view into wider rows: starting at an odd element
  // (Fused::odd: the kernel's pipelines for any view) or with every offset
  // and stride a multiple of 16 elements (Fused::aligned: the vector loads).
  enum class Fused { no, odd, aligned };
  static void run(const Case& c, DType dt, bool token_states, const Var* variant = nullptr, std::uint32_t bv = 0,
                  std::uint32_t kpi = 0, std::uint32_t ql = 0, Fused fused = Fused::no) {
    Context& ctx = sync_context();  // the state's copy and the step depend on each other
    const ref::GatedDeltaRuleProblem& p = c.p;
    const std::int64_t B = std::int64_t(p.B), T = std::int64_t(p.T), Hg = std::int64_t(p.Hg), H = std::int64_t(p.H);
    const std::int64_t N = std::int64_t(p.N());
    auto q = Tensor::from_floats(ctx, dt, {B, T, Hg, K}, c.q);
    auto k = Tensor::from_floats(ctx, dt, {B, T, Hg, K}, c.k);
    auto v = Tensor::from_floats(ctx, dt, {B, T, H, V}, c.v);
    auto g = Tensor::from_floats(ctx, DType::f32, {B, T, H}, c.g);
    auto beta = Tensor::from_floats(ctx, DType::f32, {B, T, H}, c.beta);
    std::optional<Tensor> a_log, dt_bias, cu;
    if (p.gate_in_kernel) a_log.emplace(Tensor::from_floats(ctx, DType::f32, {H}, c.A_log));
    if (!c.dt_bias.empty()) dt_bias.emplace(Tensor::from_floats(ctx, DType::f32, {H}, c.dt_bias));
    if (!p.cu_seqlens.empty()) {
      cu.emplace(ctx, DType::i32, Shape{std::int64_t(p.cu_seqlens.size())});
      cu->upload(std::span<const std::int32_t>(p.cu_seqlens));
    }
    const Shape state_shape = c.o.vk ? Shape{N, H, V, K} : Shape{N, H, K, V};
    const Shape ts_shape = c.o.vk ? Shape{B, T, H, V, K} : Shape{B, T, H, K, V};
    auto h0 = Tensor::from_floats(ctx, DType::f32, state_shape, c.h0);
    GuardedTensor state(ctx, DType::f32, state_shape), o(ctx, dt, {B, T, H, V});
    std::optional<GuardedTensor> ts;
    if (token_states) ts.emplace(ctx, DType::f32, ts_shape);

    Kernel step(ctx, {.qk_dtype = dt, .v_dtype = dt});
    typename Kernel::Args args;
    args.q = q, args.k = k, args.v = v, args.g = g, args.beta = beta, args.state = state, args.o = o;
    std::optional<FusedRows> qkv_rows, gate_rows, o_rows;
    if (fused != Fused::no) {
      const bool odd = fused == Fused::odd;
      qkv_rows.emplace(ctx, dt, B * T, 2 * Hg * K + H * V + (odd ? 3 : 16), odd ? 5 : 16);
      gate_rows.emplace(ctx, DType::f32, B * T, 2 * H + 1, 3);
      o_rows.emplace(ctx, dt, B * T, H * V + (odd ? 2 : 4), odd ? 2 : 4);  // a 16-bit o starts at an even element
      args.q = qkv_rows->view({B, T, Hg, K}, 2, 0);
      args.k = qkv_rows->view({B, T, Hg, K}, 2, Hg * K);
      args.v = qkv_rows->view({B, T, H, V}, 2, 2 * Hg * K + (odd ? 1 : 0));
      args.g = gate_rows->view({B, T, H}, 2, 0);
      args.beta = gate_rows->view({B, T, H}, 2, H + 1);
      args.o = o_rows->view({B, T, H, V}, 2, odd ? 2 : 4);
      EXPECT_EQ(step.problem(args).aligned, !odd);
      EXPECT_FALSE(step.problem(args).dense);
      qkv_rows->upload(args.q, c.q), qkv_rows->upload(args.k, c.k), qkv_rows->upload(args.v, c.v);
      gate_rows->upload(args.g, c.g), gate_rows->upload(args.beta, c.beta);
    }
    if (fused == Fused::no) {
      EXPECT_TRUE(step.problem(args).dense);  // the pipelines of dense tensors
    }
    if (ts) args.token_states = ts->ref();
    if (a_log) args.A_log = a_log->ref();
    if (dt_bias) args.dt_bias = dt_bias->ref();
    if (cu) args.cu_seqlens = cu->ref();
    args.cu_seqlens_host = p.cu_seqlens;
    args.options = gdn_options(c.o);
    if (p.scale != 0) args.scale = float(p.scale);  // 0: the default, 1 / sqrt(K)
    Plan plan = step.plan(args);
    if (variant) plan.variant = variant;
    if (bv) plan.bv = bv;
    if (kpi) plan.kpi = kpi;
    if (ql) plan.ql = ql;
    step.prepare(plan);
    SCOPED_TRACE(std::string(c.o.name) + (fused == Fused::odd ? " fused, odd" : fused == Fused::aligned ? " fused, aligned" : "") + " " + std::string(dtype_name(dt)) + " variant " +
                 std::string(plan.variant->name) + " bv " + std::to_string(plan.bv) + " kpi " +
                 std::to_string(plan.kpi) + " ql " + std::to_string(plan.ql));
    const auto record = [&](vk::CommandBuffer cmd) {
      copy_into(ctx, cmd, h0, state);
      step.record(cmd, args, plan);
    };
    ctx.submit_and_wait(record);
    const auto got_o = o_rows ? o_rows->read(args.o) : o.read_floats(), got_s = state.read_floats();
    if (o_rows) o_rows->expect_untouched_outside({args.o});
    const auto got_ts = ts ? ts->read_floats() : std::vector<float>{};

    const auto r = ref::gated_delta_rule(p, c.in(), token_states);
    const double e_o = relative_rms(got_o, r.o), e_s = relative_rms(got_s, r.final_state);
    EXPECT_LE(e_o, o_budget(dt)) << "o";
    EXPECT_LE(e_s, kBudgetF32) << "state";
    double e_ts = 0;
    if (ts) {
      e_ts = relative_rms(got_ts, r.token_states);
      EXPECT_LE(e_ts, kBudgetF32) << "token states";
    }
    std::printf("[gdn step] %-18s %-4s %-8s bv=%-2u kpi=%-2u ql=%u N=%zu T=%zu Hg=%zu H=%zu K=%u V=%u: o %.2e "
                "state %.2e token states %.2e\n",
                c.o.name, std::string(dtype_name(dt)).c_str(), std::string(plan.variant->name).c_str(), plan.bv,
                plan.kpi, plan.ql, p.N(), p.T, p.Hg, p.H, K, V, e_o, e_s, ts ? e_ts : 0.0);

    o.poison();
    state.poison();
    if (ts) ts->poison();
    ctx.submit_and_wait(record);
    const auto again_o = o_rows ? o_rows->read(args.o) : o.read_floats();
    EXPECT_EQ(0, std::memcmp(got_o.data(), again_o.data(), got_o.size() * 4)) << "o moved between runs";
    EXPECT_EQ(0, std::memcmp(got_s.data(), state.read_floats().data(), got_s.size() * 4)) << "state moved";
    if (ts) {
      EXPECT_EQ(0, std::memcmp(got_ts.data(), ts->read_floats().data(), got_ts.size() * 4)) << "token states moved";
    }
  }

  // Every variant this device can run, with the automatic geometry.
  static void run_all(const Case& c, DType dt = DType::bf16, bool token_states = true) {
    for (const auto& v : Kernel::variants)
      if (eligibility(context(), v, typename Kernel::Problem{}) &&
          Kernel(context()).can_run(v, 8, gdn::RecurrentStepConfig<K, V>::default_kpi))
        run(c, dt, token_states, &v);
  }
};

class RecurrentStepTest : public DeviceTest {};

TEST_F(RecurrentStepTest, TokensAndSequences) {
  using C = StepCase<64, 64>;
  std::uint64_t seed = 2000;
  for (std::size_t T : {1, 4, 8}) C::run_all(step_case(1, T, 1, 2, 64, 64, {}, kPlain, seed++));
  C::run_all(step_case(3, 4, 1, 2, 64, 64, {}, kPlain, seed++));
  C::run_all(step_case(1, 12, 1, 2, 64, 64, {0, 1, 5, 12}, kPlain, seed++));  // lengths 1, 4, 7
  C::run_all(step_case(1, 3, 1, 2, 64, 64, {0, 3}, kPlain, seed++));          // one sequence
  C::run_all(step_case(1, 9, 1, 2, 64, 64, {0, 8, 8, 9}, kPlain, seed++));    // an empty one keeps its state
  C::run_all(step_case(1, 6, 1, 2, 64, 64, {0, 2, 4, 6}, kPlain, seed++), DType::bf16, false);
}

// q, k, v, g, beta and o as views of an engine's fused rows, in every
// dtype, for a batch of single tokens and for ragged sequences.
TEST_F(RecurrentStepTest, ViewsOfAFusedProjection) {
  using C = StepCase<64, 64>;
  std::uint64_t seed = 2600;
  for (const DType dt : {DType::bf16, DType::f16, DType::f32})
    for (const auto fused : {C::Fused::odd, C::Fused::aligned}) {
      C::run(step_case(3, 1, 2, 4, 64, 64, {}, kPlain, seed++, dt), dt, false, nullptr, 0, 0, 0, fused);
      C::run(step_case(1, 7, 1, 2, 64, 64, {0, 2, 7}, kPlain, seed++, dt), dt, true, nullptr, 0, 0, 0, fused);
    }
}

TEST_F(RecurrentStepTest, GroupedHeads) {
  std::uint64_t seed = 2100;
  for (std::size_t H : {2, 4, 8}) StepCase<64, 64>::run_all(step_case(1, 5, 2, H, 64, 64, {0, 1, 5}, kPlain, seed++));
}

TEST_F(RecurrentStepTest, EveryOption) {
  std::uint64_t seed = 2200;
  bool token_states = false;
  for (const Opts& o : kOptionSets) {
    StepCase<64, 64>::run_all(step_case(1, 9, 1, 4, 64, 64, {0, 1, 4, 9}, o, seed++), DType::bf16, token_states);
    token_states = !token_states;
  }
}

TEST_F(RecurrentStepTest, DTypes) {
  std::uint64_t seed = 2300;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    StepCase<64, 64>::run_all(step_case(2, 4, 1, 2, 64, 64, {}, kPlain, seed, dt), dt);
    StepCase<64, 64>::run_all(step_case(1, 8, 1, 2, 64, 64, {0, 1, 8}, kOptionSets[6], seed + 1, dt), dt);  // all options
    seed += 2;
  }
}

// Slices, rows per invocation and quads on adjacent lanes, including sums
// over K that span several subgroups (K / kpi lanes, ql apart, beyond the
// subgroup) and fit in one.
TEST_F(RecurrentStepTest, Geometries) {
  using C = StepCase<64, 64>;
  const Case c = step_case(1, 6, 1, 2, 64, 64, {0, 2, 6}, kOptionSets[5], 2400);  // [V, K]
  const Case d = step_case(1, 6, 1, 2, 64, 64, {0, 2, 6}, kPlain, 2401);
  struct Geometry {
    std::uint32_t bv, kpi, ql;
  };
  const Geometry geometries[] = {{8, 4, 1},  {8, 16, 1}, {16, 8, 1}, {32, 4, 1}, {64, 8, 1},
                                 {64, 16, 1}, {8, 8, 2},  {32, 8, 8}, {64, 4, 4}, {16, 16, 4}};
  for (const auto& v : C::Kernel::variants) {
    if (!eligibility(context(), v, C::Kernel::Problem{})) continue;
    for (const Geometry& g : geometries) {
      if (!C::Kernel(context()).can_run(v, g.bv, g.kpi)) continue;
      C::run(c, DType::bf16, true, &v, g.bv, g.kpi, g.ql);
      C::run(d, DType::bf16, false, &v, g.bv, g.kpi, g.ql);
    }
  }
}

TEST_F(RecurrentStepTest, HeadSizes) {
  StepCase<128, 128>::run_all(step_case(1, 5, 1, 2, 128, 128, {0, 1, 5}, kOptionSets[6], 2500));
  StepCase<256, 256>::run_all(step_case(1, 2, 1, 1, 256, 256, {}, kPlain, 2501));
  StepCase<128, 64>::run_all(step_case(2, 3, 1, 2, 128, 64, {}, kOptionSets[5], 2502), DType::f32);
}

// Zero rows with qk_l2norm: the norm's 1e-6 keeps 1 / sqrt(|x|^2 + 1e-6)
// finite, so a zero k adds nothing to the state and a zero q reads 0,
// never NaN.
TEST_F(RecurrentStepTest, ZeroRowsWithL2Norm) {
  Case c = step_case(1, 4, 1, 2, 64, 64, {}, kOptionSets[1], 2600);
  std::fill(c.k.begin() + 64, c.k.begin() + 128, 0.0f);   // token 1's k
  std::fill(c.q.begin() + 128, c.q.begin() + 192, 0.0f);  // token 2's q
  StepCase<64, 64>::run_all(c);
}

TEST_F(RecurrentStepTest, ChecksArguments) {
  Context& ctx = context();
  using Kernel = gdn::RecurrentStep<gdn::RecurrentStepConfig<64, 64>>;
  Tensor q(ctx, DType::bf16, {1, 6, 1, 64}), v(ctx, DType::bf16, {1, 6, 2, 64}), g(ctx, DType::f32, {1, 6, 2});
  Tensor o(ctx, DType::bf16, {1, 6, 2, 64}), state(ctx, DType::f32, {1, 2, 64, 64});
  Kernel step(ctx, {.qk_dtype = DType::bf16, .v_dtype = DType::bf16});
  Kernel::Args args;
  args.q = q, args.k = q, args.v = v, args.g = g, args.beta = g, args.o = o, args.state = state;
  EXPECT_TRUE(step.can_implement(args)) << step.can_implement(args).message;

  Kernel::Args bad = args;
  Tensor q32(ctx, DType::f32, {1, 6, 1, 64});
  bad.k = q32;
  expect_check_error(step, bad, ErrorCode::dtype_mismatch, "k: expected dtype bf16, got f32");
  bad = args;
  Tensor o32(ctx, DType::f32, {1, 6, 2, 64});
  bad.o = o32;
  expect_check_error(step, bad, ErrorCode::dtype_mismatch, "o: expected dtype bf16");
  bad = args;
  Tensor q_wide(ctx, DType::bf16, {1, 6, 1, 128});
  bad.q = q_wide;
  expect_check_error(step, bad, ErrorCode::shape_mismatch, "q: expected shape [1, 6, 1, 64]");
  bad = args;
  Tensor v3(ctx, DType::bf16, {1, 6, 3, 64});
  Tensor q2(ctx, DType::bf16, {1, 6, 2, 64});
  bad.q = q2, bad.k = q2, bad.v = v3;
  expect_check_error(step, bad, ErrorCode::shape_mismatch, "H = 3 heads is not a multiple of Hg = 2");
  bad = args;
  Tensor state_vk(ctx, DType::f32, {1, 2, 64, 32});
  bad.state = state_vk;
  expect_check_error(step, bad, ErrorCode::shape_mismatch, "state: expected shape [1, 2, 64, 64]");
  bad = args;
  Tensor ts(ctx, DType::f32, {1, 6, 2, 64, 64});
  Tensor ts_short(ctx, DType::f32, {1, 5, 2, 64, 64});
  bad.token_states = ts_short.ref();
  expect_check_error(step, bad, ErrorCode::shape_mismatch, "token_states: expected shape [1, 6, 2, 64, 64]");
  bad.token_states = ts.ref();
  EXPECT_TRUE(step.can_implement(bad)) << step.can_implement(bad).message;
  bad = args;
  bad.options.gate_in_kernel = true;
  expect_check_error(step, bad, ErrorCode::invalid_argument, "A_log: gate_in_kernel needs it");
  bad = args;
  bad.options.allow_neg_eigval = true;
  expect_check_error(step, bad, ErrorCode::invalid_argument, "allow_neg_eigval needs beta_sigmoid");

  // cu_seqlens: three sequences need a state of three and B = 1.
  Tensor cu(ctx, DType::i32, {4}), cu_f(ctx, DType::f32, {4});
  const std::vector<std::int32_t> good{0, 1, 1, 6}, decreasing{0, 3, 1, 6}, short_end{0, 1, 2, 5};
  bad = args;
  bad.cu_seqlens = cu.ref();
  expect_check_error(step, bad, ErrorCode::shape_mismatch, "state: expected shape [3, 2, 64, 64]");
  Tensor state3(ctx, DType::f32, {3, 2, 64, 64});
  bad.state = state3;
  EXPECT_TRUE(step.can_implement(bad)) << step.can_implement(bad).message;
  bad.cu_seqlens_host = good;
  EXPECT_TRUE(step.can_implement(bad)) << step.can_implement(bad).message;
  bad.cu_seqlens_host = decreasing;
  expect_check_error(step, bad, ErrorCode::invalid_argument, "cu_seqlens: must not decrease");
  bad.cu_seqlens_host = short_end;
  expect_check_error(step, bad, ErrorCode::invalid_argument, "cu_seqlens: must end at T = 6");
  bad.cu_seqlens_host = {};
  bad.cu_seqlens = cu_f.ref();
  expect_check_error(step, bad, ErrorCode::dtype_mismatch, "cu_seqlens: expected dtype i32");
  bad = args;
  bad.cu_seqlens_host = good;
  expect_check_error(step, bad, ErrorCode::invalid_argument, "host copy was given without the device copy");
  Tensor q_b2(ctx, DType::bf16, {2, 3, 1, 64}), v_b2(ctx, DType::bf16, {2, 3, 2, 64}), g_b2(ctx, DType::f32, {2, 3, 2});
  bad = args;
  bad.q = q_b2, bad.k = q_b2, bad.v = v_b2, bad.o = v_b2, bad.g = g_b2, bad.beta = g_b2, bad.cu_seqlens = cu.ref();
  expect_check_error(step, bad, ErrorCode::invalid_argument, "cu_seqlens: needs B = 1");

  // A plan changed by hand is checked too.
  Kernel::Plan plan = step.plan(args);
  plan.bv = 24;
  EXPECT_THROW(step.check(args, plan), Error);
  plan.bv = 8, plan.kpi = 2;
  EXPECT_THROW(step.check(args, plan), Error);
  plan.kpi = 8, plan.ql = 4;  // more quads than bv / 4
  EXPECT_THROW(step.check(args, plan), Error);
}

}  // namespace
