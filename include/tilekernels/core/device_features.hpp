// SPDX-License-Identifier: MIT
// Feature probing: what a physical device offers (DeviceInfo), and the
// logical device a Context creates with every optional feature the kernels
// can use enabled where the device has it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tilekernels/core/device_info.hpp"
#include "tilekernels/core/vulkan.hpp"

namespace tilekernels::detail {

// VK_KHR_cooperative_matrix and VK_KHR_shader_bfloat16 as the Vulkan
// registry defines them (structure types 1000506000-1000506001 and
// 1000141000, component type BFLOAT16_KHR 1000141000): newer than the
// Debian bookworm headers, so declared here under names of our own.
struct CoopMatFeaturesKHR {
  VkStructureType sType = static_cast<VkStructureType>(1000506000);
  void* pNext = nullptr;
  VkBool32 cooperativeMatrix = VK_FALSE;
  VkBool32 cooperativeMatrixRobustBufferAccess = VK_FALSE;
};
struct CoopMatPropertiesKHR {
  VkStructureType sType = static_cast<VkStructureType>(1000506001);
  void* pNext = nullptr;
  std::uint32_t MSize = 0, NSize = 0, KSize = 0;
  std::int32_t AType = 0, BType = 0, CType = 0, ResultType = 0;  // VkComponentTypeKHR
  VkBool32 saturatingAccumulation = VK_FALSE;
  std::int32_t scope = 0;  // VkScopeKHR
};
struct BFloat16FeaturesKHR {
  VkStructureType sType = static_cast<VkStructureType>(1000141000);
  void* pNext = nullptr;
  VkBool32 shaderBFloat16Type = VK_FALSE;
  VkBool32 shaderBFloat16DotProduct = VK_FALSE;
  VkBool32 shaderBFloat16CooperativeMatrix = VK_FALSE;
};
inline constexpr std::int32_t kComponentFloat16 = 0;
inline constexpr std::int32_t kComponentFloat32 = 1;
inline constexpr std::int32_t kComponentBFloat16 = 1000141000;
inline constexpr std::int32_t kScopeSubgroup = 3;

inline std::vector<std::string> device_extensions(vk::PhysicalDevice physical, const InstanceDispatch& d) {
  std::vector<std::string> out;
  for (const auto& e : physical.enumerateDeviceExtensionProperties(nullptr, d)) out.emplace_back(e.extensionName.data());
  return out;
}

inline bool has_extension(const std::vector<std::string>& extensions, const char* name) {
  for (const auto& e : extensions)
    if (e == name) return true;
  return false;
}

// Limits, subgroup geometry and multiprocessor count; the optional feature
// flags stay false (they say what is enabled, which device creation or the
// adopting caller decides).
inline DeviceInfo read_device_info(vk::PhysicalDevice physical, const InstanceDispatch& d,
                                   const std::vector<std::string>& extensions) {
  DeviceInfo info;
  const auto props = physical.getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceSubgroupProperties,
                                             vk::PhysicalDeviceSubgroupSizeControlProperties>(d);
  const auto& p = props.get<vk::PhysicalDeviceProperties2>().properties;
  const auto& sg = props.get<vk::PhysicalDeviceSubgroupProperties>();
  info.name = p.deviceName.data();
  info.vendor_id = p.vendorID;
  info.api_version = p.apiVersion;
  info.type = p.deviceType;
  info.subgroup_size = sg.subgroupSize;
  info.min_subgroup_size = info.max_subgroup_size = sg.subgroupSize;
  const bool compute = static_cast<bool>(sg.supportedStages & vk::ShaderStageFlagBits::eCompute);
  info.subgroup_arithmetic = compute && static_cast<bool>(sg.supportedOperations & vk::SubgroupFeatureFlagBits::eArithmetic);
  info.subgroup_shuffle = compute && static_cast<bool>(sg.supportedOperations & vk::SubgroupFeatureFlagBits::eShuffle);
  info.max_workgroup_count = {p.limits.maxComputeWorkGroupCount[0], p.limits.maxComputeWorkGroupCount[1],
                              p.limits.maxComputeWorkGroupCount[2]};
  info.max_workgroup_invocations = p.limits.maxComputeWorkGroupInvocations;
  info.max_shared_memory = p.limits.maxComputeSharedMemorySize;
  info.max_storage_buffer_range = p.limits.maxStorageBufferRange;
  info.min_storage_buffer_offset_alignment = p.limits.minStorageBufferOffsetAlignment;
  info.timestamp_period_ns = p.limits.timestampPeriod;
  if (info.api_version >= VK_API_VERSION_1_1)
    info.max_memory_allocation_size =
        physical.getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceMaintenance3Properties>(d)
            .get<vk::PhysicalDeviceMaintenance3Properties>()
            .maxMemoryAllocationSize;
  const auto memory = physical.getMemoryProperties(d);
  for (std::uint32_t i = 0; i < memory.memoryHeapCount; ++i)
    info.largest_heap = std::max<std::uint64_t>(info.largest_heap, memory.memoryHeaps[i].size);

  if (has_extension(extensions, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME)) {
    const auto sm =
        physical.getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV>(d);
    info.multiprocessors = sm.get<vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV>().shaderSMCount;
  } else if (has_extension(extensions, VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME)) {
    const auto core =
        physical.getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceShaderCorePropertiesAMD>(d);
    const auto& c = core.get<vk::PhysicalDeviceShaderCorePropertiesAMD>();
    info.multiprocessors = c.shaderEngineCount * c.shaderArraysPerEngineCount * c.computeUnitsPerShaderArray;
  }
  if (info.api_version >= VK_API_VERSION_1_2)
    info.driver_id = physical.getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceDriverProperties>(d)
                         .get<vk::PhysicalDeviceDriverProperties>()
                         .driverID;
  // lavapipe runs compute shaders in vectors of min(width / 32, 16) lanes,
  // each vector one subgroup, but reports (and gl_SubgroupSize returns)
  // width / 32, with LP_NATIVE_VECTOR_WIDTH = width; it ignores a required
  // subgroup size and REQUIRE_FULL_SUBGROUPS too. Above 16 the subgroups
  // are not what the builtins say (bench/notes/2026-11-lavapipe.md; the test
  // Subgroups.LavapipeWideVectorsRunSixteenLanes fails once that changes).
  info.subgroups_as_reported = !(info.driver_id == vk::DriverId::eMesaLlvmpipe && info.subgroup_size > 16);
  if (has_extension(extensions, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME) || info.api_version >= VK_API_VERSION_1_3) {
    const auto& sc = props.get<vk::PhysicalDeviceSubgroupSizeControlProperties>();
    info.subgroup_size_control =
        sc.minSubgroupSize > 0 && static_cast<bool>(sc.requiredSubgroupSizeStages & vk::ShaderStageFlagBits::eCompute);
    if (info.subgroup_size_control) {
      info.min_subgroup_size = sc.minSubgroupSize;
      info.max_subgroup_size = sc.maxSubgroupSize;
    }
  }
  return info;
}

// The tiles VK_KHR_cooperative_matrix lists (none where the device or the
// loader lacks it).
inline std::vector<CoopMatPropertiesKHR> khr_matrix_tiles(vk::Instance instance, vk::PhysicalDevice physical,
                                                          const InstanceDispatch& d) {
  using Query = VkResult(VKAPI_PTR*)(VkPhysicalDevice, std::uint32_t*, CoopMatPropertiesKHR*);
  const auto query = reinterpret_cast<Query>(
      d.vkGetInstanceProcAddr(static_cast<VkInstance>(instance), "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"));
  if (!query) return {};
  const auto handle = static_cast<VkPhysicalDevice>(physical);
  std::uint32_t count = 0;
  if (query(handle, &count, nullptr) != VK_SUCCESS) return {};
  std::vector<CoopMatPropertiesKHR> props(count);
  if (query(handle, &count, props.data()) != VK_SUCCESS) return {};
  props.resize(count);
  return props;
}

// lavapipe (Mesa 26.2) crashes compiling any cooperative-matrix shader at
// LP_NATIVE_VECTOR_WIDTH 512 and above (subgroups of 16 or more;
// bench/notes/2026-12-khr-matrices.md): its matrices are used only at
// subgroups of 8.
inline bool matrix_units_usable(const DeviceInfo& info) {
  return !(info.driver_id == vk::DriverId::eMesaLlvmpipe && info.subgroup_size > 8);
}

// The bf16 kernels use 16x16x16 bf16 x bf16 -> f32 in subgroup scope.
inline bool has_bf16_coopmat_shape(const std::vector<CoopMatPropertiesKHR>& tiles) {
  for (const auto& p : tiles)
    if (p.MSize == 16 && p.NSize == 16 && p.KSize == 16 && p.AType == kComponentBFloat16 &&
        p.BType == kComponentBFloat16 && p.CType == kComponentFloat32 && p.ResultType == kComponentFloat32 &&
        p.scope == kScopeSubgroup)
      return true;
  return false;
}

inline bool is_fp16_subgroup_tile(const CoopMatPropertiesKHR& p) {
  return p.AType == kComponentFloat16 && p.BType == kComponentFloat16 && p.CType == kComponentFloat32 &&
         p.ResultType == kComponentFloat32 && p.scope == kScopeSubgroup;
}

inline std::vector<MatrixTile> fp16_matrix_tiles(const std::vector<CoopMatPropertiesKHR>& tiles) {
  std::vector<MatrixTile> out;
  for (const auto& p : tiles)
    if (is_fp16_subgroup_tile(p)) out.push_back({p.MSize, p.NSize, p.KSize});
  return out;
}

// The fp16 x fp16 -> f32 subgroup tile the fp16 matrix variants compose
// their 16 x 16 x 16 products of (shaders/common/mma.glsl: M, N and K of 8
// or 16), among those fp16_matrix_tiles() lists: the largest, ties to the
// taller; m = 0 where none is usable.
inline MatrixTile fp16_matrix_tile(const std::vector<MatrixTile>& listed) {
  MatrixTile best;
  const auto fits = [](std::uint32_t x) { return x == 8 || x == 16; };
  const auto volume = [](const MatrixTile& x) { return x.m * x.n * x.k; };
  for (const auto& t : listed) {
    if (!(fits(t.m) && fits(t.n) && fits(t.k))) continue;
    if (volume(t) > volume(best) || (volume(t) == volume(best) && (t.m > best.m || (t.m == best.m && t.n > best.n))))
      best = t;
  }
  return best;
}

// DeviceInfo's fp16 matrix fields from the driver's list.
inline void set_fp16_tiles(DeviceInfo& info, const std::vector<CoopMatPropertiesKHR>& tiles) {
  info.fp16_tiles_listed = fp16_matrix_tiles(tiles);
  info.fp16_tile = fp16_matrix_tile(info.fp16_tiles_listed);
  info.cooperative_matrix_fp16 = info.fp16_tile.m != 0;
}

// Where the device has extension `ext` and its feature `member` (of the
// feature structure F): sets the feature in `storage`, links `storage` into
// the chain of `head` (it must outlive device creation) and adds `ext` to
// `enabled`.
template <class F>
bool enable_feature(vk::PhysicalDevice physical, const InstanceDispatch& d, const std::vector<std::string>& available,
                    vk::PhysicalDeviceFeatures2& head, std::vector<const char*>& enabled, const char* ext, F& storage,
                    vk::Bool32 F::*member) {
  if (!has_extension(available, ext) ||
      !(physical.getFeatures2<vk::PhysicalDeviceFeatures2, F>(d).template get<F>().*member))
    return false;
  storage.*member = VK_TRUE;
  storage.pNext = head.pNext;
  head.pNext = &storage;
  enabled.push_back(ext);
  return true;
}

// The first queue family with compute.
inline std::uint32_t compute_queue_family(vk::PhysicalDevice physical, const InstanceDispatch& d,
                                          const DeviceInfo& info) {
  const auto families = physical.getQueueFamilyProperties(d);
  for (std::uint32_t i = 0; i < families.size(); ++i)
    if (families[i].queueFlags & vk::QueueFlagBits::eCompute) return i;
  throw Error(ErrorCode::unsupported, "device '" + info.name + "' has no compute queue");
}

// Creates the logical device with one queue of `queue_family` and every
// optional feature the kernels use that the device has, recording in
// `info` what was enabled. The caller destroys it.
inline vk::Device create_device(vk::Instance instance, vk::PhysicalDevice physical, const InstanceDispatch& d,
                                const vk::AllocationCallbacks* allocator, const std::vector<std::string>& available,
                                std::uint32_t queue_family, bool want_statistics, DeviceInfo& info) {
  if (!has_extension(available, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME))
    throw Error(ErrorCode::unsupported, "device '" + info.name + "' lacks VK_KHR_push_descriptor");
  std::vector<const char*> extensions{VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME};
  info.push_descriptor = true;

  const auto supported = physical.getFeatures2<vk::PhysicalDeviceFeatures2, vk::PhysicalDeviceVulkan11Features,
                                               vk::PhysicalDeviceVulkan12Features,
                                               vk::PhysicalDeviceSubgroupSizeControlFeatures>(d);
  vk::StructureChain<vk::PhysicalDeviceFeatures2, vk::PhysicalDeviceVulkan11Features, vk::PhysicalDeviceVulkan12Features,
                     vk::PhysicalDeviceSubgroupSizeControlFeatures>
      enable;
  auto& head = enable.get<vk::PhysicalDeviceFeatures2>();
  auto& f10 = head.features;
  f10.shaderInt16 = supported.get<vk::PhysicalDeviceFeatures2>().features.shaderInt16;
  auto& f11 = enable.get<vk::PhysicalDeviceVulkan11Features>();
  f11.storageBuffer16BitAccess = supported.get<vk::PhysicalDeviceVulkan11Features>().storageBuffer16BitAccess;
  info.storage_16bit = f11.storageBuffer16BitAccess;
  auto& f12 = enable.get<vk::PhysicalDeviceVulkan12Features>();
  const auto& s12 = supported.get<vk::PhysicalDeviceVulkan12Features>();
  f12.shaderFloat16 = s12.shaderFloat16;
  f12.vulkanMemoryModel = s12.vulkanMemoryModel;
  f12.vulkanMemoryModelDeviceScope = s12.vulkanMemoryModelDeviceScope;
  info.float16 = f12.shaderFloat16;
  if (supported.get<vk::PhysicalDeviceFeatures2>().features.shaderInt64 && s12.shaderBufferInt64Atomics) {
    f10.shaderInt64 = VK_TRUE;
    f12.shaderBufferInt64Atomics = VK_TRUE;
    info.int64_atomics = true;
  }

  if (info.subgroup_size_control) {
    auto& size_control = enable.get<vk::PhysicalDeviceSubgroupSizeControlFeatures>();
    const auto& s = supported.get<vk::PhysicalDeviceSubgroupSizeControlFeatures>();
    size_control.subgroupSizeControl = s.subgroupSizeControl;
    size_control.computeFullSubgroups = s.computeFullSubgroups;
    info.subgroup_size_control = s.subgroupSizeControl && s.computeFullSubgroups;
    if (info.api_version < VK_API_VERSION_1_3) extensions.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  }
  if (!info.subgroup_size_control) enable.unlink<vk::PhysicalDeviceSubgroupSizeControlFeatures>();

  // VK_KHR_cooperative_matrix: fp16 tiles, and bf16 ones with
  // VK_KHR_shader_bfloat16; chained by hand (newer than the Vulkan headers
  // this builds against).
  CoopMatFeaturesKHR coopmat_khr;
  BFloat16FeaturesKHR bf16_features;
  if (has_extension(available, "VK_KHR_cooperative_matrix") && info.float16 && info.storage_16bit &&
      matrix_units_usable(info)) {
    const bool bf16_ext = has_extension(available, "VK_KHR_shader_bfloat16");
    CoopMatFeaturesKHR coopmat_supported;
    BFloat16FeaturesKHR bf16_supported;
    if (bf16_ext) coopmat_supported.pNext = &bf16_supported;
    VkPhysicalDeviceFeatures2 query{};
    query.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    query.pNext = &coopmat_supported;
    d.vkGetPhysicalDeviceFeatures2(static_cast<VkPhysicalDevice>(physical), &query);
    const auto tiles = coopmat_supported.cooperativeMatrix ? khr_matrix_tiles(instance, physical, d)
                                                           : std::vector<CoopMatPropertiesKHR>{};
    set_fp16_tiles(info, tiles);
    if (bf16_ext && f10.shaderInt16 && bf16_supported.shaderBFloat16Type &&
        bf16_supported.shaderBFloat16CooperativeMatrix && has_bf16_coopmat_shape(tiles)) {
      bf16_features.shaderBFloat16Type = VK_TRUE;
      bf16_features.shaderBFloat16CooperativeMatrix = VK_TRUE;
      bf16_features.pNext = head.pNext;
      head.pNext = &bf16_features;
      extensions.push_back("VK_KHR_shader_bfloat16");
      info.cooperative_matrix_bf16 = true;
    }
    if (info.cooperative_matrix_fp16 || info.cooperative_matrix_bf16) {
      coopmat_khr.cooperativeMatrix = VK_TRUE;
      coopmat_khr.pNext = head.pNext;
      head.pNext = &coopmat_khr;
      extensions.push_back("VK_KHR_cooperative_matrix");
    }
  }

  // Lets every pipeline turn off the driver's bounds checks on storage
  // buffers (Pipeline): some drivers check each load otherwise, even with
  // robustBufferAccess off.
  vk::PhysicalDevicePipelineRobustnessFeaturesEXT robustness;
  info.pipeline_robustness =
      enable_feature(physical, d, available, head, extensions, VK_EXT_PIPELINE_ROBUSTNESS_EXTENSION_NAME, robustness,
                     &vk::PhysicalDevicePipelineRobustnessFeaturesEXT::pipelineRobustness);

  // Diagnostics only: the driver's per-pipeline statistics.
  vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR executable_info;
  info.pipeline_statistics =
      want_statistics && enable_feature(physical, d, available, head, extensions,
                                        VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME, executable_info,
                                        &vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::pipelineExecutableInfo);

  const float priority = 1.0f;
  const vk::DeviceQueueCreateInfo queue_info({}, queue_family, 1, &priority);
  vk::DeviceCreateInfo create_info({}, queue_info, {}, extensions);
  create_info.pNext = &head;
  return physical.createDevice(create_info, allocator, d);
}

}  // namespace tilekernels::detail
