// SPDX-License-Identifier: MIT
// aura::DecodeAttention, a whole decode step (every dispatch record() makes),
// at the shapes: 32 query heads over 8 KV heads, Dim 128, 16-token
// pages in shuffled order, bf16 q and output; batch 1 at 1K, 4K, 32K and
// 128K keys, batch 32 at 4K keys each, q_len 4 at 32K (and for K4V4 and raw
// bf16, batches 4 and 8 at 1K and 4K); K4V4 Hadamard and the
// raw bf16 cache (our uncompressed baseline); Sweep_ entries add Dim 64 and
// 256 and three models' heads (`decode_attention_torch.py --dim --heads`).
// Bytes: the cache read once (codes and norms of every key of every KV
// head), q read and the output written once; the floor is those bytes over
// the measured copy bandwidth. Peers:
// bench/compare/decode_attention_torch.py (PyTorch SDPA, bf16) on the same GPU.
// Args: batch, keys per sequence, q_len, then workgroup, keys per invocation,
// splits (0: automatic) for the sweeps, and 1 to force the CUDA-core
// (subgroup) variant, 2 the first tensor-core one, 3 the staged
// tensor-core one (what devices without the lanes variant's layout take),
// where the automatic choice would take another.
// g++ 12 reports copying DecodeAttentionArgs (decode_step's per-set
// copies) as "may be used uninitialized": a false positive that -Werror
// would turn into a failed build. Clang does not report it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <tilekernels/aura/decode_attention.hpp>

#include <numeric>
#include <optional>
#include <vector>

#include "common.hpp"

namespace {

using namespace tkbench;
namespace aura = tilekernels::aura;

constexpr std::int64_t kPageTokens = 16;

// The heads (32 query heads over 8 KV heads) unless given.
// `centred`: the cache's keys are centred (one centre row per sequence);
// `k_hi_dims`: split keys (CacheFormat::k_hi_dims); `arrivals`: the call
// passes arrival counters (a split step in one dispatch where the plan
// takes it), as an engine that wants the fastest step does; `resident`:
// one cache, read by every call, so that it stays in the last-level cache
// (the regime of a peer that times one op over the same tensors, such as
// ggml's test-backend-ops in perf mode) instead of rotating copies.
void decode_step(benchmark::State& state, std::uint32_t k_bits, std::uint32_t v_bits, std::int64_t dim = 128,
                 std::int64_t q_heads = 32, std::int64_t kv_heads = 8, bool centred = false,
                 std::uint32_t k_hi_dims = 0, bool arrivals = true, bool resident = false) {
  Context& ctx = context();
  aura::CacheFormat format{static_cast<std::uint32_t>(dim), static_cast<std::uint32_t>(kPageTokens), k_bits, v_bits};
  format.k_centred = centred;
  format.k_hi_dims = k_hi_dims;
  const std::int64_t batch = state.range(0), keys = state.range(1), q_len = state.range(2);
  const std::int64_t pages_per_seq = (keys + kPageTokens - 1) / kPageTokens, pages = batch * pages_per_seq;
  aura::DecodeAttentionKernel kernel(ctx, format, DType::bf16, DType::bf16,
                                     {.max_num_seqs = batch, .max_q_len = q_len, .q_heads = q_heads, .kv_heads = kv_heads,
                                      .lse = false});
  const Tensor tables = aura::CacheTables::make(ctx, format, 0, 1);

  const double cache_bytes = double(batch) * keys * kv_heads * format.bytes_per_token();
  const double bytes = cache_bytes + 2.0 * 2 * batch * q_len * q_heads * dim;
  const int sets = resident ? 1 : rotation_sets(cache_bytes);

  // Random codes and raw values (finite bf16), norms ~1: the contents do not change the work.
  std::uint64_t seed = 1;
  const auto next = [&] {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::uint32_t>(seed >> 32);
  };
  const auto side = [&](std::uint32_t bits, Tensor& store, std::optional<Tensor>& norms) {
    std::vector<std::uint32_t> words(static_cast<std::size_t>(store.elements() * dtype_size(store.dtype()) / 4));
    for (auto& w : words) w = aura::CacheFormat::raw(bits) ? (next() & 0x3fff3fffu) | 0x3c003c00u : next();
    store.upload(std::span<const std::uint32_t>(words));
    if (norms) norms->upload_floats(std::vector<float>(static_cast<std::size_t>(norms->elements()), 1.0f));
  };
  struct Set {
    Tensor k, v;
    std::optional<Tensor> kn, vn;
  };
  std::vector<Set> caches;
  for (int s = 0; s < sets; ++s) {
    Set set{Tensor(ctx, format.store_dtype(k_bits), format.side_store_shape(true, pages, kv_heads)),
            Tensor(ctx, format.store_dtype(v_bits), format.side_store_shape(false, pages, kv_heads)), {}, {}};
    if (!format.k_raw()) set.kn.emplace(ctx, DType::f32, format.norm_shape(pages, kv_heads));
    if (!format.v_raw()) set.vn.emplace(ctx, DType::f32, format.norm_shape(pages, kv_heads));
    side(k_bits, set.k, set.kn);
    side(v_bits, set.v, set.vn);
    caches.push_back(std::move(set));
  }
  std::vector<std::int32_t> perm(static_cast<std::size_t>(pages));
  std::iota(perm.begin(), perm.end(), 0);
  for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[next() % i]);
  Tensor table(ctx, DType::i32, {batch, pages_per_seq}), lens(ctx, DType::i32, {batch});
  table.upload(std::span<const std::int32_t>(perm));
  const std::vector<std::int32_t> host_lens(static_cast<std::size_t>(batch), static_cast<std::int32_t>(keys));
  lens.upload(std::span<const std::int32_t>(host_lens));
  std::vector<float> qv(static_cast<std::size_t>(batch * q_len * q_heads * dim));
  for (auto& x : qv) x = static_cast<float>(next() >> 8) * 0x1p-23f - 1.0f;
  const auto q = Tensor::from_floats(ctx, DType::bf16, {batch, q_len, q_heads, dim}, qv);
  Tensor out(ctx, DType::bf16, {batch, q_len, q_heads, dim});

  aura::DecodeAttentionArgs args{q, caches[0].k, {}, caches[0].v, {}, table, lens, tables, out};
  args.max_seq_len = keys;
  std::optional<Tensor> centre, seq_centres;
  if (centred) {
    std::vector<float> mu(static_cast<std::size_t>(batch * kv_heads * dim));
    for (auto& x : mu) x = static_cast<float>(next() >> 8) * 0x1p-23f - 1.0f;
    centre.emplace(Tensor::from_floats(ctx, DType::f32, format.centre_shape(batch, kv_heads), mu));
    std::vector<std::int32_t> rows(static_cast<std::size_t>(batch));
    std::iota(rows.begin(), rows.end(), 0);
    seq_centres.emplace(ctx, DType::i32, Shape{batch});
    seq_centres->upload(std::span<const std::int32_t>(rows));
    args.k_centre = centre->ref();
    args.seq_centres = seq_centres->ref();
  }
  std::optional<Tensor> counters;
  if (arrivals) {
    counters.emplace(ctx, DType::u32, Shape{kernel.arrival_slots(kernel.problem(args))});
    args.arrivals = counters->ref();
    ctx.submit_and_wait([&](vk::CommandBuffer cmd) { kernel.record_arrivals_init(cmd, counters->ref()); });
  }
  const auto problem = kernel.problem(args);
  const auto* variant = &tilekernels::select_variant(ctx, kernel.name, kernel.variants, problem);
  if (state.range(6) != 0) {
    // The tensor-core rule asks for 16 rows: its eligibility is read at 16.
    auto wide = problem;
    wide.q_heads = wide.kv_heads * 16;
    wide.q_len = 1;
    const auto path = state.range(6) == 1 ? tilekernels::Path::subgroup : tilekernels::Path::tensor_core_fp16;
    const tilekernels::Variant<aura::DecodeAttentionProblem>* forced = nullptr;
    for (const auto& v : kernel.variants)
      if (v.path == path && (state.range(6) != 3 || v.name == "tensor_core_fp16") &&
          eligibility(ctx, v, path == tilekernels::Path::subgroup ? problem : wide)) {
        forced = &v;
        break;
      }
    if (!forced) {
      state.SkipWithError("the forced variant does not run here");
      return;
    }
    variant = forced;
  }
  auto geometry = kernel.geometry(problem, true, *variant);
  if (state.range(3)) geometry.workgroup = static_cast<std::uint32_t>(state.range(3));
  if (state.range(4)) geometry.tokens_per_invocation = static_cast<std::uint32_t>(state.range(4));
  if (state.range(5)) geometry.splits = static_cast<std::uint32_t>(state.range(5));
  geometry.fused_merge = kernel.fused_merge(problem, geometry);
  const std::uint64_t ws_bytes = std::max<std::uint64_t>(kernel.workspace_bytes(problem, geometry), 4);
  Tensor workspace(ctx, DType::u32, {static_cast<std::int64_t>(ws_bytes / 4)});
  args.workspace = Workspace{workspace.ref()};
  std::vector<aura::DecodeAttentionArgs> per_set;
  for (const Set& s : caches) {
    aura::DecodeAttentionArgs a = args;
    a.k_codes = s.k;
    a.v_codes = s.v;
    if (s.kn) a.k_norms = s.kn->ref();
    if (s.vn) a.v_norms = s.vn->ref();
    per_set.push_back(a);
  }
  auto plan = kernel.plan(problem, ws_bytes);
  plan.variant = variant;
  plan.geometry = geometry;
  try {
    kernel.check(per_set[0], plan);
    kernel.prepare(plan);
  } catch (const Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  run_timed(state, ctx, [&](vk::CommandBuffer cmd, int i) {
    kernel.record(cmd, per_set[static_cast<std::size_t>(i % sets)], plan);
  }, bytes, 0);
  state.counters["cache_MB"] = cache_bytes * 1e-6;
  state.counters["wg"] = geometry.workgroup;
  state.counters["tpi"] = geometry.tokens_per_invocation;
  state.counters["rows"] = 4 * geometry.row_vecs;
  state.counters["splits"] = geometry.splits;
  state.counters["fused"] = geometry.fused_merge ? 1 : 0;
  state.counters["tc"] = variant->path == tilekernels::Path::tensor_core_fp16 ? 1 : 0;
  state.counters["workgroups"] = double(batch * kv_heads) * geometry.splits *
                                 double((q_heads / kv_heads * q_len + 4 * geometry.row_vecs - 1) / (4 * geometry.row_vecs));
}

void BM_DecodeAttentionK4V4(benchmark::State& state) { decode_step(state, 4, 4); }
void BM_DecodeAttentionRawBf16(benchmark::State& state) { decode_step(state, 16, 16); }
void BM_DecodeAttentionK8V4(benchmark::State& state) { decode_step(state, 8, 4); }
void BM_DecodeAttentionK4V4CudaCores(benchmark::State& state) { decode_step(state, 4, 4); }
void BM_DecodeAttentionK8V4CudaCores(benchmark::State& state) { decode_step(state, 8, 4); }
void BM_DecodeAttentionK4V3(benchmark::State& state) { decode_step(state, 4, 3); }
void BM_DecodeAttentionK3V3(benchmark::State& state) { decode_step(state, 3, 3); }

// The shapes with the automatic geometry.
#define TK_DECODE_SHAPES_(f)                                                                                  \
  Args({1, 1024, 1, 0, 0, 0, f})->Args({1, 4096, 1, 0, 0, 0, f})->Args({1, 32768, 1, 0, 0, 0, f})                     \
      ->Args({1, 131072, 1, 0, 0, 0, f})->Args({32, 4096, 1, 0, 0, 0, f})->Args({1, 32768, 4, 0, 0, 0, f})
#define TK_DECODE_SHAPES TK_DECODE_SHAPES_(0)
// Short steps of small batches (a chat engine's common case).
#define TK_DECODE_SHORT_(f)            \
  Args({4, 1024, 1, 0, 0, 0, f})       \
      ->Args({4, 4096, 1, 0, 0, 0, f}) \
      ->Args({8, 1024, 1, 0, 0, 0, f}) \
      ->Args({8, 4096, 1, 0, 0, 0, f})
#define TK_DECODE_SHORT TK_DECODE_SHORT_(0)
BENCHMARK(BM_DecodeAttentionK4V4)->TK_DECODE_SHAPES->TK_DECODE_SHORT->UseManualTime()->Iterations(10)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeAttentionRawBf16)->TK_DECODE_SHAPES->TK_DECODE_SHORT->UseManualTime()->Iterations(10)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeAttentionK8V4)->TK_DECODE_SHAPES->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
// The same steps without arrival counters: the split in two dispatches.
void BM_DecodeAttentionK4V4TwoDispatches(benchmark::State& state) {
  decode_step(state, 4, 4, 128, 32, 8, false, 0, false);
}
void BM_DecodeAttentionRawBf16TwoDispatches(benchmark::State& state) {
  decode_step(state, 16, 16, 128, 32, 8, false, 0, false);
}
BENCHMARK(BM_DecodeAttentionK4V4TwoDispatches)
    ->Name("Sweep_DecodeAttentionK4V4TwoDispatches")
    ->TK_DECODE_SHAPES->TK_DECODE_SHORT->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeAttentionRawBf16TwoDispatches)
    ->Name("Sweep_DecodeAttentionRawBf16TwoDispatches")
    ->TK_DECODE_SHAPES->TK_DECODE_SHORT->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMicrosecond);
// The short steps with the cache resident in the L2 (every call reads the
// same one), the regime in which ggml's test-backend-ops times its flash
// attention: the like-for-like comparison with that peer.
void BM_DecodeAttentionK4V4Resident(benchmark::State& state) {
  decode_step(state, 4, 4, 128, 32, 8, false, 0, true, true);
}
void BM_DecodeAttentionRawBf16Resident(benchmark::State& state) {
  decode_step(state, 16, 16, 128, 32, 8, false, 0, true, true);
}
BENCHMARK(BM_DecodeAttentionK4V4Resident)
    ->Name("Sweep_DecodeAttentionK4V4Resident")
    ->Args({1, 1024, 1, 0, 0, 0, 0})
    ->Args({1, 4096, 1, 0, 0, 0, 0})
    ->TK_DECODE_SHORT->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeAttentionRawBf16Resident)
    ->Name("Sweep_DecodeAttentionRawBf16Resident")
    ->Args({1, 1024, 1, 0, 0, 0, 0})
    ->Args({1, 4096, 1, 0, 0, 0, 0})
    ->TK_DECODE_SHORT->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMicrosecond);
// The same shapes on the CUDA-core (subgroup) variant, which devices without
// the lanes variant take (--benchmark_filter=^Sweep_).
BENCHMARK(BM_DecodeAttentionK4V4CudaCores)
    ->Name("Sweep_DecodeAttentionK4V4CudaCores")
    ->TK_DECODE_SHAPES_(1)
    ->TK_DECODE_SHORT_(1)
    ->ArgsProduct({{1}, {1024, 4096}, {1}, {128, 256}, {1}, {4, 8, 16, 32}, {1}})
    ->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeAttentionK8V4CudaCores)
    ->Name("Sweep_DecodeAttentionK8V4CudaCores")
    ->TK_DECODE_SHAPES_(1)->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
// The demo's 3-bit formats, automatic and on CUDA cores.
#define TK_DECODE_LONG_(f) Args({1, 32768, 1, 0, 0, 0, f})->Args({1, 131072, 1, 0, 0, 0, f})
BENCHMARK(BM_DecodeAttentionK4V3)->Name("Sweep_DecodeAttentionK4V3")->TK_DECODE_LONG_(0)->TK_DECODE_LONG_(1)
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeAttentionK3V3)->Name("Sweep_DecodeAttentionK3V3")->TK_DECODE_LONG_(0)->TK_DECODE_LONG_(1)
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
// Split keys at 3.5 bits (K3 with half its coordinates at 4) over V3: the
// CUDA-core kernel (the tensor-core variants do not read split keys),
// beside K3V3 and K4V3 forced onto it above.
void BM_DecodeAttentionK35V3(benchmark::State& state) { decode_step(state, 3, 3, 128, 32, 8, false, 64); }
BENCHMARK(BM_DecodeAttentionK35V3)->Name("Sweep_DecodeAttentionK3.5V3")->TK_DECODE_LONG_(0)
    ->Args({32, 4096, 1, 0, 0, 0, 0})->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
// The other coded widths the lanes variant takes, automatic only.
#define TK_DECODE_WIDTH(K, V)                                                                                 \
  void BM_DecodeAttentionK##K##V##V(benchmark::State& state) { decode_step(state, K, V); }                   \
  BENCHMARK(BM_DecodeAttentionK##K##V##V)->Name("Sweep_DecodeAttentionK" #K "V" #V)->TK_DECODE_LONG_(0)      \
      ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
TK_DECODE_WIDTH(8, 8)
TK_DECODE_WIDTH(6, 6)
TK_DECODE_WIDTH(4, 8)
TK_DECODE_WIDTH(2, 2)
#undef TK_DECODE_WIDTH
// K4V4 at the other head sizes, same heads: Dim 64 and 256 (Qwen3-Next's
// and Gemma's attention layers), both on the lanes variant on NVIDIA; and
// the CUDA-core kernel at Dim 256.
template <std::int64_t D>
void BM_DecodeAttentionK4V4Dim(benchmark::State& state) { decode_step(state, 4, 4, D); }
BENCHMARK_TEMPLATE(BM_DecodeAttentionK4V4Dim, 64)->Name("Sweep_DecodeAttentionK4V4Dim64")->TK_DECODE_LONG_(0)
    ->Args({32, 4096, 1, 0, 0, 0, 0})->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_DecodeAttentionK4V4Dim, 256)->Name("Sweep_DecodeAttentionK4V4Dim256")->TK_DECODE_LONG_(0)
    ->Args({32, 4096, 1, 0, 0, 0, 0})->Args({1, 32768, 4, 0, 0, 0, 0})->TK_DECODE_LONG_(1)
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
// Three models' attention layers: Qwen3-Next (16 query heads over 2 KV
// heads, Dim 256), gpt-oss (64 over 8, Dim 64; no sinks or window here) and
// GQA 8 at Dim 128 (64 over 8: Llama 3 70B, Qwen2.5 72B).
void BM_DecodeAttentionQwen3Next(benchmark::State& state) { decode_step(state, 4, 4, 256, 16, 2); }
void BM_DecodeAttentionGptOss(benchmark::State& state) { decode_step(state, 4, 4, 64, 64, 8); }
void BM_DecodeAttentionGqa8(benchmark::State& state) { decode_step(state, 4, 4, 128, 64, 8); }
#define TK_DECODE_MODEL_(f, NAME)                                                                             \
  BENCHMARK(f)->Name(NAME)->TK_DECODE_LONG_(0)->Args({32, 4096, 1, 0, 0, 0, 0})->UseManualTime()->Iterations(10) \
      ->Unit(benchmark::kMicrosecond);
TK_DECODE_MODEL_(BM_DecodeAttentionGqa8, "Sweep_DecodeAttentionK4V4Gqa8")
TK_DECODE_MODEL_(BM_DecodeAttentionQwen3Next, "Sweep_DecodeAttentionK4V4Qwen3Next")
TK_DECODE_MODEL_(BM_DecodeAttentionGptOss, "Sweep_DecodeAttentionK4V4GptOss")
#undef TK_DECODE_MODEL_
BENCHMARK(BM_DecodeAttentionQwen3Next)->Name("Sweep_DecodeAttentionK4V4Qwen3NextSplits")
    ->ArgsProduct({{1}, {32768, 131072}, {1}, {0}, {0}, {4, 8, 16, 32, 64}, {0}})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeAttentionGptOss)->Name("Sweep_DecodeAttentionK4V4GptOssSplits")
    ->ArgsProduct({{1}, {32768, 131072}, {1}, {0}, {0}, {4, 8, 16, 32}, {0}})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
// The lanes variant's splits at Dim 64.
BENCHMARK_TEMPLATE(BM_DecodeAttentionK4V4Dim, 64)->Name("Sweep_DecodeAttentionK4V4Dim64Splits")
    ->ArgsProduct({{1}, {32768, 131072}, {1}, {0}, {0}, {8, 16, 32}, {0}})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

// The geometry behind the automatic choice (--benchmark_filter=^Sweep_):
// workgroup x keys per invocation x splits at the shapes that matter.
void BM_DecodeAttentionSweep(benchmark::State& state) { decode_step(state, 4, 4); }
BENCHMARK(BM_DecodeAttentionSweep)
    ->Name("Sweep_DecodeAttention")
    ->ArgsProduct({{1}, {1024}, {1}, {64}, {1}, {8, 16, 32}, {1}})
    ->ArgsProduct({{1}, {4096}, {1}, {64, 128}, {1}, {32, 64}, {1}})
    ->ArgsProduct({{1}, {32768}, {1}, {128}, {1, 2}, {32, 64, 128}, {1}})
    ->ArgsProduct({{1}, {131072}, {1}, {128}, {1, 2}, {32, 64, 128}, {1}})
    ->ArgsProduct({{32}, {4096}, {1}, {128}, {1, 2}, {1, 2, 4}, {1}})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
// The tensor-core variants' splits (forced: the first the device has, the lanes
// variant on NVIDIA).
void BM_DecodeAttentionTensorCoreSweep(benchmark::State& state) { decode_step(state, 4, 4); }
BENCHMARK(BM_DecodeAttentionTensorCoreSweep)
    ->Name("Sweep_DecodeAttentionTensorCore")
    ->ArgsProduct({{1}, {1024}, {1}, {0}, {0}, {0, 4, 16}, {2}})
    ->ArgsProduct({{1}, {4096}, {1}, {0}, {0}, {0, 8, 16, 32, 64}, {2}})
    ->ArgsProduct({{1}, {32768}, {1}, {0}, {0}, {0, 16, 32, 64, 128}, {2}})
    ->ArgsProduct({{1}, {131072}, {1}, {0}, {0}, {0, 32, 64, 128}, {2}})
    ->ArgsProduct({{32}, {4096}, {1}, {0}, {0}, {0, 2, 4}, {2}})
    ->ArgsProduct({{1}, {32768}, {4}, {0}, {0}, {16, 32, 64}, {2}})
    ->ArgsProduct({{1}, {1024}, {1}, {0}, {0}, {1, 4, 8}, {2}})
    ->ArgsProduct({{1}, {1024, 4096}, {1}, {128}, {0}, {0, 8, 16, 32}, {2}})
    ->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMicrosecond);
// The staged tensor-core variant at the headline shapes.
void BM_DecodeAttentionStaged(benchmark::State& state) { decode_step(state, 4, 4); }
BENCHMARK(BM_DecodeAttentionStaged)->Name("Sweep_DecodeAttentionK4V4Staged")->TK_DECODE_SHAPES_(3)->UseManualTime()
    ->Iterations(10)->Unit(benchmark::kMicrosecond);
// K4V4 with centred keys (each row's scores gain scale <q, mu>) at the
// headline shapes, automatic and on the CUDA-core variant.
void BM_DecodeAttentionK4V4Centred(benchmark::State& state) { decode_step(state, 4, 4, 128, 32, 8, true); }
BENCHMARK(BM_DecodeAttentionK4V4Centred)->Name("Sweep_DecodeAttentionK4V4Centred")->TK_DECODE_SHAPES_(0)
    ->TK_DECODE_SHAPES_(1)->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
// Where the lanes variant overtakes the CUDA-core one below 16 rows per KV
// head (decode_attention.hpp, lanes_rule): both forced, automatic geometry.
void BM_DecodeAttentionCrossover(benchmark::State& state) { decode_step(state, 4, 4); }
BENCHMARK(BM_DecodeAttentionCrossover)
    ->Name("Sweep_DecodeAttentionCrossover")
    ->ArgsProduct({{1, 4}, {1024, 2048, 4096, 8192, 16384}, {1, 2}, {0}, {0}, {0}, {1, 2}})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
void BM_DecodeAttentionRawBf16Sweep(benchmark::State& state) { decode_step(state, 16, 16); }
BENCHMARK(BM_DecodeAttentionRawBf16Sweep)
    ->Name("Sweep_DecodeAttentionRawBf16")
    ->ArgsProduct({{1}, {32768, 131072}, {1}, {128}, {1}, {32, 64}, {1}})
    ->ArgsProduct({{32}, {4096}, {1}, {128}, {1}, {1, 2}, {1}})
    ->ArgsProduct({{1}, {1024, 4096}, {1}, {128, 256}, {1}, {4, 8, 16, 32}, {1}})
    ->ArgsProduct({{4, 8}, {1024}, {1}, {128, 256}, {1}, {2, 4, 8}, {1}})
    ->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
