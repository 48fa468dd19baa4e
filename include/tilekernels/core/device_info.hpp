// SPDX-License-Identifier: MIT
// What the library needs to know about a physical device: limits, subgroup
// geometry and the optional features that select kernel paths.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tilekernels/core/vulkan.hpp"

namespace tilekernels {

// Which implementations of a kernel may run. `automatic` takes the fastest
// one the device supports; `subgroup` allows subgroup variants but no matrix
// units (the tensor_core_* paths), as on devices without them; `portable`
// forces the path that runs on any Vulkan 1.2 device. TILEKERNELS_PATH
// (automatic, subgroup or portable) overrides `automatic`.
enum class PathPreference { automatic, subgroup, portable };

// A cooperative-matrix tile: an M x K by K x N product into M x N.
struct MatrixTile {
  std::uint32_t m = 0, n = 0, k = 0;
  bool operator==(const MatrixTile&) const = default;
};

// Which 16 x 16 fragments of a subgroup of 32 hold their elements where
// mma.sync's m16n8k16 puts them (core/fragment_layout.hpp): lane 4 g + j
// holds 8 elements, element i of A and of the f32 accumulator at row
// g + 8 (i >> 2), column 2 j + (i & 1) + 8 ((i >> 1) & 1), of B at the
// transpose. Read back from the device when a Context is created; all
// false where it was not read.
struct MmaLayout {
  bool a = false, b = false, accumulator = false;
  bool operator==(const MmaLayout&) const = default;
};

struct DeviceInfo {
  std::string name;
  std::uint32_t vendor_id = 0;
  std::uint32_t api_version = 0;
  vk::PhysicalDeviceType type = vk::PhysicalDeviceType::eOther;
  vk::DriverId driver_id = {};  // VkPhysicalDeviceDriverProperties::driverID (0 where unknown)

  std::uint32_t subgroup_size = 0;      // the default size of a compute pipeline
  std::uint32_t min_subgroup_size = 0;  // with subgroup size control, else == subgroup_size
  std::uint32_t max_subgroup_size = 0;
  bool subgroup_arithmetic = false;     // subgroupAdd etc. in compute shaders
  bool subgroup_shuffle = false;
  // Whether compute subgroups are what subgroup_size and the shader builtins
  // say: subgroups of subgroup_size invocations (gl_SubgroupSize), as many
  // as gl_NumSubgroups says. False where a driver is known to break this:
  // lavapipe with LP_NATIVE_VECTOR_WIDTH above 512 reports subgroups of
  // width/32 invocations but runs compute shaders in subgroups of 16
  // (bench/notes/2026-11-lavapipe.md). Without it, no variant that depends on the
  // subgroup size or layout is used.
  bool subgroups_as_reported = true;

  std::array<std::uint32_t, 3> max_workgroup_count{};
  std::uint32_t max_workgroup_invocations = 0;
  std::uint32_t max_shared_memory = 0;
  std::uint64_t max_storage_buffer_range = 0;
  std::uint64_t min_storage_buffer_offset_alignment = 0;
  // The largest single allocation (Vulkan 1.1's maxMemoryAllocationSize;
  // 0 where unknown) and the largest memory heap, in bytes: Buffer refuses
  // what exceeds them before asking the driver.
  std::uint64_t max_memory_allocation_size = 0;
  std::uint64_t largest_heap = 0;

  // Streaming multiprocessors (VK_NV_shader_sm_builtins) or compute units
  // (VK_AMD_shader_core_properties) where the driver reports them, else 0.
  // Persistent kernels size their grids by it.
  std::uint32_t multiprocessors = 0;
  // The persistent kernels' default grid: one workgroup per multiprocessor
  // where known, else `fallback`.
  std::uint32_t persistent_grid(std::uint32_t fallback) const noexcept {
    return multiprocessors ? multiprocessors : fallback;
  }

  float timestamp_period_ns = 0;  // nanoseconds per timestamp tick
  bool timestamps = false;        // the compute queue writes timestamps

  // Optional features, true only when the device has them and the Context
  // enabled them.
  bool push_descriptor = false;
  bool subgroup_size_control = false;
  bool storage_16bit = false;  // storageBuffer16BitAccess
  bool float16 = false;        // shaderFloat16
  // VK_KHR_cooperative_matrix with shaderFloat16 and storageBuffer16BitAccess,
  // and fp16_tile: the fp16 x fp16 -> f32 subgroup tile the fp16 matrix
  // variants are built with (shaders/common/mma.glsl).
  bool cooperative_matrix_fp16 = false;
  MatrixTile fp16_tile;
  std::vector<MatrixTile> fp16_tiles_listed;  // every fp16 x fp16 -> f32 subgroup tile the device lists
  // VK_KHR_cooperative_matrix with VK_KHR_shader_bfloat16 (and shaderInt16,
  // shaderFloat16, storageBuffer16BitAccess):
  // bf16 x bf16 -> fp32 16x16x16 tiles in subgroup scope, bf16 shader values.
  bool cooperative_matrix_bf16 = false;
  // The layouts of fp16 and bf16 16 x 16 fragments at subgroups of 32, where
  // the device has such matrices and the Context read them
  // (ContextOptions::probe_fragment_layouts).
  MmaLayout fp16_layout, bf16_layout;
  bool int64_atomics = false;  // shaderInt64 and shaderBufferInt64Atomics
  bool pipeline_statistics = false;    // pipelines capture the driver's statistics (ContextOptions)
  // VK_EXT_pipeline_robustness (pipelineRobustness): the library's pipelines
  // run without bounds checks on storage buffers (every kernel stays in
  // bounds by construction; the host checks sizes before recording).
  bool pipeline_robustness = false;

  bool is_cpu() const noexcept { return type == vk::PhysicalDeviceType::eCpu; }
  // Whether compute pipelines can run with subgroups of n invocations: the
  // default size, or one a pipeline may require (subgroup size control).
  bool allows_subgroup_size(std::uint32_t n) const noexcept {
    if (!subgroups_as_reported) return false;
    return subgroup_size_control ? (min_subgroup_size <= n && max_subgroup_size >= n) : subgroup_size == n;
  }
  // Whether a workgroup of `invocations` (x only) runs as whole subgroups of
  // subgroup_size, or as one subgroup when it is smaller, so that
  // gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID numbers its
  // invocations 0 .. invocations-1 (a permutation of the local index):
  // what the variants that number invocations by subgroup rely on.
  bool whole_subgroups(std::uint32_t invocations) const noexcept {
    return subgroups_as_reported && subgroup_size > 0 &&
           (invocations % subgroup_size == 0 || invocations < subgroup_size);
  }
};

}  // namespace tilekernels
