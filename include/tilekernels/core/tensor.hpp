// SPDX-License-Identifier: MIT
// Tensors: a dtype and a numpy-style shape (row-major, last index innermost)
// over a range of a storage buffer, optionally with strides (a view).
//
// TensorRef is the non-owning view every dispatcher takes, so callers can pass
// their own VkBuffers; Tensor owns a Buffer and converts floats on the host.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tilekernels/core/buffer.hpp"
#include "tilekernels/core/dtype.hpp"

namespace tilekernels {

using Shape = std::vector<std::int64_t>;

// The product of `shape`'s dimensions, or -1 when a dimension is negative
// or the product does not fit 62 bits (no tensor is that large).
inline std::int64_t checked_elements(const Shape& shape) noexcept {
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > (std::int64_t(1) << 62) / d) return -1;
    n *= d;
  }
  return n;
}

inline std::int64_t element_count(const Shape& shape) {
  const std::int64_t n = checked_elements(shape);
  if (n < 0) throw Error(ErrorCode::invalid_argument, "a shape with a negative dimension or more than 2^62 elements");
  return n;
}

inline std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

struct TensorRef {
  vk::Buffer buffer;
  // Bytes from the buffer's start: a multiple of the element size for the
  // kernels' view inputs and outputs (they say which), else of the device's
  // minStorageBufferOffsetAlignment.
  vk::DeviceSize offset = 0;
  vk::DeviceSize size = 0;    // bytes available from offset
  DType dtype = DType::f32;
  Shape shape;
  // Elements between consecutive indices of each dimension; empty: dense
  // row-major. Kernels say which dimensions of which tensors may be strided
  // (the innermost never is).
  Shape strides = {};

  std::int64_t elements() const { return element_count(shape); }
  // Elements between consecutive indices of dimension `d`.
  std::int64_t stride(std::size_t d) const {
    if (!strides.empty()) return strides.at(d);
    std::int64_t s = 1;
    for (std::size_t i = d + 1; i < shape.size(); ++i) s *= shape[i];
    return s;
  }
  bool dense() const {
    if (strides.empty()) return true;
    for (std::size_t d = 0; d < shape.size(); ++d)
      if (shape[d] > 1 && strides[d] != stride_dense(d)) return false;
    return true;
  }
  // Elements from the first to one past the last element the view reaches.
  // Throws where that does not fit 62 bits.
  std::int64_t span() const {
    if (elements() == 0) return 0;
    constexpr std::int64_t limit = std::int64_t(1) << 62;
    std::int64_t last = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      const std::int64_t n = shape[d] - 1, st = stride(d);
      if (n > 0 && (st < 0 || st > (limit - last) / n))
        throw Error(ErrorCode::invalid_argument, "a view of shape " + shape_string(shape) + " and strides " +
                                                     shape_string(strides) +
                                                     (st < 0 ? " has a negative stride" : " spans more than 2^62 elements"));
      if (n > 0) last += n * st;
    }
    return last + 1;
  }
  // Bytes the view occupies from `offset`: its span, 16-bit tensors bound in
  // whole 32-bit words.
  vk::DeviceSize bytes() const {
    const auto b = static_cast<vk::DeviceSize>(span()) * dtype_size(dtype);
    return (offset % 4 + b + 3) / 4 * 4 - offset % 4;
  }

 private:
  std::int64_t stride_dense(std::size_t d) const {
    std::int64_t s = 1;
    for (std::size_t i = d + 1; i < shape.size(); ++i) s *= shape[i];
    return s;
  }
};

class Tensor {
 public:
  // `name`, when given, is what errors call the tensor.
  Tensor(Context& ctx, DType dtype, Shape shape, std::string_view name = {})
      : dtype_(dtype), shape_(std::move(shape)), buffer_(ctx, storage_bytes(ctx, dtype_, shape_, name)) {}

  // A tensor holding `values` narrowed to `dtype` (round to nearest even).
  static Tensor from_floats(Context& ctx, DType dtype, Shape shape, std::span<const float> values) {
    Tensor t(ctx, dtype, std::move(shape));
    t.upload_floats(values);
    return t;
  }

  DType dtype() const noexcept { return dtype_; }
  const Shape& shape() const noexcept { return shape_; }
  std::int64_t elements() const { return element_count(shape_); }
  Buffer& buffer() noexcept { return buffer_; }
  const Buffer& buffer() const noexcept { return buffer_; }

  TensorRef ref() const { return TensorRef{buffer_.handle(), 0, buffer_.size(), dtype_, shape_}; }
  operator TensorRef() const { return ref(); }  // NOLINT: a Tensor is usable wherever a view is

  void upload_floats(std::span<const float> values) {
    check_count(values.size());
    if (dtype_ == DType::f32) return buffer_.upload(values.data(), values.size() * 4);
    std::vector<std::uint16_t> bits(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) bits[i] = static_cast<std::uint16_t>(narrow(dtype_, values[i]));
    buffer_.upload(bits.data(), bits.size() * 2);
  }

  // The stored values widened to float (exact for every float dtype).
  std::vector<float> download_floats() const {
    std::vector<float> out(static_cast<std::size_t>(elements()));
    if (dtype_ == DType::f32 || !is_float(dtype_)) {
      buffer_.download(out.data(), out.size() * 4);
      return out;
    }
    std::vector<std::uint16_t> bits(out.size());
    buffer_.download(bits.data(), bits.size() * 2);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = widen(dtype_, bits[i]);
    return out;
  }

  template <class T>
  void upload(std::span<const T> values) {
    if (values.size_bytes() != static_cast<std::size_t>(elements()) * dtype_size(dtype_))
      throw Error(ErrorCode::shape_mismatch, "upload of " + std::to_string(values.size_bytes()) + " bytes into a " +
                                                 std::string(dtype_name(dtype_)) + " tensor of shape " +
                                                 shape_string(shape_));
    buffer_.upload(values.data(), values.size_bytes());
  }

  template <class T>
  std::vector<T> download() const {
    std::vector<T> out(static_cast<std::size_t>(elements()) * dtype_size(dtype_) / sizeof(T));
    buffer_.download(out.data(), out.size() * sizeof(T));
    return out;
  }

 private:
  static std::size_t storage_bytes(const Context& ctx, DType dtype, const Shape& shape, std::string_view name) {
    const std::string what = name.empty() ? std::string("tensor") : "tensor '" + std::string(name) + "'";
    for (auto d : shape)
      if (d <= 0)
        throw Error(ErrorCode::invalid_argument, what + ": every dimension must be > 0, got shape " + shape_string(shape));
    const std::int64_t n = checked_elements(shape);
    if (n < 0 || n > (std::int64_t(1) << 60) / static_cast<std::int64_t>(dtype_size(dtype)))
      throw Error(ErrorCode::invalid_argument, what + ": shape " + shape_string(shape) + " has more than 2^60 bytes");
    const auto b = (static_cast<std::size_t>(n) * dtype_size(dtype) + 3) / 4 * 4;
    if (const std::string why = Buffer::allocation_limit(ctx, b); !why.empty())
      throw Error(ErrorCode::unsupported, what + ": shape " + shape_string(shape) + " of " +
                                              std::string(dtype_name(dtype)) + " needs " + std::to_string(b) + " bytes, which " + why);
    return b;
  }

  void check_count(std::size_t n) const {
    if (n != static_cast<std::size_t>(elements()))
      throw Error(ErrorCode::shape_mismatch, std::to_string(n) + " values for a tensor of shape " + shape_string(shape_));
  }

  DType dtype_;
  Shape shape_;
  Buffer buffer_;
};

}  // namespace tilekernels
