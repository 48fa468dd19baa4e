// SPDX-License-Identifier: MIT
// aura::DecodeAttention against the double-precision reference over the
// cache the GPU wrote (reference/aura/decode_attention.hpp): lengths around
// page and block edges in one batch, pages shuffled, every geometry knob,
// both variants, GQA 1 / 4 / 8 with 1, 4 and 16 new tokens, windows, sinks,
// softcap, empty attention, the grid split, and the checks before
// recording. Formats, quality and whole decode steps are in
// test_decode_attention_formats.cpp.
#include <memory>
#include <set>

#include "decode_attention_support.hpp"

namespace {

using namespace tktest;
using namespace tktest::aura_cache;

using K4V4 = aura::PagedCacheConfig<128, 16, 4, 4>;
using Attention = aura::DecodeAttentionConfig<K4V4, DType::bf16, DType::f32>;
using Kernel = aura::DecodeAttention<Attention>;

class DecodeAttentionTest : public DeviceTest {};

TEST_F(DecodeAttentionTest, LengthsAroundPageAndBlockEdges) {
  // One batch: sequences of 1, 15, 16, 17, 1000 and 4097 keys over shuffled
  // pages; one workgroup per KV head (no workspace), the automatic split,
  // and geometries by hand, on each variant.
  const std::vector<std::int32_t> lens{1, 15, 16, 17, 1000, 4097};
  // (variant, workgroup, keys per invocation, row vecs, splits); 0: automatic.
  const std::array<std::uint32_t, 5> runs[] = {
      {0, 0, 0, 0, 0}, {0, 64, 1, 1, 5}, {0, 128, 2, 2, 3}, {1, 64, 4, 2, 2}, {0, 256, 1, 1, 4}};
  std::uint64_t seed = 1;
  {
    for (const auto& run : runs) {
      const std::array<std::uint32_t, 4> g{run[1], run[2], run[3], run[4]};
      const int variant = static_cast<int>(run[0]);
      AttentionCase c;
      c.lens = lens;
      c.seed = seed++;
      c.geometry = g;
      c.variant = variant;
      c.key_mean = 0.5;
      SCOPED_TRACE("variant " + std::to_string(variant) + " geometry " + std::to_string(g[0]) + "/" +
                   std::to_string(g[1]) + "/" + std::to_string(g[2]) + "/" + std::to_string(g[3]));
      expect_matches<Attention>(run_attention<Attention>(c));
    }
  }
  AttentionCase unsplit;
  unsplit.lens = lens;
  unsplit.workspace = false;
  expect_matches<Attention>(run_attention<Attention>(unsplit));
}

TEST_F(DecodeAttentionTest, GroupsAndNewTokens) {
  // (q_heads, kv_heads, q_len): GQA 1, 4 and 8 with 1, 4 and 16 new tokens
  // (up to 128 query rows of a KV head: 16 row chunks).
  const std::int64_t shapes[][3] = {{2, 2, 1}, {2, 2, 4}, {8, 2, 4}, {8, 2, 16}, {8, 1, 1}, {8, 1, 4}, {16, 2, 16}};
  std::uint64_t seed = 100;
  for (const auto& sh : shapes) {
    for (bool split : {false, true}) {
      AttentionCase c = groups_case(sh, seed++, split);
      if (split) c.geometry = sh[2] * sh[0] / sh[1] > 4 ? std::array<std::uint32_t, 4>{128, 2, 2, 3} : std::array<std::uint32_t, 4>{64, 1, 1, 3};
      SCOPED_TRACE(groups_trace(sh, split));
      expect_matches<Attention>(run_attention<Attention>(c));
    }
  }
}

TEST_F(DecodeAttentionTest, WindowSinksSoftcapScale) {
  std::uint64_t seed = 200;
  for (std::uint32_t window : {1u, 7u, 100u})
    for (int variant : {0, 1}) {
      AttentionCase c = options_case(window, seed++);
      c.variant = variant;
      c.geometry = variant == 0 ? std::array<std::uint32_t, 4>{128, 2, 2, 2} : std::array<std::uint32_t, 4>{64, 4, 2, 2};
      SCOPED_TRACE("window " + std::to_string(window) + " variant " + std::to_string(variant));
      expect_matches<Attention>(run_attention<Attention>(c));
    }
}

// A decode step whose q, k and v are slices of one fused projection
// starting at an element offset no device aligns a binding to (3), or at
// one it may (8), and whose output is a view with a gap between rows:
// cache_write and the attention read the views in place.
TEST_F(DecodeAttentionTest, ViewsOfAFusedProjection) {
  using Bf16Out = aura::DecodeAttentionConfig<K4V4, DType::f32, DType::bf16>;
  using F32Out = aura::DecodeAttentionConfig<K4V4, DType::f32, DType::f32>;
  for (const std::int64_t at : {3, 8}) {
    SCOPED_TRACE("fused at " + std::to_string(at));
    AttentionCase c;
    c.lens = {37, 300, 5};
    c.q_len = 2;
    c.step = true;
    c.fused_at = at;
    c.seed = 700 + static_cast<std::uint64_t>(at);
    expect_matches<Bf16Out>(run_attention<Bf16Out>(c));
    expect_matches<F32Out>(run_attention<F32Out>(c));
  }
}

TEST_F(DecodeAttentionTest, EmptyAttention) {
  // Inactive entries (seq_len 0) next to live ones: zeros and lse -inf, or
  // lse = sink with a sink; a split over nothing as well.
  for (bool sinks : {false, true})
    for (std::uint32_t splits : {1u, 4u}) {
      AttentionCase c;
      c.lens = {0, 5, 0};
      c.sinks = sinks;
      c.geometry = {64, 1, 1, splits};
      c.seed = 300 + splits;
      const auto r = run_attention<Attention>(c);
      expect_matches<Attention>(r);
      const std::size_t per_seq = static_cast<std::size_t>(c.q_len * c.q_heads);
      for (std::size_t i = 0; i < per_seq; ++i) {
        const float want_lse = sinks && i > 0 ? r.options.sinks[i] : -std::numeric_limits<float>::infinity();
        EXPECT_EQ(r.lse[i], want_lse) << "row " << i;
        for (std::size_t d = 0; d < 128; ++d) ASSERT_EQ(r.output[i * 128 + d], 0.0f) << "row " << i;
      }
    }
}

// A NaN planted in the value of new token 1 (KV head 0) and in the key of
// new token 2 (KV head 1) of 4: the causal mask hides them from the rows
// before, whose outputs stay finite and match the reference on every
// variant and with splits (a masked key weighs 0 by selection, not by a
// product with 0).
TEST_F(DecodeAttentionTest, NonFiniteKeysBehindTheMaskDoNotLeak) {
  constexpr std::size_t D = 128;
  constexpr std::int64_t len = 50, q_len = 4, q_heads = 8, kv_heads = 2;
  for (const int variant : {0, 1, 2})
    for (const std::uint32_t splits : {0u, 3u}) {
      AttentionCase c;
      c.lens = {static_cast<std::int32_t>(len)};
      c.q_len = q_len, c.q_heads = q_heads, c.kv_heads = kv_heads;
      c.variant = variant;
      c.seed = 450 + static_cast<std::uint64_t>(variant) * 2 + splits;
      if (splits) c.geometry = {128, 2, 2, splits};
      c.edit = [](std::vector<float>&, std::vector<float>& k, std::vector<float>& v, std::size_t) {
        const std::size_t row = kv_heads * D, first_new = len - q_len;
        v[(first_new + 1) * row + 0 * D + 5] = std::numeric_limits<float>::quiet_NaN();
        k[(first_new + 2) * row + 1 * D + 7] = std::numeric_limits<float>::quiet_NaN();
      };
      const auto r = run_attention<Attention>(c);
      SCOPED_TRACE(r.variant + (splits ? " split" : ""));
      // Row (token j, head h) sees the NaN of KV head h / 4 from token 1 (V) or 2 (K) on.
      std::vector<float> got;
      std::vector<double> want;
      for (std::int64_t j = 0; j < q_len; ++j)
        for (std::int64_t h = 0; h < q_heads; ++h) {
          const bool sees = h / (q_heads / kv_heads) == 0 ? j >= 1 : j >= 2;
          if (sees) continue;
          for (std::size_t d = 0; d < D; ++d) {
            const std::size_t i = static_cast<std::size_t>(j * q_heads + h) * D + d;
            ASSERT_TRUE(std::isfinite(r.output[i])) << "token " << j << " head " << h << " dim " << d;
            got.push_back(r.output[i]);
            want.push_back(r.reference.output[i]);
          }
        }
      EXPECT_EQ(got.size(), (8 + 4) * D);  // token 0: 8 rows, token 1: 4, tokens 2 and 3: none
      EXPECT_LE(relative_rms(got, want), output_budget(Attention::out_dtype));
    }
}

TEST_F(DecodeAttentionTest, LongSequence) {
  AttentionCase c;
  c.lens = {20000};
  c.kv_heads = 1;
  c.q_heads = 4;
  c.seed = 400;
  c.geometry = {128, 2, 1, 64};
  expect_matches<Attention>(run_attention<Attention>(c));
}

// Many splits, with splits that saw no keys (the short sequence): the
// merge kernel takes 72 and 80 states per row quad, 5 batches of 16, the
// last one partly past the states.
TEST_F(DecodeAttentionTest, ManySplitsMerged) {
  const std::array<std::uint32_t, 4> geometries[] = {{64, 1, 2, 72}, {128, 2, 2, 80}};
  std::uint64_t seed = 450;
  for (const auto& g : geometries) {
    AttentionCase c;
    c.lens = {9000, 300};
    c.q_heads = 16;  // GQA 8: 8 rows
    c.geometry = g;
    c.seed = seed++;
    c.variant = 0;
    SCOPED_TRACE("splits " + std::to_string(g[3]) + ", row vecs " + std::to_string(g[2]));
    expect_matches<Attention>(run_attention<Attention>(c));
  }
}

// An engine's decode loop: one workspace sized once by workspace_bytes()
// for its largest batch, then calls with fewer and more sequences and
// lengths whose split counts differ. Every call must take the fastest plan
// (the workspace is never too small for it), match the reference and stay
// inside the workspace.
TEST_F(DecodeAttentionTest, OneWorkspaceAcrossBatchesAndLengths) {
  Context& ctx = context();
  using Cache = K4V4;
  using Writer = aura::CacheWrite<aura::CacheWriteConfig<Cache, DType::f32>>;
  // 70 sequences: the largest batch has, on a CPU device, enough groups not
  // to split, while the small ones split.
  constexpr std::int64_t kKvHeads = 1, kQHeads = 4, kSeqs = 70;
  constexpr std::size_t D = Cache::dim;
  std::vector<std::int32_t> capacity{3000, 1000, 700};
  for (std::int32_t i = 3; i < kSeqs; ++i) capacity.push_back(1 + i * 37 % 400);
  Rng rng(600);
  const Layout layout = make_layout(rng, capacity, Cache::page_tokens);
  GpuCache<Cache> cache(ctx, kKvHeads, layout.num_pages);
  const Tensor tables = aura::CacheTables::make(ctx, Cache::format, 21, 22);
  {
    std::vector<std::int32_t> slots;
    for (std::size_t s = 0; s < capacity.size(); ++s)
      for (std::int32_t p = 0; p < capacity[s]; ++p)
        slots.push_back(layout.slot(s, static_cast<std::size_t>(p), Cache::page_tokens));
    const auto n = static_cast<std::int64_t>(slots.size());
    const auto k = Tensor::from_floats(ctx, DType::f32, {n, kKvHeads, D}, rng.normals(slots.size() * D));
    const auto v = Tensor::from_floats(ctx, DType::f32, {n, kKvHeads, D}, rng.normals(slots.size() * D));
    Tensor st(ctx, DType::i32, {n});
    st.upload(std::span<const std::int32_t>(slots));
    Writer(ctx).run({k, v, st, tables, cache.k_codes, cache.k_norms_ref(), cache.v_codes, cache.v_norms_ref(), slots});
  }
  ref::PagedCache host(reference_format<Cache>(kKvHeads, static_cast<std::uint32_t>(layout.num_pages), 21, 22));
  cache.read_into(host);
  const std::vector<float> qs = rounded(DType::bf16, rng.normals(kSeqs * kQHeads * D));
  Kernel kernel(ctx, {.max_num_seqs = kSeqs, .max_q_len = 1, .q_heads = kQHeads, .kv_heads = kKvHeads, .lse = false});

  // The arguments for the first n sequences at the given lengths.
  struct Call {
    Tensor q, block_table, seq_lens;
    GuardedTensor out;
    Kernel::Args args;
    std::vector<std::int32_t> table, lens;  // the host copies args points to
  };
  const auto call = [&](const std::vector<std::int32_t>& lens) {
    const auto n = static_cast<std::int64_t>(lens.size());
    const std::vector<float> q(qs.begin(), qs.begin() + n * kQHeads * static_cast<std::int64_t>(D));
    auto c = std::make_unique<Call>(Call{Tensor::from_floats(ctx, DType::bf16, {n, 1, kQHeads, D}, q),
                                         Tensor(ctx, DType::i32, {n, layout.max_pages}), Tensor(ctx, DType::i32, {n}),
                                         GuardedTensor(ctx, DType::f32, {n, 1, kQHeads, D}), {},
                                         std::vector<std::int32_t>(layout.block_table.begin(),
                                                                   layout.block_table.begin() + n * layout.max_pages),
                                         lens});
    c->block_table.upload(std::span<const std::int32_t>(c->table));
    c->seq_lens.upload(std::span<const std::int32_t>(c->lens));
    c->args = Kernel::Args{c->q,          cache.k_codes, cache.k_norms_ref(), cache.v_codes, cache.v_norms_ref(),
                           c->block_table, c->seq_lens,   tables,              c->out};
    c->args.host_seq_lens = c->lens;
    c->args.host_block_table = c->table;
    return c;
  };
  const std::uint64_t bytes = kernel.workspace_bytes(kernel.problem(call(capacity)->args));
  ASSERT_GT(bytes, 0u) << "the smaller batches split";
  GuardedTensor ws(ctx, DType::u32, {static_cast<std::int64_t>(bytes / 4)});
  const Workspace workspace{ws.ref()};
  std::set<std::uint32_t> splits_seen;
  std::vector<std::int32_t> halves;
  for (auto len : capacity) halves.push_back(len / 2 + 1);
  const std::vector<std::vector<std::int32_t>> steps{
      {3000}, {1}, {17, 700, 699}, capacity, {64}, {200, 300},
      std::vector<std::int32_t>(capacity.begin(), capacity.begin() + 6), halves, {1500}, {3000, 1, 64}};
  for (const auto& lens : steps) {
    SCOPED_TRACE(std::to_string(lens.size()) + " sequences, the first " + std::to_string(lens[0]) + " long");
    const auto c = call(lens);
    c->args.workspace = workspace;
    const auto plan = kernel.plan(kernel.problem(c->args), bytes);
    EXPECT_EQ(plan.geometry.splits, kernel.geometry(kernel.problem(c->args), true).splits)
        << "the workspace was too small for the fastest plan";
    splits_seen.insert(plan.geometry.splits);
    ctx.submit_and_wait([&](vk::CommandBuffer cmd) { kernel.record(cmd, c->args, plan); });
    const auto want = ref::decode_attention_paged_rotated(
        std::span<const float>(qs.data(), lens.size() * kQHeads * D), host, c->args.host_block_table,
        static_cast<std::size_t>(layout.max_pages), lens, {lens.size(), 1, kQHeads, kKvHeads, D}, {});
    EXPECT_LE(relative_rms(c->out.read_floats(), want.output), output_budget(DType::f32));
    EXPECT_TRUE(ws.guards_intact()) << "the kernel wrote outside its workspace";
  }
  EXPECT_GE(splits_seen.size(), 3u) << "the calls should differ in their split counts";
}

// More workgroups than one dispatch may have: the dispatcher slices the
// grid, and the split states still meet in one merge.
TEST(DecodeAttentionSplit, GridLargerThanOneDispatch) {
  ContextOptions options;
  options.max_groups_per_dispatch = 7;
  options.validation = false;
  Context ctx(options);
  AttentionCase c;
  c.lens = {100, 250};
  c.geometry = {64, 1, 1, 4};  // 2 sequences x 2 KV heads x 4 splits = 16 workgroups
  c.seed = 500;
  expect_matches<Attention>(run_attention<Attention>(c, ctx));
}

class DecodeAttentionErrors : public DeviceTest {};

TEST_F(DecodeAttentionErrors, NamesTheBadTensor) {
  Context& ctx = context();
  Kernel kernel(ctx, {.max_num_seqs = 2, .max_q_len = 4, .q_heads = 8, .kv_heads = 2, .lse = true});
  const Tensor tables = aura::CacheTables::make(ctx, K4V4::format, 1, 2);
  Tensor q(ctx, DType::bf16, {2, 1, 8, 128}), k(ctx, DType::u32, {6, 2, 16, 16}), kn(ctx, DType::f32, {6, 2, 16});
  Tensor v(ctx, DType::u32, {6, 2, 16, 16}), vn(ctx, DType::f32, {6, 2, 16});
  Tensor table(ctx, DType::i32, {2, 3}), lens(ctx, DType::i32, {2}), out(ctx, DType::f32, {2, 1, 8, 128});
  Tensor lse(ctx, DType::f32, {2, 1, 8}), sinks(ctx, DType::f32, {8});
  Tensor q_f32(ctx, DType::f32, {2, 1, 8, 128}), q_long(ctx, DType::bf16, {2, 17, 8, 128}), q_odd(ctx, DType::bf16, {2, 1, 5, 128});
  Tensor kn_wrong(ctx, DType::f32, {6, 2, 8}), table_u32(ctx, DType::u32, {2, 3}), sinks_short(ctx, DType::f32, {4});
  const std::vector<std::int32_t> host_lens{48, 5}, too_long{49, 5}, short_len{48, 0}, below_qlen{48, 3};
  const std::vector<std::int32_t> host_table{0, 1, 2, 3, -1, -1}, bad_table{0, 1, 6, 3, -1, -1};
  using Args = Kernel::Args;
  Args ok{q, k, kn.ref(), v, vn.ref(), table, lens, tables, out, lse.ref(), sinks.ref()};
  ok.host_seq_lens = host_lens;
  ok.host_block_table = host_table;
  EXPECT_TRUE(kernel.can_implement(ok)) << kernel.can_implement(ok).message;
  const auto expect_error = [&](const Args& a, ErrorCode code, const std::string& needle) {
    expect_check_error(kernel, a, code, needle);
  };
  Args a = ok;
  a.q = q_f32;
  expect_error(a, ErrorCode::dtype_mismatch, "q: expected dtype bf16, got f32");
  a = ok;
  a.q = q_long;
  a.output = q_long;  // checked after q
  expect_error(a, ErrorCode::invalid_argument, "q: q_len must be at most 16, got 17");
  a = ok;
  a.q = q_odd;
  expect_error(a, ErrorCode::shape_mismatch, "q: q_heads (5) must be a multiple of kv_heads (2");
  a = ok;
  a.q.offset = 1;
  expect_error(a, ErrorCode::invalid_argument, "q: offset 1 is not a multiple of the element size 2");
  a = ok;
  a.output.offset = 4;
  a.output.size -= 4;
  expect_error(a, ErrorCode::buffer_too_small, "output: shape [2, 1, 8, 128] of f32 needs 8192 bytes");
  a = ok;
  a.q.strides = {1024, 1024, 128, 2};
  expect_error(a, ErrorCode::invalid_argument, "q: the innermost dimensions must be contiguous");
  a = ok;
  Tensor q_rows(ctx, DType::bf16, {2, 2, 8, 128});  // rows of 2048 elements: q's heads, then 1024 more
  a.q = q_rows.ref();
  a.q.shape = {2, 1, 8, 128};
  a.q.strides = {2048, 2048, 128, 1};
  EXPECT_TRUE(kernel.can_implement(a)) << kernel.can_implement(a).message;
  a.q.strides = {4096, 1024, 128, 1};
  expect_error(a, ErrorCode::invalid_argument, "q: dimensions 0..1 must form one token axis");
  a = ok;
  a.tables = sinks;
  expect_error(a, ErrorCode::shape_mismatch, "tables: expected shape");
  a = ok;
  TensorRef empty = q.ref();
  empty.shape = {0, 1, 8, 128};
  a.q = empty;
  expect_error(a, ErrorCode::shape_mismatch, "q: every dimension must be > 0");  // an empty sequence list
  a = ok;
  a.k_norms = kn_wrong.ref();
  expect_error(a, ErrorCode::shape_mismatch, "k_norms: expected shape [6, 2, 16], got [6, 2, 8]");
  a = ok;
  a.v_norms.reset();
  expect_error(a, ErrorCode::invalid_argument, "v_norms: a coded side needs its norms");
  a = ok;
  a.block_table = table_u32;
  expect_error(a, ErrorCode::dtype_mismatch, "block_table: expected dtype i32, got u32");
  a = ok;
  a.sinks = sinks_short.ref();
  expect_error(a, ErrorCode::shape_mismatch, "sinks: expected shape [8], got [4]");
  a = ok;
  a.lse = sinks.ref();
  expect_error(a, ErrorCode::shape_mismatch, "lse: expected shape [2, 1, 8]");
  a = ok;
  a.host_seq_lens = too_long;
  expect_error(a, ErrorCode::invalid_argument, "seq_lens: seq_len 49 of sequence 0 is outside [0, max_pages * page_tokens = 48]");
  a = ok;
  a.host_block_table = bad_table;
  expect_error(a, ErrorCode::invalid_argument, "block_table: entry [0, 2] = 6 is not a page of the cache (6 pages)");
  a = ok;
  a.host_seq_lens = short_len;  // 0: an inactive entry, fine
  EXPECT_TRUE(kernel.can_implement(a));
  a = ok;
  a.options.softcap = -1.0f;
  expect_error(a, ErrorCode::invalid_argument, "softcap must be finite and >= 0");
  a = ok;
  a.options.scale = std::numeric_limits<float>::infinity();
  expect_error(a, ErrorCode::invalid_argument, "scale must be finite");
  a = ok;
  a.max_seq_len = 1000;
  expect_error(a, ErrorCode::invalid_argument, "max_seq_len must be in [0, max_pages * page_tokens = 48]");
  a = ok;
  Tensor q4(ctx, DType::bf16, {2, 4, 8, 128}), out4(ctx, DType::f32, {2, 4, 8, 128});
  a.q = q4, a.output = out4, a.lse.reset(), a.host_seq_lens = below_qlen;
  expect_error(a, ErrorCode::invalid_argument, "seq_lens: seq_len 3 of sequence 1 is below q_len 4");

  // Geometries changed by hand are checked before recording.
  const auto expect_geometry_error = [&](auto change, const std::string& needle) {
    auto plan = kernel.plan(kernel.problem(ok), 0);
    change(plan.geometry);
    try {
      kernel.check(ok, plan);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_geometry_error([](Kernel::Geometry& g) { g.workgroup = 96; }, "workgroup must be 64, 128 or 256");
  expect_geometry_error([](Kernel::Geometry& g) { g.tokens_per_invocation = 3; }, "tokens_per_invocation must be 1, 2 or 4");
  expect_geometry_error(
      [](Kernel::Geometry& g) {
        g.workgroup = 256;
        g.tokens_per_invocation = 4;
        g.row_vecs = 2;
      },
      "workgroup 256 takes tokens_per_invocation x row_vecs of at most 4");
  expect_geometry_error([](Kernel::Geometry& g) { g.row_vecs = 3; }, "row_vecs must be 1 or 2");
  expect_geometry_error([](Kernel::Geometry& g) { g.splits = 129; }, "splits must be in [1, 128]");
  expect_geometry_error([](Kernel::Geometry& g) { g.splits = 2; }, "workspace: splits need one");
  const Status bad = kernel.can_implement([&] {
    Args b = ok;
    b.seq_lens = table;
    return b;
  }());
  EXPECT_FALSE(bad);
  EXPECT_NE(bad.message.find("seq_lens"), std::string::npos) << bad.message;
}

// seq_lens and block_table live on the GPU: whatever they hold, the kernel
// reads nothing outside the cache and the table (lengths and page ids are
// clamped): the call completes and writes only its output.
TEST_F(DecodeAttentionErrors, GarbageLengthsAndPagesStayInside) {
  Context& ctx = context();
  Kernel kernel(ctx, {.max_num_seqs = 2, .max_q_len = 1, .q_heads = 8, .kv_heads = 2, .lse = false});
  const Tensor tables = aura::CacheTables::make(ctx, K4V4::format, 1, 2);
  Rng rng(7);
  const auto qv = rng.normals(2 * 8 * 128);
  const auto q = Tensor::from_floats(ctx, DType::bf16, {2, 1, 8, 128}, qv);
  GpuCache<K4V4> cache(ctx, 2, 3);
  Tensor table(ctx, DType::i32, {2, 2}), lens(ctx, DType::i32, {2});
  const std::vector<std::int32_t> garbage_table{-7, 1 << 30, 2, 99}, garbage_lens{1 << 30, -5};
  table.upload(std::span<const std::int32_t>(garbage_table));
  lens.upload(std::span<const std::int32_t>(garbage_lens));
  GuardedTensor out(ctx, DType::f32, {2, 1, 8, 128});
  kernel.run({q, cache.k_codes, cache.k_norms_ref(), cache.v_codes, cache.v_norms_ref(), table, lens, tables, out});
  EXPECT_TRUE(out.guards_intact());
  EXPECT_TRUE(cache.k_codes.guards_intact());
}

}  // namespace
