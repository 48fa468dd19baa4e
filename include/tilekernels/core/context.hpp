// tilekernels::Context: the device the kernels run on.
//
// Either creates its own instance, device and queue (device chosen by
// TILEKERNELS_DEVICE: an index or a name substring; else the first discrete
// GPU; else any) or adopts a caller's. Holds the memoised pipelines and a
// command pool for the convenience submit-and-wait path.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tilekernels/core/device_info.hpp"
#include "tilekernels/core/pipeline.hpp"
#include "tilekernels/core/vulkan.hpp"

namespace tilekernels {

struct ContextOptions {
  // Device selector; empty: the TILEKERNELS_DEVICE environment variable.
  std::string device;
  // Enable VK_LAYER_KHRONOS_validation when installed. Unset: on when the
  // environment variable TILEKERNELS_VALIDATION is 1.
  std::optional<bool> validation;
  // Kernel path choice; TILEKERNELS_PATH=portable overrides `automatic`.
  PathPreference path = PathPreference::automatic;
  // Deadline of every fence wait the Context does itself.
  std::chrono::milliseconds fence_timeout{std::chrono::seconds(60)};
  // Serialized pipeline cache from an earlier run (Context::pipeline_cache_data);
  // data the driver does not recognise is ignored by Vulkan.
  std::vector<std::uint8_t> pipeline_cache;
  // Largest number of workgroups one vkCmdDispatch gets along x; 0: the
  // device limit. Larger grids are split into several dispatches (lowering
  // it lets tests exercise the split on any device).
  std::uint32_t max_groups_per_dispatch = 0;
  // Ask the driver for per-pipeline statistics (registers, shared and local
  // memory, instruction counts: whatever it reports) through
  // VK_KHR_pipeline_executable_properties, where the device has it; read
  // them with Context::pipeline_report(). Unset: on when the environment
  // variable TILEKERNELS_PIPELINE_STATS is 1. A diagnostic: it may slow
  // pipeline creation.
  std::optional<bool> pipeline_statistics;
};

// What a caller enabled on a device it hands to Context (see adopt ctor).
struct AdoptedFeatures {
  bool push_descriptor = true;  // required: VK_KHR_push_descriptor
  bool subgroup_size_control = false;
  bool storage_16bit = false;
  bool float16 = false;
  bool cooperative_matrix_nv = false;
  // VK_KHR_cooperative_matrix (cooperativeMatrix), VK_KHR_shader_bfloat16
  // (shaderBFloat16Type, shaderBFloat16CooperativeMatrix), shaderInt16,
  // shaderFloat16 and storageBuffer16BitAccess, with a 16x16x16
  // bf16 x bf16 -> f32 subgroup shape.
  bool cooperative_matrix_bf16 = false;
  // shaderInt64 and shaderBufferInt64Atomics.
  bool int64_atomics = false;
  // VK_EXT_pipeline_robustness (pipelineRobustness).
  bool pipeline_robustness = false;
};

namespace detail {
inline std::string env_string(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

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
inline constexpr std::int32_t kComponentFloat32 = 1;
inline constexpr std::int32_t kComponentBFloat16 = 1000141000;
inline constexpr std::int32_t kScopeSubgroup = 3;
}  // namespace detail

class Context {
 public:
  explicit Context(ContextOptions options = {}) : options_(std::move(options)) {
    detail::vk_call("creating the Vulkan context", [&] { create_own(); });
    finish_setup();
  }

  // Adopts a caller's objects. The caller keeps ownership and must keep them
  // alive past this Context; the device must be Vulkan 1.2+ with
  // VK_KHR_push_descriptor enabled, `features` saying what else is enabled.
  Context(VkInstance instance, VkPhysicalDevice physical, VkDevice device, std::uint32_t queue_family,
          std::uint32_t queue_index, AdoptedFeatures features, ContextOptions options = {})
      : options_(std::move(options)), adopted_(true) {
    instance_.emplace(raii_, instance);
    physical_.emplace(*instance_, physical);
    device_.emplace(*physical_, device);
    queue_family_ = queue_family;
    queue_ = *device_->getQueue(queue_family, queue_index);
    read_info();
    info_.push_descriptor = features.push_descriptor;
    info_.subgroup_size_control = features.subgroup_size_control && info_.subgroup_size_control;
    info_.storage_16bit = features.storage_16bit;
    info_.float16 = features.float16;
    info_.cooperative_matrix_nv = features.cooperative_matrix_nv;
    info_.cooperative_matrix_bf16 = features.cooperative_matrix_bf16;
    info_.int64_atomics = features.int64_atomics;
    info_.pipeline_robustness = features.pipeline_robustness;
    finish_setup();
  }

  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  ~Context() {
    pipelines_.clear();
    command_pool_.reset();
    pipeline_cache_.reset();
    if (adopted_) {
      if (device_) device_->release();
      if (instance_) instance_->release();
    }
  }

  const DeviceInfo& info() const noexcept { return info_; }
  vk::Instance instance() const { return **instance_; }
  const vk::raii::Device& device() const { return *device_; }
  const vk::raii::PhysicalDevice& physical_device() const { return *physical_; }
  vk::Queue queue() const noexcept { return queue_; }
  std::uint32_t queue_family() const noexcept { return queue_family_; }
  const vk::raii::DeviceDispatcher& dispatcher() const { return *device_->getDispatcher(); }

  // True when kernels should take their portable path even where a faster one
  // exists (option or TILEKERNELS_PATH=portable).
  bool force_portable() const noexcept { return force_portable_; }

  // Workgroups per dispatch along x, after ContextOptions::max_groups_per_dispatch.
  std::uint32_t max_groups_per_dispatch() const noexcept {
    const auto limit = info_.max_workgroup_count[0];
    return options_.max_groups_per_dispatch ? std::min(limit, options_.max_groups_per_dispatch) : limit;
  }

  bool validation_enabled() const noexcept { return static_cast<bool>(messenger_); }
  // Messages the validation layer reported since the last clear.
  std::vector<std::string> validation_messages() const {
    std::lock_guard lock(log_->mutex);
    return log_->messages;
  }
  void clear_validation_messages() {
    std::lock_guard lock(log_->mutex);
    log_->messages.clear();
  }

  // The pipeline for `key`, built on first use.
  const Pipeline& pipeline(const PipelineKey& key) {
    std::lock_guard lock(pipeline_mutex_);
    auto it = pipelines_.find(key);
    if (it == pipelines_.end())
      it = pipelines_
               .emplace(key, std::make_unique<Pipeline>(*device_, pipeline_cache_ ? &*pipeline_cache_ : nullptr, key,
                                                         info_.pipeline_statistics, info_.pipeline_robustness))
               .first;
    return *it->second;
  }

  // One line per pipeline built so far: its module size and specialization
  // constants (which identify the kernel and its configuration), then the
  // driver's statistics for it. Empty unless pipeline statistics are on
  // (ContextOptions::pipeline_statistics) and the device supports them.
  std::string pipeline_report() {
    std::lock_guard lock(pipeline_mutex_);
    std::string out;
    if (!info_.pipeline_statistics) return out;
    for (const auto& [key, p] : pipelines_) {
      out += "spirv " + std::to_string(key.spirv_words) + " words, spec [";
      for (std::size_t i = 0; i < key.spec.size(); ++i) {
        if (i) out += ' ';
        out += std::to_string(key.spec[i]);
      }
      out += "]";
      for (const auto& [name, value] : p->statistics()) out += " | " + name + " " + value;
      out += "\n";
    }
    return out;
  }

  // Serialised pipeline cache, for saving across runs.
  std::vector<std::uint8_t> pipeline_cache_data() const {
    return detail::vk_call("reading the pipeline cache", [&] { return pipeline_cache_->getData(); });
  }

  // Records with `record` into a fresh command buffer, submits it and waits
  // (with the fence timeout). Thread-safe; meant for setup, tests and tools,
  // not for a hot loop.
  void submit_and_wait(const std::function<void(vk::CommandBuffer)>& record) {
    std::lock_guard lock(submit_mutex_);
    auto buffers = detail::vk_call("allocating a command buffer", [&] {
      return device_->allocateCommandBuffers(
          vk::CommandBufferAllocateInfo(**command_pool_, vk::CommandBufferLevel::ePrimary, 1));
    });
    vk::raii::CommandBuffer& cmd = buffers.front();
    detail::vk_call("recording a command buffer", [&] {
      cmd.begin(vk::CommandBufferBeginInfo(vk::CommandBufferUsageFlagBits::eOneTimeSubmit));
    });
    record(*cmd);
    detail::vk_call("recording a command buffer", [&] { cmd.end(); });
    vk::raii::Fence fence = detail::vk_call("creating a fence", [&] { return vk::raii::Fence(*device_, vk::FenceCreateInfo()); });
    const vk::CommandBuffer handle = *cmd;
    const vk::SubmitInfo submit({}, {}, handle);
    check(static_cast<vk::Result>(dispatcher().vkQueueSubmit(queue_, 1, reinterpret_cast<const VkSubmitInfo*>(&submit),
                                                             static_cast<VkFence>(*fence))),
          "vkQueueSubmit");
    wait(*fence);
  }

  // Waits for a fence with the configured timeout; a timeout or a lost
  // device becomes an Error (the caller's work may still be in flight).
  void wait(vk::Fence fence) const {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.fence_timeout).count();
    const VkFence f = fence;
    const auto result = static_cast<vk::Result>(
        dispatcher().vkWaitForFences(**device_, 1, &f, VK_TRUE, static_cast<std::uint64_t>(ns)));
    if (result == vk::Result::eTimeout) {
      // Nothing we recorded can be safely reused while the GPU may still run it.
      throw Error(ErrorCode::timeout, "a fence wait exceeded " + std::to_string(options_.fence_timeout.count()) + " ms");
    }
    check(result, "vkWaitForFences");
  }

  // Throws unless `bytes` bound as one storage buffer fits the device.
  void check_storage_range(const char* tensor, std::uint64_t bytes) const {
    if (bytes > info_.max_storage_buffer_range)
      throw Error(ErrorCode::unsupported, std::string(tensor) + ": " + std::to_string(bytes) +
                                              " bytes exceed the device's maxStorageBufferRange of " +
                                              std::to_string(info_.max_storage_buffer_range));
  }

 private:
  struct Log {
    std::mutex mutex;
    std::vector<std::string> messages;
  };

  static void check(vk::Result result, const char* what) {
    if (result != vk::Result::eSuccess) throw detail::vulkan_error(what, result);
  }

  static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT,
                                                   VkDebugUtilsMessageTypeFlagsEXT,
                                                   const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
    auto* log = static_cast<Log*>(user);
    std::lock_guard lock(log->mutex);
    log->messages.emplace_back(data && data->pMessage ? data->pMessage : "(no message)");
    return VK_FALSE;
  }

  bool want_validation() const {
    if (options_.validation) return *options_.validation;
    return detail::env_string("TILEKERNELS_VALIDATION") == "1";
  }

  void create_own() {
    std::vector<const char*> layers, extensions;
    bool validation = false;
    if (want_validation()) {
      for (const auto& l : raii_.enumerateInstanceLayerProperties())
        if (std::string(l.layerName.data()) == "VK_LAYER_KHRONOS_validation") validation = true;
      if (validation) {
        layers.push_back("VK_LAYER_KHRONOS_validation");
        extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
      }
    }
    const std::uint32_t loader = raii_.enumerateInstanceVersion();
    if (loader < VK_API_VERSION_1_2)
      throw Error(ErrorCode::unsupported, "the Vulkan loader is older than 1.2");
    const vk::ApplicationInfo app("tilekernels", 1, "tilekernels", 1, std::min(loader, VK_API_VERSION_1_3));
    instance_.emplace(raii_, vk::InstanceCreateInfo({}, &app, layers, extensions));
    if (validation) {
      using S = vk::DebugUtilsMessageSeverityFlagBitsEXT;
      using T = vk::DebugUtilsMessageTypeFlagBitsEXT;
      messenger_.emplace(*instance_, vk::DebugUtilsMessengerCreateInfoEXT(
                                         {}, S::eWarning | S::eError, T::eGeneral | T::eValidation | T::ePerformance,
                                         &on_message, log_.get()));
    }

    physical_.emplace(pick_device(vk::raii::PhysicalDevices(*instance_)));
    read_info();
    if (info_.api_version < VK_API_VERSION_1_2)
      throw Error(ErrorCode::unsupported, "device '" + info_.name + "' supports only Vulkan " +
                                              std::to_string(VK_API_VERSION_MAJOR(info_.api_version)) + "." +
                                              std::to_string(VK_API_VERSION_MINOR(info_.api_version)) +
                                              "; tilekernels needs 1.2");
    create_device();
  }

  vk::raii::PhysicalDevice pick_device(vk::raii::PhysicalDevices devices) {
    if (devices.empty()) throw Error(ErrorCode::unsupported, "no Vulkan device found");
    std::string want = options_.device.empty() ? detail::env_string("TILEKERNELS_DEVICE") : options_.device;
    if (!want.empty()) {
      if (want.find_first_not_of("0123456789") == std::string::npos) {
        const std::size_t index = std::stoul(want);
        if (index >= devices.size())
          throw Error(ErrorCode::invalid_argument, "TILEKERNELS_DEVICE=" + want + " but only " +
                                                       std::to_string(devices.size()) + " device(s) exist");
        return std::move(devices[index]);
      }
      for (auto& d : devices)
        if (std::string(d.getProperties().deviceName.data()).find(want) != std::string::npos) return std::move(d);
      throw Error(ErrorCode::invalid_argument, "no Vulkan device name contains '" + want + "'");
    }
    for (auto& d : devices)
      if (d.getProperties().deviceType == vk::PhysicalDeviceType::eDiscreteGpu) return std::move(d);
    return std::move(devices.front());
  }

  void read_info() {
    const auto props = physical_->getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceSubgroupProperties,
                                                 vk::PhysicalDeviceSubgroupSizeControlProperties>();
    const auto& p = props.get<vk::PhysicalDeviceProperties2>().properties;
    const auto& sg = props.get<vk::PhysicalDeviceSubgroupProperties>();
    info_.name = p.deviceName.data();
    info_.vendor_id = p.vendorID;
    info_.api_version = p.apiVersion;
    info_.type = p.deviceType;
    info_.subgroup_size = sg.subgroupSize;
    info_.min_subgroup_size = info_.max_subgroup_size = sg.subgroupSize;
    const bool compute = static_cast<bool>(sg.supportedStages & vk::ShaderStageFlagBits::eCompute);
    info_.subgroup_arithmetic = compute && static_cast<bool>(sg.supportedOperations & vk::SubgroupFeatureFlagBits::eArithmetic);
    info_.subgroup_shuffle = compute && static_cast<bool>(sg.supportedOperations & vk::SubgroupFeatureFlagBits::eShuffle);
    info_.max_workgroup_count = {p.limits.maxComputeWorkGroupCount[0], p.limits.maxComputeWorkGroupCount[1],
                                 p.limits.maxComputeWorkGroupCount[2]};
    info_.max_workgroup_invocations = p.limits.maxComputeWorkGroupInvocations;
    info_.max_shared_memory = p.limits.maxComputeSharedMemorySize;
    info_.max_storage_buffer_range = p.limits.maxStorageBufferRange;
    info_.min_storage_buffer_offset_alignment = p.limits.minStorageBufferOffsetAlignment;
    info_.max_push_constants_size = p.limits.maxPushConstantsSize;
    info_.timestamp_period_ns = p.limits.timestampPeriod;

    for (const auto& e : physical_->enumerateDeviceExtensionProperties())
      extensions_.emplace_back(e.extensionName.data());
    if (has_extension(VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME)) {
      const auto sm =
          physical_->getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV>();
      info_.multiprocessors = sm.get<vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV>().shaderSMCount;
    } else if (has_extension(VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME)) {
      const auto core =
          physical_->getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceShaderCorePropertiesAMD>();
      const auto& c = core.get<vk::PhysicalDeviceShaderCorePropertiesAMD>();
      info_.multiprocessors = c.shaderEngineCount * c.shaderArraysPerEngineCount * c.computeUnitsPerShaderArray;
    }
    if (has_extension(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME) || info_.api_version >= VK_API_VERSION_1_3) {
      const auto& sc = props.get<vk::PhysicalDeviceSubgroupSizeControlProperties>();
      info_.subgroup_size_control = sc.minSubgroupSize > 0 &&
                                    static_cast<bool>(sc.requiredSubgroupSizeStages & vk::ShaderStageFlagBits::eCompute);
      if (info_.subgroup_size_control) {
        info_.min_subgroup_size = sc.minSubgroupSize;
        info_.max_subgroup_size = sc.maxSubgroupSize;
      }
    }
  }

  bool has_extension(const char* name) const {
    for (const auto& e : extensions_)
      if (e == name) return true;
    return false;
  }

  void create_device() {
    const auto families = physical_->getQueueFamilyProperties();
    std::optional<std::uint32_t> family;
    for (std::uint32_t i = 0; i < families.size() && !family; ++i)
      if (families[i].queueFlags & vk::QueueFlagBits::eCompute) family = i;
    if (!family) throw Error(ErrorCode::unsupported, "device '" + info_.name + "' has no compute queue");
    queue_family_ = *family;

    if (!has_extension(VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME))
      throw Error(ErrorCode::unsupported, "device '" + info_.name + "' lacks VK_KHR_push_descriptor");
    std::vector<const char*> extensions{VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME};
    info_.push_descriptor = true;

    const auto supported =
        physical_->getFeatures2<vk::PhysicalDeviceFeatures2, vk::PhysicalDeviceVulkan11Features,
                                vk::PhysicalDeviceVulkan12Features, vk::PhysicalDeviceSubgroupSizeControlFeatures,
                                vk::PhysicalDeviceCooperativeMatrixFeaturesNV>();
    vk::StructureChain<vk::PhysicalDeviceFeatures2, vk::PhysicalDeviceVulkan11Features,
                       vk::PhysicalDeviceVulkan12Features, vk::PhysicalDeviceSubgroupSizeControlFeatures,
                       vk::PhysicalDeviceCooperativeMatrixFeaturesNV>
        enable;
    auto& f10 = enable.get<vk::PhysicalDeviceFeatures2>().features;
    f10.shaderInt16 = supported.get<vk::PhysicalDeviceFeatures2>().features.shaderInt16;
    auto& f11 = enable.get<vk::PhysicalDeviceVulkan11Features>();
    f11.storageBuffer16BitAccess = supported.get<vk::PhysicalDeviceVulkan11Features>().storageBuffer16BitAccess;
    info_.storage_16bit = f11.storageBuffer16BitAccess;
    auto& f12 = enable.get<vk::PhysicalDeviceVulkan12Features>();
    const auto& s12 = supported.get<vk::PhysicalDeviceVulkan12Features>();
    f12.shaderFloat16 = s12.shaderFloat16;
    f12.vulkanMemoryModel = s12.vulkanMemoryModel;
    f12.vulkanMemoryModelDeviceScope = s12.vulkanMemoryModelDeviceScope;
    info_.float16 = f12.shaderFloat16;
    if (supported.get<vk::PhysicalDeviceFeatures2>().features.shaderInt64 && s12.shaderBufferInt64Atomics) {
      f10.shaderInt64 = VK_TRUE;
      f12.shaderBufferInt64Atomics = VK_TRUE;
      info_.int64_atomics = true;
    }

    auto& size_control = enable.get<vk::PhysicalDeviceSubgroupSizeControlFeatures>();
    if (info_.subgroup_size_control) {
      const auto& s = supported.get<vk::PhysicalDeviceSubgroupSizeControlFeatures>();
      size_control.subgroupSizeControl = s.subgroupSizeControl;
      size_control.computeFullSubgroups = s.computeFullSubgroups;
      info_.subgroup_size_control = s.subgroupSizeControl && s.computeFullSubgroups;
      if (info_.api_version < VK_API_VERSION_1_3) extensions.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    }
    if (!info_.subgroup_size_control) enable.unlink<vk::PhysicalDeviceSubgroupSizeControlFeatures>();

    if (has_extension(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) &&
        supported.get<vk::PhysicalDeviceCooperativeMatrixFeaturesNV>().cooperativeMatrix && info_.float16 &&
        info_.storage_16bit && has_fp16_coopmat_shape()) {
      enable.get<vk::PhysicalDeviceCooperativeMatrixFeaturesNV>().cooperativeMatrix = VK_TRUE;
      extensions.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
      info_.cooperative_matrix_nv = true;
    } else {
      enable.unlink<vk::PhysicalDeviceCooperativeMatrixFeaturesNV>();
    }

    // bf16 tensor cores: VK_KHR_cooperative_matrix + VK_KHR_shader_bfloat16.
    // Newer than the Vulkan headers this builds against (1.3.239), hence the
    // structures of detail::, chained by hand.
    detail::CoopMatFeaturesKHR coopmat_khr;
    detail::BFloat16FeaturesKHR bf16_features;
    if (has_extension("VK_KHR_cooperative_matrix") && has_extension("VK_KHR_shader_bfloat16") &&
        f10.shaderInt16 && info_.float16 && info_.storage_16bit && has_bf16_coopmat_shape()) {
      detail::CoopMatFeaturesKHR coopmat_supported;
      detail::BFloat16FeaturesKHR bf16_supported;
      coopmat_supported.pNext = &bf16_supported;
      VkPhysicalDeviceFeatures2 query{};
      query.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
      query.pNext = &coopmat_supported;
      physical_->getDispatcher()->vkGetPhysicalDeviceFeatures2(**physical_, &query);
      if (coopmat_supported.cooperativeMatrix && bf16_supported.shaderBFloat16Type &&
          bf16_supported.shaderBFloat16CooperativeMatrix) {
        coopmat_khr.cooperativeMatrix = VK_TRUE;
        bf16_features.shaderBFloat16Type = VK_TRUE;
        bf16_features.shaderBFloat16CooperativeMatrix = VK_TRUE;
        bf16_features.pNext = enable.get<vk::PhysicalDeviceFeatures2>().pNext;
        coopmat_khr.pNext = &bf16_features;
        enable.get<vk::PhysicalDeviceFeatures2>().pNext = &coopmat_khr;
        extensions.push_back("VK_KHR_cooperative_matrix");
        extensions.push_back("VK_KHR_shader_bfloat16");
        info_.cooperative_matrix_bf16 = true;
      }
    }

    // Lets every pipeline turn off the driver's bounds checks on storage
    // buffers (Pipeline). The H100's driver checked every load without it,
    // even with robustBufferAccess off (bench/NOTES-gdn-scoreboard.md, tenth session).
    vk::PhysicalDevicePipelineRobustnessFeaturesEXT robustness;
    info_.pipeline_robustness =
        enable_feature(enable.get<vk::PhysicalDeviceFeatures2>(), extensions, VK_EXT_PIPELINE_ROBUSTNESS_EXTENSION_NAME,
                       robustness, &vk::PhysicalDevicePipelineRobustnessFeaturesEXT::pipelineRobustness);

    // Diagnostics only: the driver's per-pipeline statistics.
    const bool want_statistics = options_.pipeline_statistics.value_or(detail::env_string("TILEKERNELS_PIPELINE_STATS") == "1");
    vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR executable_info;
    info_.pipeline_statistics =
        want_statistics &&
        enable_feature(enable.get<vk::PhysicalDeviceFeatures2>(), extensions,
                       VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME, executable_info,
                       &vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::pipelineExecutableInfo);

    const float priority = 1.0f;
    const vk::DeviceQueueCreateInfo queue_info({}, queue_family_, 1, &priority);
    vk::DeviceCreateInfo info({}, queue_info, {}, extensions);
    info.pNext = &enable.get<vk::PhysicalDeviceFeatures2>();
    device_.emplace(*physical_, info);
    queue_ = *device_->getQueue(queue_family_, 0);
  }

  // Where the device has extension `ext` and its feature `member` (of the
  // feature structure F): sets the feature in `storage`, links `storage`
  // into the chain of `head` (it must outlive device creation) and adds
  // `ext` to `extensions`.
  template <class F>
  bool enable_feature(vk::PhysicalDeviceFeatures2& head, std::vector<const char*>& extensions, const char* ext,
                      F& storage, vk::Bool32 F::*member) const {
    if (!has_extension(ext) || !(physical_->getFeatures2<vk::PhysicalDeviceFeatures2, F>().template get<F>().*member))
      return false;
    storage.*member = VK_TRUE;
    storage.pNext = head.pNext;
    head.pNext = &storage;
    extensions.push_back(ext);
    return true;
  }

  // The NV extension lists its shapes; the tensor-core kernels use
  // 16x16x16 (or 16x8x16) fp16 x fp16 -> fp32 in subgroup scope.
  bool has_fp16_coopmat_shape() const {
    const auto& d = *physical_->getDispatcher();
    if (!d.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV) return false;
    std::uint32_t count = 0;
    d.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(**physical_, &count, nullptr);
    VkCooperativeMatrixPropertiesNV blank{};
    blank.sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
    std::vector<VkCooperativeMatrixPropertiesNV> props(count, blank);
    d.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(**physical_, &count, props.data());
    for (const auto& p : props)
      if (p.MSize == 16 && p.KSize == 16 && (p.NSize == 16 || p.NSize == 8) && p.AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
          p.BType == VK_COMPONENT_TYPE_FLOAT16_NV && p.CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
          p.DType == VK_COMPONENT_TYPE_FLOAT32_NV && p.scope == VK_SCOPE_SUBGROUP_NV)
        return true;
    return false;
  }

  // The KHR extension lists its shapes; the bf16 kernels use 16x16x16
  // bf16 x bf16 -> f32 in subgroup scope.
  bool has_bf16_coopmat_shape() const {
    using Query = VkResult(VKAPI_PTR*)(VkPhysicalDevice, std::uint32_t*, detail::CoopMatPropertiesKHR*);
    const auto query = reinterpret_cast<Query>(instance_->getDispatcher()->vkGetInstanceProcAddr(
        **instance_, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"));
    if (!query) return false;
    std::uint32_t count = 0;
    if (query(**physical_, &count, nullptr) != VK_SUCCESS) return false;
    std::vector<detail::CoopMatPropertiesKHR> props(count);
    if (query(**physical_, &count, props.data()) != VK_SUCCESS) return false;
    for (const auto& p : props)
      if (p.MSize == 16 && p.NSize == 16 && p.KSize == 16 && p.AType == detail::kComponentBFloat16 &&
          p.BType == detail::kComponentBFloat16 && p.CType == detail::kComponentFloat32 &&
          p.ResultType == detail::kComponentFloat32 && p.scope == detail::kScopeSubgroup)
        return true;
    return false;
  }

  void finish_setup() {
    const auto families = physical_->getQueueFamilyProperties();
    info_.timestamps = families[queue_family_].timestampValidBits > 0 && info_.timestamp_period_ns > 0;
    force_portable_ = options_.path == PathPreference::portable || detail::env_string("TILEKERNELS_PATH") == "portable";
    detail::vk_call("creating the command pool and pipeline cache", [&] {
      command_pool_.emplace(*device_, vk::CommandPoolCreateInfo(vk::CommandPoolCreateFlagBits::eTransient, queue_family_));
      pipeline_cache_.emplace(*device_, vk::PipelineCacheCreateInfo({}, options_.pipeline_cache.size(),
                                                                    options_.pipeline_cache.data()));
    });
  }

  ContextOptions options_;
  bool adopted_ = false;
  bool force_portable_ = false;
  std::unique_ptr<Log> log_ = std::make_unique<Log>();
  vk::raii::Context raii_;
  std::optional<vk::raii::Instance> instance_;
  std::optional<vk::raii::DebugUtilsMessengerEXT> messenger_;
  std::optional<vk::raii::PhysicalDevice> physical_;
  std::optional<vk::raii::Device> device_;
  vk::Queue queue_;
  std::uint32_t queue_family_ = 0;
  std::vector<std::string> extensions_;
  DeviceInfo info_;
  std::optional<vk::raii::CommandPool> command_pool_;
  std::optional<vk::raii::PipelineCache> pipeline_cache_;
  std::mutex pipeline_mutex_;  // pipelines_ (taken while recording, so not the submit lock)
  std::recursive_mutex submit_mutex_;  // command_pool_ and the queue
  std::map<PipelineKey, std::unique_ptr<Pipeline>> pipelines_;
};

}  // namespace tilekernels
