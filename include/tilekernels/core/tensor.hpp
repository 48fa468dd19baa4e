// Tensors: a dtype and a numpy-style shape (row-major, last index innermost)
// over a range of a storage buffer.
//
// TensorRef is the non-owning view every dispatcher takes, so callers can pass
// their own VkBuffers; Tensor owns a Buffer and converts floats on the host.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "tilekernels/core/buffer.hpp"
#include "tilekernels/core/dtype.hpp"

namespace tilekernels {

using Shape = std::vector<std::int64_t>;

inline std::int64_t element_count(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

inline std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

struct TensorRef {
  vk::Buffer buffer;
  vk::DeviceSize offset = 0;  // bytes; a multiple of minStorageBufferOffsetAlignment
  vk::DeviceSize size = 0;    // bytes available from offset
  DType dtype = DType::f32;
  Shape shape;

  std::int64_t elements() const { return element_count(shape); }
  // Bytes the shape occupies; 16-bit tensors are bound in whole 32-bit words.
  vk::DeviceSize bytes() const {
    const auto b = static_cast<vk::DeviceSize>(elements()) * dtype_size(dtype);
    return (b + 3) / 4 * 4;
  }
};

class Tensor {
 public:
  Tensor(Context& ctx, DType dtype, Shape shape)
      : dtype_(dtype), shape_(std::move(shape)), buffer_(ctx, storage_bytes(dtype_, shape_)) {}

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
  static std::size_t storage_bytes(DType dtype, const Shape& shape) {
    for (auto d : shape)
      if (d <= 0) throw Error(ErrorCode::invalid_argument, "tensor shape " + shape_string(shape) + " has a dimension <= 0");
    const auto b = static_cast<std::size_t>(element_count(shape)) * dtype_size(dtype);
    return (b + 3) / 4 * 4;
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
