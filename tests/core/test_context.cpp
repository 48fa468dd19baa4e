// Context: adopting a caller's device, and seeding the pipeline cache.
#include <tilekernels/aura/flash_pass2.hpp>

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
  Merge(ctx).run({o_t, m_t, l_t, out, {}});
  return out.read_floats();
}

TEST(ContextAdopt, RunsOnTheCallersDeviceAndLeavesItAlive) {
  ContextOptions options;
  options.validation = false;
  Context owner(options);
  const auto expected = merge_once(owner);
  {
    AdoptedFeatures features;
    features.push_descriptor = true;
    Context adopted(owner.instance(), *owner.physical_device(), *owner.device(), owner.queue_family(), 0, features);
    EXPECT_EQ(adopted.info().name, owner.info().name);
    EXPECT_EQ(merge_once(adopted), expected);
  }
  // The adopted Context released, not destroyed, the caller's objects.
  EXPECT_EQ(merge_once(owner), expected);
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

}  // namespace
