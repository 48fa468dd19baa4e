// SPDX-License-Identifier: MIT
// How an inference engine adopts tilekernels: every Vulkan object here is the
// engine's, made with the Vulkan C API (instance, device, queue, command
// pool, one VkDeviceMemory block its allocator sub-allocates for every
// tensor, cache and workspace); the library gets the engine's
// vkGetInstanceProcAddr and records into the engine's command buffers.
//
// A hybrid model's decode loop, 64 steps of one sequence: per step an
// attention layer appends its token's K and V to a paged K4V4 cache
// (aura::CacheWrite) and attends over it (aura::DecodeAttention), and a
// Gated DeltaNet layer takes its recurrent step (gdn::RecurrentStep). q, k
// and v of each layer are views of that layer's fused projection row, g and
// beta views of another. Every kernel is built before the loop; record()
// then only appends commands. At the end the outputs are checked against
// the library's double-precision references. With the Khronos validation
// layer installed, it runs under it with synchronization validation, and
// any message fails the run. Prints OK last.
#include <vulkan/vulkan.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tilekernels/aura.hpp>
#include <tilekernels/gdn.hpp>
#include <tilekernels/reference/aura/decode_attention.hpp>
#include <tilekernels/reference/aura/paged_cache.hpp>
#include <tilekernels/reference/gdn/gated_delta_rule.hpp>
#include <vector>

namespace tk = tilekernels;
namespace aura = tilekernels::aura;
namespace gdn = tilekernels::gdn;

namespace {

// ---- the model -----------------------------------------------------------
constexpr std::int64_t kSteps = 64;
// Attention layer: 8 query heads over 2 KV heads of 64, a K4V4 cache in pages of 16.
constexpr std::int64_t kQHeads = 8, kKvHeads = 2, kDim = 64, kPageTokens = 16;
constexpr std::int64_t kPages = (kSteps + kPageTokens - 1) / kPageTokens;
using Cache = aura::PagedCacheConfig<kDim, kPageTokens, 4, 4>;
// Its fused projection row per token: q heads, then k, then v.
constexpr std::int64_t kQkvRow = (kQHeads + 2 * kKvHeads) * kDim;
// Gated DeltaNet layer: 2 q/k heads, 4 value heads, K = V = 64; its fused
// row q, k, v (bf16) and a row of g then beta (f32) per token.
constexpr std::int64_t kHg = 2, kH = 4, kK = 64, kV = 64;
constexpr std::int64_t kGdnRow = 2 * kHg * kK + kH * kV, kGateRow = 2 * kH;

std::vector<std::string> g_messages;

VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT, VkDebugUtilsMessageTypeFlagsEXT,
                                          const VkDebugUtilsMessengerCallbackDataEXT* data, void*) {
  g_messages.emplace_back(data && data->pMessage ? data->pMessage : "(no message)");
  return VK_FALSE;
}

void check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) throw std::runtime_error(std::string(what) + " failed: VkResult " + std::to_string(r));
}

// Deterministic values in [-1, 1).
struct Rng {
  std::uint64_t s;
  float next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<double>(s >> 40) * 0x1p-23 - 1.0);
  }
};

std::uint16_t to_bf16(float x) { return static_cast<std::uint16_t>(tk::narrow(tk::DType::bf16, x)); }
float from_bf16(std::uint16_t b) { return tk::widen(tk::DType::bf16, b); }

// ---- the engine's Vulkan objects -------------------------------------------
struct Engine {
  VkInstance instance = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  std::uint32_t family = 0;
  VkQueue queue = VK_NULL_HANDLE;
  VkCommandPool pool = VK_NULL_HANDLE;
  VkPhysicalDeviceProperties props{};
  bool validation = false;

  Engine() {
    std::uint32_t n = 0;
    vkEnumerateInstanceLayerProperties(&n, nullptr);
    std::vector<VkLayerProperties> layers(n);
    vkEnumerateInstanceLayerProperties(&n, layers.data());
    for (const auto& l : layers)
      if (std::strcmp(l.layerName, "VK_LAYER_KHRONOS_validation") == 0) validation = true;
    const char* layer = "VK_LAYER_KHRONOS_validation";
    const char* extensions[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME};
    const VkValidationFeatureEnableEXT sync = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkValidationFeaturesEXT features{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
    features.enabledValidationFeatureCount = 1;
    features.pEnabledValidationFeatures = &sync;
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "engine_integration";
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    info.pApplicationInfo = &app;
    if (validation) {
      info.pNext = &features;
      info.enabledLayerCount = 1;
      info.ppEnabledLayerNames = &layer;
      info.enabledExtensionCount = 2;
      info.ppEnabledExtensionNames = extensions;
    }
    check(vkCreateInstance(&info, nullptr, &instance), "vkCreateInstance");
    if (validation) {
      VkDebugUtilsMessengerCreateInfoEXT m{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
      m.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
      m.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                      VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
      m.pfnUserCallback = &on_message;
      const auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
          vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
      check(create(instance, &m, nullptr, &messenger), "vkCreateDebugUtilsMessengerEXT");
    }

    // The first device (the one TILEKERNELS_DEVICE names by index, if set)
    // and its first queue family with compute.
    std::uint32_t count = 0;
    check(vkEnumeratePhysicalDevices(instance, &count, nullptr), "vkEnumeratePhysicalDevices");
    if (count == 0) throw std::runtime_error("no Vulkan device");
    std::vector<VkPhysicalDevice> devices(count);
    check(vkEnumeratePhysicalDevices(instance, &count, devices.data()), "vkEnumeratePhysicalDevices");
    const char* pick = std::getenv("TILEKERNELS_DEVICE");
    physical = devices[pick && *pick ? std::strtoul(pick, nullptr, 10) % count : 0];
    vkGetPhysicalDeviceProperties(physical, &props);
    vkGetPhysicalDeviceQueueFamilyProperties(physical, &count, nullptr);
    std::vector<VkQueueFamilyProperties> families(count);
    vkGetPhysicalDeviceQueueFamilyProperties(physical, &count, families.data());
    while (family < count && !(families[family].queueFlags & VK_QUEUE_COMPUTE_BIT)) ++family;
    if (family == count) throw std::runtime_error("no compute queue");

    // What the kernels need: push descriptors, and 16-bit storage for the
    // bf16 tensors (tilekernels::AdoptedFeatures says what was enabled).
    VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceFeatures2 supported{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    supported.pNext = &f11;
    vkGetPhysicalDeviceFeatures2(physical, &supported);
    VkPhysicalDeviceVulkan11Features enable11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    enable11.storageBuffer16BitAccess = f11.storageBuffer16BitAccess;
    storage_16bit = f11.storageBuffer16BitAccess == VK_TRUE;
    const float priority = 1.0f;
    VkDeviceQueueCreateInfo q{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    q.queueFamilyIndex = family;
    q.queueCount = 1;
    q.pQueuePriorities = &priority;
    const char* device_extensions[] = {VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME};
    VkDeviceCreateInfo d{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    d.pNext = &enable11;
    d.queueCreateInfoCount = 1;
    d.pQueueCreateInfos = &q;
    d.enabledExtensionCount = 1;
    d.ppEnabledExtensionNames = device_extensions;
    check(vkCreateDevice(physical, &d, nullptr, &device), "vkCreateDevice");
    vkGetDeviceQueue(device, family, 0, &queue);
    VkCommandPoolCreateInfo p{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    p.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    p.queueFamilyIndex = family;
    check(vkCreateCommandPool(device, &p, nullptr, &pool), "vkCreateCommandPool");
  }
  ~Engine() {
    if (pool) vkDestroyCommandPool(device, pool, nullptr);
    if (device) vkDestroyDevice(device, nullptr);
    if (messenger) {
      const auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
          vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
      destroy(instance, messenger, nullptr);
    }
    if (instance) vkDestroyInstance(instance, nullptr);
  }
  bool storage_16bit = false;
};

// One host-visible VkDeviceMemory block behind one storage buffer; the
// engine's allocator hands out aligned ranges of it.
struct Arena {
  VkDevice device;
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  std::uint8_t* host = nullptr;
  VkDeviceSize size = 0, used = 0, align = 0;

  Arena(const Engine& e, VkDeviceSize bytes) : device(e.device), size(bytes) {
    align = std::max<VkDeviceSize>(e.props.limits.minStorageBufferOffsetAlignment, 16);
    VkBufferCreateInfo b{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    b.size = bytes;
    b.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
    check(vkCreateBuffer(device, &b, nullptr, &buffer), "vkCreateBuffer");
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(device, buffer, &req);
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(e.physical, &mp);
    const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    std::uint32_t type = mp.memoryTypeCount;
    for (std::uint32_t i = 0; i < mp.memoryTypeCount && type == mp.memoryTypeCount; ++i)
      if ((req.memoryTypeBits & (1u << i)) && (mp.memoryTypes[i].propertyFlags & want) == want) type = i;
    if (type == mp.memoryTypeCount) throw std::runtime_error("no host-visible coherent memory");
    VkMemoryAllocateInfo a{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    a.allocationSize = req.size;
    a.memoryTypeIndex = type;
    check(vkAllocateMemory(device, &a, nullptr, &memory), "vkAllocateMemory");
    check(vkBindBufferMemory(device, buffer, memory, 0), "vkBindBufferMemory");
    void* p = nullptr;
    check(vkMapMemory(device, memory, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory");
    host = static_cast<std::uint8_t*>(p);
    std::memset(host, 0xff, static_cast<std::size_t>(bytes));  // NaN everywhere nothing was written
  }
  ~Arena() {
    vkUnmapMemory(device, memory);
    vkDestroyBuffer(device, buffer, nullptr);
    vkFreeMemory(device, memory, nullptr);
  }

  // A dense tensor at the next aligned offset.
  tk::TensorRef take(tk::DType dtype, tk::Shape shape) {
    tk::TensorRef t{buffer, used, 0, dtype, std::move(shape)};
    t.size = t.bytes();
    used += (t.size + align - 1) / align * align;
    if (used > size) throw std::runtime_error("the arena is too small");
    return t;
  }
  template <class T>
  T* at(const tk::TensorRef& t) {
    return reinterpret_cast<T*>(host + t.offset);
  }
};

// A view of one token's row of a fused projection: `shape` is
// [token dims..., inner dims...] with the first `token_dims` dimensions the
// token axis (stride: the row), the rest dense, starting `col` elements in.
tk::TensorRef view(const tk::TensorRef& row, tk::Shape shape, std::size_t token_dims, std::int64_t col) {
  tk::TensorRef v = row;
  v.offset += static_cast<VkDeviceSize>(col) * tk::dtype_size(row.dtype);
  v.size -= static_cast<VkDeviceSize>(col) * tk::dtype_size(row.dtype);
  v.strides.assign(shape.size(), 1);
  for (std::size_t d = shape.size() - 1; d-- > token_dims;) v.strides[d] = v.strides[d + 1] * shape[d + 1];
  std::int64_t stride = row.shape.back();
  for (std::size_t d = token_dims; d-- > 0;) {
    v.strides[d] = stride;
    stride *= shape[d];
  }
  v.shape = std::move(shape);
  return v;
}

double relative_rms(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

int run() {
  Engine e;
  std::printf("engine_integration: %s, validation %s\n", e.props.deviceName,
              e.validation ? "on with synchronization validation" : "not installed");
  // Hand the engine's device to the library: its loader entry, its objects.
  tk::AdoptedDevice adopted;
  adopted.get_instance_proc_addr = &vkGetInstanceProcAddr;
  adopted.instance = e.instance;
  adopted.physical_device = e.physical;
  adopted.device = e.device;
  adopted.queue_family = e.family;
  adopted.features.storage_16bit = e.storage_16bit;
  tk::ContextOptions options;
  options.validation = false;  // the instance is the engine's: its layers are already on
  tk::Context ctx(adopted, options);

  // Every kernel built before the loop, for the shapes the loop will use.
  const aura::CacheWrite<aura::CacheWriteConfig<Cache, tk::DType::bf16>> cache_write(ctx);
  const aura::DecodeAttention<aura::DecodeAttentionConfig<Cache, tk::DType::bf16, tk::DType::f32>> attention(
      ctx, {.max_num_seqs = 1, .max_q_len = 1, .q_heads = kQHeads, .kv_heads = kKvHeads, .lse = false});
  const gdn::RecurrentStep<gdn::RecurrentStepConfig<kK, kV>> recurrent_step(
      ctx, {.qk_dtype = tk::DType::bf16, .v_dtype = tk::DType::bf16});
  std::printf("pipelines: cache_write %zu, decode_attention %zu, recurrent_step %zu\n", cache_write.pipelines(),
              attention.pipelines(), recurrent_step.pipelines());
  const std::uint64_t pipelines_before_loop = ctx.pipelines_created();

  // The engine's memory: one block, every tensor a range of it.
  Arena arena(e, 8u << 20);
  const tk::TensorRef qkv = arena.take(tk::DType::bf16, {kSteps, kQkvRow});  // attention projections, one row per step
  const tk::TensorRef gdn_rows = arena.take(tk::DType::bf16, {kSteps, kGdnRow});
  const tk::TensorRef gates = arena.take(tk::DType::f32, {kSteps, kGateRow});
  const tk::TensorRef k_codes = arena.take(tk::DType::u32, Cache::store_shape(4, kPages, kKvHeads));
  const tk::TensorRef k_norms = arena.take(tk::DType::f32, Cache::norm_shape(kPages, kKvHeads));
  const tk::TensorRef v_codes = arena.take(tk::DType::u32, Cache::store_shape(4, kPages, kKvHeads));
  const tk::TensorRef v_norms = arena.take(tk::DType::f32, Cache::norm_shape(kPages, kKvHeads));
  const tk::TensorRef tables = arena.take(tk::DType::f32, aura::CacheTables::shape(Cache::format));
  // Each step's slot and sequence length, a tensor of their own: a binding
  // starts at a multiple of minStorageBufferOffsetAlignment.
  std::vector<tk::TensorRef> slots, seq_lens;
  for (std::int64_t t = 0; t < kSteps; ++t)
    slots.push_back(arena.take(tk::DType::i32, {1})), seq_lens.push_back(arena.take(tk::DType::i32, {1}));
  const tk::TensorRef block_table = arena.take(tk::DType::i32, {1, kPages});
  const tk::TensorRef attended = arena.take(tk::DType::f32, {kSteps, 1, kQHeads, kDim});
  const tk::TensorRef state = arena.take(tk::DType::f32, {1, kH, kK, kV});
  const tk::TensorRef gdn_out = arena.take(tk::DType::bf16, {kSteps, 1, kH, kV});

  // What the previous layers would have written: random projections, the
  // sequence's pages (shuffled), its slots, and the GDN layer's start state.
  Rng rng{7};
  for (std::int64_t i = 0; i < kSteps * kQkvRow; ++i) arena.at<std::uint16_t>(qkv)[i] = to_bf16(rng.next());
  for (std::int64_t i = 0; i < kSteps * kGdnRow; ++i) arena.at<std::uint16_t>(gdn_rows)[i] = to_bf16(0.3f * rng.next());
  for (std::int64_t t = 0; t < kSteps; ++t)
    for (std::int64_t h = 0; h < kH; ++h) {
      arena.at<float>(gates)[t * kGateRow + h] = -0.05f - 0.1f * std::abs(rng.next());      // g: log decay
      arena.at<float>(gates)[t * kGateRow + kH + h] = 0.5f + 0.4f * rng.next();             // beta
    }
  const std::vector<std::int32_t> pages{2, 0, 3, 1};
  for (std::int64_t p = 0; p < kPages; ++p) arena.at<std::int32_t>(block_table)[p] = pages[static_cast<std::size_t>(p)];
  for (std::int64_t t = 0; t < kSteps; ++t) {
    *arena.at<std::int32_t>(slots[std::size_t(t)]) = pages[static_cast<std::size_t>(t / kPageTokens)] * kPageTokens + t % kPageTokens;
    *arena.at<std::int32_t>(seq_lens[std::size_t(t)]) = static_cast<std::int32_t>(t + 1);
  }
  std::vector<float> h0(static_cast<std::size_t>(kH * kK * kV));
  for (auto& x : h0) x = 0.1f * rng.next();
  std::memcpy(arena.at<float>(state), h0.data(), h0.size() * 4);

  // Row r of a dense [rows, ...] tensor, as a [1, n] tensor (n: the
  // elements of one row).
  const auto row = [](const tk::TensorRef& rows, std::int64_t r) {
    tk::TensorRef one = rows;
    const std::int64_t n = rows.elements() / rows.shape[0];
    const VkDeviceSize bytes = static_cast<VkDeviceSize>(n) * tk::dtype_size(rows.dtype);
    one.offset += static_cast<VkDeviceSize>(r) * bytes;
    one.size = bytes;
    one.shape = {1, n};
    return one;
  };
  // Step t's attention: its query a view of the fused row, the workspace
  // (for the splits along the keys) a range of the arena, sized once for
  // the largest call and zeroed there once.
  aura::DecodeAttentionArgs attend;
  attend.k_codes = k_codes, attend.k_norms = k_norms, attend.v_codes = v_codes, attend.v_norms = v_norms;
  attend.block_table = block_table;
  attend.tables = tables;
  const auto attend_args = [&](std::int64_t t) {
    aura::DecodeAttentionArgs a = attend;
    a.q = view(row(qkv, t), {1, 1, kQHeads, kDim}, 2, 0);
    a.seq_lens = seq_lens[static_cast<std::size_t>(t)];
    a.output = row(attended, t);
    a.output.shape = {1, 1, kQHeads, kDim};
    return a;
  };
  const std::uint64_t workspace_bytes = attention.workspace_bytes(attention.problem(attend_args(0)));
  if (workspace_bytes > 0) {
    const tk::TensorRef ws = arena.take(tk::DType::u32, {static_cast<std::int64_t>((workspace_bytes + 3) / 4)});
    std::memset(arena.at<std::uint8_t>(ws), 0, static_cast<std::size_t>(ws.size));
    attend.workspace = tk::Workspace{ws, true};
  }
  std::printf("decode attention workspace: %llu bytes\n", static_cast<unsigned long long>(workspace_bytes));
  // Arrival counters: with them a split step takes one dispatch on a GPU
  // (each group's last workgroup merges). They hold the tag between calls:
  // written once here, and apart from memory that other work reuses.
  const tk::TensorRef arrivals =
      arena.take(tk::DType::u32, {attention.arrival_slots(attention.problem(attend_args(0)))});
  std::fill_n(arena.at<std::uint32_t>(arrivals), arrivals.elements(), attention.arrival_tag);
  attend.arrivals = arrivals;

  // The engine's command buffers: two, each step into the one not in flight.
  VkCommandBuffer cmds[2];
  VkCommandBufferAllocateInfo ca{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ca.commandPool = e.pool;
  ca.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ca.commandBufferCount = 2;
  check(vkAllocateCommandBuffers(e.device, &ca, cmds), "vkAllocateCommandBuffers");
  VkFence fences[2];
  for (auto& f : fences) {
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    fi.flags = VK_FENCE_CREATE_SIGNALED_BIT;
    check(vkCreateFence(e.device, &fi, nullptr, &f), "vkCreateFence");
  }
  const auto barrier = [](VkCommandBuffer cmd) {
    VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    b.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    b.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &b, 0,
                         nullptr, 0, nullptr);
  };
  const std::vector<float> table_values = aura::CacheTables::values(Cache::format, 101, 102);

  for (std::int64_t t = 0; t < kSteps; ++t) {
    VkCommandBuffer cmd = cmds[t % 2];
    check(vkWaitForFences(e.device, 1, &fences[t % 2], VK_TRUE, 10'000'000'000ull), "vkWaitForFences");
    check(vkResetFences(e.device, 1, &fences[t % 2]), "vkResetFences");
    check(vkResetCommandBuffer(cmd, 0), "vkResetCommandBuffer");
    VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(vkBeginCommandBuffer(cmd, &begin), "vkBeginCommandBuffer");
    if (t == 0) aura::CacheTables::record_upload(ctx, cmd, tables, table_values);

    // This step's rows of the fused projections, as views.
    const tk::TensorRef qkv_t = row(qkv, t), gdn_t = row(gdn_rows, t), gates_t = row(gates, t);
    aura::CacheWriteArgs append;
    append.k = view(qkv_t, {1, kKvHeads, kDim}, 1, kQHeads * kDim);
    append.v = view(qkv_t, {1, kKvHeads, kDim}, 1, (kQHeads + kKvHeads) * kDim);
    append.slot_mapping = slots[static_cast<std::size_t>(t)];
    append.tables = tables;
    append.k_codes = k_codes, append.k_norms = k_norms, append.v_codes = v_codes, append.v_norms = v_norms;
    cache_write.record(cmd, append);
    barrier(cmd);  // the attention reads the token just appended

    attention.record(cmd, attend_args(t));

    gdn::RecurrentStep<gdn::RecurrentStepConfig<kK, kV>>::Args step;
    step.q = view(gdn_t, {1, 1, kHg, kK}, 2, 0);
    step.k = view(gdn_t, {1, 1, kHg, kK}, 2, kHg * kK);
    step.v = view(gdn_t, {1, 1, kH, kV}, 2, 2 * kHg * kK);
    step.g = view(gates_t, {1, 1, kH}, 2, 0);
    step.beta = view(gates_t, {1, 1, kH}, 2, kH);
    step.state = state;
    step.o = row(gdn_out, t);
    step.o.shape = {1, 1, kH, kV};
    recurrent_step.record(cmd, step);  // the state is read and written in place: the next step waits for this one

    check(vkEndCommandBuffer(cmd), "vkEndCommandBuffer");
    VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &cmd;
    check(vkQueueSubmit(e.queue, 1, &submit, fences[t % 2]), "vkQueueSubmit");
    // The state carries from step to step: wait before the next is recorded
    // into the other buffer's turn (an engine would chain with a semaphore).
    check(vkWaitForFences(e.device, 1, &fences[t % 2], VK_TRUE, 10'000'000'000ull), "vkWaitForFences");
  }
  check(vkDeviceWaitIdle(e.device), "vkDeviceWaitIdle");
  for (auto f : fences) vkDestroyFence(e.device, f, nullptr);
  vkFreeCommandBuffers(e.device, e.pool, 2, cmds);
  if (ctx.pipelines_created() != pipelines_before_loop) {
    std::fprintf(stderr, "FAIL: %llu pipelines were created inside the loop\n",
                 static_cast<unsigned long long>(ctx.pipelines_created() - pipelines_before_loop));
    return 1;
  }

  // ---- the references --------------------------------------------------------
  // Attention: over the cache the GPU wrote (so the kernel's own error is
  // measured), read back; step t sees positions 0..t.
  namespace ra = tilekernels::reference::aura;
  ra::PagedCacheFormat f;
  f.dim = kDim, f.page_tokens = kPageTokens, f.kv_heads = kKvHeads, f.num_pages = kPages;
  f.k.bits = 4, f.k.seed = 101, f.v.bits = 4, f.v.seed = 102;
  ra::PagedCache host(f);
  const auto words = [&](const tk::TensorRef& t, std::vector<std::uint32_t>& out) {
    out.assign(arena.at<std::uint32_t>(t), arena.at<std::uint32_t>(t) + t.elements());
  };
  words(k_codes, host.k.codes);
  words(v_codes, host.v.codes);
  host.k.norms.assign(arena.at<float>(k_norms), arena.at<float>(k_norms) + k_norms.elements());
  host.v.norms.assign(arena.at<float>(v_norms), arena.at<float>(v_norms) + v_norms.elements());
  double worst_attention = 0;
  for (std::int64_t t = 0; t < kSteps; ++t) {
    std::vector<float> q(static_cast<std::size_t>(kQHeads * kDim));
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = from_bf16(arena.at<std::uint16_t>(qkv)[t * kQkvRow + std::int64_t(i)]);
    const std::vector<std::int32_t> len{static_cast<std::int32_t>(t + 1)};
    const auto want = ra::decode_attention_paged_rotated(q, host, pages, kPages, len,
                                                        {1, 1, kQHeads, kKvHeads, kDim}, {});
    const float* got = arena.at<float>(attended) + t * kQHeads * kDim;
    worst_attention = std::max(worst_attention, relative_rms({got, got + kQHeads * kDim}, want.output));
  }
  // Gated DeltaNet: the token-by-token recurrence over the 64 tokens.
  namespace rg = tilekernels::reference::gdn;
  rg::GatedDeltaRuleProblem p;
  p.B = 1, p.T = kSteps, p.Hg = kHg, p.H = kH, p.K = kK, p.V = kV;
  std::vector<float> q, k, v, g, beta;
  for (std::int64_t t = 0; t < kSteps; ++t) {
    const std::uint16_t* r = arena.at<std::uint16_t>(gdn_rows) + t * kGdnRow;
    for (std::int64_t i = 0; i < kHg * kK; ++i) q.push_back(from_bf16(r[i])), k.push_back(from_bf16(r[kHg * kK + i]));
    for (std::int64_t i = 0; i < kH * kV; ++i) v.push_back(from_bf16(r[2 * kHg * kK + i]));
    for (std::int64_t h = 0; h < kH; ++h)
      g.push_back(arena.at<float>(gates)[t * kGateRow + h]), beta.push_back(arena.at<float>(gates)[t * kGateRow + kH + h]);
  }
  const auto want = rg::gated_delta_rule(p, {q, k, v, g, beta, {}, {}, h0});
  std::vector<float> o(static_cast<std::size_t>(kSteps * kH * kV));
  for (std::size_t i = 0; i < o.size(); ++i) o[i] = from_bf16(arena.at<std::uint16_t>(gdn_out)[i]);
  const double gdn_o = relative_rms(o, want.o);
  const double gdn_state = relative_rms({arena.at<float>(state), arena.at<float>(state) + h0.size()}, want.final_state);

  std::printf("attention output (f32) vs reference: worst relative RMS %.2e over %lld steps\n", worst_attention,
              static_cast<long long>(kSteps));
  std::printf("GDN output (bf16) %.2e, final state (f32) %.2e vs the recurrence\n", gdn_o, gdn_state);
  bool ok = worst_attention <= 1e-5 && gdn_o <= 5e-3 && gdn_state <= 1e-5;
  if (!g_messages.empty()) {
    for (const auto& m : g_messages) std::fprintf(stderr, "validation: %s\n", m.c_str());
    ok = false;
  }
  if (!ok) {
    std::fprintf(stderr, "FAIL\n");
    return 1;
  }
  std::printf("OK\n");
  return 0;
}

}  // namespace

int main() try {
  return run();
} catch (const std::exception& e) {
  std::fprintf(stderr, "FAIL: %s\n", e.what());
  return 1;
}
