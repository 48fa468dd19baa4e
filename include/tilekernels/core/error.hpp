// SPDX-License-Identifier: MIT
// tilekernels::Error: the one exception type the library throws.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace tilekernels {

// What went wrong, coarse enough to branch on; the message carries the detail
// (which tensor, what was expected, what was given).
enum class ErrorCode {
  invalid_argument,  // a parameter outside its documented range
  shape_mismatch,    // tensor shapes that do not agree with each other
  dtype_mismatch,    // a tensor of the wrong element type
  buffer_too_small,  // a buffer smaller than its shape needs
  unsupported,       // the device lacks a feature or limit the kernel needs
  device_lost,       // VK_ERROR_DEVICE_LOST
  timeout,           // a fence wait ran past its deadline
  vulkan,            // any other failing Vulkan call
  io,                // file input/output (npy files in tk-run)
};

constexpr std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid argument";
    case ErrorCode::shape_mismatch: return "shape mismatch";
    case ErrorCode::dtype_mismatch: return "dtype mismatch";
    case ErrorCode::buffer_too_small: return "buffer too small";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::device_lost: return "device lost";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::vulkan: return "vulkan error";
    case ErrorCode::io: return "i/o error";
  }
  return "unknown error";
}

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error("tilekernels: " + std::string(to_string(code)) + ": " + message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace tilekernels
