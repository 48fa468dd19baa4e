// SPDX-License-Identifier: MIT
// GPU time between two points of a command buffer, from timestamp queries.
#pragma once

#include <array>
#include <cstdint>

#include "tilekernels/core/context.hpp"

namespace tilekernels {

class GpuTimer {
 public:
  explicit GpuTimer(Context& ctx) : ctx_(&ctx) {
    if (!ctx.info().timestamps)
      throw Error(ErrorCode::unsupported, "device '" + ctx.info().name + "' has no timestamps on its compute queue");
    pool_ = detail::vk_call("creating a query pool", [&] {
      const auto& d = ctx.dispatcher();
      return Owned<vk::QueryPool>(
          ctx.device(),
          ctx.device().createQueryPool(vk::QueryPoolCreateInfo({}, vk::QueryType::eTimestamp, 2), ctx.allocator(), d),
          d.vkDestroyQueryPool, ctx.allocator());
    });
  }

  // Record around the work to time, in one command buffer.
  void start(vk::CommandBuffer cmd) {
    cmd.resetQueryPool(*pool_, 0, 2, ctx_->dispatcher());
    cmd.writeTimestamp(vk::PipelineStageFlagBits::eAllCommands, *pool_, 0, ctx_->dispatcher());
  }
  void stop(vk::CommandBuffer cmd) {
    cmd.writeTimestamp(vk::PipelineStageFlagBits::eAllCommands, *pool_, 1, ctx_->dispatcher());
  }

  // Seconds between start and stop; call after the command buffer completed.
  double seconds() const {
    std::array<std::uint64_t, 2> ticks{};
    const auto result = static_cast<vk::Result>(ctx_->dispatcher().vkGetQueryPoolResults(
        static_cast<VkDevice>(ctx_->device()), static_cast<VkQueryPool>(*pool_), 0, 2, sizeof(ticks), ticks.data(), sizeof(std::uint64_t),
        VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
    if (result != vk::Result::eSuccess) throw detail::vulkan_error("reading timestamps", result);
    return static_cast<double>(ticks[1] - ticks[0]) * ctx_->info().timestamp_period_ns * 1e-9;
  }

 private:
  Context* ctx_;
  Owned<vk::QueryPool> pool_;
};

}  // namespace tilekernels
