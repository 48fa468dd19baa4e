// SPDX-License-Identifier: MIT
// Context: adopting a caller's device, the path preference, the
// multiprocessor count, seeding the pipeline cache, and the driver's
// pipeline statistics.
#include <tilekernels/aura/flash_pass2.hpp>
#include <tilekernels/gdn/chunk_o.hpp>
#include <tilekernels/gdn/kkt_solve.hpp>
#include <tilekernels/gdn/recurrent_step.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <optional>
#include <cstdio>
#include <string>

#include "../support.hpp"

namespace {

using namespace tktest;
using Merge = aura::FlashPass2<aura::FlashPass2Config<64, DType::f32, DType::f32>>;

// Runs one small merge on `ctx` and returns the output.
std::vector<float> merge_once(Context& ctx) {
  Rng rng(31);
  const auto o = rng.normals(2 * 3 * 64);
  std::vector<float> m{0.5f, -1.0f, 2.0f, 0.0f, 1.0f, 3.0f}, l{1.0f, 2.0f, 0.5f, 1.5f, 0.0f, 2.5f};
  auto o_t = Tensor::from_floats(ctx, DType::f32, {2, 3, 64}, o);
  auto m_t = Tensor::from_floats(ctx, DType::f32, {2, 3}, m);
  auto l_t = Tensor::from_floats(ctx, DType::f32, {2, 3}, l);
  GuardedTensor out(ctx, DType::f32, {2, 64});
  Merge(ctx).run({o_t, m_t, l_t, out, {}, {}});
  return out.read_floats();
}

// An engine's device as a Context adopts it: the loader entry point comes
// from the engine (here: the owner's), never from a loader the library opens.
AdoptedDevice adopted_from(const Context& owner, const VkAllocationCallbacks* allocator = nullptr) {
  AdoptedDevice a;
  a.get_instance_proc_addr = owner.instance_dispatcher().vkGetInstanceProcAddr;
  a.instance = owner.instance();
  a.physical_device = owner.physical_device();
  a.device = owner.device();
  a.queue_family = owner.queue_family();
  a.features.int64_atomics = owner.info().int64_atomics;
  a.allocator = allocator;
  return a;
}

// Fence waits: a minute by default, ten on a CPU device (which compiles
// pipelines inside the wait); the option overrides both.
TEST(ContextOptionsTest, FenceTimeoutDependsOnTheDeviceUnlessGiven) {
  const Context& ctx = tktest::context();
  EXPECT_EQ(ctx.fence_timeout(), ctx.info().is_cpu() ? std::chrono::minutes(10) : std::chrono::minutes(1));
  ContextOptions options;
  options.validation = false;
  options.fence_timeout = std::chrono::seconds(5);
  EXPECT_EQ(Context(options).fence_timeout(), std::chrono::seconds(5));
}

// Sets an environment variable for one scope, and restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Under PathPreference::subgroup every matrix-unit variant is refused (and,
// where the build compiled it, says why) and every other variant is as
// eligible as without the cap.
template <class Kernel>
void expect_capped(const Context& capped, const Context& open, const typename Kernel::Problem& problem) {
  for (const auto& v : Kernel::variants) {
    SCOPED_TRACE(std::string(Kernel::name) + " " + std::string(v.name));
    const Status s = eligibility(capped, v, problem);
    if (v.path == Path::tensor_core_fp16 || v.path == Path::tensor_core_bf16) {
      EXPECT_FALSE(s);
      if (!v.spirv.empty()) {  // else refused first as not built
        EXPECT_NE(s.message.find("matrix units are off"), std::string::npos) << s.message;
      }
    } else {
      EXPECT_EQ(bool(s), bool(eligibility(open, v, problem))) << s.message;
    }
  }
  EXPECT_NE(select_variant(capped, Kernel::name, Kernel::variants, problem).path, Path::tensor_core_fp16);
  EXPECT_NE(select_variant(capped, Kernel::name, Kernel::variants, problem).path, Path::tensor_core_bf16);
}

TEST(ContextOptionsTest, SubgroupPathTurnsMatrixUnitsOff) {
  ContextOptions options;
  options.validation = false;
  options.path = PathPreference::automatic;
  ScopedEnv automatic("TILEKERNELS_PATH", "automatic");
  const Context open(options);
  options.path = PathPreference::subgroup;
  const Context capped(options);
  EXPECT_EQ(capped.path(), PathPreference::subgroup);
  EXPECT_FALSE(capped.force_portable());
  expect_capped<gdn::ChunkO<gdn::ChunkOConfig<16, 64, 64>>>(capped, open, {1, 64, 1, 2, 0, true});
  expect_capped<gdn::KKTSolve<gdn::KKTSolveConfig<16, 64>>>(capped, open, {1, 64, 1, 2, 0, true});
  expect_capped<gdn::RecurrentStep<gdn::RecurrentStepConfig<64, 64>>>(capped, open, {1, 2, 1});
}

// TILEKERNELS_PATH sets the path where the options leave it automatic, and
// anything but automatic, subgroup or portable is refused by name.
TEST(ContextOptionsTest, PathFromTheEnvironment) {
  ContextOptions options;
  options.validation = false;
  {
    ScopedEnv env("TILEKERNELS_PATH", "subgroup");
    EXPECT_EQ(Context(options).path(), PathPreference::subgroup);
    options.path = PathPreference::portable;
    EXPECT_EQ(Context(options).path(), PathPreference::portable);  // the options win
    options.path = PathPreference::automatic;
  }
  {
    ScopedEnv env("TILEKERNELS_PATH", "portable");
    EXPECT_TRUE(Context(options).force_portable());
  }
  ScopedEnv env("TILEKERNELS_PATH", "tensor");
  try {
    Context ctx(options);
    ADD_FAILURE() << "TILEKERNELS_PATH=tensor was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("TILEKERNELS_PATH must be automatic, subgroup or portable, got 'tensor'"),
              std::string::npos)
        << e.what();
  }
}

// A wait that runs out leaves its work in flight: the error says so, the
// Context reports it abandoned, and neither the buffer that work writes
// nor the Context (its command buffer, pool, device) is freed under it
// (they are leaked; a driver may crash on memory freed while in use).
TEST(ContextOptionsTest, TimedOutWorkKeepsItsMemory) {
  ContextOptions options;
  options.validation = false;
  options.fence_timeout = std::chrono::milliseconds(0);  // a poll: no device finishes 1 GiB of fills before it
  {
    // The fragment-layout probe waits too: where it runs, it cannot finish
    // within that either, and the Context is made abandoned, layouts unknown.
    Context probed(options);
    if (probed.abandoned()) {
      EXPECT_EQ(probed.info().fp16_layout, MmaLayout{});
      EXPECT_EQ(probed.info().bf16_layout, MmaLayout{});
    }
    std::printf("[context] a zero fence timeout: the probe %s\n",
                probed.abandoned() ? "ran out, the Context is abandoned" : "did not run or finished");
  }
  options.probe_fragment_layouts = false;
  auto ctx = std::make_unique<Context>(options);
  EXPECT_FALSE(ctx->abandoned());
  auto buffer = std::make_unique<Buffer>(*ctx, std::size_t(64) << 20);
  try {
    ctx->submit_and_wait([&](vk::CommandBuffer cmd) {
      for (std::uint32_t i = 0; i < 16; ++i) cmd.fillBuffer(buffer->handle(), 0, VK_WHOLE_SIZE, i, ctx->dispatcher());
    });
    GTEST_SKIP() << "the device finished 1 GiB of fills within a zero-length wait";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::timeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("frees nothing"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(ctx->abandoned());
  buffer.reset();
  ctx.reset();
}

TEST(ContextAdopt, RunsOnTheCallersDeviceAndLeavesItAlive) {
  ContextOptions options;
  options.validation = false;
  Context owner(options);
  const auto expected = merge_once(owner);
  {
    Context adopted(adopted_from(owner));
    EXPECT_EQ(adopted.info().name, owner.info().name);
    EXPECT_EQ(adopted.info().multiprocessors, owner.info().multiprocessors);
    EXPECT_EQ(merge_once(adopted), expected);
  }
  // The adopted Context released, not destroyed, the caller's objects.
  EXPECT_EQ(merge_once(owner), expected);
}

// Allocation callbacks that count what passes through them.
struct CountingAllocator {
  std::atomic<int> allocations{0}, frees{0};
  static void* VKAPI_PTR allocate(void* user, std::size_t size, std::size_t alignment, VkSystemAllocationScope) {
    static_cast<CountingAllocator*>(user)->allocations++;
    return ::operator new(size, std::align_val_t(std::max<std::size_t>(alignment, alignof(std::max_align_t))));
  }
  static void* VKAPI_PTR reallocate(void*, void*, std::size_t, std::size_t, VkSystemAllocationScope) {
    return nullptr;  // never asked for by the objects the library creates; a failure if it were
  }
  static void VKAPI_PTR release(void* user, void* memory) {
    if (!memory) return;
    static_cast<CountingAllocator*>(user)->frees++;
    ::operator delete(memory, std::align_val_t(alignof(std::max_align_t)));
  }
  VkAllocationCallbacks callbacks() {
    VkAllocationCallbacks c{};
    c.pUserData = this;
    c.pfnAllocation = &allocate;
    c.pfnReallocation = &reallocate;
    c.pfnFree = &release;
    return c;
  }
};

// Every object the adopted Context creates (its command pool, the kernel's
// pipelines and layouts, the tensors' buffers) goes through the engine's
// allocation callbacks where the driver allocates host memory for it, and
// is freed through them by the time the Context is gone.
TEST(ContextAdopt, UsesTheEnginesAllocationCallbacks) {
  ContextOptions options;
  options.validation = false;
  Context owner(options);
  CountingAllocator counter;
  const VkAllocationCallbacks callbacks = counter.callbacks();
  {
    Context adopted(adopted_from(owner, &callbacks));
    merge_once(adopted);
  }
  std::printf("[context] %d host allocations through the engine's callbacks\n", counter.allocations.load());
  if (counter.allocations.load() == 0) GTEST_SKIP() << owner.info().name << " allocates no host memory through callbacks";
  EXPECT_EQ(counter.allocations.load(), counter.frees.load());
}

TEST(ContextAdopt, RefusesAMissingLoaderEntryPoint) {
  ContextOptions options;
  options.validation = false;
  Context owner(options);
  AdoptedDevice a = adopted_from(owner);
  a.get_instance_proc_addr = nullptr;
  try {
    Context adopted(a);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("get_instance_proc_addr"), std::string::npos) << e.what();
  }
}

// An engine's own VkPipelineCache: the kernels' pipelines are created
// through it, and the Context serialises it.
TEST(ContextPipelineCache, CreatesThroughTheEnginesCache) {
  ContextOptions owner_options;
  owner_options.validation = false;
  Context owner(owner_options);
  const auto& d = owner.dispatcher();
  const vk::PipelineCache cache = owner.device().createPipelineCache(vk::PipelineCacheCreateInfo(), nullptr, d);
  const std::size_t empty = owner.device().getPipelineCacheData(cache, d).size();
  {
    ContextOptions options;
    options.external_pipeline_cache = cache;
    Context adopted(adopted_from(owner), options);
    merge_once(adopted);
    EXPECT_EQ(adopted.pipeline_cache_data(), owner.device().getPipelineCacheData(cache, d));
  }
  std::printf("[context] the engine's cache: %zu bytes empty, %zu after a kernel\n", empty,
              owner.device().getPipelineCacheData(cache, d).size());
  owner.device().destroyPipelineCache(cache, nullptr, d);
}

// The multiprocessor count persistent kernels size their grids by: none on
// a CPU device; every NVIDIA driver with compute since Turing reports its
// SMs (VK_NV_shader_sm_builtins), and no GPU has fewer than 2 or more than
// a few hundred.
TEST(ContextDeviceInfo, MultiprocessorsArePlausible) {
  const auto& info = context().info();
  std::printf("[context] %s: %u multiprocessors\n", info.name.c_str(), info.multiprocessors);
  if (info.is_cpu()) {
    EXPECT_EQ(info.multiprocessors, 0u);
  }
  if (info.vendor_id == 0x10de) {
    EXPECT_GE(info.multiprocessors, 2u);
    EXPECT_LE(info.multiprocessors, 1024u);
  }
}

TEST(ContextPipelineCache, SavedDataSeedsANewContext) {
  ContextOptions options;
  options.validation = false;
  std::vector<std::uint8_t> data;
  {
    Context first(options);
    merge_once(first);
    data = first.pipeline_cache_data();
  }
  ASSERT_FALSE(data.empty());
  options.pipeline_cache = data;
  Context second(options);
  EXPECT_EQ(merge_once(second).size(), 128u);
}

TEST(ContextPipelineStatistics, ReportsEachPipelineWhereTheDriverCan) {
  ContextOptions options;
  options.validation = true;  // the extension's use must be valid too
  options.pipeline_statistics = true;
  Context ctx(options);
  const auto out = merge_once(ctx);
  EXPECT_EQ(out.size(), 128u);
  const std::string report = ctx.pipeline_report();
  if (!ctx.info().pipeline_statistics) {
    EXPECT_TRUE(report.empty());
    GTEST_SKIP() << "no VK_KHR_pipeline_executable_properties on " << ctx.info().name;
  }
  // One line per pipeline the Context built (the merge kernel's, for its
  // envelope), naming its specialization constants and at least one
  // statistic.
  EXPECT_NE(report.find("spec ["), std::string::npos) << report;
  EXPECT_NE(report.find(" | "), std::string::npos) << report;
  EXPECT_EQ(std::count(report.begin(), report.end(), '\n'), static_cast<std::ptrdiff_t>(ctx.pipelines_created()))
      << report;
  std::printf("%s", report.c_str());
}

TEST(ContextPipelineStatistics, OffByDefault) {
  ContextOptions options;
  options.validation = false;
  options.pipeline_statistics = false;
  Context ctx(options);
  merge_once(ctx);
  EXPECT_FALSE(ctx.info().pipeline_statistics);
  EXPECT_TRUE(ctx.pipeline_report().empty());
}

}  // namespace

namespace {

// The synchronization validation of sync_context() is live: a merge that
// reads partials a fill has just written, with no barrier between them, is
// a hazard it must report (so tests that record whole steps on it can fail).
TEST(ContextSyncValidation, ReportsAMissingBarrier) {
  Context& ctx = sync_context();
  if (!ctx.validation_enabled()) GTEST_SKIP() << "no validation layer";
  ctx.clear_validation_messages();
  Rng rng(7);
  auto o = Tensor::from_floats(ctx, DType::f32, {2, 3, 64}, rng.normals(2 * 3 * 64));
  auto m = Tensor::from_floats(ctx, DType::f32, {2, 3}, rng.normals(6));
  auto l = Tensor::from_floats(ctx, DType::f32, {2, 3}, std::vector<float>(6, 1.0f));
  Tensor out(ctx, DType::f32, {2, 64});
  Merge merge(ctx);
  const auto fill_then_merge = [&](bool barrier) {
    ctx.submit_and_wait([&](vk::CommandBuffer cmd) {
      cmd.fillBuffer(m.buffer().handle(), 0, VK_WHOLE_SIZE, 0u, ctx.dispatcher());
      if (barrier) {
        const vk::MemoryBarrier written(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eShaderRead);
        cmd.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eComputeShader, {},
                            written, {}, {}, ctx.dispatcher());
      }
      merge.record(cmd, {o, m, l, out, {}, {}});
    });
    auto messages = ctx.validation_messages();
    ctx.clear_validation_messages();
    return messages;
  };
  const auto without = fill_then_merge(false);
  ASSERT_FALSE(without.empty()) << "no hazard reported for a read after an unsynchronized fill";
  for (const auto& msg : without) EXPECT_NE(msg.find("SYNC-HAZARD-READ-AFTER-WRITE"), std::string::npos) << msg;
  EXPECT_TRUE(fill_then_merge(true).empty());
}

}  // namespace
