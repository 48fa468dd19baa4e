// What one dependent dispatch costs, by what the dispatch does: a
// near-empty kernel (shaders/bench/empty.comp) recorded 2000 times, with the
// library's compute barrier (or an execution-only one, or none) between,
// timed on the GPU. On the H100: 1.39 us with nothing stored, 1.87-2.07 us
// with one store per workgroup, 0.15-0.50 us without barriers, whatever the
// workgroup size, shared memory or required subgroup size (bench/NOTES.md).
#include <tilekernels/spirv/bench/empty.hpp>

#include "common.hpp"

namespace {

using namespace tkbench;

// Args: invocations per workgroup, shared words declared, store (0/1),
// workgroups, required subgroup size (0: none), barrier (0 library, 1 execution only, 2 none).
void BM_BarrierCost(benchmark::State& state) {
  Context& ctx = context();
  const auto local = static_cast<std::uint32_t>(state.range(0));
  const auto words = static_cast<std::uint32_t>(state.range(1));
  const auto write = static_cast<std::uint32_t>(state.range(2));
  const auto groups = static_cast<std::uint32_t>(state.range(3));
  const auto subgroup = static_cast<std::uint32_t>(state.range(4));
  const auto barrier = state.range(5);
  if (subgroup != 0 && !ctx.info().allows_subgroup_size(subgroup)) {
    state.SkipWithError("this subgroup size is not available on this device");
    return;
  }
  Tensor out(ctx, DType::u32, {static_cast<std::int64_t>(groups)});
  const Pipeline& p =
      ctx.pipeline({spirv::bench_empty, std::size(spirv::bench_empty), {local, words, write}, 1, 0, subgroup});
  const int reps = 2000;
  const auto record = [&](vk::CommandBuffer cmd) {
    for (int i = 0; i < reps; ++i) {
      if (i == 0) {
        const vk::DescriptorBufferInfo info(out.ref().buffer, out.ref().offset, out.ref().bytes());
        const vk::WriteDescriptorSet w(vk::DescriptorSet{}, 0, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &info);
        cmd.bindPipeline(vk::PipelineBindPoint::eCompute, p.pipeline(), ctx.dispatcher());
        cmd.pushDescriptorSetKHR(vk::PipelineBindPoint::eCompute, p.layout(), 0, w, ctx.dispatcher());
      }
      cmd.dispatch(groups, 1, 1, ctx.dispatcher());
      const auto stage = vk::PipelineStageFlagBits::eComputeShader;
      if (barrier == 0) compute_barrier(ctx, cmd);
      else if (barrier == 1) cmd.pipelineBarrier(stage, stage, {}, {}, {}, {}, ctx.dispatcher());
    }
  };
  for (auto _ : state) {
    GpuTimer timer(ctx);
    ctx.submit_and_wait([&](vk::CommandBuffer cmd) {
      record(cmd);
      compute_barrier(ctx, cmd);
      timer.start(cmd);
      record(cmd);
      timer.stop(cmd);
    });
    state.SetIterationTime(timer.seconds() / reps);
  }
}
BENCHMARK(BM_BarrierCost)
    ->ArgsProduct({{32, 256}, {1, 8192}, {0, 1}, {1, 132}, {0, 32}, {0, 2}})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

}  // namespace
