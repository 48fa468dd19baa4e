// SPDX-License-Identifier: MIT
// gdn::ChunkForward, the whole chunked forward, against the double-precision
// chunked reference at FLA's rounding points (Rounding::fla: o and the
// final state within 5e-3) and against the exact token-by-token recurrence
// (within the 1e-2 that FLA's rounding points alone come near, see
// bench/notes/2026-11-gdn-forward.md). Recorded on the synchronization-validation
// Context; the workspace starts as NaN, and each case runs twice (bit for
// bit the same). The inputs and o are dense tensors or views of fused rows.
#include <tilekernels/gdn/chunk_forward.hpp>
#include <tilekernels/gdn/state_recurrence.hpp>

#include <algorithm>
#include <cstring>
#include <limits>

#include "gdn_cases.hpp"

namespace {

using namespace gdntest;

constexpr double kBudgetFla = 5e-3;
constexpr double kBudgetExact = 1e-2;

struct Errors {
  double o_fla = 0, state_fla = 0, o_exact = 0, state_exact = 0;
};

// How a case passes q, k, v, g, beta and o: dense tensors, or views of an
// engine's fused rows (FusedRows: q, k and v in one bf16 row per token, g
// and beta in one f32 row, o inside wider bf16 rows; every other element
// NaN), their heads further apart than a row, at offsets and strides that
// are multiples of 8 elements (every row on a 16-byte boundary), or odd ones
// (o: even, not multiples of 8; g and beta interleaved).
enum class Layout { dense, fused_aligned, fused_odd };
const char* layout_name(Layout l) {
  return l == Layout::dense ? "dense" : l == Layout::fused_aligned ? "fused, aligned" : "fused, odd";
}

template <std::uint32_t BT, std::uint32_t K, std::uint32_t V>
struct ForwardCase {
  using Kernel = gdn::ChunkForward<gdn::ChunkForwardConfig<BT, K, V>>;

  // keep_state false: no final_state argument (the kernels' variants without
  // it); o is checked, the state errors stay 0.
  static Errors run(const Case& c, bool keep_state = true, Layout layout = Layout::dense) {
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
    std::optional<FusedRows> qkv_rows, gate_rows, o_rows;
    if (layout != Layout::dense) {
      const bool odd = layout == Layout::fused_odd;
      const auto heads_apart = [](TensorRef t, std::int64_t elements) {
        t.strides[2] = elements;
        return t;
      };
      const std::int64_t gap = odd ? 1 : 8, o_gap = odd ? 2 : 8;  // elements between one head's row and the next
      const std::int64_t qk = Hg * (K + gap);
      qkv_rows.emplace(ctx, DType::bf16, B * T, 2 * qk + H * (V + gap) + (odd ? 3 : 8), odd ? 5 : 8);
      gate_rows.emplace(ctx, DType::f32, B * T, 2 * H + 1, 3);
      o_rows.emplace(ctx, DType::bf16, B * T, H * (V + o_gap) + o_gap, odd ? 2 : 8);
      args.q = heads_apart(qkv_rows->view({B, T, Hg, K}, 2, 0), K + gap);
      args.k = heads_apart(qkv_rows->view({B, T, Hg, K}, 2, qk), K + gap);
      args.v = heads_apart(qkv_rows->view({B, T, H, V}, 2, 2 * qk + (odd ? 1 : 0)), V + gap);
      args.o = heads_apart(o_rows->view({B, T, H, V}, 2, o_gap), V + o_gap);
      if (odd) {  // interleaved
        args.g = heads_apart(gate_rows->view({B, T, H}, 2, 0), 2);
        args.beta = heads_apart(gate_rows->view({B, T, H}, 2, 1), 2);
      } else {
        args.g = gate_rows->view({B, T, H}, 2, 0);
        args.beta = gate_rows->view({B, T, H}, 2, H + 1);
      }
      qkv_rows->upload(args.q, c.q), qkv_rows->upload(args.k, c.k), qkv_rows->upload(args.v, c.v);
      gate_rows->upload(args.g, c.g), gate_rows->upload(args.beta, c.beta);
      EXPECT_TRUE(fwd.problem(args).qk_views) << "strided q and k must be copied for the later stages";
    }
    SCOPED_TRACE(layout_name(layout));
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
    const auto read_o = [&] { return o_rows ? o_rows->read(args.o) : o.read_floats(); };
    ctx.submit_and_wait([&](vk::CommandBuffer cmd) { fwd.record(cmd, args); });
    const auto got_o = read_o(), got_ht = ht.read_floats();
    EXPECT_TRUE(ws.guards_intact()) << "the forward wrote outside its workspace";
    if (o_rows) {
      o_rows->expect_untouched_outside({args.o});
      qkv_rows->expect_untouched_outside({args.q, args.k, args.v});
      gate_rows->expect_untouched_outside({args.g, args.beta});
    }

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
    std::printf("[gdn forward] %s (%s) N=%zu T=%zu Hg=%zu H=%zu K=%u V=%u BT=%u: o %.2e / %.2e, state %.2e / %.2e "
                "(fla / exact)\n",
                c.o.name, layout_name(layout), p.N(), p.T, p.Hg, p.H, K, V, BT, e.o_fla, e.o_exact, e.state_fla,
                e.state_exact);

    o.poison();
    if (o_rows) o_rows->upload(args.o, std::vector<float>(got_o.size(), std::numeric_limits<float>::quiet_NaN()));
    ht.poison();
    ws.poison();
    ctx.submit_and_wait([&](vk::CommandBuffer cmd) { fwd.record(cmd, args); });
    EXPECT_EQ(0, std::memcmp(got_o.data(), read_o().data(), got_o.size() * 4)) << "o moved between runs";
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

// q, k and v as views of one fused bf16 row per token, g and beta of one
// f32 row, o a view into wider rows: on 16-byte boundaries (the default
// pipelines) and at odd elements (o at even ones; word-wise pipelines), with
// and without qk_l2norm (q and k normalised into the workspace, or copied
// there), fixed length (B = 2) and varlen, grouped heads.
TEST_F(ChunkForwardTest, ViewsOfFusedProjections) {
  std::uint64_t seed = 1500;
  for (const Layout layout : {Layout::fused_aligned, Layout::fused_odd})
    for (const Opts& o : {kPlain, kOptionSets[1]}) {
      ForwardCase<64, 64, 64>::run(make_case(2, 100, 1, 2, 64, 64, {}, o, seed++), true, layout);
      ForwardCase<64, 64, 64>::run(make_case(1, 150, 2, 4, 64, 64, {0, 40, 41, 150}, o, seed++), true, layout);
    }
  // Every option (the gate computed from g in the kernel, beta from logits,
  // the state [V, K]) at K = V = 128, and another chunk length.
  ForwardCase<64, 128, 128>::run(make_case(1, 130, 1, 2, 128, 128, {0, 65, 130}, kOptionSets[6], seed++), true,
                                 Layout::fused_odd);
  ForwardCase<32, 64, 128>::run(make_case(2, 45, 2, 4, 64, 128, {}, kOptionSets[3], seed++), true,
                                Layout::fused_aligned);
}

// What a view may be: the innermost dimension dense, offsets multiples of
// the element size, a bf16 o on even elements, rows off 16-byte boundaries
// only inside the envelope; each is refused naming the tensor. A strided or
// misaligned q or k is copied into the workspace (qk_views), which grows.
TEST_F(ChunkForwardTest, ChecksViews) {
  Context& ctx = context();
  using Kernel = gdn::ChunkForward<gdn::ChunkForwardConfig<64, 64, 64>>;
  constexpr std::int64_t B = 1, T = 10, Hg = 1, H = 2, K = 64, V = 64;
  FusedRows qkv(ctx, DType::bf16, B * T, 2 * Hg * K + H * V + 3, 5), gate(ctx, DType::f32, B * T, 2 * H + 1, 3);
  FusedRows out(ctx, DType::bf16, B * T, H * V + 4, 2), out_odd_rows(ctx, DType::bf16, B * T, H * V + 3, 2);
  Kernel fwd(ctx);
  Kernel::Args args;
  args.q = qkv.view({B, T, Hg, K}, 2, 0), args.k = qkv.view({B, T, Hg, K}, 2, Hg * K);
  args.v = qkv.view({B, T, H, V}, 2, 2 * Hg * K + 1);
  args.g = gate.view({B, T, H}, 2, 0), args.beta = gate.view({B, T, H}, 2, H + 1);
  args.o = out.view({B, T, H, V}, 2, 2);
  EXPECT_TRUE(fwd.problem(args).qk_views);
  Tensor ws(ctx, DType::u32, {std::int64_t(Kernel::workspace_bytes(fwd.problem(args)) / 4)});
  args.workspace = Workspace{ws.ref()};
  EXPECT_TRUE(fwd.can_implement(args)) << fwd.can_implement(args).message;
  const Kernel::Args good = args;

  args.k.strides.back() = 2;
  expect_check_error(fwd, args, ErrorCode::invalid_argument,
                     "gdn.chunk_forward: k: the innermost dimensions must be contiguous");
  args = good, args.o = out.view({B, T, H, V}, 2, 3);
  expect_check_error(fwd, args, ErrorCode::invalid_argument,
                     "gdn.chunk_forward: o: a 16-bit output view needs an even element offset and even strides");
  args = good, args.o = out_odd_rows.view({B, T, H, V}, 2, 2);
  expect_check_error(fwd, args, ErrorCode::invalid_argument, "o: a 16-bit output view needs an even element offset");
  args = good, args.g.offset += 2;
  expect_check_error(fwd, args, ErrorCode::invalid_argument, "g: offset");
  args = good, args.beta.strides = {3};
  expect_check_error(fwd, args, ErrorCode::invalid_argument, "beta: strides [3] do not match the shape's 3 dimensions");

  // Built without unaligned views: v and o views off 16-byte boundaries are
  // outside its envelope (and named), views on them are inside.
  gdn::GdnEnvelope no_unaligned;
  no_unaligned.unaligned_views = false;
  const Kernel aligned_only(ctx, no_unaligned);
  expect_check_error(aligned_only, good, ErrorCode::invalid_argument,
                     "v: a view whose rows do not all start on a 16-byte boundary");
  FusedRows qkv8(ctx, DType::bf16, B * T, 2 * Hg * K + H * V + 8, 8), out8(ctx, DType::bf16, B * T, H * V + 8, 8);
  args = good, args.v = qkv8.view({B, T, H, V}, 2, 2 * Hg * K);
  expect_check_error(aligned_only, args, ErrorCode::invalid_argument,
                     "o: a view whose rows do not all start on a 16-byte boundary");
  args.o = out8.view({B, T, H, V}, 2, 8);
  EXPECT_TRUE(aligned_only.can_implement(args)) << aligned_only.can_implement(args).message;

  // q and k dense and bound where they are: no copy, a smaller workspace;
  // a dense k at an offset no device aligns bindings to is copied.
  Tensor q(ctx, DType::bf16, {B, T, Hg, K});
  args = good, args.q = q, args.k = q;
  EXPECT_FALSE(fwd.problem(args).qk_views);
  EXPECT_LT(Kernel::workspace_bytes(fwd.problem(args)), Kernel::workspace_bytes(fwd.problem(good)));
  EXPECT_TRUE(fwd.can_implement(args)) << fwd.can_implement(args).message;
  Tensor q_wide(ctx, DType::bf16, {B * T * Hg * K + 1});
  args.k = q_wide.ref(), args.k.shape = {B, T, Hg, K}, args.k.offset = 2, args.k.size -= 2;
  EXPECT_TRUE(fwd.problem(args).qk_views);
  EXPECT_TRUE(fwd.can_implement(args)) << fwd.can_implement(args).message;
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
