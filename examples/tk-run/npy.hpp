// SPDX-License-Identifier: MIT
// Minimal .npy reading and writing for tk-run: little-endian f32, f16, i32
// and u32 arrays in C order (format versions 1.0 to 3.0).
//
// The reader is strict: the header must be the Python dict literal numpy
// writes, with exactly the keys 'descr', 'fortran_order' and 'shape';
// dimensions are plain decimal digits; every size is checked for overflow
// before it is multiplied, and the data must fill the rest of the file
// exactly. Anything else is refused with a one-line reason naming the file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tkrun {

// What the header of a .npy file says, checked against the file's length.
struct NpyHeader {
  std::vector<std::int64_t> shape;
  char kind = 'f';            // 'f' float (f32 or f16 on disk), 'i' int32, 'u' uint32
  std::uint32_t elem = 4;     // bytes per element on disk
  std::uint64_t count = 1;    // elements (the product of shape, no overflow)
  std::uint64_t data_at = 0;  // offset of the data in the file
};

struct NpyArray {
  std::vector<std::int64_t> shape;
  char kind = 'f';  // 'f' float (f32 or f16 on disk), 'i' int32, 'u' uint32
  std::vector<float> floats;         // kind 'f', widened exactly
  std::vector<std::uint32_t> words;  // kind 'i' or 'u', bit patterns
};

// Called with the parsed header before any data is read (or allocated); it
// may throw to refuse the array.
using NpyVet = std::function<void(const NpyHeader&)>;

// Throws std::runtime_error with a one-line reason ("PATH: why") on any problem.
NpyHeader read_npy_header(const std::string& path);
NpyArray read_npy(const std::string& path, const NpyVet& vet = {});

// The bytes of a .npy file (format 1.0) holding f32 `floats` or 32-bit
// `words` (descr `word_descr`: "<u4" or "<i4").
std::string npy_bytes(const std::vector<std::int64_t>& shape, const std::vector<float>* floats,
                      const std::vector<std::uint32_t>* words, const char* word_descr = "<u4");
// Writes f32 (`floats`) or 32-bit (`words`) data; replaces `path` atomically.
void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const std::vector<float>* floats,
               const std::vector<std::uint32_t>* words, const char* word_descr = "<u4");

// `s` with every byte outside printable ASCII written as \xNN, cut to
// `limit` characters: what error messages quote from files and arguments.
std::string printable(const std::string& s, std::size_t limit = 200);

}  // namespace tkrun
