// SPDX-License-Identifier: MIT
// The README's usage example (built with the examples, so it stays true).
#include <tilekernels/aura.hpp>

#include <cstdio>
#include <vector>

namespace tk = tilekernels;

int main() try {
  tk::Context ctx;  // or adopt your own: tk::Context(tk::AdoptedDevice{vkGetInstanceProcAddr, instance, ...})

  // Shapes are compile-time where they make the kernel fast: Dim 128, f32
  // partials, bf16 output. FlashPass2Config<100> would not compile.
  using Merge = tk::aura::FlashPass2Config<128, tk::DType::f32, tk::DType::bf16>;
  const std::int64_t heads = 32, blocks = 16;

  std::vector<float> o(heads * blocks * 128, 0.5f), m(heads * blocks, 1.0f), l(heads * blocks, 2.0f);
  auto o_partials = tk::Tensor::from_floats(ctx, tk::DType::f32, {heads, blocks, 128}, o);
  auto m_partials = tk::Tensor::from_floats(ctx, tk::DType::f32, {heads, blocks}, m);
  auto l_partials = tk::Tensor::from_floats(ctx, tk::DType::f32, {heads, blocks}, l);
  tk::Tensor output(ctx, tk::DType::bf16, {heads, 128});
  tk::Tensor lse(ctx, tk::DType::f32, {heads});

  // Built for the shapes it will see: every pipeline it may need is
  // compiled here, none while recording.
  tk::aura::FlashPass2<Merge> merge(ctx, {.max_q_heads = heads, .max_blocks = blocks});
  // Record into any command buffer of yours; Tensor converts to TensorRef,
  // which can also name your own VkBuffer, offset and size.
  ctx.submit_and_wait([&](vk::CommandBuffer cmd) {
    merge.record(cmd, {o_partials, m_partials, l_partials, output, lse.ref()});
  });
  std::printf("output[0] = %g (expect 0.25), lse[0] = %g\n", output.download_floats()[0], lse.download_floats()[0]);
} catch (const tk::Error& e) {  // bad shapes, dtypes, sizes, device problems
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
