// What every dispatcher does before and while recording: check each tensor
// argument (naming it in the error), bind the tensors as push descriptors,
// push the constants and dispatch, split along x where the grid is larger
// than the device allows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "tilekernels/core/context.hpp"
#include "tilekernels/core/tensor.hpp"

namespace tilekernels::detail {

inline std::string where(std::string_view kernel, std::string_view tensor) {
  return std::string(kernel) + ": " + std::string(tensor) + ": ";
}

// Throws unless `t` has the expected dtype and shape and its buffer range can
// hold it and be bound on this device.
inline void expect_tensor(const Context& ctx, std::string_view kernel, std::string_view name, const TensorRef& t,
                          DType dtype, const Shape& shape) {
  if (!t.buffer) throw Error(ErrorCode::invalid_argument, where(kernel, name) + "no buffer given (VK_NULL_HANDLE)");
  if (t.dtype != dtype)
    throw Error(ErrorCode::dtype_mismatch, where(kernel, name) + "expected dtype " + std::string(dtype_name(dtype)) +
                                               ", got " + std::string(dtype_name(t.dtype)));
  if (t.shape != shape)
    throw Error(ErrorCode::shape_mismatch,
                where(kernel, name) + "expected shape " + shape_string(shape) + ", got " + shape_string(t.shape));
  if (t.size < t.bytes())
    throw Error(ErrorCode::buffer_too_small, where(kernel, name) + "shape " + shape_string(shape) + " of " +
                                                 std::string(dtype_name(dtype)) + " needs " + std::to_string(t.bytes()) +
                                                 " bytes, the buffer range holds " + std::to_string(t.size));
  const auto align = ctx.info().min_storage_buffer_offset_alignment;
  if (align && t.offset % align)
    throw Error(ErrorCode::invalid_argument, where(kernel, name) + "offset " + std::to_string(t.offset) +
                                                 " is not a multiple of minStorageBufferOffsetAlignment (" +
                                                 std::to_string(align) + ")");
  if (t.bytes() > ctx.info().max_storage_buffer_range)
    throw Error(ErrorCode::unsupported, where(kernel, name) + std::to_string(t.bytes()) +
                                            " bytes exceed the device's maxStorageBufferRange of " +
                                            std::to_string(ctx.info().max_storage_buffer_range));
}

inline void expect_rank(std::string_view kernel, std::string_view name, const TensorRef& t, std::size_t rank) {
  if (t.shape.size() != rank)
    throw Error(ErrorCode::shape_mismatch, where(kernel, name) + "expected " + std::to_string(rank) +
                                               " dimensions, got shape " + shape_string(t.shape));
  for (auto d : t.shape)
    if (d <= 0)
      throw Error(ErrorCode::shape_mismatch, where(kernel, name) + "every dimension must be > 0, got shape " +
                                                 shape_string(t.shape));
}

// Binds `tensors` at bindings 0..n-1 and pushes `push` (whose first uint32
// is overwritten per split with the x offset of the slice), then dispatches
// `groups_x` x `groups_y` workgroups, in slices of at most the device limit.
template <class Push>
void record_dispatch(const Context& ctx, vk::CommandBuffer cmd, const Pipeline& pipeline,
                     const std::vector<TensorRef>& tensors, Push push, std::uint64_t groups_x,
                     std::uint32_t groups_y = 1) {
  static_assert(sizeof(Push) % 4 == 0 && sizeof(Push) <= 128, "push constants: whole words, at most 128 bytes");
  const auto& d = ctx.dispatcher();
  std::vector<vk::DescriptorBufferInfo> infos;
  for (const auto& t : tensors) infos.emplace_back(t.buffer, t.offset, t.bytes());
  std::vector<vk::WriteDescriptorSet> writes;
  for (std::uint32_t i = 0; i < infos.size(); ++i)
    writes.emplace_back(vk::DescriptorSet{}, i, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &infos[i]);
  cmd.bindPipeline(vk::PipelineBindPoint::eCompute, pipeline.pipeline(), d);
  cmd.pushDescriptorSetKHR(vk::PipelineBindPoint::eCompute, pipeline.layout(), 0, writes, d);
  const std::uint64_t limit = ctx.max_groups_per_dispatch();
  for (std::uint64_t first = 0; first < groups_x; first += limit) {
    push.group_offset = static_cast<std::uint32_t>(first);
    cmd.pushConstants(pipeline.layout(), vk::ShaderStageFlagBits::eCompute, 0, sizeof(Push), &push, d);
    cmd.dispatch(static_cast<std::uint32_t>(std::min(limit, groups_x - first)), groups_y, 1, d);
  }
}

}  // namespace tilekernels::detail

namespace tilekernels {

// A barrier that makes compute writes visible to later compute reads and
// writes: what a caller records between two dependent kernels.
inline void compute_barrier(const Context& ctx, vk::CommandBuffer cmd) {
  const vk::MemoryBarrier barrier(vk::AccessFlagBits::eShaderWrite | vk::AccessFlagBits::eShaderRead,
                                  vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite);
  cmd.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eComputeShader, {},
                      barrier, {}, {}, ctx.dispatcher());
}

}  // namespace tilekernels
