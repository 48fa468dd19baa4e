// SPDX-License-Identifier: MIT
// Vulkan-Hpp configuration shared by every header, the dispatch through
// which the library calls Vulkan, and the translation of Vulkan failures
// into tilekernels::Error.
//
// Every device-level call goes through a DeviceDispatch that the Context
// builds from a vkGetInstanceProcAddr (the system loader's, or an engine's:
// volk, a statically linked MoltenVK), never through symbols of a linked
// loader; objects the library creates are Owned handles that destroy
// themselves through the same dispatch and the Context's allocation
// callbacks.
#pragma once

#include <vulkan/vulkan_raii.hpp>

#include <string>
#include <utility>

#include "tilekernels/core/error.hpp"

namespace tilekernels {

using InstanceDispatch = vk::raii::InstanceDispatcher;
using DeviceDispatch = vk::raii::DeviceDispatcher;

// A device-level Vulkan object the library owns (a vk:: handle type), with
// the function and allocation callbacks that destroy it. Move-only.
template <class Handle>
class Owned {
 public:
  using CHandle = typename Handle::CType;
  using Destroy = void(VKAPI_PTR*)(VkDevice, CHandle, const VkAllocationCallbacks*);

  Owned() = default;
  Owned(vk::Device device, Handle handle, Destroy destroy, const vk::AllocationCallbacks* allocator) noexcept
      : device_(device), handle_(handle), destroy_(destroy), allocator_(allocator) {}
  Owned(Owned&& o) noexcept { *this = std::move(o); }
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      reset();
      device_ = o.device_;
      handle_ = std::exchange(o.handle_, Handle{});
      destroy_ = o.destroy_;
      allocator_ = o.allocator_;
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() { reset(); }

  Handle get() const noexcept { return handle_; }
  Handle operator*() const noexcept { return handle_; }
  explicit operator bool() const noexcept { return static_cast<bool>(handle_); }
  void reset() noexcept {
    if (handle_ && destroy_)
      destroy_(static_cast<VkDevice>(device_), static_cast<CHandle>(handle_),
               reinterpret_cast<const VkAllocationCallbacks*>(allocator_));
    handle_ = Handle{};
  }
  // Gives the handle up without destroying it (an object the device may
  // still be using after a fence wait ran out: Submitter).
  void leak() noexcept { handle_ = Handle{}; }

 private:
  vk::Device device_;
  Handle handle_{};
  Destroy destroy_ = nullptr;
  const vk::AllocationCallbacks* allocator_ = nullptr;
};

}  // namespace tilekernels

namespace tilekernels::detail {

inline Error vulkan_error(const char* what, vk::Result result) {
  if (result == vk::Result::eErrorDeviceLost)
    return Error(ErrorCode::device_lost, std::string(what) + ": the device was lost (VK_ERROR_DEVICE_LOST)");
  return Error(ErrorCode::vulkan, std::string(what) + " failed: " + vk::to_string(result));
}

// Runs a Vulkan-Hpp call and turns its exceptions into tilekernels::Error.
template <class F>
decltype(auto) vk_call(const char* what, F&& f) {
  try {
    return f();
  } catch (const vk::SystemError& e) {
    throw vulkan_error(what, static_cast<vk::Result>(e.code().value()));
  }
}

}  // namespace tilekernels::detail
