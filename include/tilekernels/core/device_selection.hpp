// SPDX-License-Identifier: MIT
// Which physical device a Context opens: TILEKERNELS_DEVICE (an index or a
// name substring) or ContextOptions::device, else the first discrete GPU,
// else the first device.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "tilekernels/core/vulkan.hpp"

namespace tilekernels {

namespace detail {

inline std::string env_string(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// `selector`: empty (automatic), a decimal index, or a name substring.
inline vk::raii::PhysicalDevice pick_physical_device(vk::raii::PhysicalDevices devices, const std::string& selector) {
  if (devices.empty()) throw Error(ErrorCode::unsupported, "no Vulkan device found");
  if (!selector.empty()) {
    if (selector.find_first_not_of("0123456789") == std::string::npos) {
      const std::size_t index = std::stoul(selector);
      if (index >= devices.size())
        throw Error(ErrorCode::invalid_argument, "device selector '" + selector + "' but only " +
                                                     std::to_string(devices.size()) + " device(s) exist");
      return std::move(devices[index]);
    }
    for (auto& d : devices)
      if (std::string(d.getProperties().deviceName.data()).find(selector) != std::string::npos) return std::move(d);
    throw Error(ErrorCode::invalid_argument, "no Vulkan device name contains '" + selector + "'");
  }
  for (auto& d : devices)
    if (d.getProperties().deviceType == vk::PhysicalDeviceType::eDiscreteGpu) return std::move(d);
  return std::move(devices.front());
}

}  // namespace detail

// The names of the Vulkan devices present, in the order a numeric
// TILEKERNELS_DEVICE / ContextOptions::device indexes them (one Context per
// device, e.g. for tensor parallelism).
inline std::vector<std::string> device_names() {
  return detail::vk_call("listing the Vulkan devices", [] {
    vk::raii::Context raii;
    const vk::ApplicationInfo app("tilekernels", 1, "tilekernels", 1, VK_API_VERSION_1_2);
    vk::raii::Instance instance(raii, vk::InstanceCreateInfo({}, &app));
    std::vector<std::string> names;
    for (const auto& d : vk::raii::PhysicalDevices(instance)) names.emplace_back(d.getProperties().deviceName.data());
    return names;
  });
}

}  // namespace tilekernels
