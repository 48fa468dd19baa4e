// Minimal .npy reading and writing for tk-run: little-endian f32, f16, i32
// and u32 arrays in C order (format versions 1.0 to 3.0).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tkrun {

struct NpyArray {
  std::vector<std::int64_t> shape;
  char kind = 'f';  // 'f' float (f32 or f16 on disk), 'i' int32, 'u' uint32
  std::vector<float> floats;         // kind 'f', widened exactly
  std::vector<std::uint32_t> words;  // kind 'i' or 'u', bit patterns
};

// Throws std::runtime_error with a one-line reason on any problem.
NpyArray read_npy(const std::string& path);
// Writes f32 (`floats`) or u32 (`words`) data; replaces `path` atomically.
void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const std::vector<float>* floats,
               const std::vector<std::uint32_t>* words);

}  // namespace tkrun
