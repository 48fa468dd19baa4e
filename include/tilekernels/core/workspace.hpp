// SPDX-License-Identifier: MIT
// Workspaces: scratch memory that some kernels need beside their tensors.
//
// A workspace is the caller's: a kernel states how much its fastest plan
// needs for a problem (workspace_bytes(problem), 0 where none) and its Args
// take an optional Workspace. record(cmd, args) requires that much;
// record(cmd, args, plan(problem, bytes)) runs the plan a smaller one holds
// (plan(problem, 0): the plan that needs none).
// Kernels that need part of the workspace zero when they start leave it
// zero when they finish; record() zero-fills that part itself (a
// vkCmdFillBuffer between two barriers, recorded into the caller's command
// buffer, so the buffer needs VK_BUFFER_USAGE_TRANSFER_DST_BIT) unless
// Workspace::zeroed says it already is. That part lies at the front of the
// workspace and the scratch, which needs no initial value, at the back of
// the range the caller passes, so no call's scratch reaches another call's
// zeroed part: a workspace sized once for the largest calls (each kernel's
// workspace_bytes() says which calls a size serves) and zeroed once stays
// valid with `zeroed` for all of them, in any order. Command buffers that
// may execute concurrently need workspaces of their own.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tilekernels/core/context.hpp"
#include "tilekernels/core/tensor.hpp"

namespace tilekernels {

struct Workspace {
  TensorRef memory;  // dtype u32, any shape; memory.size bytes from memory.offset are used
  // The caller vouches that the part the kernel needs zero is zero: the
  // memory was zeroed and since then used only by dispatches of the same
  // kernel's kind (any shapes the size serves), each complete before the
  // next starts. record() then records no fill.
  bool zeroed = false;
};

namespace detail {

// Every region of a workspace starts at a multiple of 256 bytes, the
// largest minStorageBufferOffsetAlignment Vulkan allows.
inline constexpr std::uint64_t kWorkspaceAlign = 256;

// Lays out the regions of a workspace: add() returns each one's byte offset.
class WorkspaceLayout {
 public:
  std::uint64_t add(std::uint64_t bytes) {
    const std::uint64_t at = bytes_;
    bytes_ += (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
    return at;
  }
  std::uint64_t bytes() const noexcept { return bytes_; }

 private:
  std::uint64_t bytes_ = 0;
};

// The two parts of a workspace (the rule above): the regions that must be
// zero, laid out from its front, and the scratch regions, laid out from the
// scratch's start, which sits at the back of the range passed.
class ZeroScratchLayout {
 public:
  std::uint64_t add_zero(std::uint64_t bytes) { return zero_.add(bytes); }
  // The region's offset from the scratch's start (scratch_at()).
  std::uint64_t add_scratch(std::uint64_t bytes) { return scratch_.add(bytes); }
  std::uint64_t zero_bytes() const noexcept { return zero_.bytes(); }
  std::uint64_t scratch_bytes() const noexcept { return scratch_.bytes(); }
  std::uint64_t bytes() const noexcept { return zero_.bytes() + scratch_.bytes(); }
  // Where the scratch starts in a workspace range of `size` bytes: at its
  // back, aligned down.
  std::uint64_t scratch_at(std::uint64_t size) const noexcept {
    const std::uint64_t s = scratch_.bytes();
    return size < s ? 0 : (size - s) / kWorkspaceAlign * kWorkspaceAlign;
  }

 private:
  WorkspaceLayout zero_, scratch_;
};

// Throws unless `w` is a u32 tensor whose range holds `bytes` bytes at a
// bindable offset.
inline void expect_workspace(const Context& ctx, std::string_view kernel, const Workspace& w, std::uint64_t bytes) {
  const std::string where = std::string(kernel) + ": workspace: ";
  if (!w.memory.buffer) throw Error(ErrorCode::invalid_argument, where + "no buffer given (VK_NULL_HANDLE)");
  if (w.memory.dtype != DType::u32)
    throw Error(ErrorCode::dtype_mismatch, where + "expected dtype u32, got " + std::string(dtype_name(w.memory.dtype)));
  if (w.memory.size < bytes)
    throw Error(ErrorCode::buffer_too_small, where + "this call needs " + std::to_string(bytes) +
                                                 " bytes (workspace_bytes), the buffer range holds " +
                                                 std::to_string(w.memory.size));
  const auto align = ctx.info().min_storage_buffer_offset_alignment;
  if (align && w.memory.offset % align)
    throw Error(ErrorCode::invalid_argument, where + "offset " + std::to_string(w.memory.offset) +
                                                 " is not a multiple of minStorageBufferOffsetAlignment (" +
                                                 std::to_string(align) + ")");
}

// The region [offset, offset + bytes) of a workspace as a u32 tensor.
inline TensorRef workspace_region(const Workspace& w, std::uint64_t offset, std::uint64_t bytes) {
  return TensorRef{w.memory.buffer, w.memory.offset + offset, bytes, DType::u32,
                   {static_cast<std::int64_t>((bytes + 3) / 4)}};
}

// Records a fill of `region` with `word` (zero by default) ordered after
// every earlier compute or transfer access to it and before every later
// compute access.
inline void record_fill(const Context& ctx, vk::CommandBuffer cmd, const TensorRef& region, std::uint32_t word = 0) {
  const auto& d = ctx.dispatcher();
  const vk::DeviceSize bytes = region.bytes();
  using A = vk::AccessFlagBits;
  using S = vk::PipelineStageFlagBits;
  const vk::BufferMemoryBarrier before(A::eShaderRead | A::eShaderWrite | A::eTransferWrite, A::eTransferWrite,
                                       VK_QUEUE_FAMILY_IGNORED, VK_QUEUE_FAMILY_IGNORED, region.buffer, region.offset,
                                       bytes);
  cmd.pipelineBarrier(S::eComputeShader | S::eTransfer, S::eTransfer, {}, {}, before, {}, d);
  cmd.fillBuffer(region.buffer, region.offset, bytes, word, d);
  const vk::BufferMemoryBarrier after(A::eTransferWrite, A::eShaderRead | A::eShaderWrite, VK_QUEUE_FAMILY_IGNORED,
                                      VK_QUEUE_FAMILY_IGNORED, region.buffer, region.offset, bytes);
  cmd.pipelineBarrier(S::eTransfer, S::eComputeShader, {}, {}, after, {}, d);
}

}  // namespace detail
}  // namespace tilekernels
