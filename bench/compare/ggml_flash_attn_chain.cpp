// SPDX-License-Identifier: MIT
// Peer timing for AURA decode attention: ggml-vulkan's FLASH_ATTN_EXT over
// an f16 (or q8_0 / q4_0) cache, in both cache regimes, on the same GPU.
//
// ggml's own `test-backend-ops -m perf` repeats one op over the same
// tensors, so its K and V stay in the L2 from op to op; our benchmarks
// rotate caches out of it. This driver times the peer both ways:
//   warm  one K/V set, read by every op (perf mode's regime; compare with
//         the Sweep_DecodeAttention*Resident entries);
//   cold  K/V sets rotated so that their sum passes 256 MiB (compare with
//         the BM_DecodeAttention* entries).
// The ops form a chain: op i takes op i-1's output, reshaped, as its query,
// so ggml synchronises between them as between a decode step's layers (its
// graph inserts a barrier where a node reads an unsynchronised write), and
// no two ops overlap. The op itself is perf mode's decode case: 32 query
// heads over 8 KV heads, Dim 128, one new token, f32 query, an f16 mask,
// f32 precision, K and V as views of a cache twice as long.
//
// Time: wall clock over one graph_compute of OPS ops, divided by OPS, the
// best of 5 after a warm-up (as perf mode times, CPU recording included:
// where recording is slower than the GPU the figure is the CPU's). For the
// GPU's own timestamps, run with GGML_VK_PERF_LOGGER=1 (it adds a timestamp
// and a barrier after every op).
//
// Build against a ggml build with the Vulkan backend (not built by CMake):
//   g++ -O2 -std=c++17 bench/compare/ggml_flash_attn_chain.cpp -I$GGML/include
//       -L$GGML_BUILD/src -lggml -lggml-base -o ggml_flash_attn_chain
// Usage: ggml_flash_attn_chain [BACKEND (Vulkan0)] [OPS (2000)] [TYPE (f16|q8_0|q4_0)]
#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr int kDim = 128, kKvHeads = 8, kGroup = 4;

// Best wall time per op of a chain of `ops` ops over `sets` K/V sets.
double time_chain(ggml_backend_t backend, int batch, int keys, int sets, int ops, ggml_type type) {
  const ggml_init_params params{
      ggml_tensor_overhead() * (4 * sets + 4 * ops + 16) + ggml_graph_overhead_custom(4 * ops + 16, false), nullptr,
      true};
  ggml_context* ctx = ggml_init(params);
  ggml_tensor* q0 = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, kDim, 1, kKvHeads * kGroup, batch);
  ggml_tensor* mask = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, keys, 1, 1, batch);
  std::vector<ggml_tensor*> caches, k, v;
  for (int s = 0; s < sets; ++s) {
    for (int side = 0; side < 2; ++side) {
      ggml_tensor* cache = ggml_new_tensor_4d(ctx, type, kDim, 2 * keys, kKvHeads, batch);
      caches.push_back(cache);
      std::vector<ggml_tensor*>& views = side ? v : k;
      views.push_back(
          ggml_view_4d(ctx, cache, kDim, keys, kKvHeads, batch, cache->nb[1], cache->nb[2], cache->nb[3], 0));
    }
  }
  ggml_cgraph* graph = ggml_new_graph_custom(ctx, 4 * ops + 16, false);
  ggml_tensor* q = q0;
  ggml_tensor* out = nullptr;
  for (int i = 0; i < ops; ++i) {
    out = ggml_flash_attn_ext(ctx, q, k[i % sets], v[i % sets], mask, 1.0f / std::sqrt(float(kDim)), 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(out, GGML_PREC_F32);
    q = ggml_reshape_4d(ctx, out, kDim, 1, kKvHeads * kGroup, batch);
  }
  ggml_build_forward_expand(graph, out);
  ggml_backend_buffer_t buffer = ggml_backend_alloc_ctx_tensors(ctx, backend);
  if (!buffer) {
    std::fprintf(stderr, "ggml_flash_attn_chain: allocation failed\n");
    std::exit(1);
  }
  // Uniform values in [-1, 1], quantised where the cache is.
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const auto fill = [&](ggml_tensor* t) {
    const std::size_t n = static_cast<std::size_t>(ggml_nelements(t));
    std::vector<float> f(n);
    for (float& x : f) x = uniform(gen);
    if (t->type == GGML_TYPE_F32) {
      ggml_backend_tensor_set(t, f.data(), 0, n * sizeof(float));
    } else if (t->type == GGML_TYPE_F16) {
      std::vector<ggml_fp16_t> h(n);
      ggml_fp32_to_fp16_row(f.data(), h.data(), static_cast<int64_t>(n));
      ggml_backend_tensor_set(t, h.data(), 0, n * sizeof(ggml_fp16_t));
    } else {
      std::vector<char> blocks(ggml_row_size(t->type, static_cast<int64_t>(n)));
      ggml_quantize_chunk(t->type, f.data(), blocks.data(), 0, static_cast<int64_t>(n) / t->ne[0], t->ne[0], nullptr);
      ggml_backend_tensor_set(t, blocks.data(), 0, blocks.size());
    }
  };
  fill(q0);
  fill(mask);
  for (ggml_tensor* t : caches) fill(t);
  if (ggml_backend_graph_compute(backend, graph) != GGML_STATUS_SUCCESS) {
    std::fprintf(stderr, "ggml_flash_attn_chain: graph_compute failed\n");
    std::exit(1);
  }
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    ggml_backend_graph_compute(backend, graph);
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::micro>(t1 - t0).count() / ops);
  }
  ggml_backend_buffer_free(buffer);
  ggml_free(ctx);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const char* name = argc > 1 ? argv[1] : "Vulkan0";
  const int ops = argc > 2 ? std::atoi(argv[2]) : 2000;
  const char* type_name = argc > 3 ? argv[3] : "f16";
  const ggml_type type = !std::strcmp(type_name, "q8_0")   ? GGML_TYPE_Q8_0
                         : !std::strcmp(type_name, "q4_0") ? GGML_TYPE_Q4_0
                                                           : GGML_TYPE_F16;
  ggml_backend_t backend = ggml_backend_init_by_name(name, nullptr);
  if (!backend || ops < 1) {
    std::fprintf(stderr, "usage: ggml_flash_attn_chain [BACKEND] [OPS] [f16|q8_0|q4_0] (no backend %s)\n", name);
    return 1;
  }
  for (const int batch : {1, 4, 8})
    for (const int keys : {1024, 4096}) {
      // Bytes of one set's two caches (each twice the keys read).
      const double set_bytes = 2.0 * 2 * keys * batch * kKvHeads * kDim * ggml_type_size(type) / ggml_blck_size(type);
      const int cold_sets = std::clamp(static_cast<int>(std::ceil(256.0 * (1 << 20) / set_bytes)), 4, 64);
      const double warm = time_chain(backend, batch, keys, 1, ops, type);
      const double cold = time_chain(backend, batch, keys, cold_sets, ops, type);
      std::printf("ggml %s batch %d keys %d: warm (1 set) %.2f us, cold (%d sets) %.2f us\n", ggml_type_name(type),
                  batch, keys, warm, cold_sets, cold);
      std::fflush(stdout);
    }
  ggml_backend_free(backend);
  return 0;
}
