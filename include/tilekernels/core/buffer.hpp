// SPDX-License-Identifier: MIT
// Device buffers with host upload and download through a staging buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "tilekernels/core/context.hpp"

namespace tilekernels {

class Buffer {
 public:
  // A storage buffer of `bytes` bytes, in device-local memory when the device
  // has it. Usable as a transfer source and destination.
  Buffer(Context& ctx, std::size_t bytes, bool host_visible = false) : ctx_(&ctx), bytes_(bytes) {
    if (bytes == 0) throw Error(ErrorCode::invalid_argument, "a buffer of 0 bytes was requested");
    if (const std::string why = allocation_limit(ctx, bytes); !why.empty())
      throw Error(ErrorCode::unsupported, "a buffer of " + std::to_string(bytes) + " bytes " + why);
    detail::vk_call("allocating a buffer", [&] {
      const vk::Device device = ctx.device();
      const auto& d = ctx.dispatcher();
      const auto* allocator = ctx.allocator();
      buffer_ = Owned<vk::Buffer>(device,
                                  device.createBuffer(vk::BufferCreateInfo({}, bytes,
                                                                           vk::BufferUsageFlagBits::eStorageBuffer |
                                                                               vk::BufferUsageFlagBits::eTransferSrc |
                                                                               vk::BufferUsageFlagBits::eTransferDst),
                                                      allocator, d),
                                  d.vkDestroyBuffer, allocator);
      const auto req = device.getBufferMemoryRequirements(*buffer_, d);
      const auto want = host_visible ? vk::MemoryPropertyFlagBits::eHostVisible | vk::MemoryPropertyFlagBits::eHostCoherent
                                     : vk::MemoryPropertyFlags(vk::MemoryPropertyFlagBits::eDeviceLocal);
      memory_ = Owned<vk::DeviceMemory>(
          device,
          device.allocateMemory(vk::MemoryAllocateInfo(req.size, memory_type(req.memoryTypeBits, want)), allocator, d),
          d.vkFreeMemory, allocator);
      device.bindBufferMemory(*buffer_, *memory_, 0, d);
    });
    host_visible_ = host_visible;
  }
  // After a fence wait of the Context ran out (Context::abandoned), the
  // device may still use the buffer: it is leaked, not freed.
  ~Buffer() { leak_if_abandoned(); }
  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      leak_if_abandoned();
      ctx_ = o.ctx_;
      bytes_ = o.bytes_;
      host_visible_ = o.host_visible_;
      buffer_ = std::move(o.buffer_);
      memory_ = std::move(o.memory_);
    }
    return *this;
  }

  // Empty when the device may hold one allocation of `bytes` bytes, else
  // which of its limits that exceeds.
  static std::string allocation_limit(const Context& ctx, std::uint64_t bytes) {
    const auto& info = ctx.info();
    if (info.max_memory_allocation_size && bytes > info.max_memory_allocation_size)
      return "exceeds the device's largest allocation (maxMemoryAllocationSize " +
             std::to_string(info.max_memory_allocation_size) + " bytes)";
    if (info.largest_heap && bytes > info.largest_heap)
      return "exceeds the device's largest memory heap (" + std::to_string(info.largest_heap) + " bytes)";
    return {};
  }

  vk::Buffer handle() const noexcept { return *buffer_; }
  vk::DeviceMemory memory() const noexcept { return *memory_; }
  std::size_t size() const noexcept { return bytes_; }
  Context& context() const noexcept { return *ctx_; }

  void upload(const void* data, std::size_t bytes, std::size_t offset = 0) {
    check_range("upload", bytes, offset);
    if (host_visible_) {
      std::memcpy(map(offset, bytes), data, bytes);
      ctx_->device().unmapMemory(*memory_, ctx_->dispatcher());
      return;
    }
    Buffer staging(*ctx_, bytes, true);
    staging.upload(data, bytes);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) {
      cmd.copyBuffer(staging.handle(), handle(), vk::BufferCopy(0, offset, bytes), ctx_->dispatcher());
    });
  }

  void download(void* data, std::size_t bytes, std::size_t offset = 0) const {
    check_range("download", bytes, offset);
    if (host_visible_) {
      std::memcpy(data, map(offset, bytes), bytes);
      ctx_->device().unmapMemory(*memory_, ctx_->dispatcher());
      return;
    }
    Buffer staging(*ctx_, bytes, true);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) {
      cmd.copyBuffer(handle(), staging.handle(), vk::BufferCopy(offset, 0, bytes), ctx_->dispatcher());
    });
    staging.download(data, bytes);
  }

  // Fills the whole buffer with a repeated 32-bit word on the device.
  void fill(std::uint32_t word) {
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) {
      cmd.fillBuffer(handle(), 0, VK_WHOLE_SIZE, word, ctx_->dispatcher());
    });
  }

 private:
  void leak_if_abandoned() noexcept {
    if (ctx_->abandoned()) {
      buffer_.leak();
      memory_.leak();
    }
  }

  void* map(std::size_t offset, std::size_t bytes) const {
    return detail::vk_call("mapping memory", [&] {
      return ctx_->device().mapMemory(*memory_, offset, bytes, {}, ctx_->dispatcher());
    });
  }

  void check_range(const char* what, std::size_t bytes, std::size_t offset) const {
    if (offset > bytes_ || bytes > bytes_ - offset)
      throw Error(ErrorCode::buffer_too_small, std::string(what) + " of " + std::to_string(bytes) + " bytes at offset " +
                                                   std::to_string(offset) + " into a buffer of " +
                                                   std::to_string(bytes_) + " bytes");
  }

  std::uint32_t memory_type(std::uint32_t allowed, vk::MemoryPropertyFlags want) const {
    const auto props = ctx_->physical_device().getMemoryProperties(ctx_->instance_dispatcher());
    for (std::uint32_t i = 0; i < props.memoryTypeCount; ++i)
      if ((allowed & (1u << i)) && (props.memoryTypes[i].propertyFlags & want) == want) return i;
    // Device-local is a preference; any allowed type works for storage.
    for (std::uint32_t i = 0; i < props.memoryTypeCount; ++i)
      if ((allowed & (1u << i)) && !(want & vk::MemoryPropertyFlagBits::eHostVisible)) return i;
    throw Error(ErrorCode::unsupported, "no memory type with the properties " + vk::to_string(want));
  }

  Context* ctx_;
  std::size_t bytes_;
  bool host_visible_ = false;
  Owned<vk::Buffer> buffer_;
  Owned<vk::DeviceMemory> memory_;
};

}  // namespace tilekernels
