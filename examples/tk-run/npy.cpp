// SPDX-License-Identifier: MIT
#include "npy.hpp"

#include <tilekernels/core/dtype.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <sys/stat.h>

namespace tkrun {

namespace {

std::runtime_error bad(const std::string& path, const std::string& why) {
  return std::runtime_error(printable(path) + ": " + why);
}

// The header's dict literal, parsed by hand: exactly what numpy writes, with
// any spacing between tokens that Python allows on one line.
class HeaderParser {
 public:
  HeaderParser(const std::string& path, const std::string& text) : path_(path), s_(text) {}

  NpyHeader parse() {
    // numpy ends the header with '\n' after space padding.
    if (s_.empty() || s_.back() != '\n') fail("header does not end with a newline", s_.size());
    std::size_t end = s_.size() - 1;
    while (end > 0 && s_[end - 1] == ' ') --end;
    body_end_ = end;
    expect('{', "the header must be a dict literal starting with '{'");
    bool have_descr = false, have_fortran = false, have_shape = false;
    std::string descr;
    NpyHeader h;
    skip_spaces();
    while (true) {
      skip_spaces();
      if (peek() == '}') break;
      const std::size_t key_at = i_;
      const std::string key = string_literal("a key");
      skip_spaces();
      expect(':', "expected ':' after key '" + printable(key, 40) + "'");
      skip_spaces();
      if (key == "descr") {
        if (have_descr) fail("key 'descr' appears twice", key_at);
        have_descr = true;
        descr = string_literal("the value of 'descr' (a dtype string such as '<f4')");
      } else if (key == "fortran_order") {
        if (have_fortran) fail("key 'fortran_order' appears twice", key_at);
        have_fortran = true;
        const std::size_t at = i_;
        if (s_.compare(i_, 4, "True") == 0) {
          i_ += 4;
          fortran_ = true;
        } else if (s_.compare(i_, 5, "False") == 0) {
          i_ += 5;
        } else {
          fail("the value of 'fortran_order' must be True or False", at);
        }
        if (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '_')
          fail("the value of 'fortran_order' must be True or False", at);
      } else if (key == "shape") {
        if (have_shape) fail("key 'shape' appears twice", key_at);
        have_shape = true;
        h.shape = shape_tuple();
      } else {
        fail("unexpected key '" + printable(key, 40) + "' (only 'descr', 'fortran_order' and 'shape')", key_at);
      }
      skip_spaces();
      if (peek() == ',') {
        ++i_;
        continue;  // another entry, or numpy's trailing ", }"
      }
      if (peek() != '}') fail("expected ',' or '}' after the value of '" + key + "'", i_);
    }
    ++i_;  // '}'
    if (i_ != body_end_) fail("unexpected text after the closing '}'", i_);
    if (!have_descr) fail("the header has no 'descr'", 0);
    if (!have_fortran) fail("the header has no 'fortran_order'", 0);
    if (!have_shape) fail("the header has no 'shape'", 0);

    if (descr == "<f4") {
      h.kind = 'f', h.elem = 4;
    } else if (descr == "<f2") {
      h.kind = 'f', h.elem = 2;
    } else if (descr == "<i4") {
      h.kind = 'i', h.elem = 4;
    } else if (descr == "<u4") {
      h.kind = 'u', h.elem = 4;
    } else {
      throw bad(path_, "dtype '" + printable(descr, 40) +
                           "' is not supported (use little-endian float32 '<f4', float16 '<f2', int32 '<i4' or uint32 '<u4')");
    }
    if (fortran_)
      throw bad(path_, "Fortran-ordered arrays are not supported (use np.ascontiguousarray before np.save)");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& why, std::size_t at) const {
    throw bad(path_, "malformed header: " + why + " (at character " + std::to_string(at) + " of '" +
                         printable(s_.substr(0, body_end_ ? body_end_ : s_.size()), 120) + "')");
  }
  char peek() const { return i_ < body_end_ ? s_[i_] : '\0'; }
  void skip_spaces() {
    while (i_ < body_end_ && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
  }
  void expect(char c, const std::string& why) {
    if (peek() != c) fail(why, i_);
    ++i_;
  }
  // '...' or "..." without escapes.
  std::string string_literal(const std::string& what) {
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected " + what + " in quotes", i_);
    const std::size_t start = ++i_;
    while (i_ < body_end_ && s_[i_] != q) {
      if (s_[i_] == '\\' || static_cast<unsigned char>(s_[i_]) < 0x20 || static_cast<unsigned char>(s_[i_]) > 0x7e)
        fail("unexpected character in a string", i_);
      ++i_;
    }
    if (i_ >= body_end_) fail("unterminated string", start - 1);
    return s_.substr(start, i_++ - start);
  }
  // A non-negative decimal integer as Python writes it: digits only, no
  // sign, no leading zeros, no '_'; at most 2^63 - 1.
  std::int64_t dimension() {
    const std::size_t start = i_;
    if (!std::isdigit(static_cast<unsigned char>(peek())))
      fail("a dimension must be a non-negative integer written in digits", start);
    std::uint64_t v = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      const auto digit = static_cast<std::uint64_t>(s_[i_] - '0');
      if (v > (static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) - digit) / 10)
        fail("dimension " + printable(s_.substr(start, 40), 40) + "... is larger than 2^63 - 1", start);
      v = v * 10 + digit;
      ++i_;
    }
    if (i_ - start > 1 && s_[start] == '0') fail("a dimension has a leading zero", start);
    if (std::isalpha(static_cast<unsigned char>(peek())) || peek() == '_' || peek() == '.')
      fail("a dimension must be a non-negative integer written in digits", start);
    return static_cast<std::int64_t>(v);
  }
  // (), (n,) or (n, m, ...) with no trailing comma after two or more.
  std::vector<std::int64_t> shape_tuple() {
    std::vector<std::int64_t> shape;
    expect('(', "the value of 'shape' must be a tuple such as (3, 4)");
    skip_spaces();
    if (peek() == ')') {
      ++i_;
      return shape;
    }
    while (true) {
      if (shape.size() == 32) fail("more than 32 dimensions", i_);
      shape.push_back(dimension());
      skip_spaces();
      if (peek() == ')') {
        if (shape.size() == 1) fail("a one-dimensional shape needs a comma, as in (3,)", i_);
        ++i_;
        return shape;
      }
      if (peek() != ',') fail("expected ',' or ')' in the shape", i_);
      ++i_;
      skip_spaces();
      if (peek() == ')') {
        if (shape.size() != 1) fail("a trailing comma in a shape of several dimensions", i_);
        ++i_;
        return shape;
      }
    }
  }

  const std::string& path_;
  const std::string& s_;
  std::size_t i_ = 0, body_end_ = 0;
  bool fortran_ = false;
};

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Opens `path` for reading after checking it is a regular file (a FIFO or a
// device would block or never end); returns its length.
std::uint64_t open_regular(const std::string& path, std::ifstream& f) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw bad(path, std::string("cannot open the file: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw bad(path, "is a directory, not a .npy file");
  if (!S_ISREG(st.st_mode)) throw bad(path, "is not a regular file");
  f.open(path, std::ios::binary);
  if (!f) throw bad(path, std::string("cannot open the file: ") + std::strerror(errno));
  return static_cast<std::uint64_t>(st.st_size);
}

NpyHeader read_header(const std::string& path, std::ifstream& f) {
  const std::uint64_t file_bytes = open_regular(path, f);
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) throw bad(path, "not a .npy file");
  const int major = static_cast<unsigned char>(magic[6]), minor = static_cast<unsigned char>(magic[7]);
  std::uint32_t header_len = 0;
  std::uint64_t prefix = 0;
  if (major == 1) {
    unsigned char b[2];
    if (!f.read(reinterpret_cast<char*>(b), 2)) throw bad(path, "truncated header");
    header_len = b[0] | (b[1] << 8);
    prefix = 10;
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    if (!f.read(reinterpret_cast<char*>(b), 4)) throw bad(path, "truncated header");
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<std::uint32_t>(b[3]) << 24);
    prefix = 12;
  } else {
    throw bad(path, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor));
  }
  if (minor != 0) throw bad(path, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor));
  if (header_len > (1u << 20)) throw bad(path, "header of " + std::to_string(header_len) + " bytes is too long");
  if (prefix + header_len > file_bytes)
    throw bad(path, "truncated header (" + std::to_string(header_len) + " bytes announced, the file has " +
                        std::to_string(file_bytes) + ")");
  std::string header(header_len, '\0');
  if (!f.read(header.data(), header_len)) throw bad(path, "truncated header");

  NpyHeader h = HeaderParser(path, header).parse();
  h.data_at = prefix + header_len;
  // Every size checked before it is used: the element count, then bytes.
  std::uint64_t count = 1;
  for (const std::int64_t d : h.shape)
    if (__builtin_mul_overflow(count, static_cast<std::uint64_t>(d), &count))
      throw bad(path, "shape " + shape_text(h.shape) + " has more elements than 64 bits can count");
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, std::uint64_t{h.elem}, &bytes))
    throw bad(path, "shape " + shape_text(h.shape) + " has more bytes than 64 bits can count");
  h.count = count;
  const std::uint64_t have = file_bytes - h.data_at;
  if (have != bytes)
    throw bad(path, "shape " + shape_text(h.shape) + " of " + std::to_string(h.elem) + "-byte elements needs " +
                        std::to_string(bytes) + " bytes of data, the file holds " + std::to_string(have));
  return h;
}

}  // namespace

std::string printable(const std::string& s, std::size_t limit) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (const char c : s) {
    if (out.size() >= limit) return out + "...";
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  return out;
}

NpyHeader read_npy_header(const std::string& path) {
  std::ifstream f;
  return read_header(path, f);
}

NpyArray read_npy(const std::string& path, const NpyVet& vet) {
  std::ifstream f;
  const NpyHeader h = read_header(path, f);
  if (vet) vet(h);
  NpyArray a;
  a.shape = h.shape;
  a.kind = h.kind;
  const auto count = static_cast<std::size_t>(h.count);
  const auto read = [&](void* into, std::size_t bytes) {
    if (!f.read(static_cast<char*>(into), static_cast<std::streamsize>(bytes)))
      throw bad(path, "the file ended before its data did (was it changed while being read?)");
  };
  if (h.kind == 'f' && h.elem == 2) {
    std::vector<std::uint16_t> half(count);
    read(half.data(), count * 2);
    a.floats.resize(count);
    for (std::size_t i = 0; i < count; ++i) a.floats[i] = tilekernels::f16_to_f32(half[i]);
  } else if (h.kind == 'f') {
    a.floats.resize(count);
    read(a.floats.data(), count * 4);
  } else {
    a.words.resize(count);
    read(a.words.data(), count * 4);
  }
  return a;
}

std::string npy_bytes(const std::vector<std::int64_t>& shape, const std::vector<float>* floats,
                      const std::vector<std::uint32_t>* words, const char* word_descr) {
  const std::string descr = floats ? "<f4" : word_descr;
  if (descr != "<f4" && descr != "<u4" && descr != "<i4")
    throw std::runtime_error("npy_bytes: unsupported descr '" + descr + "'");
  std::string dims;  // "3," or "3, 4", as numpy writes them
  for (std::size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ',';
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  const std::size_t n = floats ? floats->size() : words->size();
  std::string out;
  out.reserve(10 + header.size() + 4 * n);
  out.append("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(floats ? reinterpret_cast<const char*>(floats->data()) : reinterpret_cast<const char*>(words->data()), 4 * n);
  return out;
}

void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const std::vector<float>* floats,
               const std::vector<std::uint32_t>* words, const char* word_descr) {
  const std::string bytes = npy_bytes(shape, floats, words, word_descr);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) throw bad(path, "cannot create the file");
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) {
      std::remove(tmp.c_str());
      throw bad(path, "write failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw bad(path, "cannot replace the file");
  }
}

}  // namespace tkrun
