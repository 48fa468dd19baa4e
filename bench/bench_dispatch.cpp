// SPDX-License-Identifier: MIT
// What a dependent dispatch costs, measured on near-empty kernels: the
// floor under every small shape (bench/notes/2026-11-method.md, "Machine",
// and bench/notes/2026-11-aura-flash-pass2.md).
#include <tilekernels/aura/flash_pass2.hpp>
#include <tilekernels/spirv/bench/empty.hpp>

#include <vector>

#include "common.hpp"

namespace {

using namespace tkbench;
namespace aura = tilekernels::aura;

// One dispatch plus barrier of a flash pass 2 with nothing to do (dim 4, one
// head, one block: it loads and stores once).
void BM_EmptyDispatch(benchmark::State& state) {
  Context& ctx = context();
  Tensor o(ctx, DType::f32, {1, 1, 4}), m(ctx, DType::f32, {1, 1}), l(ctx, DType::f32, {1, 1});
  Tensor out(ctx, DType::f32, {1, 4});
  aura::FlashPass2<aura::FlashPass2Config<4, DType::f32, DType::f32>> kernel(ctx);
  run_timed(state, ctx, [&](vk::CommandBuffer cmd, int) { kernel.record(cmd, {o, m, l, out, {}}); }, 0, 0);
}
BENCHMARK(BM_EmptyDispatch)->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

// What that cost is made of, per dispatch of the same near-empty kernel, in
// one command buffer of 2000 (arg): 0 recorded whole (pipeline, push
// descriptors and constants) with a barrier after each, as above; 1 only
// vkCmdDispatch and the barrier (state bound once); 2 only vkCmdDispatch,
// no barriers (dispatches may overlap); 3 recorded whole, no barriers;
// then state bound once and other barriers after each dispatch: 4 an
// execution dependency alone (not enough for data), 5 shader writes made
// visible to reads and writes, 6 shader writes made visible to reads, 7
// as 5 with a by-region dependency, 8 as 5 split into an event set after
// each dispatch and waited on before the next, 9 as 5 from all commands to
// all commands, 10 as 5 with draw-indirect added to the destination stages.
void BM_DispatchAnatomy(benchmark::State& state) {
  Context& ctx = context();
  Tensor o(ctx, DType::f32, {1, 1, 4}), m(ctx, DType::f32, {1, 1}), l(ctx, DType::f32, {1, 1});
  Tensor out(ctx, DType::f32, {1, 4});
  aura::FlashPass2<aura::FlashPass2Config<4, DType::f32, DType::f32>> kernel(ctx);
  const auto mode = state.range(0);
  const int reps = 2000;
  std::vector<Owned<vk::Event>> events;
  const auto& d = ctx.dispatcher();
  if (mode == 8)
    for (int i = 0; i < 2 * reps; ++i)
      events.emplace_back(ctx.device(), ctx.device().createEvent(vk::EventCreateInfo{}, nullptr, d), d.vkDestroyEvent, nullptr);
  int next_event = 0;
  using A = vk::AccessFlagBits;
  const auto stage = vk::PipelineStageFlagBits::eComputeShader;
  const vk::MemoryBarrier wr(A::eShaderWrite, A::eShaderRead | A::eShaderWrite);
  const vk::MemoryBarrier write_read(A::eShaderWrite, A::eShaderRead);
  const auto record = [&](vk::CommandBuffer cmd) {
    for (int i = 0; i < reps; ++i) {
      if (i == 0 || mode == 0 || mode == 3)
        kernel.record(cmd, {o, m, l, out, {}});
      else
        cmd.dispatch(1, 1, 1, ctx.dispatcher());
      if (mode < 2) {
        compute_barrier(ctx, cmd);
      } else if (mode == 4) {
        cmd.pipelineBarrier(stage, stage, {}, {}, {}, {}, ctx.dispatcher());
      } else if (mode == 5) {
        cmd.pipelineBarrier(stage, stage, {}, wr, {}, {}, ctx.dispatcher());
      } else if (mode == 6) {
        cmd.pipelineBarrier(stage, stage, {}, write_read, {}, {}, ctx.dispatcher());
      } else if (mode == 7) {  // by-region dependency
        cmd.pipelineBarrier(stage, stage, vk::DependencyFlagBits::eByRegion, wr, {}, {}, ctx.dispatcher());
      } else if (mode == 8) {  // split barrier: an event set after the dispatch, waited on before the next
        const vk::Event e = *events[static_cast<std::size_t>(next_event++)];
        cmd.setEvent(e, stage, ctx.dispatcher());
        cmd.waitEvents(e, stage, stage, wr, {}, {}, ctx.dispatcher());
      } else if (mode == 9) {  // all commands to all commands
        const auto all = vk::PipelineStageFlagBits::eAllCommands;
        cmd.pipelineBarrier(all, all, {}, wr, {}, {}, ctx.dispatcher());
      } else if (mode == 10) {  // compute to draw-indirect + compute (as an indirect dispatch would)
        cmd.pipelineBarrier(stage, stage | vk::PipelineStageFlagBits::eDrawIndirect, {}, wr, {}, {}, ctx.dispatcher());
      }
    }
  };
  for (auto _ : state) {
    state.SetIterationTime(gpu_seconds_per_item(ctx, record, reps));
    for (auto& e : events) e.reset();  // unsignalled again for the next iteration
    next_event = 0;
  }
}
BENCHMARK(BM_DispatchAnatomy)->DenseRange(0, 10)->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

// The same cost by what the dispatch does, on shaders/bench/empty.comp (2000
// dispatches per batch). On the H100: 1.39 us with nothing stored, 1.87-2.07
// us with one store per workgroup, 0.15-0.50 us without barriers, whatever
// the workgroup size, shared memory or required subgroup size. Args:
// invocations per workgroup, shared words declared, store (0/1),
// workgroups, required subgroup size (0: none), barrier (0 the library's, 1
// an execution-only one, measured the same, 2 none).
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
  const Pipeline& p = ctx.pipeline(
      {spirv::bench_empty.data(), spirv::bench_empty.size(), {local, words, write}, 1, 0, subgroup});
  const int reps = 2000;
  const auto stage = vk::PipelineStageFlagBits::eComputeShader;
  const auto record = [&](vk::CommandBuffer cmd) {
    for (int i = 0; i < reps; ++i) {
      // No push constants, unlike record_dispatch: a kernel whose store
      // address reads one took ~0.3 us longer per dispatch on the H100.
      if (i == 0) {
        const vk::DescriptorBufferInfo info(out.ref().buffer, out.ref().offset, out.ref().bytes());
        const vk::WriteDescriptorSet w(vk::DescriptorSet{}, 0, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &info);
        cmd.bindPipeline(vk::PipelineBindPoint::eCompute, p.pipeline(), ctx.dispatcher());
        cmd.pushDescriptorSetKHR(vk::PipelineBindPoint::eCompute, p.layout(), 0, w, ctx.dispatcher());
      }
      cmd.dispatch(groups, 1, 1, ctx.dispatcher());
      if (barrier == 0) compute_barrier(ctx, cmd);
      else if (barrier == 1) cmd.pipelineBarrier(stage, stage, {}, {}, {}, {}, ctx.dispatcher());
    }
  };
  for (auto _ : state) state.SetIterationTime(gpu_seconds_per_item(ctx, record, reps));
}
BENCHMARK(BM_BarrierCost)
    ->ArgsProduct({{32, 256}, {1, 8192}, {0, 1}, {1, 132}, {0, 32}, {0, 2}})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

}  // namespace
