// SPDX-License-Identifier: MIT
// What every dispatcher does before and while recording: check each tensor
// argument (naming it in the error), bind the tensors as push descriptors,
// push the constants and dispatch, split along x where the grid is larger
// than the device allows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "tilekernels/core/context.hpp"
#include "tilekernels/core/tensor.hpp"

namespace tilekernels::detail {

inline std::string where(std::string_view kernel, std::string_view tensor) {
  return std::string(kernel) + ": " + std::string(tensor) + ": ";
}

// Throws unless `t` has the expected dtype and shape (its dimensions
// counted without overflow) and a buffer.
inline void expect_dtype_shape(std::string_view kernel, std::string_view name, const TensorRef& t, DType dtype,
                               const Shape& shape) {
  if (!t.buffer) throw Error(ErrorCode::invalid_argument, where(kernel, name) + "no buffer given (VK_NULL_HANDLE)");
  if (t.dtype != dtype)
    throw Error(ErrorCode::dtype_mismatch, where(kernel, name) + "expected dtype " + std::string(dtype_name(dtype)) +
                                               ", got " + std::string(dtype_name(t.dtype)));
  if (t.shape != shape)
    throw Error(ErrorCode::shape_mismatch,
                where(kernel, name) + "expected shape " + shape_string(shape) + ", got " + shape_string(t.shape));
  if (checked_elements(shape) < 0)
    throw Error(ErrorCode::invalid_argument, where(kernel, name) + "shape " + shape_string(shape) + " is too large");
}

// Throws unless the range of `t` holds its bytes() and can be bound on this device.
inline void expect_range(const Context& ctx, std::string_view kernel, std::string_view name, const TensorRef& t) {
  if (t.size < t.bytes())
    throw Error(ErrorCode::buffer_too_small, where(kernel, name) + "shape " + shape_string(t.shape) + " of " +
                                                 std::string(dtype_name(t.dtype)) +
                                                 (t.dense() ? std::string() : " with strides " + shape_string(t.strides)) +
                                                 " needs " + std::to_string(t.bytes()) +
                                                 " bytes, the buffer range holds " + std::to_string(t.size));
  const auto align = ctx.info().min_storage_buffer_offset_alignment;
  const auto bound = t.bytes() + (align ? t.offset % align : 0);
  if (bound > ctx.info().max_storage_buffer_range)
    throw Error(ErrorCode::unsupported, where(kernel, name) + std::to_string(bound) +
                                            " bytes exceed the device's maxStorageBufferRange of " +
                                            std::to_string(ctx.info().max_storage_buffer_range));
}

// Throws unless `t` is a dense tensor of the expected dtype and shape whose
// buffer range can hold it and be bound on this device at its offset.
inline void expect_tensor(const Context& ctx, std::string_view kernel, std::string_view name, const TensorRef& t,
                          DType dtype, const Shape& shape) {
  expect_dtype_shape(kernel, name, t, dtype, shape);
  if (!t.dense())
    throw Error(ErrorCode::invalid_argument, where(kernel, name) + "must be dense (row-major), got strides " +
                                                 shape_string(t.strides));
  const auto align = ctx.info().min_storage_buffer_offset_alignment;
  if (align && t.offset % align)
    throw Error(ErrorCode::invalid_argument, where(kernel, name) + "offset " + std::to_string(t.offset) +
                                                 " is not a multiple of minStorageBufferOffsetAlignment (" +
                                                 std::to_string(align) + ")");
  expect_range(ctx, kernel, name, t);
}

// An optional f32 table [length]: required where length > 0, refused
// where it is 0. `feature` names what needs it, for the messages.
inline void expect_optional_table(const Context& ctx, std::string_view kernel, std::string_view name,
                                  const std::optional<TensorRef>& t, std::int64_t length, std::string_view feature) {
  if (length == 0) {
    if (t)
      throw Error(ErrorCode::invalid_argument,
                  where(kernel, name) + "only " + std::string(feature) + " take it; this kernel's format has none");
    return;
  }
  if (!t) throw Error(ErrorCode::invalid_argument, where(kernel, name) + std::string(feature) + " need it; none given");
  expect_tensor(ctx, kernel, name, *t, DType::f32, {length});
}

// Where a view's elements are, as its shader reads them: `at` elements from
// the start of its binding (which starts at the offset rounded down to
// minStorageBufferOffsetAlignment), then `token` elements per token and
// `head` per head (the innermost dimension is contiguous).
struct ViewLayout {
  std::uint32_t at = 0, token = 0, head = 0;
  // Whether every row starts at a multiple of `elements` (vector loads).
  bool aligned(std::uint32_t elements) const noexcept {
    return at % elements == 0 && token % elements == 0 && head % elements == 0;
  }
};

// Checks a view `t` of dtype `dtype` and shape `shape` whose first
// `token_dims` dimensions index tokens (they must flatten into one token
// axis: stride(i) == shape[i + 1] * stride(i + 1) between them), the next
// one heads, and the rest, if any, the contiguous innermost row: any
// positive token and head strides, any offset that is a multiple of the
// element size. Returns where its elements are.
inline ViewLayout expect_view(const Context& ctx, std::string_view kernel, std::string_view name, const TensorRef& t,
                              DType dtype, const Shape& shape, std::size_t token_dims) {
  expect_dtype_shape(kernel, name, t, dtype, shape);
  const std::size_t rank = shape.size();
  const auto esize = static_cast<std::int64_t>(dtype_size(dtype));
  const auto bad = [&](const std::string& why) { throw Error(ErrorCode::invalid_argument, where(kernel, name) + why); };
  if (t.offset % esize) bad("offset " + std::to_string(t.offset) + " is not a multiple of the element size " + std::to_string(esize));
  if (!t.strides.empty()) {
    if (t.strides.size() != rank)
      bad("strides " + shape_string(t.strides) + " do not match the shape's " + std::to_string(rank) + " dimensions");
    for (auto st : t.strides)
      if (st <= 0 || st > (std::int64_t(1) << 40)) bad("strides " + shape_string(t.strides) + " must be positive");
    for (std::size_t d = token_dims + 1; d < rank; ++d)
      if (t.stride(d) != (d + 1 == rank ? 1 : t.shape[d + 1] * t.stride(d + 1)))
        bad("the innermost dimensions must be contiguous, got strides " + shape_string(t.strides));
    for (std::size_t d = 0; d + 1 < token_dims; ++d)
      if (t.shape[d] > 1 && t.stride(d) != t.shape[d + 1] * t.stride(d + 1))
        bad("dimensions 0.." + std::to_string(token_dims - 1) + " must form one token axis (stride " +
            std::to_string(d) + " = shape " + std::to_string(d + 1) + " x stride " + std::to_string(d + 1) +
            "), got strides " + shape_string(t.strides));
  }
  expect_range(ctx, kernel, name, t);
  const auto align = ctx.info().min_storage_buffer_offset_alignment;
  const std::int64_t at = static_cast<std::int64_t>(align ? t.offset % align : 0) / esize;
  const std::int64_t token = token_dims ? t.stride(token_dims - 1) : 0;
  const std::int64_t head = token_dims < rank ? t.stride(token_dims) : 0;
  if (at + t.span() > std::int64_t(1) << 32 || token >= std::int64_t(1) << 32 || head >= std::int64_t(1) << 32)
    bad("reaches past element 2^32 of its binding: too large for 32-bit indexing");
  return {static_cast<std::uint32_t>(at), static_cast<std::uint32_t>(token), static_cast<std::uint32_t>(head)};
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
  // The shaders number workgroups in 32 bits (group_offset + x). The
  // kernels' own checks keep every grid far below; this is the last guard
  // against a grid sized from a shape they did not bound.
  if (groups_x >= (std::uint64_t(1) << 32))
    throw Error(ErrorCode::unsupported, "a dispatch of " + std::to_string(groups_x) + " x " + std::to_string(groups_y) +
                                            " workgroups: the grid is numbered in 32 bits");
  const auto& d = ctx.dispatcher();
  // Each tensor is bound from its offset rounded down to the device's
  // alignment (a view's shader adds the rest as an element offset).
  const auto align = ctx.info().min_storage_buffer_offset_alignment;
  std::vector<vk::DescriptorBufferInfo> infos;
  for (const auto& t : tensors) {
    const vk::DeviceSize rest = align ? t.offset % align : 0;
    infos.emplace_back(t.buffer, t.offset - rest, rest + t.bytes());
  }
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
