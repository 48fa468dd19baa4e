// SPDX-License-Identifier: MIT
// Decode attention over a compressed, paged KV cache: the README's first demo.
//
// One attention layer shaped like a current 8B model (32 query heads over 8
// KV heads, Dim 128): synthetic keys with a per-head mean and a few outlier
// channels (as post-RoPE keys have), Gaussian values and queries. For each
// cache format the context is appended in chunks with aura::CacheWrite,
// then a few decode steps each append their token and attend, recorded in
// one command buffer (append, barrier, aura::DecodeAttention). Formats with
// centred keys (paged_cache.hpp) first set the sequence's centre from the
// prompt's first chunk (aura::KeyCentre); formats with split keys take
// half of K's rotated coordinates at one bit more. Printed per
// format: cache bytes per token and the compression against bf16, the error
// and cosine of the attention output against exact attention over the
// original K/V, and the GPU time of a step on a busy GPU (as in an
// engine's decode loop). 2048 keys on a CPU device (lavapipe), 32768 on a
// GPU.
#include <tilekernels/aura/cache_write.hpp>
#include <tilekernels/aura/decode_attention.hpp>
#include <tilekernels/aura/key_centre.hpp>
#include <tilekernels/core/splitmix.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "warm_up.hpp"

namespace tk = tilekernels;
namespace aura = tk::aura;

namespace {

constexpr std::int64_t kQHeads = 32, kKvHeads = 8, kDim = 128, kPageTokens = 16, kSteps = 4;
constexpr int kCopies = 8;  // untimed copies of a step before the timed one (GPUs)

// splitmix64 with Box-Muller normals: the same inputs on every run.
struct Rng {
  std::uint64_t s;
  std::uint64_t next() { return tilekernels::splitmix64(s); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  float normal() {
    return static_cast<float>(std::sqrt(-2.0 * std::log(1.0 - uniform())) * std::cos(6.283185307179586 * uniform()));
  }
};

// The layer's K/V for every position [positions, kv_heads, dim] (bf16
// values, as a model would hand them over) and each step's queries.
struct Layer {
  std::int64_t positions = 0;
  std::vector<float> k, v, q;  // q [steps, q_heads, dim]

  explicit Layer(std::int64_t n) : positions(n) {
    Rng rng{7};
    std::vector<float> mean(kKvHeads * kDim);
    for (auto& m : mean) m = 0.5f * rng.normal();
    for (std::int64_t h = 0; h < kKvHeads; ++h)  // outlier channels: large mean and spread
      for (std::int64_t c : {3, 40, 77, 111}) mean[h * kDim + c] = (c % 2 ? 6.0f : -5.0f) * (1.0f + 0.1f * h);
    const auto row = static_cast<std::size_t>(kKvHeads * kDim);
    k.resize(static_cast<std::size_t>(n) * row);
    v.resize(k.size());
    for (std::size_t i = 0; i < k.size(); ++i) {
      const bool outlier = mean[i % row] > 4.0f || mean[i % row] < -4.0f;
      k[i] = tk::round_to_bf16(mean[i % row] + (outlier ? 3.0f : 1.0f) * rng.normal());
      v[i] = tk::round_to_bf16(rng.normal());
    }
    q.resize(static_cast<std::size_t>(kSteps * kQHeads * kDim));
    for (auto& x : q) x = tk::round_to_bf16(rng.normal());
  }
};

// Exact attention of step `step`'s queries over positions [0, len) in double.
std::vector<double> exact_attention(const Layer& l, std::int64_t step, std::int64_t len) {
  std::vector<double> out(kQHeads * kDim, 0.0), z(static_cast<std::size_t>(len));
  const double scale = 1.0 / std::sqrt(double(kDim));
  for (std::int64_t h = 0; h < kQHeads; ++h) {
    const float* q = &l.q[static_cast<std::size_t>((step * kQHeads + h) * kDim)];
    const std::int64_t kvh = h / (kQHeads / kKvHeads);
    double m = -INFINITY, sum = 0;
    for (std::int64_t t = 0; t < len; ++t) {
      const float* k = &l.k[static_cast<std::size_t>((t * kKvHeads + kvh) * kDim)];
      double dot = 0;
      for (std::int64_t d = 0; d < kDim; ++d) dot += double(q[d]) * k[d];
      z[static_cast<std::size_t>(t)] = dot * scale;
      m = std::max(m, dot * scale);
    }
    for (std::int64_t t = 0; t < len; ++t) {
      const double p = std::exp(z[static_cast<std::size_t>(t)] - m);
      sum += p;
      const float* v = &l.v[static_cast<std::size_t>((t * kKvHeads + kvh) * kDim)];
      for (std::int64_t d = 0; d < kDim; ++d) out[static_cast<std::size_t>(h * kDim + d)] += p * v[d];
    }
    for (std::int64_t d = 0; d < kDim; ++d) out[static_cast<std::size_t>(h * kDim + d)] /= sum;
  }
  return out;
}

template <class Cache>
void run_format(tk::Context& ctx, const char* name, const Layer& layer, std::int64_t context) {
  using Write = aura::CacheWrite<aura::CacheWriteConfig<Cache, tk::DType::bf16>>;
  using Attention = aura::DecodeAttention<aura::DecodeAttentionConfig<Cache, tk::DType::bf16, tk::DType::bf16>>;
  const std::int64_t total = context + kSteps, pages = (total + kPageTokens - 1) / kPageTokens;
  // The format's codebooks and rotations, read by the writer and the
  // attention alike; the kernels built for this layer's shapes.
  const tk::Tensor tables = aura::CacheTables::make(ctx, Cache::format, 101, 102);
  Write write(ctx);
  Attention attention(ctx, {.max_num_seqs = 1, .max_q_len = 1, .q_heads = kQHeads, .kv_heads = kKvHeads, .lse = false});

  // The cache, and the sequence's pages in shuffled order.
  tk::Tensor k_codes(ctx, Cache::store_dtype(Cache::k_bits), Cache::side_store_shape(true, pages, kKvHeads));
  tk::Tensor v_codes(ctx, Cache::store_dtype(Cache::v_bits), Cache::side_store_shape(false, pages, kKvHeads));
  std::optional<tk::Tensor> k_norms, v_norms;
  if (!Cache::k_raw) k_norms.emplace(ctx, tk::DType::f32, Cache::norm_shape(pages, kKvHeads));
  if (!Cache::v_raw) v_norms.emplace(ctx, tk::DType::f32, Cache::norm_shape(pages, kKvHeads));
  const auto norms = [](const std::optional<tk::Tensor>& t) {
    return t ? std::optional<tk::TensorRef>(t->ref()) : std::nullopt;
  };
  std::vector<std::int32_t> table(static_cast<std::size_t>(pages));
  std::iota(table.begin(), table.end(), 0);
  Rng rng{11};
  for (std::size_t i = table.size(); i > 1; --i) std::swap(table[i - 1], table[rng.next() % i]);
  tk::Tensor block_table(ctx, tk::DType::i32, {1, pages});
  block_table.upload(std::span<const std::int32_t>(table));
  const auto slot = [&](std::int64_t p) { return table[static_cast<std::size_t>(p / kPageTokens)] * kPageTokens + p % kPageTokens; };
  // Centred keys: the sequence's centre (one row), and each appended
  // token's row of it (0).
  std::optional<tk::Tensor> centre;
  std::vector<std::int32_t> rows(512, 0);
  tk::Tensor row_ids(ctx, tk::DType::i32, {512}), seq_row(ctx, tk::DType::i32, {1});
  if (Cache::k_centred) {
    centre.emplace(ctx, tk::DType::f32, Cache::centre_shape(1, kKvHeads));
    row_ids.upload(std::span<const std::int32_t>(rows));
    seq_row.upload(std::span<const std::int32_t>(rows.data(), 1));
  }

  // Appends positions [first, first + n) (recorded into `cmd`, or run now).
  const auto append_args = [&](std::int64_t first, std::int64_t n, std::vector<tk::Tensor>& keep,
                               std::vector<std::int32_t>& slots) {
    const auto row = static_cast<std::ptrdiff_t>(kKvHeads * kDim);
    const std::vector<float> k(layer.k.begin() + first * row, layer.k.begin() + (first + n) * row);
    const std::vector<float> v(layer.v.begin() + first * row, layer.v.begin() + (first + n) * row);
    slots.clear();
    for (std::int64_t p = first; p < first + n; ++p) slots.push_back(slot(p));
    keep.push_back(tk::Tensor::from_floats(ctx, tk::DType::bf16, {n, kKvHeads, kDim}, k));
    keep.push_back(tk::Tensor::from_floats(ctx, tk::DType::bf16, {n, kKvHeads, kDim}, v));
    keep.emplace_back(ctx, tk::DType::i32, tk::Shape{n});
    keep.back().upload(std::span<const std::int32_t>(slots));
    typename Write::Args a{keep[keep.size() - 3], keep[keep.size() - 2], keep.back(), tables, k_codes,
                           norms(k_norms), v_codes, norms(v_norms), slots};
    if (centre) {
      a.k_centre = centre->ref();
      tk::TensorRef ids = row_ids.ref();  // the first n of the 512 row ids
      ids.shape = {n};
      a.token_centres = ids;
    }
    return a;
  };
  for (std::int64_t first = 0; first < context; first += 512) {  // the prompt, in chunks
    std::vector<tk::Tensor> keep;
    std::vector<std::int32_t> slots;
    const auto args = append_args(first, std::min<std::int64_t>(512, context - first), keep, slots);
    if constexpr (Cache::k_centred) {
      if (first == 0) {  // the first chunk sets the centre
        const aura::KeyCentre<aura::CacheWriteConfig<Cache, tk::DType::bf16>> key_centre(ctx);
        const std::vector<std::int32_t> starts{0, static_cast<std::int32_t>(args.k.shape[0])};
        tk::Tensor starts_gpu(ctx, tk::DType::i32, {2});
        starts_gpu.upload(std::span<const std::int32_t>(starts));
        ctx.submit_and_wait([&](vk::CommandBuffer cmd) {
          key_centre.record(cmd, {args.k, starts_gpu, seq_row, *centre});
          tk::compute_barrier(ctx, cmd);
          write.record(cmd, args);
        });
        continue;
      }
    }
    write.run(args);
  }

  // Decode steps: append the step's token, then attend, in one command
  // buffer. The workspace is the engine's: sized once for the batch shape
  // (every length fits it); so are the arrival counters (set once, left so
  // by every call), with which a split step takes one dispatch on a GPU.
  tk::Tensor seq_lens(ctx, tk::DType::i32, {1}), output(ctx, tk::DType::bf16, {1, 1, kQHeads, kDim});
  std::optional<tk::Tensor> workspace, arrivals;
  // Each step is timed after copies of itself in the same command buffer
  // (appending a token again rewrites the same slot), the first one after
  // the GPU's warm-up (warm_up.hpp). Not on a CPU device.
  const bool gpu = !ctx.info().is_cpu();
  tk::GpuTimer timer(ctx);
  double err2 = 0, ref2 = 0, dot = 0, nn = 0;
  std::vector<double> times;
  std::vector<std::vector<float>> outputs;
  for (std::int64_t step = 0; step < kSteps; ++step) {
    const std::int64_t len = context + step + 1;
    const std::vector<std::int32_t> lens{static_cast<std::int32_t>(len)};
    seq_lens.upload(std::span<const std::int32_t>(lens));
    const std::vector<float> qs(layer.q.begin() + step * kQHeads * kDim, layer.q.begin() + (step + 1) * kQHeads * kDim);
    const auto q = tk::Tensor::from_floats(ctx, tk::DType::bf16, {1, 1, kQHeads, kDim}, qs);
    typename Attention::Args args{q, k_codes, norms(k_norms), v_codes, norms(v_norms), block_table, seq_lens, tables, output};
    args.max_seq_len = len;  // the host knows the length: the split is sized for it
    if (centre) {
      args.k_centre = centre->ref();
      args.seq_centres = seq_row.ref();
    }
    if (step == 0) {
      if (const std::uint64_t bytes = attention.workspace_bytes(attention.problem(args)))
        workspace.emplace(ctx, tk::DType::u32, tk::Shape{static_cast<std::int64_t>(bytes / 4)});
      arrivals.emplace(ctx, tk::DType::u32, tk::Shape{attention.arrival_slots(attention.problem(args))});
      ctx.submit_and_wait([&](vk::CommandBuffer cmd) { attention.record_arrivals_init(cmd, arrivals->ref()); });
    }
    if (workspace) args.workspace = tk::Workspace{workspace->ref()};
    args.arrivals = arrivals->ref();
    std::vector<tk::Tensor> keep;
    std::vector<std::int32_t> slots;
    const auto append = append_args(len - 1, 1, keep, slots);
    const auto run = [&](int untimed) {
      ctx.submit_and_wait([&](vk::CommandBuffer cmd) {
        for (int i = 0; i < untimed; ++i) {
          write.record(cmd, append);
          tk::compute_barrier(ctx, cmd);
          attention.record(cmd, args);
          tk::compute_barrier(ctx, cmd);
        }
        timer.start(cmd);
        write.record(cmd, append);
        tk::compute_barrier(ctx, cmd);
        attention.record(cmd, args);
        timer.stop(cmd);
      });
      return timer.seconds();
    };
    if (step == 0) tk::examples::warm_up(ctx, run);
    times.push_back(run(gpu ? kCopies : 0));
    outputs.push_back(output.download_floats());
  }
  // The references after the steps, so that the GPU does not idle between
  // them.
  for (std::int64_t step = 0; step < kSteps; ++step) {
    const auto& got = outputs[static_cast<std::size_t>(step)];
    const auto want = exact_attention(layer, step, context + step + 1);
    for (std::size_t i = 0; i < want.size(); ++i) {
      err2 += (got[i] - want[i]) * (got[i] - want[i]);
      ref2 += want[i] * want[i];
      dot += got[i] * want[i];
      nn += double(got[i]) * got[i];
    }
  }
  std::sort(times.begin(), times.end());
  const double bytes = double(Cache::bytes_per_token) * kKvHeads;
  std::printf("%-9s %7.0f B %8.2fx %11.2e %9.5f %12.1f\n", name, bytes, 2.0 * 2 * kDim * kKvHeads / bytes,
              std::sqrt(err2 / ref2), dot / std::sqrt(nn * ref2), times[times.size() / 2] * 1e6);
}

}  // namespace

int main() try {
  tk::Context ctx;
  const std::int64_t context = ctx.info().is_cpu() ? 2048 : 32768;
  std::printf("device: %s\n", ctx.info().name.c_str());
  std::printf("one layer: %lld query heads over %lld KV heads, Dim %lld, %lld keys in %lld-token pages (shuffled), "
              "then %lld decode steps\n",
              static_cast<long long>(kQHeads), static_cast<long long>(kKvHeads), static_cast<long long>(kDim),
              static_cast<long long>(context), static_cast<long long>(kPageTokens), static_cast<long long>(kSteps));
  const Layer layer(context + kSteps);
  std::printf("\n%-9s %9s %9s %11s %9s %12s\n", "format", "per token", "vs bf16", "rel. error", "cosine", "GPU us/step");
  using aura::PagedCacheConfig;
  run_format<PagedCacheConfig<128, 16, 16, 16>>(ctx, "raw bf16", layer, context);
  run_format<PagedCacheConfig<128, 16, 8, 4>>(ctx, "k8v4", layer, context);
  run_format<PagedCacheConfig<128, 16, 4, 4>>(ctx, "k4v4", layer, context);
  run_format<PagedCacheConfig<128, 16, 4, 3>>(ctx, "k4v3", layer, context);
  run_format<PagedCacheConfig<128, 16, 3, 4>::split_keys<64>>(ctx, "k3.5v4", layer, context);
  run_format<PagedCacheConfig<128, 16, 3, 3>::split_keys<64>>(ctx, "k3.5v3", layer, context);
  run_format<PagedCacheConfig<128, 16, 3, 3>>(ctx, "k3v3", layer, context);
  run_format<PagedCacheConfig<128, 16, 2, 3>::split_keys<64>>(ctx, "k2.5v3", layer, context);
  run_format<PagedCacheConfig<128, 16, 4, 4>::centred>(ctx, "k4v4 c", layer, context);
  run_format<PagedCacheConfig<128, 16, 3, 4>::split_keys<64>::centred>(ctx, "k3.5v4 c", layer, context);
  run_format<PagedCacheConfig<128, 16, 3, 3>::split_keys<64>::centred>(ctx, "k3.5v3 c", layer, context);
  run_format<PagedCacheConfig<128, 16, 3, 3>::centred>(ctx, "k3v3 c", layer, context);
  run_format<PagedCacheConfig<128, 16, 2, 3>::split_keys<64>::centred>(ctx, "k2.5v3 c", layer, context);
  const std::string after =
      ctx.info().is_cpu() ? "" : " after " + std::to_string(kCopies) + " copies of itself in its command buffer";
  std::printf(
      "\nper token: K and V of all KV heads of one layer, norms included; error and cosine: the attention "
      "output of all query heads (bf16, as an engine takes it) against exact attention over the original "
      "(bf16) K/V; GPU time: one step (append the token, barrier, attention)%s, the median of %lld%s. "
      "c: centred keys, the centre set from the prompt's first 512 tokens. k3.5, k2.5: split keys, half of K's "
      "rotated coordinates at one bit more (aura::PagedCacheConfig::split_keys).\n",
      after.c_str(), static_cast<long long>(kSteps), ctx.info().is_cpu() ? " (a CPU device: far from a GPU's)" : "");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "kv_attention_demo: %s\n", e.what());
  return 1;
}
