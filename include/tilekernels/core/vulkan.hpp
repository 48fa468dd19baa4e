// Vulkan-Hpp configuration shared by every header, and the translation of
// Vulkan failures into tilekernels::Error.
#pragma once

#include <vulkan/vulkan_raii.hpp>

#include <string>

#include "tilekernels/core/error.hpp"

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
