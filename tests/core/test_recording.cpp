// SPDX-License-Identifier: MIT
// The recording contract (core/context.hpp): record() appends to the
// caller's command buffer and nothing else. It never submits (a Context
// counts its own submissions), one kernel object records from several
// threads into command buffers that run concurrently, each with its own
// workspace, and every Vulkan device present runs the kernels at once, one
// Context and one thread per device (tensor parallelism).
#include <tilekernels/aura.hpp>
#include <tilekernels/gdn.hpp>
#include <tilekernels/reference/aura/flash_pass2.hpp>
#include <tilekernels/reference/gdn/chunk_o.hpp>

#include <algorithm>
#include <cmath>
#include <thread>

#include "../support.hpp"

namespace {

using namespace tktest;
namespace aura = tilekernels::aura;
namespace gdn = tilekernels::gdn;
namespace ref = tilekernels::reference::gdn;

using Merge = aura::FlashPass2<aura::FlashPass2Config<64, DType::f32, DType::f32>>;

// A merge problem that takes the split path (few heads, many blocks) when
// given a workspace, with its inputs, output and reference.
struct MergeCase {
  static constexpr std::int64_t heads = 2, blocks = 600, dim = 64;
  std::vector<float> o, m, l;
  Tensor o_t, m_t, l_t;
  GuardedTensor out;
  std::vector<double> want;

  MergeCase(Context& ctx, std::uint64_t seed)
      : o(make(seed, heads * blocks * dim, 1.0f)),
        m(make(seed + 1, heads * blocks, 2.0f)),
        l(positive(seed + 2, heads * blocks)),
        o_t(Tensor::from_floats(ctx, DType::f32, {heads, blocks, dim}, o)),
        m_t(Tensor::from_floats(ctx, DType::f32, {heads, blocks}, m)),
        l_t(Tensor::from_floats(ctx, DType::f32, {heads, blocks}, l)),
        out(ctx, DType::f32, {heads, dim}),
        want(tilekernels::reference::aura::flash_pass2(o, m, l, heads, blocks, dim).output) {}

  Merge::Args args(const std::optional<Workspace>& ws) const { return {o_t, m_t, l_t, out, {}, ws}; }

  static std::vector<float> make(std::uint64_t seed, std::int64_t n, float scale) {
    Rng rng(seed);
    return rng.normals(static_cast<std::size_t>(n), scale);
  }
  static std::vector<float> positive(std::uint64_t seed, std::int64_t n) {
    Rng rng(seed);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = rng.uniform(0.5f, 2.0f);
    return v;
  }
};

// The checks below read ctx.submissions() before and after recording; a
// counter that never moved would let them pass whatever record() did. One
// submission through the Context's own path must count exactly one.
void expect_submissions_counted(Context& ctx) {
  const std::uint64_t before = ctx.submissions();
  ctx.submit_and_wait([](vk::CommandBuffer) {});
  ASSERT_EQ(ctx.submissions(), before + 1) << "the Context does not count its submissions";
}

// Every kernel of the library, recorded into the test's own command
// buffer: the Context's submission count and pipeline count do not move
// while recording (every kernel built its pipelines when constructed).
void record_every_kernel_without_submitting(Context& ctx) {
  Rng rng(5);
  expect_submissions_counted(ctx);
  if (::testing::Test::HasFatalFailure()) return;
  OwnCommandBuffer cmd(ctx);

  // Split-K merge, split through a workspace.
  MergeCase merge(ctx, 11);
  const Merge merge_kernel(ctx);
  const auto ws_bytes = merge_kernel.workspace_bytes({MergeCase::heads, MergeCase::blocks});
  ASSERT_GT(ws_bytes, 0u) << "the case should take the split path";
  Tensor ws(ctx, DType::u32, {static_cast<std::int64_t>(ws_bytes / 4)});

  // Encode few rows (workspace), Hadamard encode, decode, reduce + undo.
  using EC = aura::EncodeConfig<64, 4, DType::f32>;
  const auto cb = aura::lloyd_max_codebook(64, 4);
  auto x = Tensor::from_floats(ctx, DType::f32, {5, 64}, rng.normals(5 * 64));
  auto rot = Tensor::from_floats(ctx, DType::f32, {64, 64}, aura::dense_rotation(64, 3));
  auto signs = Tensor::from_floats(ctx, DType::f32, {64}, aura::hadamard_signs(64, 3));
  auto bounds = Tensor::from_floats(ctx, DType::f32, {15}, cb.boundaries);
  auto codes = Tensor::from_floats(ctx, DType::f32, {16}, cb.codebook);
  Tensor packed(ctx, DType::u32, {5, 8}), packed_h(ctx, DType::u32, {5, 8}), norms(ctx, DType::f32, {5}),
      norms_h(ctx, DType::f32, {5}), decoded(ctx, DType::f32, {5, 64}), reduced(ctx, DType::f32, {3, 64});
  Tensor enc_ws(ctx, DType::u32, {static_cast<std::int64_t>(aura::Encode<EC>::workspace_bytes({5}) / 4)});
  auto parts_o = Tensor::from_floats(ctx, DType::f32, {3, 4, 64}, rng.normals(3 * 4 * 64));
  auto parts_m = Tensor::from_floats(ctx, DType::f32, {3, 4}, rng.normals(12));
  auto parts_l = Tensor::from_floats(ctx, DType::f32, {3, 4}, std::vector<float>(12, 1.0f));

  // Gated DeltaNet.
  using CO = gdn::ChunkOConfig<16, 64, 64>;
  using RW = gdn::RecomputeWUConfig<16, 64, 64>;
  auto q = Tensor::from_floats(ctx, DType::bf16, {1, 20, 1, 64}, rng.normals(20 * 64, 0.1f));
  auto k = Tensor::from_floats(ctx, DType::bf16, {1, 20, 1, 64}, rng.normals(20 * 64, 0.1f));
  auto v = Tensor::from_floats(ctx, DType::bf16, {1, 20, 2, 64}, rng.normals(20 * 2 * 64));
  auto h = Tensor::from_floats(ctx, DType::bf16, {1, 2, 2, 64, 64}, rng.normals(2 * 2 * 64 * 64, 0.1f));
  auto g = Tensor::from_floats(ctx, DType::f32, {1, 20, 2}, std::vector<float>(40, -0.1f));
  auto beta = Tensor::from_floats(ctx, DType::f32, {1, 20, 2}, std::vector<float>(40, 0.5f));
  auto A = Tensor::from_floats(ctx, DType::f32, {1, 20, 2, 16}, rng.normals(20 * 2 * 16, 0.1f));
  Tensor o(ctx, DType::bf16, {1, 20, 2, 64}), w(ctx, DType::bf16, {1, 20, 2, 64}), u(ctx, DType::bf16, {1, 20, 2, 64});
  // The whole chunked forward (its workspace the caller's) and the decode step.
  using CF = gdn::ChunkForward<gdn::ChunkForwardConfig<16, 64, 64>>;
  Tensor o_fwd(ctx, DType::bf16, {1, 20, 2, 64}), ht(ctx, DType::f32, {1, 2, 64, 64});
  Tensor fwd_ws(ctx, DType::u32, {static_cast<std::int64_t>(CF::workspace_bytes({1, 20, 1, 2}) / 4)});
  CF::Args fwd;
  fwd.q = q, fwd.k = k, fwd.v = v, fwd.g = g, fwd.beta = beta, fwd.o = o_fwd;
  fwd.final_state = ht.ref();
  fwd.workspace = Workspace{fwd_ws.ref()};
  auto sq = Tensor::from_floats(ctx, DType::bf16, {2, 1, 1, 64}, rng.normals(2 * 64, 0.1f));
  auto sv = Tensor::from_floats(ctx, DType::bf16, {2, 1, 2, 64}, rng.normals(2 * 2 * 64));
  auto sg = Tensor::from_floats(ctx, DType::f32, {2, 1, 2}, std::vector<float>(4, -0.1f));
  auto state = Tensor::from_floats(ctx, DType::f32, {2, 2, 64, 64}, rng.normals(2 * 2 * 64 * 64, 0.1f));
  Tensor o_step(ctx, DType::bf16, {2, 1, 2, 64});
  gdn::RecurrentStep<gdn::RecurrentStepConfig<64, 64>>::Args step;
  step.q = sq, step.k = sq, step.v = sv, step.g = sg, step.beta = sg, step.state = state, step.o = o_step;

  // The paged cache: 20 tokens of 2 KV heads appended into 2 pages of 16,
  // then one decode step of 4 query heads over them.
  using PC = aura::PagedCacheConfig<64, 16, 4, 4>;
  auto k_in = Tensor::from_floats(ctx, DType::bf16, {20, 2, 64}, rng.normals(20 * 2 * 64));
  auto v_in = Tensor::from_floats(ctx, DType::bf16, {20, 2, 64}, rng.normals(20 * 2 * 64));
  const std::vector<std::int32_t> slots{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  const std::vector<std::int32_t> pages{0, 1}, lens{20};
  Tensor slot_t(ctx, DType::i32, {20}), table_t(ctx, DType::i32, {1, 2}), lens_t(ctx, DType::i32, {1});
  slot_t.upload(std::span<const std::int32_t>(slots));
  table_t.upload(std::span<const std::int32_t>(pages));
  lens_t.upload(std::span<const std::int32_t>(lens));
  Tensor k_codes(ctx, DType::u32, {2, 2, 16, 8}), v_codes(ctx, DType::u32, {2, 2, 16, 8}),
      k_norms(ctx, DType::f32, {2, 2, 16}), v_norms(ctx, DType::f32, {2, 2, 16});
  auto aq = Tensor::from_floats(ctx, DType::bf16, {1, 1, 4, 64}, rng.normals(4 * 64));
  Tensor attended(ctx, DType::f32, {1, 1, 4, 64});
  const Tensor tables = aura::CacheTables::make(ctx, PC::format, 1, 2);
  aura::CacheWriteArgs append;
  append.k = k_in, append.v = v_in, append.slot_mapping = slot_t, append.tables = tables;
  append.k_codes = k_codes, append.k_norms = k_norms.ref(), append.v_codes = v_codes, append.v_norms = v_norms.ref();
  aura::DecodeAttentionArgs attend;
  attend.q = aq, attend.k_codes = k_codes, attend.k_norms = k_norms.ref(), attend.v_codes = v_codes;
  attend.v_norms = v_norms.ref(), attend.block_table = table_t, attend.seq_lens = lens_t, attend.tables = tables;
  attend.output = attended;
  // Every kernel built (its pipelines with it) before recording.
  const aura::Encode<EC> encode(ctx);
  const aura::HadamardEncode<EC> encode_hadamard(ctx);
  const aura::Decode<aura::DecodeConfig<64, 4>> decode(ctx);
  const aura::FaReduceHadamard<aura::FaReduceHadamardConfig<64>> reduce(ctx);
  const gdn::ChunkO<CO> chunk_o(ctx);
  const gdn::RecomputeWU<RW> recompute_wu(ctx);
  const CF forward(ctx);
  const gdn::RecurrentStep<gdn::RecurrentStepConfig<64, 64>> recurrent_step(ctx, {DType::bf16, DType::bf16});
  const aura::CacheWrite<aura::CacheWriteConfig<PC>> writer(ctx);
  const aura::DecodeAttention<aura::DecodeAttentionConfig<PC, DType::bf16, DType::f32>> attention(
      ctx, {.max_num_seqs = 1, .max_q_len = 1, .q_heads = 4, .kv_heads = 2, .lse = false});
  const auto attend_ws_bytes = attention.workspace_bytes(attention.problem(attend));
  Tensor attend_ws(ctx, DType::u32, {std::max<std::int64_t>(1, static_cast<std::int64_t>(attend_ws_bytes / 4))});
  if (attend_ws_bytes) attend.workspace = Workspace{attend_ws.ref()};

  const std::uint64_t ready = ctx.submissions();  // uploads submit; recording must not
  const std::uint64_t pipelines = ctx.pipelines_created();
  merge_kernel.record(cmd.get(), merge.args(Workspace{ws.ref()}));
  encode.record(cmd.get(), {x, rot, bounds, codes, packed, norms, Workspace{enc_ws.ref()}});
  encode_hadamard.record(cmd.get(), {x, signs, bounds, codes, packed_h, norms_h});
  compute_barrier(ctx, cmd.get());
  decode.record(cmd.get(), {packed, norms, rot, codes, decoded});
  reduce.record(cmd.get(), {parts_o, parts_m, parts_l, signs, reduced});
  chunk_o.record(cmd.get(), {q, k, v, h, g, o, 0.125f, {}, {}, {}});
  recompute_wu.record(cmd.get(), {k, v, beta, g, A, w, u, {}, {}, {}});
  forward.record(cmd.get(), fwd);
  recurrent_step.record(cmd.get(), step);
  writer.record(cmd.get(), append);
  compute_barrier(ctx, cmd.get());
  attention.record(cmd.get(), attend);
  EXPECT_EQ(ctx.submissions(), ready) << "a record() submitted";
  EXPECT_EQ(ctx.pipelines_created(), pipelines) << "a record() created a pipeline";
  cmd.end();
  OwnCommandBuffer::submit(ctx, {&cmd});
  EXPECT_EQ(ctx.submissions(), ready) << "the test's own submission went through the Context";
  EXPECT_LE(relative_rms(merge.out.read_floats(), merge.want), 1e-5);
  for (float f : decoded.download_floats()) ASSERT_TRUE(std::isfinite(f));
  for (float f : o.download_floats()) ASSERT_TRUE(std::isfinite(f));
  for (float f : o_fwd.download_floats()) ASSERT_TRUE(std::isfinite(f));
  for (float f : ht.download_floats()) ASSERT_TRUE(std::isfinite(f));
  for (float f : o_step.download_floats()) ASSERT_TRUE(std::isfinite(f));
  for (float f : attended.download_floats()) ASSERT_TRUE(std::isfinite(f));
}

class Recording : public DeviceTest {};

TEST_F(Recording, NoKernelSubmitsWhileRecording) { record_every_kernel_without_submitting(context()); }

// The same on a Context that adopted the caller's device and queue.
TEST_F(Recording, NoKernelSubmitsOnAnAdoptedDevice) {
  ContextOptions options;
  options.validation = false;
  Context owner(options);
  AdoptedDevice device;
  device.get_instance_proc_addr = owner.instance_dispatcher().vkGetInstanceProcAddr;
  device.instance = owner.instance();
  device.physical_device = owner.physical_device();
  device.device = owner.device();
  device.queue_family = owner.queue_family();
  device.features.int64_atomics = owner.info().int64_atomics;
  Context adopted(device, ContextOptions{});
  record_every_kernel_without_submitting(adopted);
}

// One merge object recorded by 4 threads at once into 4 command buffers,
// each with its own inputs, output and workspace, submitted together (they
// may run concurrently): every output must match its reference.
TEST_F(Recording, OneObjectFromFourThreads) {
  Context& ctx = context();
  const Merge kernel(ctx);
  std::vector<std::unique_ptr<MergeCase>> cases;
  std::vector<std::unique_ptr<Tensor>> workspaces;
  std::vector<std::unique_ptr<OwnCommandBuffer>> buffers;
  const auto bytes = kernel.workspace_bytes({MergeCase::heads, MergeCase::blocks});
  for (int t = 0; t < 4; ++t) {
    cases.push_back(std::make_unique<MergeCase>(ctx, 100 + 10 * t));
    workspaces.push_back(std::make_unique<Tensor>(ctx, DType::u32, Shape{static_cast<std::int64_t>(bytes / 4)}));
    buffers.push_back(std::make_unique<OwnCommandBuffer>(ctx));
  }
  expect_submissions_counted(ctx);
  const std::uint64_t before = ctx.submissions();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      kernel.record(buffers[t]->get(), cases[t]->args(Workspace{workspaces[t]->ref()}));
      buffers[t]->end();
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(ctx.submissions(), before);
  OwnCommandBuffer::submit(ctx, {buffers[0].get(), buffers[1].get(), buffers[2].get(), buffers[3].get()});
  for (int t = 0; t < 4; ++t) {
    EXPECT_LE(relative_rms(cases[t]->out.read_floats(), cases[t]->want), 1e-5) << "thread " << t;
    EXPECT_TRUE(cases[t]->out.guards_intact()) << "thread " << t;
  }
}

// Tensor parallelism: one Context per Vulkan device present, each running
// its half (third, ...) of the heads of a chunk_o and a merge from a thread
// of its own, all at once; every device's output must match the reference
// (on lavapipe: one device).
TEST(RecordingDevices, EveryDeviceAtOnce) {
  const auto names = tilekernels::device_names();
  ASSERT_FALSE(names.empty());
  const std::size_t n = names.size();
  using Config = gdn::ChunkOConfig<64, 64, 64>;
  const ref::ChunkOShape whole{1, 130, 2, 4 * n, 64, 64, 64};
  Rng rng(77);
  const auto I = [](std::size_t x) { return static_cast<std::int64_t>(x); };
  const auto q = rounded(DType::bf16, rng.normals(whole.B * whole.T * whole.Hg * whole.K, 0.15f));
  const auto k = rounded(DType::bf16, rng.normals(whole.B * whole.T * whole.Hg * whole.K, 0.15f));
  std::vector<std::string> failures(n);
  std::vector<std::thread> threads;
  for (std::size_t d = 0; d < n; ++d)
    threads.emplace_back([&, d] {
      try {
        ContextOptions options;
        options.device = std::to_string(d);
        options.validation = false;
        Context ctx(options);
        // This device's heads: 4 of the 4n value heads (2 per key head).
        Rng local(1000 + d);
        const ref::ChunkOShape s{1, 130, 2, 4, 64, 64, 64};
        const auto v = rounded(DType::bf16, local.normals(s.T * s.H * s.V));
        const auto h = rounded(DType::bf16, local.normals(s.NT() * s.H * s.V * s.K, 0.2f));
        std::vector<float> g(s.T * s.H);
        for (std::size_t t = 0; t < s.T; ++t)
          for (std::size_t i = 0; i < s.H; ++i) g[t * s.H + i] = -0.05f * static_cast<float>(t % 64 + 1);
        auto qt = Tensor::from_floats(ctx, DType::bf16, {1, I(s.T), I(s.Hg), 64}, q);
        auto kt = Tensor::from_floats(ctx, DType::bf16, {1, I(s.T), I(s.Hg), 64}, k);
        auto vt = Tensor::from_floats(ctx, DType::bf16, {1, I(s.T), I(s.H), 64}, v);
        auto ht = Tensor::from_floats(ctx, DType::bf16, {1, I(s.NT()), I(s.H), 64, 64}, h);
        auto gt = Tensor::from_floats(ctx, DType::f32, {1, I(s.T), I(s.H)}, g);
        Tensor ot(ctx, DType::bf16, {1, I(s.T), I(s.H), 64});
        MergeCase merge(ctx, 500 + d);
        OwnCommandBuffer cmd(ctx);
        gdn::ChunkO<Config>(ctx).record(cmd.get(), {qt, kt, vt, ht, gt, ot, 0.125f, {}, {}, {}});
        const Merge merge_kernel(ctx);
        merge_kernel.record(cmd.get(), merge.args(std::nullopt), merge_kernel.plan({MergeCase::heads, MergeCase::blocks}, 0));
        cmd.end();
        OwnCommandBuffer::submit(ctx, {&cmd});
        const double e1 = relative_rms(ot.download_floats(), ref::chunk_o(q, k, v, h, g, 0.125, s));
        const double e2 = relative_rms(merge.out.read_floats(), merge.want);
        if (!(e1 <= 5e-3) || !(e2 <= 1e-5))
          failures[d] = names[d] + ": chunk_o error " + std::to_string(e1) + ", merge error " + std::to_string(e2);
        std::printf("[recording] device %zu (%s): chunk_o %.2e, merge %.2e\n", d, names[d].c_str(), e1, e2);
      } catch (const std::exception& e) {
        failures[d] = names[d] + ": " + e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (const auto& f : failures) EXPECT_TRUE(f.empty()) << f;
}

}  // namespace
