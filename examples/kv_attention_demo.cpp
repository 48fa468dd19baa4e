// Decode attention with a split-K merge on the GPU.
//
// A few query heads attend over a random K/V cache. The CPU computes each
// key block's partial result (as pass 1 of a split-K decode kernel would:
// the block maximum m, the sum l of e^(s - m), and o = sum e^(s - m) v), the
// GPU merges the blocks with aura::FlashPass2, and the result is checked
// against attention computed directly in double precision.
#include <tilekernels/aura.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace tk = tilekernels;

int main() try {
  constexpr std::uint32_t dim = 128;
  const std::size_t heads = 8, seq = 4096, block = 256, blocks = seq / block;
  tk::Context ctx;
  std::printf("device: %s\n", ctx.info().name.c_str());

  // Random queries, keys and values (a fixed LCG, so every run is the same).
  std::uint64_t state = 42;
  auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((state >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
  };
  std::vector<float> q(heads * dim), k(heads * seq * dim), v(heads * seq * dim);
  for (auto& x : q) x = uniform();
  for (auto& x : k) x = uniform();
  for (auto& x : v) x = uniform();
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));

  // Pass 1 on the CPU: per (head, block) partials in f32.
  std::vector<float> o(heads * blocks * dim, 0.0f), m(heads * blocks), l(heads * blocks);
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t b = 0; b < blocks; ++b) {
      std::vector<float> s(block);
      float mx = -INFINITY;
      for (std::size_t j = 0; j < block; ++j) {
        float dot = 0;
        for (std::size_t d = 0; d < dim; ++d) dot += q[h * dim + d] * k[(h * seq + b * block + j) * dim + d];
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      float sum = 0;
      float* ob = &o[(h * blocks + b) * dim];
      for (std::size_t j = 0; j < block; ++j) {
        const float p = std::exp(s[j] - mx);
        sum += p;
        for (std::size_t d = 0; d < dim; ++d) ob[d] += p * v[(h * seq + b * block + j) * dim + d];
      }
      m[h * blocks + b] = mx;
      l[h * blocks + b] = sum;
    }

  // Pass 2 on the GPU, timed with GPU timestamps.
  const auto H = static_cast<std::int64_t>(heads), B = static_cast<std::int64_t>(blocks);
  auto o_t = tk::Tensor::from_floats(ctx, tk::DType::f32, {H, B, dim}, o);
  auto m_t = tk::Tensor::from_floats(ctx, tk::DType::f32, {H, B}, m);
  auto l_t = tk::Tensor::from_floats(ctx, tk::DType::f32, {H, B}, l);
  tk::Tensor out(ctx, tk::DType::bf16, {H, dim});
  tk::aura::FlashPass2<tk::aura::FlashPass2Config<dim>> merge(ctx);
  tk::GpuTimer timer(ctx);
  merge.run({o_t, m_t, l_t, out, {}});  // warm-up: builds the pipeline
  ctx.submit_and_wait([&](vk::CommandBuffer cmd) {
    timer.start(cmd);
    merge.record(cmd, {o_t, m_t, l_t, out, {}});
    timer.stop(cmd);
  });
  const auto got = out.download_floats();

  // Direct attention in double precision.
  double err2 = 0, ref2 = 0;
  for (std::size_t h = 0; h < heads; ++h) {
    std::vector<double> s(seq);
    double mx = -INFINITY;
    for (std::size_t j = 0; j < seq; ++j) {
      double dot = 0;
      for (std::size_t d = 0; d < dim; ++d) dot += double(q[h * dim + d]) * k[(h * seq + j) * dim + d];
      s[j] = dot * scale;
      mx = std::max(mx, s[j]);
    }
    double sum = 0;
    std::vector<double> acc(dim, 0.0);
    for (std::size_t j = 0; j < seq; ++j) {
      const double p = std::exp(s[j] - mx);
      sum += p;
      for (std::size_t d = 0; d < dim; ++d) acc[d] += p * v[(h * seq + j) * dim + d];
    }
    for (std::size_t d = 0; d < dim; ++d) {
      const double r = acc[d] / sum, e = got[h * dim + d] - r;
      err2 += e * e;
      ref2 += r * r;
    }
  }
  const double rel = std::sqrt(err2 / ref2);
  std::printf("%zu heads x %zu keys (dim %u) in %zu blocks of %zu: merged on the GPU in %.2f us\n", heads, seq, dim,
              blocks, block, timer.seconds() * 1e6);
  std::printf("relative RMS error vs direct attention (bf16 output): %.2e (budget 5e-3) %s\n", rel,
              rel <= 5e-3 ? "OK" : "FAILED");
  return rel <= 5e-3 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
