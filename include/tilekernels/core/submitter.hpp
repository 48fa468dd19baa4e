// SPDX-License-Identifier: MIT
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
  Submitter(vk::Device device, const DeviceDispatch& d, const vk::AllocationCallbacks* allocator, vk::Queue queue,
            std::uint32_t queue_family, std::chrono::milliseconds fence_timeout)
      : device_(device), dispatch_(&d), allocator_(allocator), queue_(queue), timeout_(fence_timeout) {
    pool_ = Owned<vk::CommandPool>(
        device,
        device.createCommandPool(vk::CommandPoolCreateInfo(vk::CommandPoolCreateFlagBits::eTransient, queue_family),
                                 allocator, d),
        d.vkDestroyCommandPool, allocator);
  }
  Submitter(const Submitter&) = delete;
  Submitter& operator=(const Submitter&) = delete;
  // The pool of an abandoned() Submitter may hold a pending command buffer.
  ~Submitter() {
    if (abandoned_) pool_.leak();
  }

  // Records with `record` into a fresh command buffer, submits it and waits
  // (with the fence timeout). Thread-safe; for setup, tests and tools, not
  // for a hot loop.
  void submit_and_wait(const std::function<void(vk::CommandBuffer)>& record) {
    std::lock_guard lock(mutex_);
    const auto& d = *dispatch_;
    const vk::CommandBuffer cmd = vk_call("allocating a command buffer", [&] {
      return device_.allocateCommandBuffers(vk::CommandBufferAllocateInfo(*pool_, vk::CommandBufferLevel::ePrimary, 1),
                                            d)
          .front();
    });
    // Freed however this returns (the pool is the Context's), unless the
    // wait ran out with the work still pending.
    struct Free {
      const Submitter* s;
      vk::CommandBuffer cmd;
      ~Free() {
        if (cmd) s->device_.freeCommandBuffers(*s->pool_, cmd, *s->dispatch_);
      }
    } free_it{this, cmd};
    vk_call("recording a command buffer",
            [&] { cmd.begin(vk::CommandBufferBeginInfo(vk::CommandBufferUsageFlagBits::eOneTimeSubmit), d); });
    record(cmd);
    vk_call("recording a command buffer", [&] { cmd.end(d); });
    Owned<vk::Fence> fence = vk_call("creating a fence", [&] {
      return Owned<vk::Fence>(device_, device_.createFence(vk::FenceCreateInfo(), allocator_, d), d.vkDestroyFence,
                              allocator_);
    });
    const vk::SubmitInfo submit({}, {}, cmd);
    ++submissions_;
    check(static_cast<vk::Result>(
              d.vkQueueSubmit(queue_, 1, reinterpret_cast<const VkSubmitInfo*>(&submit), static_cast<VkFence>(*fence))),
          "vkQueueSubmit");
    try {
      wait(*fence);
    } catch (const Error& e) {
      // The device may still run this command buffer (abandoned()).
      if (e.code() == ErrorCode::timeout) {
        free_it.cmd = vk::CommandBuffer{};
        fence.leak();
      }
      throw;
    }
  }

  // Waits for a fence with the configured timeout; a timeout or a lost
  // device becomes an Error. After a timeout the work may still be in
  // flight: abandoned() is true from then on.
  void wait(vk::Fence fence) const {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout_).count();
    const VkFence f = fence;
    const auto result = static_cast<vk::Result>(
        dispatch_->vkWaitForFences(static_cast<VkDevice>(device_), 1, &f, VK_TRUE, static_cast<std::uint64_t>(ns)));
    if (result == vk::Result::eTimeout) {
      abandoned_ = true;
      throw Error(ErrorCode::timeout, "a fence wait exceeded " + std::to_string(timeout_.count()) +
                                          " ms; the Context frees nothing from now on (Context::abandoned)");
    }
    check(result, "vkWaitForFences");
  }

  std::uint64_t submissions() const noexcept { return submissions_.load(); }
  // Whether a wait ran out with its work still pending: the device may
  // still use anything that work references, so nothing the library
  // allocated is freed afterwards.
  bool abandoned() const noexcept { return abandoned_.load(); }

 private:
  static void check(vk::Result result, const char* what) {
    if (result != vk::Result::eSuccess) throw vulkan_error(what, result);
  }

  vk::Device device_;
  const DeviceDispatch* dispatch_;
  const vk::AllocationCallbacks* allocator_;
  vk::Queue queue_;
  std::chrono::milliseconds timeout_;
  Owned<vk::CommandPool> pool_;
  std::recursive_mutex mutex_;  // the pool and the queue
  std::atomic<std::uint64_t> submissions_{0};
  mutable std::atomic<bool> abandoned_{false};
};

}  // namespace tilekernels::detail
