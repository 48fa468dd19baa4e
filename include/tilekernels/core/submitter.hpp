// The Context's own submissions: a command pool and a queue lock for the
// convenience submit-and-wait path (uploads, downloads, run(), tests and
// tools). Kernels never use it while recording: record() appends to the
// caller's command buffer only. Every submission is counted, so tests can
// prove that no record() submits.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "tilekernels/core/vulkan.hpp"

namespace tilekernels::detail {

class Submitter {
 public:
  Submitter(const vk::raii::Device& device, vk::Queue queue, std::uint32_t queue_family,
            std::chrono::milliseconds fence_timeout)
      : device_(&device), queue_(queue), timeout_(fence_timeout) {
    pool_.emplace(device, vk::CommandPoolCreateInfo(vk::CommandPoolCreateFlagBits::eTransient, queue_family));
  }
  ~Submitter() { pool_.reset(); }
  Submitter(const Submitter&) = delete;
  Submitter& operator=(const Submitter&) = delete;

  // Records with `record` into a fresh command buffer, submits it and waits
  // (with the fence timeout). Thread-safe; for setup, tests and tools, not
  // for a hot loop.
  void submit_and_wait(const std::function<void(vk::CommandBuffer)>& record) {
    std::lock_guard lock(mutex_);
    auto buffers = vk_call("allocating a command buffer", [&] {
      return device_->allocateCommandBuffers(vk::CommandBufferAllocateInfo(**pool_, vk::CommandBufferLevel::ePrimary, 1));
    });
    vk::raii::CommandBuffer& cmd = buffers.front();
    vk_call("recording a command buffer",
            [&] { cmd.begin(vk::CommandBufferBeginInfo(vk::CommandBufferUsageFlagBits::eOneTimeSubmit)); });
    record(*cmd);
    vk_call("recording a command buffer", [&] { cmd.end(); });
    vk::raii::Fence fence = vk_call("creating a fence", [&] { return vk::raii::Fence(*device_, vk::FenceCreateInfo()); });
    const vk::CommandBuffer handle = *cmd;
    const vk::SubmitInfo submit({}, {}, handle);
    ++submissions_;
    check(static_cast<vk::Result>(device_->getDispatcher()->vkQueueSubmit(
              queue_, 1, reinterpret_cast<const VkSubmitInfo*>(&submit), static_cast<VkFence>(*fence))),
          "vkQueueSubmit");
    wait(*fence);
  }

  // Waits for a fence with the configured timeout; a timeout or a lost
  // device becomes an Error (the caller's work may still be in flight).
  void wait(vk::Fence fence) const {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout_).count();
    const VkFence f = fence;
    const auto result = static_cast<vk::Result>(
        device_->getDispatcher()->vkWaitForFences(**device_, 1, &f, VK_TRUE, static_cast<std::uint64_t>(ns)));
    if (result == vk::Result::eTimeout)
      throw Error(ErrorCode::timeout, "a fence wait exceeded " + std::to_string(timeout_.count()) + " ms");
    check(result, "vkWaitForFences");
  }

  std::uint64_t submissions() const noexcept { return submissions_.load(); }

 private:
  static void check(vk::Result result, const char* what) {
    if (result != vk::Result::eSuccess) throw vulkan_error(what, result);
  }

  const vk::raii::Device* device_;
  vk::Queue queue_;
  std::chrono::milliseconds timeout_;
  std::optional<vk::raii::CommandPool> pool_;
  std::recursive_mutex mutex_;  // the pool and the queue
  std::atomic<std::uint64_t> submissions_{0};
};

}  // namespace tilekernels::detail
