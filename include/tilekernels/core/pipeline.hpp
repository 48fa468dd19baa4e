// SPDX-License-Identifier: MIT
// A compute pipeline built from embedded SPIR-V, its specialization constants
// and an optional required subgroup size, with push descriptors for its
// storage buffers so that recording needs no descriptor pool.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tilekernels/core/vulkan.hpp"

namespace tilekernels {

// Everything that makes one pipeline distinct; the Context memoises on it.
struct PipelineKey {
  const std::uint32_t* spirv = nullptr;  // identity of the embedded module
  std::size_t spirv_words = 0;
  std::vector<std::uint32_t> spec;       // constant_id i gets spec[i]
  std::uint32_t bindings = 0;            // storage buffers at bindings 0..n-1
  std::uint32_t push_constant_bytes = 0;
  std::uint32_t required_subgroup_size = 0;  // 0: the driver's choice

  bool operator<(const PipelineKey& o) const {
    if (spirv != o.spirv) return spirv < o.spirv;
    if (spec != o.spec) return spec < o.spec;
    if (bindings != o.bindings) return bindings < o.bindings;
    if (push_constant_bytes != o.push_constant_bytes) return push_constant_bytes < o.push_constant_bytes;
    return required_subgroup_size < o.required_subgroup_size;
  }
};

class Pipeline {
 public:
  // `cache`: may be null. `statistics`: capture the driver's statistics
  // (the device must have VK_KHR_pipeline_executable_properties enabled).
  // `unchecked`: storage buffer accesses without the driver's bounds checks
  // (the device must have VK_EXT_pipeline_robustness's pipelineRobustness
  // enabled).
  Pipeline(vk::Device device, const DeviceDispatch& d, const vk::AllocationCallbacks* allocator, vk::PipelineCache cache,
           const PipelineKey& key, bool statistics = false, bool unchecked = false)
      : device_(device), dispatch_(&d), bindings_(key.bindings), push_bytes_(key.push_constant_bytes),
        statistics_(statistics) {
    detail::vk_call("creating a compute pipeline", [&] { build(allocator, cache, key, unchecked); });
  }

  // (name, value) of every statistic the driver reports for this pipeline's
  // executables; empty when it was built without statistics.
  std::vector<std::pair<std::string, std::string>> statistics() const {
    std::vector<std::pair<std::string, std::string>> out;
    if (!statistics_) return out;
    detail::vk_call("reading pipeline statistics", [&] {
      const auto& d = *dispatch_;
      const auto device = static_cast<VkDevice>(device_);
      VkPipelineInfoKHR info{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, nullptr, static_cast<VkPipeline>(*pipeline_)};
      std::uint32_t count = 0;
      vk::resultCheck(vk::Result(d.vkGetPipelineExecutablePropertiesKHR(device, &info, &count, nullptr)),
                      "vkGetPipelineExecutablePropertiesKHR");
      for (std::uint32_t e = 0; e < count; ++e) {
        VkPipelineExecutableInfoKHR exe{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, nullptr,
                                        static_cast<VkPipeline>(*pipeline_), e};
        std::uint32_t n = 0;
        vk::resultCheck(vk::Result(d.vkGetPipelineExecutableStatisticsKHR(device, &exe, &n, nullptr)),
                        "vkGetPipelineExecutableStatisticsKHR");
        VkPipelineExecutableStatisticKHR blank{};
        blank.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR;
        std::vector<VkPipelineExecutableStatisticKHR> stats(n, blank);
        vk::resultCheck(vk::Result(d.vkGetPipelineExecutableStatisticsKHR(device, &exe, &n, stats.data())),
                        "vkGetPipelineExecutableStatisticsKHR");
        for (const auto& st : stats) {
          std::string value;
          switch (st.format) {
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: value = st.value.b32 ? "true" : "false"; break;
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: value = std::to_string(st.value.i64); break;
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: value = std::to_string(st.value.u64); break;
            default: value = std::to_string(st.value.f64); break;
          }
          std::string name = count > 1 ? std::to_string(e) : std::string();
          if (count > 1) name += ':';
          name += st.name;
          out.emplace_back(std::move(name), std::move(value));
        }
      }
    });
    return out;
  }

  vk::Pipeline pipeline() const { return *pipeline_; }
  vk::PipelineLayout layout() const { return *layout_; }
  std::uint32_t bindings() const { return bindings_; }
  std::uint32_t push_constant_bytes() const { return push_bytes_; }

 private:
  void build(const vk::AllocationCallbacks* allocator, vk::PipelineCache cache, const PipelineKey& key, bool unchecked) {
    const auto& d = *dispatch_;
    std::vector<vk::DescriptorSetLayoutBinding> slots;
    for (std::uint32_t i = 0; i < key.bindings; ++i)
      slots.emplace_back(i, vk::DescriptorType::eStorageBuffer, 1, vk::ShaderStageFlagBits::eCompute);
    set_layout_ = Owned<vk::DescriptorSetLayout>(
        device_,
        device_.createDescriptorSetLayout(
            vk::DescriptorSetLayoutCreateInfo(vk::DescriptorSetLayoutCreateFlagBits::ePushDescriptorKHR, slots),
            allocator, d),
        d.vkDestroyDescriptorSetLayout, allocator);
    const vk::PushConstantRange range(vk::ShaderStageFlagBits::eCompute, 0, key.push_constant_bytes);
    const vk::DescriptorSetLayout set_layout = *set_layout_;
    vk::PipelineLayoutCreateInfo layout_info({}, set_layout);
    if (key.push_constant_bytes) layout_info.setPushConstantRanges(range);
    layout_ = Owned<vk::PipelineLayout>(device_, device_.createPipelineLayout(layout_info, allocator, d),
                                        d.vkDestroyPipelineLayout, allocator);

    const Owned<vk::ShaderModule> module(
        device_,
        device_.createShaderModule(
            vk::ShaderModuleCreateInfo({}, key.spirv_words * sizeof(std::uint32_t), key.spirv), allocator, d),
        d.vkDestroyShaderModule, allocator);
    std::vector<vk::SpecializationMapEntry> entries;
    for (std::uint32_t i = 0; i < key.spec.size(); ++i)
      entries.emplace_back(i, i * sizeof(std::uint32_t), sizeof(std::uint32_t));
    const vk::SpecializationInfo spec_info(entries, vk::ArrayProxyNoTemporaries<const std::uint32_t>(key.spec));

    vk::PipelineShaderStageCreateInfo stage({}, vk::ShaderStageFlagBits::eCompute, *module, "main",
                                            key.spec.empty() ? nullptr : &spec_info);
    vk::PipelineShaderStageRequiredSubgroupSizeCreateInfo subgroup(key.required_subgroup_size);
    if (key.required_subgroup_size) {
      stage.pNext = &subgroup;
      stage.flags = vk::PipelineShaderStageCreateFlagBits::eRequireFullSubgroups;
    }
    vk::ComputePipelineCreateInfo info(
        statistics_ ? vk::PipelineCreateFlagBits::eCaptureStatisticsKHR : vk::PipelineCreateFlags{}, stage, *layout_);
    const vk::PipelineRobustnessCreateInfoEXT robustness(
        vk::PipelineRobustnessBufferBehaviorEXT::eDisabled, vk::PipelineRobustnessBufferBehaviorEXT::eDeviceDefault,
        vk::PipelineRobustnessBufferBehaviorEXT::eDeviceDefault, vk::PipelineRobustnessImageBehaviorEXT::eDeviceDefault);
    if (unchecked) info.pNext = &robustness;
    VkPipeline pipeline = VK_NULL_HANDLE;
    const auto result = static_cast<vk::Result>(d.vkCreateComputePipelines(
        static_cast<VkDevice>(device_), static_cast<VkPipelineCache>(cache), 1,
        reinterpret_cast<const VkComputePipelineCreateInfo*>(&info),
        reinterpret_cast<const VkAllocationCallbacks*>(allocator), &pipeline));
    vk::resultCheck(result, "vkCreateComputePipelines");
    pipeline_ = Owned<vk::Pipeline>(device_, vk::Pipeline(pipeline), d.vkDestroyPipeline, allocator);
  }

  vk::Device device_;
  const DeviceDispatch* dispatch_;
  Owned<vk::DescriptorSetLayout> set_layout_;
  Owned<vk::PipelineLayout> layout_;
  Owned<vk::Pipeline> pipeline_;
  std::uint32_t bindings_;
  std::uint32_t push_bytes_;
  bool statistics_;
};

}  // namespace tilekernels
