// gdn::ChunkForward, the whole chunked forward, against the double-precision
// chunked reference at FLA's rounding points (Rounding::fla: o and the
// final state within 5e-3) and against the exact token-by-token recurrence
// (within the 1e-2 that FLA's rounding points alone come near, see
// bench/notes/2026-11-gdn-forward.md). Recorded on the synchronization-validation
// Context; the workspace starts as NaN, and each case runs twice (bit for
// bit the same).
#include <tilekernels/gdn/chunk_forward.hpp>
#include <tilekernels/gdn/state_recurrence.hpp>

#include <algorithm>
#include <cstring>

#include "gdn_cases.hpp"

namespace {

using namespace gdntest;

constexpr double kBudgetFla = 5e-3;
constexpr double kBudgetExact = 1e-2;

struct Errors {
  double o_fla = 0, state_fla = 0, o_exact = 0, state_exact = 0;
};

template <std::uint32_t BT, std::uint32_t K, std::uint32_t V>
struct ForwardCase {
  using Kernel = gdn::ChunkForward<gdn::ChunkForwardConfig<BT, K, V>>;

  // keep_state false: no final_state argument (the kernels' variants without
  // it); o is checked, the state errors stay 0.
  static Errors run(const Case& c, bool keep_state = true) {
    Context& ctx = sync_context();
    const ref::GatedDeltaRuleProblem& p = c.p;
    const std::int64_t B = std::int64_t(p.B), T = std::int64_t(p.T), Hg = std::int64_t(p.Hg), H = std::int64_t(p.H);
    auto q = Tensor::from_floats(ctx, DType::bf16, {B, T, Hg, K}, c.q);
    auto k = Tensor::from_floats(ctx, DType::bf16, {B, T, Hg, K}, c.k);
    auto v = Tensor::from_floats(ctx, DType::bf16, {B, T, H, V}, c.v);
    auto g = Tensor::from_floats(ctx, DType::f32, {B, T, H}, c.g);
    auto beta = Tensor::from_floats(ctx, DType::f32, {B, T, H}, c.beta);
    std::optional<Tensor> a_log, dt_bias, h0, cu;
    if (p.gate_in_kernel) a_log.emplace(Tensor::from_floats(ctx, DType::f32, {H}, c.A_log));
    if (!c.dt_bias.empty()) dt_bias.emplace(Tensor::from_floats(ctx, DType::f32, {H}, c.dt_bias));
    const std::int64_t N = std::int64_t(p.N());
    const Shape state = c.o.vk ? Shape{N, H, V, K} : Shape{N, H, K, V};
    if (!c.h0.empty()) h0.emplace(Tensor::from_floats(ctx, DType::f32, state, c.h0));
    if (!p.cu_seqlens.empty()) {
      cu.emplace(ctx, DType::i32, Shape{std::int64_t(p.cu_seqlens.size())});
      cu->upload(std::span<const std::int32_t>(p.cu_seqlens));
    }
    GuardedTensor o(ctx, DType::bf16, {B, T, H, V});
    GuardedTensor ht(ctx, DType::f32, state);

    Kernel fwd(ctx, gdn::GdnEnvelope{gdn_options(c.o)});
    typename Kernel::Args args;
    args.q = q, args.k = k, args.v = v, args.g = g, args.beta = beta, args.o = o;
    if (h0) args.initial_state = h0->ref();
    if (keep_state) args.final_state = ht.ref();
    if (a_log) args.A_log = a_log->ref();
    if (dt_bias) args.dt_bias = dt_bias->ref();
    if (cu) args.cu_seqlens = cu->ref();
    args.cu_seqlens_host = p.cu_seqlens;
    args.options = gdn_options(c.o);
    if (p.scale != 0) args.scale = float(p.scale);  // 0: the default, 1 / sqrt(K)
    GuardedTensor ws(ctx, DType::u32, {std::int64_t(Kernel::workspace_bytes(fwd.problem(args)) / 4)});
    args.workspace = Workspace{ws.ref()};
    ctx.submit_and_wait([&](vk::CommandBuffer cmd) { fwd.record(cmd, args); });
    const auto got_o = o.read_floats(), got_ht = ht.read_floats();
    EXPECT_TRUE(ws.guards_intact()) << "the forward wrote outside its workspace";

    const auto fla = ref::chunk_forward(p, c.in(), BT, ref::Rounding::fla);
    const auto exact = ref::gated_delta_rule(p, c.in());
    Errors e{relative_rms(got_o, fla.o), 0, relative_rms(got_o, exact.o), 0};
    if (keep_state) {
      e.state_fla = relative_rms(got_ht, fla.final_state);
      e.state_exact = relative_rms(got_ht, exact.final_state);
    } else {
      const auto words = ht.read_words();
      EXPECT_TRUE(std::all_of(words.begin(), words.end(), [](std::uint32_t w) { return w == 0xFFFFFFFFu; }))
          << "a final_state that was not passed changed";
    }
    EXPECT_LE(e.o_fla, kBudgetFla) << "o against the Rounding::fla reference";
    EXPECT_LE(e.state_fla, kBudgetFla) << "final state against the Rounding::fla reference";
    EXPECT_LE(e.o_exact, kBudgetExact) << "o against the exact recurrence";
    EXPECT_LE(e.state_exact, kBudgetExact) << "final state against the exact recurrence";
    std::printf("[gdn forward] %s N=%zu T=%zu Hg=%zu H=%zu K=%u V=%u BT=%u: o %.2e / %.2e, state %.2e / %.2e "
                "(fla / exact)\n",
                c.o.name, p.N(), p.T, p.Hg, p.H, K, V, BT, e.o_fla, e.o_exact, e.state_fla, e.state_exact);

    o.poison();
    ht.poison();
    ws.poison();
    ctx.submit_and_wait([&](vk::CommandBuffer cmd) { fwd.record(cmd, args); });
    EXPECT_EQ(0, std::memcmp(got_o.data(), o.read_floats().data(), got_o.size() * 4)) << "o moved between runs";
    EXPECT_EQ(0, std::memcmp(got_ht.data(), ht.read_floats().data(), got_ht.size() * 4)) << "state moved";
    return e;
  }
};

class ChunkForwardTest : public DeviceTest {};

TEST_F(ChunkForwardTest, FixedLengthAcrossT) {
  std::uint64_t seed = 1000;
  for (std::size_t T : {1, 63, 64, 65, 500}) ForwardCase<64, 64, 64>::run(make_case(1, T, 1, 2, 64, 64, {}, kPlain, seed++));
  // Two rows of 65: tails inside the batch (one dispatch per row for the reused stages).
  ForwardCase<64, 64, 64>::run(make_case(2, 65, 1, 1, 64, 64, {}, kPlain, seed++));
  ForwardCase<64, 64, 64>::run(make_case(2, 128, 2, 2, 64, 64, {}, kPlain, seed++));  // GQA 1
}

TEST_F(ChunkForwardTest, VariableLength) {
  std::uint64_t seed = 1100;
  ForwardCase<64, 64, 64>::run(make_case(1, 15, 1, 2, 64, 64, {0, 15}, kPlain, seed++));
  ForwardCase<64, 64, 64>::run(make_case(1, 1200, 1, 4, 64, 64, {0, 15, 100, 300, 1200}, kPlain, seed++));  // GQA 4
  ForwardCase<64, 64, 64>::run(make_case(1, 130, 1, 2, 64, 64, {0, 1, 65, 65, 130}, kPlain, seed++));  // lengths 1, 0
  ForwardCase<64, 64, 64>::run(make_case(1, 192, 1, 2, 64, 64, {0, 64, 192}, kPlain, seed++));  // whole chunks only
}

TEST_F(ChunkForwardTest, EveryOption) {
  std::uint64_t seed = 1200;
  for (const Opts& o : kOptionSets) ForwardCase<64, 64, 64>::run(make_case(1, 150, 1, 2, 64, 64, {0, 70, 150}, o, seed++));
}

TEST_F(ChunkForwardTest, HeadSizesAndChunkLengths) {
  std::uint64_t seed = 1300;
  ForwardCase<64, 128, 128>::run(make_case(1, 130, 1, 2, 128, 128, {}, kPlain, seed++));
  ForwardCase<32, 64, 128>::run(make_case(1, 100, 1, 2, 64, 128, {0, 33, 100}, kPlain, seed++));
  ForwardCase<16, 128, 64>::run(make_case(1, 50, 1, 1, 128, 64, {}, kOptionSets[6], seed++));
  ForwardCase<64, 256, 64>::run(make_case(1, 70, 1, 1, 256, 64, {}, kPlain, seed++));
  ForwardCase<64, 64, 256>::run(make_case(1, 70, 1, 1, 64, 256, {}, kPlain, seed++));
}

// Without final_state (the state kernels' variants that keep no state at the
// end): o as with it, fixed length and varlen, h0 on and off.
TEST_F(ChunkForwardTest, WithoutFinalState) {
  std::uint64_t seed = 1400;
  ForwardCase<64, 64, 64>::run(make_case(1, 130, 1, 2, 64, 64, {}, kPlain, seed++), false);
  ForwardCase<64, 128, 128>::run(make_case(1, 200, 1, 2, 128, 128, {0, 1, 70, 200}, kOptionSets[7], seed++), false);
  // The rows kernel where ManyHeadsVariableLength reaches it (132 or more multiprocessors).
  if (sync_context().info().multiprocessors >= 132)
    ForwardCase<32, 64, 128>::run(make_case(1, 150, 6, 12, 64, 128, {0, 40, 41, 150}, kPlain, seed++), false);
}

// Enough (sequence, head, column slice) workgroups (3 x 12 x 128 / 32 = 144)
// to fill the 132 multiprocessors of an H100 or H200, so that the state
// recurrence takes its rows kernel there (StateRecurrence::rows_applies);
// other devices run their own paths on the same case.
TEST_F(ChunkForwardTest, ManyHeadsVariableLength) {
  using State = gdn::StateRecurrence<gdn::StateRecurrenceConfig<32, 64, 128>>;
  const auto& chosen = select_variant(sync_context(), State::name, State::variants, State::Problem{3, 1, 1, 12});
  std::printf("[gdn forward] the state recurrence runs %s\n", std::string(chosen.name).c_str());
  if (sync_context().info().multiprocessors >= 132 && eligibility(sync_context(), State::variants[0], {})) {
    EXPECT_EQ(chosen.name, State::rows_name) << "the case no longer reaches the rows kernel";
  }
  ForwardCase<32, 64, 128>::run(make_case(1, 150, 6, 12, 64, 128, {0, 40, 41, 150}, kPlain, 960));
}

TEST_F(ChunkForwardTest, ChecksArguments) {
  Context& ctx = context();
  using Kernel = gdn::ChunkForward<gdn::ChunkForwardConfig<64, 64, 64>>;
  Tensor q(ctx, DType::bf16, {1, 10, 1, 64}), v(ctx, DType::bf16, {1, 10, 2, 64}), g(ctx, DType::f32, {1, 10, 2});
  Tensor o(ctx, DType::bf16, {1, 10, 2, 64});
  Kernel fwd(ctx);
  Kernel::Args args;
  args.q = q, args.k = q, args.v = v, args.g = g, args.beta = g, args.o = o;
  expect_check_error(fwd, args, ErrorCode::invalid_argument, "workspace");
  Tensor ws(ctx, DType::u32, {std::int64_t(Kernel::workspace_bytes(fwd.problem(args)) / 4)});
  args.workspace = Workspace{ws.ref()};
  EXPECT_TRUE(fwd.can_implement(args)) << fwd.can_implement(args).message;
  const Kernel::Args good = args;

  // Each tensor: a wrong dtype or shape is named.
  Tensor q_f32(ctx, DType::f32, {1, 10, 1, 64}), k_short(ctx, DType::bf16, {1, 9, 1, 64});
  Tensor v_f32(ctx, DType::f32, {1, 10, 2, 64}), g_4d(ctx, DType::f32, {1, 10, 2, 1});
  Tensor o_wide(ctx, DType::bf16, {1, 10, 2, 128}), v_3heads(ctx, DType::bf16, {1, 10, 3, 64});
  Tensor q_2heads(ctx, DType::bf16, {1, 10, 2, 64});
  args.q = q_f32;
  expect_check_error(fwd, args, ErrorCode::dtype_mismatch, "gdn.chunk_forward: q: expected dtype bf16");
  args = good, args.k = k_short;
  expect_check_error(fwd, args, ErrorCode::shape_mismatch, "k: expected shape [1, 10, 1, 64]");
  args = good, args.v = v_f32;
  expect_check_error(fwd, args, ErrorCode::dtype_mismatch, "v: expected dtype bf16");
  args = good, args.g = g_4d;
  expect_check_error(fwd, args, ErrorCode::shape_mismatch, "g: expected shape [1, 10, 2]");
  args = good, args.beta = q;
  expect_check_error(fwd, args, ErrorCode::dtype_mismatch, "beta: expected dtype f32");
  args = good, args.o = o_wide;
  expect_check_error(fwd, args, ErrorCode::shape_mismatch, "o: expected shape [1, 10, 2, 64]");
  args = good, args.q = q_2heads, args.k = q_2heads, args.v = v_3heads, args.o = v_3heads;
  expect_check_error(fwd, args, ErrorCode::shape_mismatch, "H = 3 heads is not a multiple of Hg = 2");

  // States: their shape follows the layout.
  Tensor bad_state(ctx, DType::f32, {1, 2, 64, 32}), state_bf16(ctx, DType::bf16, {1, 2, 64, 64});
  args = good, args.final_state = bad_state.ref();
  expect_check_error(fwd, args, ErrorCode::shape_mismatch, "final_state: expected shape [1, 2, 64, 64]");
  args = good, args.initial_state = state_bf16.ref();
  expect_check_error(fwd, args, ErrorCode::dtype_mismatch, "initial_state: expected dtype f32");

  // Options that need more.
  args = good, args.options.gate_in_kernel = true;
  expect_check_error(fwd, args, ErrorCode::invalid_argument, "A_log: gate_in_kernel needs it");
  Tensor a_log_short(ctx, DType::f32, {1});
  args.A_log = a_log_short.ref();
  expect_check_error(fwd, args, ErrorCode::shape_mismatch, "A_log: expected shape [2]");
  args = good, args.options.allow_neg_eigval = true;
  expect_check_error(fwd, args, ErrorCode::invalid_argument, "allow_neg_eigval needs beta_sigmoid");

  // cu_seqlens: a partition of the tokens of one row, host and device copies agreeing.
  args = good;
  const std::vector<std::int32_t> cu{0, 3, 10};
  Tensor cu_dev(ctx, DType::i32, {3}), cu_short(ctx, DType::i32, {2}), cu_four(ctx, DType::i32, {4});
  args.cu_seqlens = cu_dev.ref();
  args.cu_seqlens_host = cu;
  expect_check_error(fwd, args, ErrorCode::buffer_too_small, "workspace");
  Tensor ws_varlen(ctx, DType::u32, {std::int64_t(Kernel::workspace_bytes(fwd.problem(args)) / 4)});
  args.workspace = Workspace{ws_varlen.ref()};
  EXPECT_TRUE(fwd.can_implement(args)) << fwd.can_implement(args).message;
  args.cu_seqlens = cu_short.ref();
  expect_check_error(fwd, args, ErrorCode::invalid_argument, "cu_seqlens: the host copy holds 3 offsets, the device copy 2");
  args.cu_seqlens.reset();
  expect_check_error(fwd, args, ErrorCode::invalid_argument, "cu_seqlens: the host copy was given without the device copy");
  args.cu_seqlens = cu_dev.ref();
  const std::vector<std::int32_t> decreasing{0, 6, 4, 10}, short_end{0, 3, 9}, late_start{1, 3, 10};
  args.cu_seqlens = cu_four.ref();
  args.cu_seqlens_host = decreasing;
  expect_check_error(fwd, args, ErrorCode::invalid_argument, "cu_seqlens: must not decrease");
  args.cu_seqlens = cu_dev.ref();
  args.cu_seqlens_host = short_end;
  expect_check_error(fwd, args, ErrorCode::invalid_argument, "cu_seqlens: must end at T = 10");
  args.cu_seqlens_host = late_start;
  expect_check_error(fwd, args, ErrorCode::invalid_argument, "cu_seqlens: must start at 0");
  Tensor q2(ctx, DType::bf16, {2, 5, 1, 64}), v2(ctx, DType::bf16, {2, 5, 2, 64}), g2(ctx, DType::f32, {2, 5, 2});
  args = good, args.q = q2, args.k = q2, args.v = v2, args.o = v2, args.g = g2, args.beta = g2;
  const std::vector<std::int32_t> two_rows{0, 5};
  args.cu_seqlens = cu_short.ref();
  args.cu_seqlens_host = two_rows;
  expect_check_error(fwd, args, ErrorCode::invalid_argument, "cu_seqlens: needs B = 1");

  // run() checks before it sizes a workspace from the shapes.
  Tensor q_2d(ctx, DType::bf16, {10, 64});
  args = good, args.workspace.reset(), args.q = q_2d;
  EXPECT_THROW(fwd.run(args), Error);
}

}  // namespace
