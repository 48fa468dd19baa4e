// SPDX-License-Identifier: MIT
// The envelope contract (core/kernel.hpp): a kernel's constructor builds
// every pipeline that a call inside its envelope can take, so no record()
// of such a call creates one or is refused. Each test builds one kernel,
// then records a sweep of calls over its envelope (batch, query rows, keys,
// tokens, sequences, options, views, with and without a workspace) into a
// command buffer that is never submitted, and checks that every call was recorded
// and that the Context created no pipeline meanwhile. It prints how many
// pipelines the constructor built and how long they took.
#include <tilekernels/aura.hpp>
#include <tilekernels/gdn.hpp>

#include <chrono>
#include <cstdio>
#include <string>

#include "../support.hpp"

namespace {

using namespace tktest;
namespace aura = tilekernels::aura;
namespace gdn = tilekernels::gdn;

// `t` reshaped (dense, from its offset) to `shape`: a smaller tensor inside
// a buffer allocated for the largest call.
TensorRef shaped(TensorRef t, Shape shape) {
  t.shape = std::move(shape);
  t.strides.clear();
  t.size = t.bytes();
  return t;
}

// Builds a kernel, reporting its pipelines and the time the constructor took.
template <class K, class... A>
K build(Context& ctx, const char* what, A&&... args) {
  const std::uint64_t before = ctx.pipelines_created();
  const auto t0 = std::chrono::steady_clock::now();
  K kernel(ctx, std::forward<A>(args)...);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[envelope] %s: %zu pipelines, %llu created by this constructor, %.0f ms\n", what, kernel.pipelines(),
              static_cast<unsigned long long>(ctx.pipelines_created() - before), ms);
  return kernel;
}

// Records `calls` calls with `record(i)` into one command buffer that is
// never submitted; fails the test on any refusal or created pipeline.
template <class F>
void record_all(Context& ctx, int calls, F record) {
  OwnCommandBuffer cmd(ctx);
  const std::uint64_t pipelines = ctx.pipelines_created();
  int refused = 0;
  for (int i = 0; i < calls; ++i) {
    try {
      record(cmd.get(), i);
    } catch (const std::exception& e) {
      if (++refused <= 5) ADD_FAILURE() << "call " << i << " was refused: " << e.what();
    }
  }
  cmd.end();
  EXPECT_EQ(refused, 0) << "of " << calls << " calls inside the envelope";
  EXPECT_EQ(ctx.pipelines_created(), pipelines) << "a record() inside the envelope created a pipeline";
}

class Envelope : public DeviceTest {};

TEST_F(Envelope, DecodeAttentionRecordsEveryCallWithoutBuildingAPipeline) {
  Context& ctx = context();
  using PC = aura::PagedCacheConfig<128, 16, 4, 4>;
  using Kernel = aura::DecodeAttention<aura::DecodeAttentionConfig<PC, DType::bf16, DType::f32>>;
  constexpr std::int64_t seqs = 4, rows = 16, qh = 8, kvh = 2, D = 128, pages = 2;
  const std::vector<std::int64_t> keys{1, 16, 17, 100, 1024, 4096, 32768, 131072};
  const std::int64_t max_pages = keys.back() / PC::page_tokens;
  const Kernel kernel =
      build<Kernel>(ctx, "aura::DecodeAttention K4V4 D128, 4 sequences, q_len <= 16, 8/2 heads, lse",
                    aura::DecodeAttentionEnvelope{.max_num_seqs = seqs, .max_q_len = rows, .q_heads = qh, .kv_heads = kvh});

  Tensor q(ctx, DType::bf16, {seqs, rows, qh, D}), out(ctx, DType::f32, {seqs, rows, qh, D}),
      lse(ctx, DType::f32, {seqs, rows, qh});
  Tensor k_codes(ctx, PC::store_dtype(4), PC::store_shape(4, pages, kvh)),
      v_codes(ctx, PC::store_dtype(4), PC::store_shape(4, pages, kvh)),
      k_norms(ctx, PC::norm_dtype, PC::norm_shape(pages, kvh)), v_norms(ctx, PC::norm_dtype, PC::norm_shape(pages, kvh));
  Tensor table(ctx, DType::i32, {seqs * max_pages}), lens(ctx, DType::i32, {seqs});
  const Tensor tables = aura::CacheTables::make(ctx, PC::format, 1, 2);

  struct Call {
    std::int64_t n, q_len, keys;
    bool lse, workspace;
  };
  std::vector<Call> calls;
  for (std::int64_t n = 1; n <= seqs; ++n)
    for (std::int64_t r = 1; r <= rows; ++r)
      for (const std::int64_t k : keys)
        for (const bool l : {false, true})
          for (const bool w : {false, true}) calls.push_back({n, r, k, l, w});
  const auto args_of = [&](const Call& c) {
    aura::DecodeAttentionArgs a;
    a.q = shaped(q, {c.n, c.q_len, qh, D});
    a.output = shaped(out, {c.n, c.q_len, qh, D});
    if (c.lse) a.lse = shaped(lse, {c.n, c.q_len, qh});
    a.k_codes = k_codes, a.v_codes = v_codes, a.k_norms = k_norms.ref(), a.v_norms = v_norms.ref();
    a.block_table = shaped(table, {c.n, (c.keys + PC::page_tokens - 1) / PC::page_tokens});
    a.seq_lens = shaped(lens, {c.n});
    a.tables = tables;
    a.max_seq_len = c.keys;
    return a;
  };
  std::uint64_t ws_bytes = 0;
  for (const Call& c : calls) ws_bytes = std::max(ws_bytes, kernel.workspace_bytes(kernel.problem(args_of(c))));
  ASSERT_GT(ws_bytes, 0u) << "the sweep should reach calls that split";
  Tensor ws(ctx, DType::u32, {static_cast<std::int64_t>((ws_bytes + 3) / 4)});

  record_all(ctx, static_cast<int>(calls.size()), [&](vk::CommandBuffer cmd, int i) {
    const Call& c = calls[static_cast<std::size_t>(i)];
    auto a = args_of(c);
    const auto p = kernel.problem(a);
    if (c.workspace) {
      a.workspace = Workspace{shaped(ws, {static_cast<std::int64_t>((kernel.workspace_bytes(p) + 3) / 4)})};
      kernel.record(cmd, a);
    } else {
      kernel.record(cmd, a, kernel.plan(p, 0));  // no workspace: no splits
    }
  });
}

TEST_F(Envelope, CacheWriteRecordsEveryCallWithoutBuildingAPipeline) {
  Context& ctx = context();
  using PC = aura::PagedCacheConfig<128, 16, 4, 4>;
  using Kernel = aura::CacheWrite<aura::CacheWriteConfig<PC>>;
  constexpr std::int64_t kvh = 2, D = 128, pages = 300;
  const Kernel kernel = build<Kernel>(ctx, "aura::CacheWrite K4V4 D128");
  const std::vector<std::int64_t> tokens{1, 2, 15, 16, 17, 100, 4096};
  Tensor k(ctx, DType::bf16, {tokens.back(), kvh, D}), v(ctx, DType::bf16, {tokens.back(), kvh, D}),
      slots(ctx, DType::i32, {tokens.back()});
  Tensor k_codes(ctx, PC::store_dtype(4), PC::store_shape(4, pages, kvh)),
      v_codes(ctx, PC::store_dtype(4), PC::store_shape(4, pages, kvh)),
      k_norms(ctx, PC::norm_dtype, PC::norm_shape(pages, kvh)), v_norms(ctx, PC::norm_dtype, PC::norm_shape(pages, kvh));
  const Tensor tables = aura::CacheTables::make(ctx, PC::format, 1, 2);
  record_all(ctx, static_cast<int>(tokens.size()), [&](vk::CommandBuffer cmd, int i) {
    const std::int64_t n = tokens[static_cast<std::size_t>(i)];
    aura::CacheWriteArgs a;
    a.k = shaped(k, {n, kvh, D}), a.v = shaped(v, {n, kvh, D}), a.slot_mapping = shaped(slots, {n});
    a.tables = tables;
    a.k_codes = k_codes, a.v_codes = v_codes, a.k_norms = k_norms.ref(), a.v_norms = v_norms.ref();
    kernel.record(cmd, a);
  });
}

TEST_F(Envelope, ChunkForwardRecordsEveryCallWithoutBuildingAPipeline) {
  Context& ctx = context();
  using Kernel = gdn::ChunkForward<gdn::ChunkForwardConfig<64, 128, 128>>;
  constexpr std::int64_t Hg = 2, H = 4, K = 128, V = 128, max_tokens = 4096, max_seqs = 5;
  const Kernel kernel = build<Kernel>(ctx, "gdn::ChunkForward BT 64, K = V = 128, every option");

  Tensor q(ctx, DType::bf16, {max_tokens * Hg * K}), k(ctx, DType::bf16, {max_tokens * Hg * K}),
      v(ctx, DType::bf16, {max_tokens * H * V}), o(ctx, DType::bf16, {max_tokens * H * V}),
      g(ctx, DType::f32, {max_tokens * H}), beta(ctx, DType::f32, {max_tokens * H}),
      h0(ctx, DType::f32, {max_seqs * H * K * V}), ht(ctx, DType::f32, {max_seqs * H * K * V}),
      cu(ctx, DType::i32, {max_seqs + 1}), A_log(ctx, DType::f32, {H}), dt_bias(ctx, DType::f32, {H});

  gdn::GdnOptions l2, gated, negative, vk_state;
  l2.qk_l2norm = true;
  gated.gate_in_kernel = true, gated.beta_sigmoid = true;
  negative.beta_sigmoid = true, negative.allow_neg_eigval = true, negative.qk_l2norm = true;
  vk_state.state_layout = gdn::StateLayout::vk;
  const std::vector<gdn::GdnOptions> options{{}, l2, gated, negative, vk_state};
  // Views of fused rows (q, k, v in one row per token, g and beta in
  // another, o inside wider rows): on 16-byte boundaries, and at odd
  // elements (o: even).
  const FusedRows qkv_aligned(ctx, DType::bf16, max_tokens, 2 * Hg * K + H * V + 8, 8),
      qkv_odd(ctx, DType::bf16, max_tokens, 2 * Hg * K + H * V + 3, 5),
      gates(ctx, DType::f32, max_tokens, 2 * H + 1, 3), o_aligned(ctx, DType::bf16, max_tokens, H * V + 8, 8),
      o_odd(ctx, DType::bf16, max_tokens, H * V + 2, 2);
  struct Call {
    std::int64_t B, T, N;  // N > 0: varlen (B = 1)
    std::size_t options;
    bool states;
    int views = 0;  // 0: dense; 1: views on 16-byte boundaries; 2: at odd elements
  };
  std::vector<Call> calls;
  for (const std::int64_t T : {1, 63, 64, 65, 1000, 2048})
    for (const auto& [B, N] : {std::pair<std::int64_t, std::int64_t>{1, 0}, {2, 0}, {1, 1}, {1, 2}, {1, 5}})
      if (N <= T) {
        for (std::size_t opt = 0; opt < options.size(); ++opt)
          for (const bool states : {false, true}) calls.push_back({B, T, N, opt, states});
        for (const int views : {1, 2})
          for (const std::size_t opt : {std::size_t(0), std::size_t(1)}) calls.push_back({B, T, N, opt, true, views});
      }
  const auto args_of = [&](const Call& c) {
    Kernel::Args a;
    const std::int64_t seqs = c.N > 0 ? c.N : c.B;
    a.q = shaped(q, {c.B, c.T, Hg, K}), a.k = shaped(k, {c.B, c.T, Hg, K});
    a.v = shaped(v, {c.B, c.T, H, V}), a.o = shaped(o, {c.B, c.T, H, V});
    a.g = shaped(g, {c.B, c.T, H}), a.beta = shaped(beta, {c.B, c.T, H});
    if (c.views) {
      const FusedRows& qkv = c.views == 1 ? qkv_aligned : qkv_odd;
      a.q = qkv.view({c.B, c.T, Hg, K}, 2, 0), a.k = qkv.view({c.B, c.T, Hg, K}, 2, Hg * K);
      a.v = qkv.view({c.B, c.T, H, V}, 2, 2 * Hg * K + (c.views == 1 ? 0 : 1));
      a.g = gates.view({c.B, c.T, H}, 2, 0), a.beta = gates.view({c.B, c.T, H}, 2, H + 1);
      a.o = c.views == 1 ? o_aligned.view({c.B, c.T, H, V}, 2, 8) : o_odd.view({c.B, c.T, H, V}, 2, 2);
    }
    a.options = options[c.options];
    const Shape state = a.options.state_layout == gdn::StateLayout::kv ? Shape{seqs, H, K, V} : Shape{seqs, H, V, K};
    if (c.states) a.initial_state = shaped(h0, state), a.final_state = shaped(ht, state);
    if (c.N > 0) a.cu_seqlens = shaped(cu, {c.N + 1});
    if (a.options.gate_in_kernel) a.A_log = A_log.ref(), a.dt_bias = dt_bias.ref();
    return a;
  };
  std::uint64_t ws_bytes = 0;
  for (const Call& c : calls) ws_bytes = std::max(ws_bytes, Kernel::workspace_bytes(kernel.problem(args_of(c))));
  Tensor ws(ctx, DType::u32, {static_cast<std::int64_t>((ws_bytes + 3) / 4)});
  record_all(ctx, static_cast<int>(calls.size()), [&](vk::CommandBuffer cmd, int i) {
    auto a = args_of(calls[static_cast<std::size_t>(i)]);
    a.workspace = Workspace{ws.ref()};
    kernel.record(cmd, a);
  });
}

TEST_F(Envelope, RecurrentStepRecordsEveryCallWithoutBuildingAPipeline) {
  Context& ctx = context();
  using Kernel = gdn::RecurrentStep<gdn::RecurrentStepConfig<128, 128>>;
  constexpr std::int64_t Hg = 2, H = 4, K = 128, V = 128, max_batch = 256;
  const Kernel kernel = build<Kernel>(ctx, "gdn::RecurrentStep K = V = 128, every dtype");

  const std::vector<DType> dtypes{DType::bf16, DType::f16, DType::f32};
  std::vector<Tensor> qk, vs, os;
  for (const DType d : dtypes) {
    qk.emplace_back(ctx, d, Shape{max_batch * Hg * K});
    vs.emplace_back(ctx, d, Shape{max_batch * H * V});
    os.emplace_back(ctx, d, Shape{max_batch * H * V});
  }
  Tensor g(ctx, DType::f32, {max_batch * H}), beta(ctx, DType::f32, {max_batch * H}),
      state(ctx, DType::f32, {max_batch * H * K * V}), cu(ctx, DType::i32, {max_batch + 1});
  gdn::GdnOptions l2;
  l2.qk_l2norm = true, l2.beta_sigmoid = true;
  struct Call {
    std::int64_t batch;
    std::size_t qk, v;
    bool varlen, l2;
  };
  std::vector<Call> calls;
  for (const std::int64_t b : {1, 2, 3, 16, 31, 64, 100, 256})
    for (std::size_t i = 0; i < dtypes.size(); ++i)
      for (std::size_t j = 0; j < dtypes.size(); ++j)
        for (const bool varlen : {false, true})
          for (const bool norm : {false, true}) calls.push_back({b, i, j, varlen, norm});
  record_all(ctx, static_cast<int>(calls.size()), [&](vk::CommandBuffer cmd, int i) {
    const Call& c = calls[static_cast<std::size_t>(i)];
    Kernel::Args a;
    const std::int64_t B = c.varlen ? 1 : c.batch, T = c.varlen ? c.batch : 1;
    a.q = shaped(qk[c.qk], {B, T, Hg, K}), a.k = a.q;
    a.v = shaped(vs[c.v], {B, T, H, V}), a.o = shaped(os[c.v], {B, T, H, V});
    a.g = shaped(g, {B, T, H}), a.beta = shaped(beta, {B, T, H});
    a.state = shaped(state, {c.batch, H, K, V});
    if (c.varlen) a.cu_seqlens = shaped(cu, {c.batch + 1});
    if (c.l2) a.options = l2;
    kernel.record(cmd, a);
  });
}

// What each engine-facing kernel's constructor costs on a Context of its
// own (nothing built before it, no pipeline cache given): every pipeline it
// holds is one it built, and the time is reported.
TEST(EnvelopePrepare, EachKernelOnAFreshContext) {
  const auto fresh = [](const char* what, auto make) {
    ContextOptions options;
    options.validation = false;
    Context ctx(options);
    const auto t0 = std::chrono::steady_clock::now();
    const auto kernel = make(ctx);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(ctx.pipelines_created(), kernel.pipelines()) << what;
    std::printf("[prepare] %s: %zu pipelines in %.0f ms (%s)\n", what, kernel.pipelines(), ms, ctx.info().name.c_str());
  };
  using PC = aura::PagedCacheConfig<128, 16, 4, 4>;
  fresh("aura::DecodeAttention K4V4 D128, bf16 q, f32 out, 4 sequences, q_len <= 16, 32/8 heads, lse", [](Context& c) {
    return aura::DecodeAttention<aura::DecodeAttentionConfig<PC, DType::bf16, DType::f32>>(
        c, {.max_num_seqs = 4, .max_q_len = 16, .q_heads = 32, .kv_heads = 8});
  });
  fresh("aura::DecodeAttention K4V4 D128, bf16 q and out, 1 sequence, q_len 1, 32/8 heads, no lse", [](Context& c) {
    return aura::DecodeAttention<aura::DecodeAttentionConfig<PC, DType::bf16, DType::bf16>>(
        c, {.max_num_seqs = 1, .max_q_len = 1, .q_heads = 32, .kv_heads = 8, .lse = false});
  });
  fresh("aura::CacheWrite K4V4 D128", [](Context& c) { return aura::CacheWrite<aura::CacheWriteConfig<PC>>(c); });
  fresh("aura::FlashPass2 D128 (any heads and blocks)", [](Context& c) {
    return aura::FlashPass2<aura::FlashPass2Config<128, DType::f32, DType::bf16>>(c);
  });
  fresh("gdn::ChunkForward BT 64, K = V = 128, every option", [](Context& c) {
    return gdn::ChunkForward<gdn::ChunkForwardConfig<64, 128, 128>>(c);
  });
  fresh("gdn::ChunkForward BT 64, K = V = 128, Qwen3-Next's options only", [](Context& c) {
    gdn::GdnOptions o;
    o.qk_l2norm = o.gate_in_kernel = o.beta_sigmoid = true;
    return gdn::ChunkForward<gdn::ChunkForwardConfig<64, 128, 128>>(c, gdn::GdnEnvelope{.options = o});
  });
  fresh("gdn::RecurrentStep K = V = 128, every dtype", [](Context& c) {
    return gdn::RecurrentStep<gdn::RecurrentStepConfig<128, 128>>(c);
  });
  fresh("gdn::RecurrentStep K = V = 128, bf16", [](Context& c) {
    return gdn::RecurrentStep<gdn::RecurrentStepConfig<128, 128>>(c, {.qk_dtype = DType::bf16, .v_dtype = DType::bf16});
  });
}

// A call outside the envelope is refused by can_implement() and by
// record() with an Error, before anything is recorded or built.
TEST_F(Envelope, CallsOutsideItAreRefused) {
  Context& ctx = context();
  const auto expect_refused = [&](const auto& kernel, const auto& args, const char* what) {
    SCOPED_TRACE(what);
    const std::uint64_t pipelines = ctx.pipelines_created();
    const Status s = kernel.can_implement(args);
    EXPECT_FALSE(s);
    EXPECT_NE(s.message.find("envelope"), std::string::npos) << s.message;
    OwnCommandBuffer cmd(ctx);
    EXPECT_THROW(kernel.record(cmd.get(), args), Error);
    cmd.end();
    EXPECT_EQ(ctx.pipelines_created(), pipelines);
  };

  using PC = aura::PagedCacheConfig<64, 16, 4, 4>;
  using Attention = aura::DecodeAttention<aura::DecodeAttentionConfig<PC, DType::bf16, DType::f32>>;
  const Attention attention(ctx, {.max_num_seqs = 1, .max_q_len = 1, .q_heads = 4, .kv_heads = 2, .lse = false});
  Tensor q(ctx, DType::bf16, {2, 2, 4, 64}), out(ctx, DType::f32, {2, 2, 4, 64}), lse(ctx, DType::f32, {2, 2, 4});
  Tensor codes(ctx, PC::store_dtype(4), PC::store_shape(4, 2, 2)), norms(ctx, PC::norm_dtype, PC::norm_shape(2, 2));
  Tensor table(ctx, DType::i32, {2, 2}), lens(ctx, DType::i32, {2});
  const Tensor tables = aura::CacheTables::make(ctx, PC::format, 1, 2);
  aura::DecodeAttentionArgs a;
  a.q = shaped(q, {1, 1, 4, 64}), a.output = shaped(out, {1, 1, 4, 64});
  a.k_codes = codes, a.v_codes = codes, a.k_norms = norms.ref(), a.v_norms = norms.ref();
  a.block_table = shaped(table, {1, 2}), a.seq_lens = shaped(lens, {1}), a.tables = tables;
  EXPECT_TRUE(attention.can_implement(a)) << attention.can_implement(a).message;
  auto more = a;
  more.block_table = table, more.seq_lens = lens;
  more.q = shaped(q, {2, 1, 4, 64}), more.output = shaped(out, {2, 1, 4, 64});
  expect_refused(attention, more, "two sequences");
  auto rows = a;
  rows.q = shaped(q, {1, 2, 4, 64}), rows.output = shaped(out, {1, 2, 4, 64});
  expect_refused(attention, rows, "two new tokens");
  auto with_lse = a;
  with_lse.lse = shaped(lse, {1, 1, 4});
  expect_refused(attention, with_lse, "lse");

  using Step = gdn::RecurrentStep<gdn::RecurrentStepConfig<64, 64>>;
  const Step step(ctx, {.qk_dtype = DType::bf16, .v_dtype = DType::bf16});
  Tensor sq(ctx, DType::f32, {1, 1, 1, 64}), sv(ctx, DType::bf16, {1, 1, 2, 64}), sg(ctx, DType::f32, {1, 1, 2}),
      state(ctx, DType::f32, {1, 2, 64, 64});
  Step::Args s;
  s.q = sq, s.k = sq, s.v = sv, s.g = sg, s.beta = sg, s.state = state, s.o = sv;
  expect_refused(step, s, "f32 q and k");

  using Forward = gdn::ChunkForward<gdn::ChunkForwardConfig<16, 64, 64>>;
  const Forward forward(ctx, gdn::GdnEnvelope{.options = gdn::GdnOptions{}});
  Tensor fq(ctx, DType::bf16, {1, 20, 1, 64}), fv(ctx, DType::bf16, {1, 20, 2, 64}), fg(ctx, DType::f32, {1, 20, 2}),
      fo(ctx, DType::bf16, {1, 20, 2, 64}), a_log(ctx, DType::f32, {2});
  Forward::Args f;
  f.q = fq, f.k = fq, f.v = fv, f.g = fg, f.beta = fg, f.o = fo;
  Tensor ws(ctx, DType::u32, {static_cast<std::int64_t>(Forward::workspace_bytes(forward.problem(f)) / 4 + 1)});
  f.workspace = Workspace{ws.ref()};
  EXPECT_TRUE(forward.can_implement(f)) << forward.can_implement(f).message;
  f.options.gate_in_kernel = true, f.A_log = a_log.ref();
  expect_refused(forward, f, "the gate in the kernel");
}

}  // namespace
