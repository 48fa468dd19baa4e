// SPDX-License-Identifier: MIT
// Test harness for aura::DecodeAttention: a batch of sequences written into a
// paged cache on the GPU by aura::CacheWrite (pages shuffled), queries, the
// kernel run twice (bit for bit), and the double-precision reference over
// the cache the GPU wrote (so the kernel's own error is measured, not the
// quantisation's); and the exact attention over the original K/V for
// quality figures.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>

#include "paged_cache_support.hpp"

namespace tktest::aura_cache {

struct AttentionCase {
  std::vector<std::int32_t> lens;
  std::int64_t q_len = 1, q_heads = 8, kv_heads = 2;
  std::uint32_t window = 0;
  float softcap = 0;
  std::optional<float> scale;
  bool sinks = false;
  bool workspace = true;  // for the automatic geometry's splits
  std::uint64_t seed = 1;
  // Geometry by hand (workgroup, tokens per invocation, row vecs, splits);
  // a field left 0 takes the automatic geometry's.
  std::array<std::uint32_t, 4> geometry{0, 0, 0, 0};
  // 0: the subgroup path, 1: the portable path, 2: the tensor-core path (the
  // module the device takes; the automatic choice where the device has none
  // of that path); -1: automatic
  int variant = -1;
  // A variant to run in place of the automatic choice; wins over `variant`.
  const Variant<aura::DecodeAttentionProblem>* forced = nullptr;
  double key_mean = 0;  // added to every key coordinate (real keys are not centred)
  float q_scale = 1;    // queries ~ N(0, q_scale^2)
  // Changes q [num_seqs, q_len, q_heads, dim] and k, v [num_seqs, max_len,
  // kv_heads, dim] before they are written (e.g. to plant a key).
  std::function<void(std::vector<float>& q, std::vector<float>& k, std::vector<float>& v, std::size_t max_len)> edit;
  // Append each sequence's q_len new tokens in the same command buffer as
  // the attention (a whole decode step: cache_write, barrier, attention).
  bool step = false;
  bool reference = true;  // compute the double-precision reference
  bool lse = true;        // ask for lse
  // >= 0 (with `step` and f32 queries): the step's q, k and v are views of
  // one fused [new tokens, (q_heads + 2 kv_heads) * dim + 3] buffer starting
  // this many elements in, and the output a view of [new tokens, q_heads *
  // dim + 2] starting at the even number below it.
  std::int64_t fused_at = -1;
  // Arrival counters (Args::arrivals): -1 passed, the plan's rule deciding
  // whether a split call merges in its last workgroup; 0 not passed (two
  // dispatches); 1 passed and the merge fused wherever the call splits.
  int fused_merge = -1;
  // With the counters: what they hold before the first call in place of
  // the tag (a buffer never initialised, or overwritten), left unchecked.
  std::optional<std::uint32_t> arrivals_fill;
};

// A case of the GQA / new-token sweeps: shape (q_heads, kv_heads, q_len),
// sequences of 37 and 300 tokens, with or without the split workspace; and
// its trace line.
inline AttentionCase groups_case(const std::int64_t (&shape)[3], std::uint64_t seed, bool split) {
  AttentionCase c;
  c.lens = {37, 300};
  c.q_heads = shape[0];
  c.kv_heads = shape[1];
  c.q_len = shape[2];
  c.seed = seed;
  c.workspace = split;
  return c;
}
inline std::string groups_trace(const std::int64_t (&shape)[3], bool split) {
  return "q_heads " + std::to_string(shape[0]) + " kv_heads " + std::to_string(shape[1]) + " q_len " +
         std::to_string(shape[2]) + (split ? " split" : "");
}

// A case of the options sweeps: a sliding window of `window` keys, sinks,
// softcap 3 and scale 0.3 over sequences of 4, 50 and 333 tokens, 4 new each.
inline AttentionCase options_case(std::uint32_t window, std::uint64_t seed) {
  AttentionCase c;
  c.lens = {4, 50, 333};
  c.q_len = 4;
  c.window = window;
  c.sinks = true;
  c.softcap = 3.0f;
  c.scale = 0.3f;
  c.seed = seed;
  return c;
}

struct AttentionRun {
  std::vector<float> output, lse;
  ref::AttentionResult reference;  // over the cache the GPU wrote
  std::vector<float> q, k, v;      // original values: k, v [num_seqs, max_len, kv_heads, dim]
  std::size_t max_len = 0;
  ref::DecodeShape shape;
  ref::AttentionOptions options;
  std::vector<std::int32_t> seq_lens;
  std::string variant;  // the variant that ran
  std::uint32_t splits = 1;  // the plan's
};

template <class Config>
AttentionRun run_attention(const AttentionCase& c, Context& ctx = context()) {
  using Cache = typename Config::cache;
  using Writer = aura::CacheWrite<aura::CacheWriteConfig<Cache, DType::f32>>;
  using Kernel = aura::DecodeAttention<Config>;
  constexpr std::uint64_t k_seed = 21, v_seed = 22;
  Rng rng(c.seed);
  const std::size_t D = Cache::dim, n = c.lens.size(), kvh = static_cast<std::size_t>(c.kv_heads);
  const Layout layout = make_layout(rng, c.lens, Cache::page_tokens);
  AttentionRun r;
  r.seq_lens = c.lens;
  for (auto len : c.lens) r.max_len = std::max<std::size_t>(r.max_len, static_cast<std::size_t>(len));
  r.max_len = std::max<std::size_t>(r.max_len, 1);
  // Queries, then K/V of every position (keys with a mean, values centred).
  r.shape = {n, static_cast<std::size_t>(c.q_len), static_cast<std::size_t>(c.q_heads), kvh, D};
  r.q = rng.normals(n * static_cast<std::size_t>(c.q_len * c.q_heads) * D, c.q_scale);
  const std::size_t row = kvh * D;
  r.k.assign(n * r.max_len * row, 0.0f);
  r.v.assign(n * r.max_len * row, 0.0f);
  for (std::size_t s = 0; s < n; ++s)
    for (std::size_t p = 0; p < static_cast<std::size_t>(c.lens[s]); ++p)
      for (std::size_t i = 0; i < row; ++i) {
        r.k[(s * r.max_len + p) * row + i] = rng.normal() + static_cast<float>(c.key_mean);
        r.v[(s * r.max_len + p) * row + i] = rng.normal();
      }
  if (c.edit) c.edit(r.q, r.k, r.v, r.max_len);
  r.q = rounded(Config::q_dtype, r.q);
  // Centred keys: n + 2 centre rows near the keys' mean, sequence s on row
  // seq_centres[s] (a shuffle: no sequence on its own index).
  const std::size_t centres = Cache::k_centred ? n + 2 : 0;
  std::vector<float> centre_rows;
  std::vector<std::int32_t> seq_centres;
  if (Cache::k_centred) {
    centre_rows = rng.normals(centres * row, 0.5f);
    for (auto& x : centre_rows) x += static_cast<float>(c.key_mean);
    for (std::size_t s = 0; s < n; ++s) seq_centres.push_back(static_cast<std::int32_t>((s + 1) % centres));
    std::reverse(seq_centres.begin(), seq_centres.end());
  }
  // The rows to append: every position, or with `step` all but the new
  // tokens first and those inside the recorded step.
  struct Append {
    std::vector<float> k, v;
    std::vector<std::int32_t> slots, centres;
  } before, during;
  for (std::size_t s = 0; s < n; ++s)
    for (std::size_t p = 0; p < static_cast<std::size_t>(c.lens[s]); ++p) {
      Append& a = c.step && p + static_cast<std::size_t>(c.q_len) >= static_cast<std::size_t>(c.lens[s]) ? during : before;
      const auto at = static_cast<std::ptrdiff_t>((s * r.max_len + p) * row);
      a.k.insert(a.k.end(), r.k.begin() + at, r.k.begin() + at + static_cast<std::ptrdiff_t>(row));
      a.v.insert(a.v.end(), r.v.begin() + at, r.v.begin() + at + static_cast<std::ptrdiff_t>(row));
      a.slots.push_back(layout.slot(s, p, Cache::page_tokens));
      if (Cache::k_centred) a.centres.push_back(seq_centres[s]);
    }
  std::optional<Tensor> centre_gpu, seq_centres_gpu;
  if (Cache::k_centred) {
    centre_gpu.emplace(Tensor::from_floats(ctx, DType::f32, Cache::centre_shape(static_cast<std::int64_t>(centres), c.kv_heads),
                                           centre_rows));
    seq_centres_gpu.emplace(ctx, DType::i32, Shape{static_cast<std::int64_t>(n)});
    seq_centres_gpu->upload(std::span<const std::int32_t>(seq_centres));
  }
  GpuCache<Cache> cache(ctx, c.kv_heads, layout.num_pages);
  const Tensor tables = aura::CacheTables::make(ctx, Cache::format, k_seed, v_seed);
  Writer writer(ctx);
  struct AppendTensors {
    std::optional<Tensor> k, v, slots, centres;
  };
  // The writer's arguments for rows k, v (views or tensors) of `a`.
  const auto write_args = [&](const TensorRef& k, const TensorRef& v, const Append& a, const AppendTensors& t) {
    typename Writer::Args w{k, v, *t.slots, tables, cache.k_codes, cache.k_norms_ref(), cache.v_codes,
                            cache.v_norms_ref(), a.slots};
    if (Cache::k_centred) {
      w.k_centre = centre_gpu->ref();
      w.token_centres = t.centres->ref();
      w.host_token_centres = a.centres;
    }
    return w;
  };
  const auto upload_centres = [&](const Append& a, AppendTensors& t) {
    if (!Cache::k_centred) return;
    t.centres.emplace(ctx, DType::i32, Shape{static_cast<std::int64_t>(a.centres.size())});
    t.centres->upload(std::span<const std::int32_t>(a.centres));
  };
  const auto upload = [&](const Append& a, AppendTensors& t) {
    const auto count = static_cast<std::int64_t>(a.slots.size());
    t.k.emplace(Tensor::from_floats(ctx, DType::f32, {count, c.kv_heads, Cache::dim}, a.k));
    t.v.emplace(Tensor::from_floats(ctx, DType::f32, {count, c.kv_heads, Cache::dim}, a.v));
    t.slots.emplace(ctx, DType::i32, Shape{count});
    t.slots->upload(std::span<const std::int32_t>(a.slots));
    upload_centres(a, t);
  };
  AppendTensors first, second;
  if (!before.slots.empty()) {
    upload(before, first);
    writer.run(write_args(*first.k, *first.v, before, first));
  }
  // The fused rows of the step's new tokens (fused_at >= 0).
  const bool fused = c.fused_at >= 0;
  const std::int64_t new_tokens = static_cast<std::int64_t>(n) * c.q_len, qhd = c.q_heads * Cache::dim,
                     kvd = c.kv_heads * Cache::dim;
  std::optional<FusedRows> qkv, out_rows;
  std::optional<TensorRef> k_view, v_view;
  if (fused) {
    EXPECT_TRUE(c.step && Config::q_dtype == DType::f32) << "fused views need step and f32 queries";
    qkv.emplace(ctx, DType::f32, new_tokens, qhd + 2 * kvd + 3, c.fused_at);
    out_rows.emplace(ctx, Config::out_dtype, new_tokens, qhd + 2, c.fused_at / 2 * 2);
    k_view = qkv->view({new_tokens, c.kv_heads, Cache::dim}, 1, qhd);
    v_view = qkv->view({new_tokens, c.kv_heads, Cache::dim}, 1, qhd + kvd);
    qkv->upload(*k_view, during.k);
    qkv->upload(*v_view, during.v);
    second.slots.emplace(ctx, DType::i32, Shape{new_tokens});
    second.slots->upload(std::span<const std::int32_t>(during.slots));
    upload_centres(during, second);
  } else if (!during.slots.empty()) {
    upload(during, second);
  }

  if (c.sinks) {
    r.options.sinks.resize(static_cast<std::size_t>(c.q_heads));
    for (auto& s : r.options.sinks) s = rng.uniform(-2.0f, 4.0f);
    r.options.sinks[0] = -std::numeric_limits<float>::infinity();  // same as none
  }
  r.options.window = c.window;
  r.options.softcap = c.softcap;
  if (c.scale) r.options.scale = *c.scale;

  const auto S = [](auto... d) { return Shape{static_cast<std::int64_t>(d)...}; };
  std::optional<Tensor> q_dense;
  TensorRef q;
  if (fused) {
    q = qkv->view(S(n, c.q_len, c.q_heads, D), 2, 0);
    qkv->upload(q, r.q);
  } else {
    q_dense.emplace(Tensor::from_floats(ctx, Config::q_dtype, S(n, c.q_len, c.q_heads, D), r.q));
    q = *q_dense;
  }
  Tensor block_table(ctx, DType::i32, S(n, layout.max_pages)), seq_lens(ctx, DType::i32, S(n));
  block_table.upload(std::span<const std::int32_t>(layout.block_table));
  seq_lens.upload(std::span<const std::int32_t>(layout.seq_lens));
  std::optional<Tensor> sinks;
  if (c.sinks) sinks.emplace(Tensor::from_floats(ctx, DType::f32, S(c.q_heads), r.options.sinks));
  GuardedTensor out(ctx, Config::out_dtype, S(n, c.q_len, c.q_heads, D)), lse(ctx, DType::f32, S(n, c.q_len, c.q_heads));

  typename Kernel::Envelope envelope;
  envelope.max_num_seqs = static_cast<std::int64_t>(n);
  envelope.max_q_len = c.q_len;
  envelope.q_heads = c.q_heads;
  envelope.kv_heads = c.kv_heads;
  envelope.lse = c.lse;
  Kernel kernel(ctx, envelope);
  const TensorRef out_ref = fused ? out_rows->view(S(n, c.q_len, c.q_heads, D), 2, 0) : out.ref();
  typename Kernel::Args args{q,          cache.k_codes, cache.k_norms_ref(), cache.v_codes, cache.v_norms_ref(),
                             block_table, seq_lens,     tables,              out_ref,       lse.ref(),
                             sinks ? std::optional<TensorRef>(sinks->ref()) : std::nullopt};
  if (!c.lse) args.lse.reset();
  args.options.window = c.window;
  args.options.softcap = c.softcap;
  args.options.scale = c.scale;
  args.host_seq_lens = layout.seq_lens;
  args.host_block_table = layout.block_table;
  if (Cache::k_centred) {
    args.k_centre = centre_gpu->ref();
    args.seq_centres = seq_centres_gpu->ref();
    args.host_seq_centres = seq_centres;
    for (std::size_t s = 0; s < n; ++s) {
      const auto at = centre_rows.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(seq_centres[s]) * row);
      r.options.k_centre.insert(r.options.k_centre.end(), at, at + static_cast<std::ptrdiff_t>(row));
    }
  }
  // The counters, initialised before the first call and checked after the
  // last: every call must leave them as it found them.
  std::optional<GuardedTensor> arrivals;
  if (c.fused_merge != 0) {
    arrivals.emplace(ctx, DType::u32, S(Kernel::arrival_slots(kernel.problem(args))));
    if (c.arrivals_fill) arrivals->fill(*c.arrivals_fill);
    args.arrivals = arrivals->ref();
  }
  auto plan = kernel.plan(kernel.problem(args), 0);
  if (c.forced) {
    plan.variant = c.forced;
  } else if (c.variant >= 0) {
    const Path want = c.variant == 0 ? Path::subgroup : c.variant == 1 ? Path::portable : Path::tensor_core_fp16;
    for (const auto& v : Kernel::variants)
      if (v.path == want && eligibility(ctx, v, kernel.problem(args))) {
        plan.variant = &v;
        break;
      }
  }
  plan.geometry = kernel.geometry(kernel.problem(args), c.workspace, *plan.variant);
  const auto take = [](std::uint32_t given, std::uint32_t& field) {
    if (given) field = given;
  };
  take(c.geometry[0], plan.geometry.workgroup);
  take(c.geometry[1], plan.geometry.tokens_per_invocation);
  take(c.geometry[2], plan.geometry.row_vecs);
  take(c.geometry[3], plan.geometry.splits);
  plan.geometry.fused_merge =
      c.fused_merge == 1 ? plan.geometry.splits > 1 : kernel.fused_merge(kernel.problem(args), plan.geometry);
  r.variant = std::string(plan.variant->name);
  r.splits = plan.geometry.splits;
  kernel.prepare(plan);  // the envelope's pipelines hold the automatic plans, not those chosen by hand
  std::optional<GuardedTensor> ws;
  const auto ws_bytes = kernel.workspace_bytes(kernel.problem(args), plan.geometry);
  if (ws_bytes) {
    ws.emplace(ctx, DType::u32, S(ws_bytes / 4));
    args.workspace = Workspace{ws->ref()};
  }
  bool initialised = false;
  const auto record = [&] {
    ctx.submit_and_wait([&](vk::CommandBuffer cmd) {
      if (arrivals && !initialised && !c.arrivals_fill) kernel.record_arrivals_init(cmd, *arrivals);
      initialised = true;
      if (second.slots) {
        writer.record(cmd, write_args(fused ? *k_view : TensorRef(*second.k), fused ? *v_view : TensorRef(*second.v),
                                      during, second));
        compute_barrier(ctx, cmd);
      }
      kernel.record(cmd, args, plan);
    });
  };
  const auto read_output = [&] { return fused ? out_rows->read(out_ref) : out.read_floats(); };
  record();
  r.output = read_output();
  if (c.lse) r.lse = lse.read_floats();
  // Again, over the first run's workspace: bit for bit.
  out.poison();
  lse.poison();
  record();
  const auto again = read_output();
  if (fused) {
    qkv->expect_untouched_outside({q, *k_view, *v_view});
    out_rows->expect_untouched_outside({out_ref});
  }
  const auto lse_again = c.lse ? lse.read_floats() : std::vector<float>{};
  EXPECT_EQ(0, std::memcmp(again.data(), r.output.data(), again.size() * 4)) << "output moved between runs";
  EXPECT_EQ(0, std::memcmp(lse_again.data(), r.lse.data(), r.lse.size() * 4)) << "lse moved between runs";
  if (ws) {
    EXPECT_TRUE(ws->guards_intact()) << "the kernel wrote outside its workspace";
  }
  if (arrivals && !c.arrivals_fill) {
    std::size_t moved = 0;
    for (const std::uint32_t w : arrivals->read_words()) moved += w != Kernel::arrival_tag;
    EXPECT_EQ(moved, 0u) << "arrival counters not left at the tag (guards checked by the read)";
  }

  if (!c.reference) return r;
  ref::PagedCache host(reference_format<Cache>(static_cast<std::uint32_t>(c.kv_heads),
                                               static_cast<std::uint32_t>(layout.num_pages), k_seed, v_seed));
  cache.read_into(host);
  r.reference = ref::decode_attention_paged_rotated(r.q, host, layout.block_table,
                                                    static_cast<std::size_t>(layout.max_pages), layout.seq_lens,
                                                    r.shape, r.options);
  return r;
}

inline double output_budget(DType out) { return out == DType::f32 ? 1e-5 : 5e-3; }

// Runs `c` with two dispatches (no counters) and with the merge fused into
// the last workgroup (AttentionCase::fused_merge 1): each run goes to
// `check`, and the two agree element by element:
// - lse to one f32 unit in the last place plus what summing l in another
//   order may change (the teams sum their states' parts of it): l, a sum
//   of n positive terms, moves by at most 2 (n - 1) 2^-24 relative, so
//   ln l by that much, and each run's ln errs by what Vulkan allows: 3
//   units in the last place of ln l <= ln(max_len + 1) (l is at least 1
//   and at most the keys and a sink), 2^-21 absolute for l in [0.5, 2];
// - the output to one unit in the last place of its dtype plus what summing
//   the n = splits states' o in another order may change (the fused merge
//   splits them among teams of invocations): each sum of a rotated dim
//   moves by at most 2 (n - 1) 2^-24 sum_s w_s |o_s| <= 2 (n - 1) 2^-24
//   max |v| over the weights' total, and V's orthonormal rotation keeps a
//   row's error norm, at most sqrt(dim) times its largest element's, so
//   an element moves by at most 2 (n - 1) 2^-24 sqrt(dim) max_k |v_k|.
template <class Config, class Check>
void expect_fused_merge_same(AttentionCase c, Check check) {
  c.fused_merge = 0;
  const AttentionRun two = run_attention<Config>(c);
  c.fused_merge = 1;
  const AttentionRun one = run_attention<Config>(c);
  check(two);
  check(one);
  const auto expect_close = [](const std::vector<float>& got, const std::vector<float>& want, double ulp, double slack,
                               const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    std::size_t apart = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      apart += !(std::abs(double(got[i]) - double(want[i])) <= ulp * std::abs(double(want[i])) + slack) &&
               std::memcmp(&got[i], &want[i], 4) != 0;
    EXPECT_EQ(apart, 0u) << what << ": elements further from the two-dispatch result than the bound";
  };
  constexpr std::size_t dim = Config::cache::dim;
  double v_max = 0;  // the largest key's |v|, 1% over for V's quantisation
  for (std::size_t k = 0; k + dim <= one.v.size(); k += dim) {
    double sq = 0;
    for (std::size_t d = 0; d < dim; ++d) sq += double(one.v[k + d]) * one.v[k + d];
    v_max = std::max(v_max, 1.01 * std::sqrt(sq));
  }
  const double order = 2.0 * (one.splits - 1) * 0x1p-24 * std::sqrt(double(dim)) * v_max;
  const double out_ulp = Config::out_dtype == DType::f32 ? 0x1p-23 : Config::out_dtype == DType::f16 ? 0x1p-10 : 0x1p-7;
  expect_close(one.output, two.output, out_ulp, order, "output");
  const double ln_max = std::log(std::max(2.0, double(one.max_len) + 1.0));
  const double ln_err = std::max(0x1p-21, 3.0 * std::ldexp(1.0, int(std::floor(std::log2(ln_max))) - 23));
  expect_close(one.lse, two.lse, 0x1p-23, 2.0 * (one.splits - 1) * 0x1p-24 + 2.0 * ln_err, "lse");
}

// Checks a run against its reference: output within the dtype's budget, lse
// within 1e-5 (relative RMS; -inf where the reference has it).
template <class Config>
void expect_matches(const AttentionRun& r) {
  EXPECT_LE(relative_rms(r.output, r.reference.output), output_budget(Config::out_dtype)) << "output relative RMS";
  if (!r.lse.empty()) {
    EXPECT_LE(relative_rms(r.lse, r.reference.lse), 1e-5) << "lse relative RMS";
  }
}

}  // namespace tktest::aura_cache
