// SPDX-License-Identifier: MIT
// tilekernels::Context: the device the kernels run on.
//
// Either creates its own instance, device and queue (through the system's
// Vulkan loader, opened at run time; device_selection.hpp; every optional
// feature the kernels use enabled where present, device_features.hpp) or
// adopts an engine's (AdoptedDevice): then every Vulkan call goes through
// the engine's vkGetInstanceProcAddr and its allocation callbacks, and no
// loader is ever opened. Holds the pipelines kernels build
// (pipeline_cache.hpp) and a command pool for its own submit-and-wait path
// (submitter.hpp: uploads, downloads, the kernels' run(), tests and tools).
//
// The recording contract of every kernel (core/kernel.hpp): record()
// appends to the caller's command buffer and nothing else. It never
// submits, waits, allocates or creates a pipeline (a kernel builds every
// pipeline it may use when it is constructed), and touches no mutable state
// of the kernel object, so one object may be recorded from several threads
// at once, into command buffers that execute concurrently when each has its
// own workspace (see workspace.hpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tilekernels/core/device_features.hpp"
#include "tilekernels/core/device_info.hpp"
#include "tilekernels/core/device_selection.hpp"
#include "tilekernels/core/fragment_layout.hpp"
#include "tilekernels/core/pipeline.hpp"
#include "tilekernels/core/pipeline_cache.hpp"
#include "tilekernels/core/submitter.hpp"
#include "tilekernels/core/vulkan.hpp"
#include "tilekernels/spirv/core/fragment_layout_bf16.hpp"
#include "tilekernels/spirv/core/fragment_layout_fp16.hpp"

namespace tilekernels {

struct ContextOptions {
  // Device selector: an index into device_names() or a name substring;
  // empty: the TILEKERNELS_DEVICE environment variable. (Own device only.)
  std::string device;
  // Enable VK_LAYER_KHRONOS_validation when installed. Unset: on when the
  // environment variable TILEKERNELS_VALIDATION is 1. (Own instance only:
  // an engine enables layers on its own instance.)
  std::optional<bool> validation;
  // With validation: also the layer's synchronization validation (hazards
  // between dependent dispatches in one command buffer), with its
  // shader-access heuristic where the layer takes settings (without it,
  // recent layers see no access a shader makes through a descriptor).
  // Slower; for tests that record several dependent dispatches.
  bool synchronization_validation = false;
  // Kernel path choice; TILEKERNELS_PATH (automatic, subgroup or
  // portable) overrides `automatic`.
  PathPreference path = PathPreference::automatic;
  // Deadline of every fence wait the Context does itself. Unset: 60 s, or
  // 10 minutes on a CPU device (lavapipe), whose driver compiles a pipeline
  // at its first execution, inside the wait.
  std::optional<std::chrono::milliseconds> fence_timeout;
  // Serialized pipeline cache from an earlier run (Context::pipeline_cache_data);
  // data the driver does not recognise is ignored by Vulkan. Ignored with
  // external_pipeline_cache.
  std::vector<std::uint8_t> pipeline_cache;
  // An engine's own VkPipelineCache: every pipeline is created through it
  // (the engine saves and seeds it); the Context then creates none. It must
  // outlive the Context; if it was created with
  // VK_PIPELINE_CACHE_CREATE_EXTERNALLY_SYNCHRONIZED_BIT, the engine must
  // not use it from another thread while a kernel is being constructed.
  vk::PipelineCache external_pipeline_cache;
  // Largest number of workgroups one vkCmdDispatch gets along x; 0: the
  // device limit. Larger grids are split into several dispatches (lowering
  // it lets tests exercise the split on any device).
  std::uint32_t max_groups_per_dispatch = 0;
  // Ask the driver for per-pipeline statistics (registers, shared and local
  // memory, instruction counts: whatever it reports) through
  // VK_KHR_pipeline_executable_properties, where the device has it; read
  // them with Context::pipeline_report(). Unset: on when the environment
  // variable TILEKERNELS_PIPELINE_STATS is 1. A diagnostic: it may slow
  // pipeline creation. (Own device only.)
  std::optional<bool> pipeline_statistics;
  // Read the fragment layout of the device's 16 x 16 fp16 and bf16
  // cooperative matrices (DeviceInfo::fp16_layout, bf16_layout) when the
  // Context is created: one pipeline and one submission of one workgroup,
  // made only where the device has such matrices with subgroups of 32 and
  // the path is not forced portable. Off, the layouts stay unknown and the
  // variants that build operands in that layout are not taken.
  bool probe_fragment_layouts = true;
};

// What a caller enabled on a device it hands to Context (see AdoptedDevice).
struct AdoptedFeatures {
  bool push_descriptor = true;  // required: VK_KHR_push_descriptor
  bool subgroup_size_control = false;
  bool storage_16bit = false;
  bool float16 = false;
  // VK_KHR_cooperative_matrix (cooperativeMatrix), shaderFloat16 and
  // storageBuffer16BitAccess: the fp16 matrix variants, on a tile the
  // device lists (DeviceInfo::fp16_tile).
  bool cooperative_matrix_fp16 = false;
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

// An engine's Vulkan objects for Context to adopt. The engine keeps
// ownership: they must outlive the Context, and the device must be Vulkan
// 1.2+ with VK_KHR_push_descriptor enabled, `features` saying what else is
// enabled.
struct AdoptedDevice {
  // The engine's loader entry point (vkGetInstanceProcAddr of the system
  // loader, volk's, a statically linked MoltenVK's): every Vulkan function
  // the library calls is looked up through it. Required.
  PFN_vkGetInstanceProcAddr get_instance_proc_addr = nullptr;
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical_device = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  std::uint32_t queue_family = 0, queue_index = 0;
  AdoptedFeatures features;
  // Used for every object the library creates and destroys (pipelines,
  // layouts, the Context's command pool, buffers of Tensor); null: the
  // driver's.
  const VkAllocationCallbacks* allocator = nullptr;
};

namespace detail {

// VK_EXT_layer_settings (a validation layer's instance extension), written
// out by the specification's layout because the Vulkan headers of the
// oldest supported distribution (1.3.239) predate it.
inline constexpr const char* layer_settings_extension = "VK_EXT_layer_settings";
inline constexpr VkStructureType layer_settings_create_info = static_cast<VkStructureType>(1000496000);
inline constexpr std::int32_t layer_setting_bool32 = 0;
struct LayerSetting {
  const char* layer;
  const char* name;
  std::int32_t type;
  std::uint32_t count;
  const void* values;
};
struct LayerSettingsCreateInfo {
  VkStructureType type;
  const void* next;
  std::uint32_t count;
  const LayerSetting* settings;
};

}  // namespace detail

class Context {
 public:
  explicit Context(ContextOptions options = {}) : options_(std::move(options)), path_(path_choice(options_)) {
    detail::vk_call("creating the Vulkan context", [&] { create_own(); });
    finish_setup();
  }

  // Adopts an engine's objects (AdoptedDevice says what it must give). The
  // Context submits to the queue only in its own submit-and-wait path
  // (uploads, downloads, run(), and once here, the fragment-layout probe of
  // ContextOptions::probe_fragment_layouts): the engine must not submit to
  // the same queue from another thread at that time (Vulkan's queue
  // synchronization).
  explicit Context(const AdoptedDevice& a, ContextOptions options = {})
      : options_(std::move(options)), path_(path_choice(options_)) {
    const auto missing = [](const char* what) {
      throw Error(ErrorCode::invalid_argument, std::string("Context: AdoptedDevice::") + what + " is null");
    };
    if (!a.get_instance_proc_addr) missing("get_instance_proc_addr");
    if (!a.instance) missing("instance");
    if (!a.physical_device) missing("physical_device");
    if (!a.device) missing("device");
    if (!a.features.push_descriptor)
      throw Error(ErrorCode::unsupported, "Context: the adopted device must have VK_KHR_push_descriptor enabled");
    allocator_ = reinterpret_cast<const vk::AllocationCallbacks*>(a.allocator);
    instance_ = vk::Instance(a.instance);
    physical_ = vk::PhysicalDevice(a.physical_device);
    device_ = vk::Device(a.device);
    detail::vk_call("adopting the Vulkan device", [&] {
      instance_dispatch_ = std::make_unique<InstanceDispatch>(a.get_instance_proc_addr, a.instance);
      make_device_dispatch();
      const auto available = detail::device_extensions(physical_, *instance_dispatch_);
      info_ = detail::read_device_info(physical_, *instance_dispatch_, available);
    });
    if (info_.api_version < VK_API_VERSION_1_2)
      throw Error(ErrorCode::unsupported, "Context: the adopted device supports only Vulkan " +
                                              std::to_string(VK_API_VERSION_MAJOR(info_.api_version)) + "." +
                                              std::to_string(VK_API_VERSION_MINOR(info_.api_version)) +
                                              "; tilekernels needs 1.2");
    const auto& f = a.features;
    info_.push_descriptor = true;
    info_.subgroup_size_control = f.subgroup_size_control && info_.subgroup_size_control;
    info_.storage_16bit = f.storage_16bit;
    info_.float16 = f.float16;
    info_.cooperative_matrix_bf16 = f.cooperative_matrix_bf16;
    if (f.cooperative_matrix_fp16 && detail::matrix_units_usable(info_)) {
      detail::set_fp16_tiles(info_, detail::khr_matrix_tiles(instance_, physical_, *instance_dispatch_));
    }
    info_.int64_atomics = f.int64_atomics;
    info_.pipeline_robustness = f.pipeline_robustness;
    queue_family_ = a.queue_family;
    queue_ = device_.getQueue(a.queue_family, a.queue_index, *device_dispatch_);
    finish_setup();
  }

  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  ~Context() {
    if (abandoned()) {
      // The device may still run work that uses the pipelines, the command
      // pool and (own device) the device itself: all are leaked, as is the
      // loader that the driver's threads may still call into.
      (void)pipelines_.release();
      (void)submitter_.release();
      if (own_device_) {
        if (messenger_) {
          (void)messenger_->release();
          (void)log_.release();  // the messenger's user data
        }
        if (own_instance_) (void)own_instance_->release();
        if (raii_) (void)new vk::raii::Context(std::move(*raii_));
      }
      return;
    }
    pipelines_.reset();
    submitter_.reset();
    if (own_device_) device_dispatch_->vkDestroyDevice(static_cast<VkDevice>(device_), c_allocator());
  }

  const DeviceInfo& info() const noexcept { return info_; }
  vk::Instance instance() const noexcept { return instance_; }
  vk::PhysicalDevice physical_device() const noexcept { return physical_; }
  vk::Device device() const noexcept { return device_; }
  vk::Queue queue() const noexcept { return queue_; }
  std::uint32_t queue_family() const noexcept { return queue_family_; }
  // The function table every device-level call of the library goes through.
  const DeviceDispatch& dispatcher() const noexcept { return *device_dispatch_; }
  const InstanceDispatch& instance_dispatcher() const noexcept { return *instance_dispatch_; }
  // The allocation callbacks of every object the library creates (null: the driver's).
  const vk::AllocationCallbacks* allocator() const noexcept { return allocator_; }

  // The paths kernels may take (ContextOptions::path, or TILEKERNELS_PATH
  // where that is `automatic`).
  PathPreference path() const noexcept { return path_; }
  // True when kernels take their portable path even where a faster one
  // exists (PathPreference::portable): the one way to force it.
  bool force_portable() const noexcept { return path_ == PathPreference::portable; }

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

  // The pipeline for `key`, built on first use (thread-safe). Kernels call
  // it only while they are constructed (PipelineSet), never from record().
  const Pipeline& pipeline(const PipelineKey& key) const { return pipelines_->get(key); }

  // Pipelines this Context has created so far, and the seconds spent
  // creating them: a test can prove that no record() creates one.
  std::uint64_t pipelines_created() const noexcept { return pipelines_->created(); }
  double pipeline_seconds() const noexcept { return pipelines_->seconds(); }

  // One line per pipeline built so far with the driver's statistics; empty
  // unless ContextOptions::pipeline_statistics is on and the device has them.
  std::string pipeline_report() const { return pipelines_->report(); }

  // Serialised pipeline cache, for saving across runs (the engine's own,
  // with ContextOptions::external_pipeline_cache).
  std::vector<std::uint8_t> pipeline_cache_data() const { return pipelines_->cache_data(); }

  // Records with `record` into a fresh command buffer, submits it and waits
  // (with the fence timeout). Thread-safe; meant for setup, tests and tools,
  // not for a hot loop.
  void submit_and_wait(const std::function<void(vk::CommandBuffer)>& record) const {
    submitter_->submit_and_wait(record);
  }
  // Waits for a fence with the configured timeout; a timeout or a lost
  // device becomes an Error.
  void wait(vk::Fence fence) const { submitter_->wait(fence); }
  // The deadline of those waits (ContextOptions::fence_timeout).
  std::chrono::milliseconds fence_timeout() const {
    if (options_.fence_timeout) return *options_.fence_timeout;
    return info_.is_cpu() ? std::chrono::minutes(10) : std::chrono::minutes(1);
  }
  // Queue submissions this Context has made (its submit-and-wait path only).
  std::uint64_t submissions() const noexcept { return submitter_->submissions(); }
  // Whether one of those waits ran out with its work still pending. The
  // device may then still use anything the library allocated, so from then
  // on nothing is freed: the Buffers and Tensors of this Context, its
  // pipelines and command pool and (its own) device are leaked when they
  // are destroyed. Treat the device as lost: destroy the Context and make
  // a new one.
  bool abandoned() const noexcept { return submitter_ && submitter_->abandoned(); }

 private:
  struct Log {
    std::mutex mutex;
    std::vector<std::string> messages;
  };

  static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT,
                                                   VkDebugUtilsMessageTypeFlagsEXT,
                                                   const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
    auto* log = static_cast<Log*>(user);
    std::lock_guard lock(log->mutex);
    // The message id's name (SYNC-HAZARD-READ-AFTER-WRITE, VUID-...) first:
    // newer layers no longer repeat it in the text.
    std::string text = data && data->pMessageIdName ? std::string("[") + data->pMessageIdName + "] " : std::string();
    text += data && data->pMessage ? data->pMessage : "(no message)";
    log->messages.push_back(std::move(text));
    return VK_FALSE;
  }

  const VkAllocationCallbacks* c_allocator() const noexcept {
    return reinterpret_cast<const VkAllocationCallbacks*>(allocator_);
  }

  bool want_validation() const {
    if (options_.validation) return *options_.validation;
    return detail::env_string("TILEKERNELS_VALIDATION") == "1";
  }

  void make_device_dispatch() {
    const auto get_device_proc_addr = reinterpret_cast<PFN_vkGetDeviceProcAddr>(
        instance_dispatch_->vkGetInstanceProcAddr(static_cast<VkInstance>(instance_), "vkGetDeviceProcAddr"));
    if (!get_device_proc_addr)
      throw Error(ErrorCode::unsupported, "Context: vkGetInstanceProcAddr gives no vkGetDeviceProcAddr");
    device_dispatch_ = std::make_unique<DeviceDispatch>(get_device_proc_addr, static_cast<VkDevice>(device_));
  }

  void create_own() {
    raii_.emplace();
    std::vector<const char*> layers, extensions;
    bool validation = false, layer_settings = false;
    if (want_validation()) {
      for (const auto& l : raii_->enumerateInstanceLayerProperties())
        if (std::string(l.layerName.data()) == "VK_LAYER_KHRONOS_validation") validation = true;
      if (validation) {
        layers.push_back("VK_LAYER_KHRONOS_validation");
        extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
        if (options_.synchronization_validation) {
          extensions.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
          for (const auto& e : raii_->enumerateInstanceExtensionProperties(std::string("VK_LAYER_KHRONOS_validation")))
            if (std::string(e.extensionName.data()) == detail::layer_settings_extension) layer_settings = true;
          if (layer_settings) extensions.push_back(detail::layer_settings_extension);
        }
      }
    }
    const std::uint32_t loader = raii_->enumerateInstanceVersion();
    if (loader < VK_API_VERSION_1_2) throw Error(ErrorCode::unsupported, "the Vulkan loader is older than 1.2");
    const vk::ApplicationInfo app("tilekernels", 1, "tilekernels", 1, std::min(loader, VK_API_VERSION_1_3));
    vk::InstanceCreateInfo create_info({}, &app, layers, extensions);
    const vk::ValidationFeatureEnableEXT sync = vk::ValidationFeatureEnableEXT::eSynchronizationValidation;
    vk::ValidationFeaturesEXT features(sync);
    // Recent layers check what shaders access through descriptors only with
    // this heuristic on; older ones, without VK_EXT_layer_settings, always
    // did.
    const VkBool32 on = VK_TRUE;
    const detail::LayerSetting heuristic{"VK_LAYER_KHRONOS_validation", "syncval_shader_accesses_heuristic",
                                         detail::layer_setting_bool32, 1, &on};
    const detail::LayerSettingsCreateInfo settings{detail::layer_settings_create_info, nullptr, 1, &heuristic};
    if (layer_settings) features.pNext = &settings;
    if (validation && options_.synchronization_validation) create_info.pNext = &features;
    own_instance_.emplace(*raii_, create_info);
    instance_ = **own_instance_;
    if (validation) {
      using S = vk::DebugUtilsMessageSeverityFlagBitsEXT;
      using T = vk::DebugUtilsMessageTypeFlagBitsEXT;
      messenger_.emplace(*own_instance_, vk::DebugUtilsMessengerCreateInfoEXT(
                                             {}, S::eWarning | S::eError, T::eGeneral | T::eValidation | T::ePerformance,
                                             &on_message, log_.get()));
    }
    const PFN_vkGetInstanceProcAddr gipa = raii_->getDispatcher()->vkGetInstanceProcAddr;
    instance_dispatch_ = std::make_unique<InstanceDispatch>(gipa, static_cast<VkInstance>(instance_));
    const std::string selector = options_.device.empty() ? detail::env_string("TILEKERNELS_DEVICE") : options_.device;
    physical_ = *detail::pick_physical_device(vk::raii::PhysicalDevices(*own_instance_), selector);
    const auto available = detail::device_extensions(physical_, *instance_dispatch_);
    info_ = detail::read_device_info(physical_, *instance_dispatch_, available);
    if (info_.api_version < VK_API_VERSION_1_2)
      throw Error(ErrorCode::unsupported, "device '" + info_.name + "' supports only Vulkan " +
                                              std::to_string(VK_API_VERSION_MAJOR(info_.api_version)) + "." +
                                              std::to_string(VK_API_VERSION_MINOR(info_.api_version)) +
                                              "; tilekernels needs 1.2");
    queue_family_ = detail::compute_queue_family(physical_, *instance_dispatch_, info_);
    const bool statistics =
        options_.pipeline_statistics.value_or(detail::env_string("TILEKERNELS_PIPELINE_STATS") == "1");
    device_ = detail::create_device(instance_, physical_, *instance_dispatch_, allocator_, available, queue_family_,
                                    statistics, info_);
    own_device_ = true;
    make_device_dispatch();
    queue_ = device_.getQueue(queue_family_, 0, *device_dispatch_);
  }

  // ContextOptions::path, or TILEKERNELS_PATH where that is automatic;
  // checked before any Vulkan object is made.
  static PathPreference path_choice(const ContextOptions& o) {
    if (o.path != PathPreference::automatic) return o.path;
    const std::string env = detail::env_string("TILEKERNELS_PATH");
    if (env.empty() || env == "automatic") return PathPreference::automatic;
    if (env == "subgroup") return PathPreference::subgroup;
    if (env == "portable") return PathPreference::portable;
    throw Error(ErrorCode::invalid_argument,
                "Context: TILEKERNELS_PATH must be automatic, subgroup or portable, got '" + env + "'");
  }

  void finish_setup() {
    const auto families = physical_.getQueueFamilyProperties(*instance_dispatch_);
    if (queue_family_ >= families.size())
      throw Error(ErrorCode::invalid_argument, "Context: queue family " + std::to_string(queue_family_) +
                                                   " does not exist (the device has " +
                                                   std::to_string(families.size()) + ")");
    info_.timestamps = families[queue_family_].timestampValidBits > 0 && info_.timestamp_period_ns > 0;
    detail::vk_call("creating the command pool and pipeline cache", [&] {
      submitter_ = std::make_unique<detail::Submitter>(device_, *device_dispatch_, allocator_, queue_, queue_family_,
                                                       fence_timeout());
      pipelines_ = std::make_unique<detail::PipelineMemo>(device_, *device_dispatch_, allocator_, options_.pipeline_cache,
                                                          options_.external_pipeline_cache, info_.pipeline_statistics,
                                                          info_.pipeline_robustness);
    });
    if (options_.probe_fragment_layouts && path_ == PathPreference::automatic && info_.subgroup_size == 32 &&
        info_.subgroups_as_reported) {
      // A probe that fails leaves its layout unknown (its variants are not
      // taken); one whose wait runs out leaves the Context abandoned().
      // Only a lost device fails the Context.
      try {
        const auto& listed = info_.fp16_tiles_listed;
        if (info_.cooperative_matrix_fp16 &&
            std::find(listed.begin(), listed.end(), MatrixTile{16, 16, 16}) != listed.end())
          info_.fp16_layout = detail::read_mma_layout(run_fragment_probe(spirv::core_fragment_layout_fp16));
        if (info_.cooperative_matrix_bf16)
          info_.bf16_layout = detail::read_mma_layout(run_fragment_probe(spirv::core_fragment_layout_bf16));
      } catch (const Error& e) {
        if (e.code() == ErrorCode::device_lost) throw;
      }
    }
  }

  // Runs one of the fragment-layout probes (shaders/core/fragment_layout_*)
  // as one workgroup and returns the words it wrote; none where the build
  // did not compile it. The buffer is host-visible and the pipeline is not
  // memoised: neither outlives the call.
  std::vector<std::uint32_t> run_fragment_probe(std::span<const std::uint32_t> module) const {
    if (module.empty()) return {};
    return detail::vk_call("reading the cooperative-matrix fragment layout", [&] {
      const auto& d = *device_dispatch_;
      const vk::DeviceSize bytes = detail::fragment_probe_words * sizeof(std::uint32_t);
      Owned<vk::Buffer> buffer(
          device_,
          device_.createBuffer(vk::BufferCreateInfo({}, bytes, vk::BufferUsageFlagBits::eStorageBuffer), allocator_, d),
          d.vkDestroyBuffer, allocator_);
      const auto req = device_.getBufferMemoryRequirements(*buffer, d);
      const auto types = physical_.getMemoryProperties(*instance_dispatch_);
      const auto want = vk::MemoryPropertyFlagBits::eHostVisible | vk::MemoryPropertyFlagBits::eHostCoherent;
      std::uint32_t type = 0;
      while (type < types.memoryTypeCount &&
             !((req.memoryTypeBits >> type & 1u) && (types.memoryTypes[type].propertyFlags & want) == want))
        ++type;
      if (type == types.memoryTypeCount) return std::vector<std::uint32_t>{};
      Owned<vk::DeviceMemory> memory(
          device_, device_.allocateMemory(vk::MemoryAllocateInfo(req.size, type), allocator_, d), d.vkFreeMemory,
          allocator_);
      device_.bindBufferMemory(*buffer, *memory, 0, d);
      auto pipeline_owner =
          std::make_unique<Pipeline>(device_, d, allocator_, vk::PipelineCache{},
                                     PipelineKey{module.data(), module.size(), {}, 1, 0, 0});
      const Pipeline& pipeline = *pipeline_owner;
      // After a wait that ran out, the device may still use all three.
      struct Abandon {
        const detail::Submitter& submitter;
        Owned<vk::Buffer>& buffer;
        Owned<vk::DeviceMemory>& memory;
        std::unique_ptr<Pipeline>& pipeline;
        ~Abandon() {
          if (!submitter.abandoned()) return;
          buffer.leak();
          memory.leak();
          (void)pipeline.release();
        }
      } abandon{*submitter_, buffer, memory, pipeline_owner};
      submitter_->submit_and_wait([&](vk::CommandBuffer cmd) {
        cmd.fillBuffer(*buffer, 0, VK_WHOLE_SIZE, 0xffffffffu, d);
        const vk::MemoryBarrier filled(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eShaderWrite);
        cmd.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eComputeShader, {},
                            filled, {}, {}, d);
        const vk::DescriptorBufferInfo out(*buffer, 0, bytes);
        const vk::WriteDescriptorSet write({}, 0, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &out);
        cmd.bindPipeline(vk::PipelineBindPoint::eCompute, pipeline.pipeline(), d);
        cmd.pushDescriptorSetKHR(vk::PipelineBindPoint::eCompute, pipeline.layout(), 0, write, d);
        cmd.dispatch(1, 1, 1, d);
        const vk::MemoryBarrier written(vk::AccessFlagBits::eShaderWrite, vk::AccessFlagBits::eHostRead);
        cmd.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eHost, {}, written,
                            {}, {}, d);
      });
      std::vector<std::uint32_t> words(detail::fragment_probe_words);
      std::memcpy(words.data(), device_.mapMemory(*memory, 0, bytes, {}, d), bytes);
      device_.unmapMemory(*memory, d);
      return words;
    });
  }

  ContextOptions options_;
  bool own_device_ = false;
  PathPreference path_ = PathPreference::automatic;
  const vk::AllocationCallbacks* allocator_ = nullptr;
  std::unique_ptr<Log> log_ = std::make_unique<Log>();
  // Own instance only: the system loader (opened at run time), the
  // instance and the validation messenger.
  std::optional<vk::raii::Context> raii_;
  std::optional<vk::raii::Instance> own_instance_;
  std::optional<vk::raii::DebugUtilsMessengerEXT> messenger_;
  vk::Instance instance_;
  vk::PhysicalDevice physical_;
  vk::Device device_;
  std::unique_ptr<InstanceDispatch> instance_dispatch_;
  std::unique_ptr<DeviceDispatch> device_dispatch_;
  vk::Queue queue_;
  std::uint32_t queue_family_ = 0;
  DeviceInfo info_;
  std::unique_ptr<detail::Submitter> submitter_;
  std::unique_ptr<detail::PipelineMemo> pipelines_;
};

}  // namespace tilekernels
