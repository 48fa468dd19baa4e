#include "npy.hpp"

#include <tilekernels/core/dtype.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <stdexcept>

namespace tkrun {

namespace {

std::runtime_error bad(const std::string& path, const std::string& why) {
  return std::runtime_error(path + ": " + why);
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw bad(path, "cannot open the file");
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) throw bad(path, "not a .npy file");
  const int major = static_cast<unsigned char>(magic[6]);
  std::uint32_t header_len = 0;
  if (major == 1) {
    unsigned char b[2];
    if (!f.read(reinterpret_cast<char*>(b), 2)) throw bad(path, "truncated header");
    header_len = b[0] | (b[1] << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    if (!f.read(reinterpret_cast<char*>(b), 4)) throw bad(path, "truncated header");
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<std::uint32_t>(b[3]) << 24);
  } else {
    throw bad(path, "unsupported .npy format version " + std::to_string(major));
  }
  if (header_len > (1u << 20)) throw bad(path, "header too long");
  std::string header(header_len, '\0');
  if (!f.read(header.data(), header_len)) throw bad(path, "truncated header");

  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr'\\s*:\\s*'([^']*)'"))) throw bad(path, "header has no descr");
  const std::string descr = m[1];
  if (std::regex_search(header, m, std::regex("'fortran_order'\\s*:\\s*True")))
    throw bad(path, "Fortran-ordered arrays are not supported (use np.ascontiguousarray)");
  if (!std::regex_search(header, m, std::regex("'shape'\\s*:\\s*\\(([^)]*)\\)"))) throw bad(path, "header has no shape");
  NpyArray a;
  const std::string dims = m[1];
  const std::regex number("[0-9]+");
  std::sregex_iterator it(dims.begin(), dims.end(), number), end;
  std::int64_t count = 1;
  for (; it != end; ++it) {
    a.shape.push_back(std::stoll(it->str()));
    count *= a.shape.back();
  }
  std::size_t elem = 4;
  if (descr == "<f4") a.kind = 'f';
  else if (descr == "<f2") { a.kind = 'f'; elem = 2; }
  else if (descr == "<i4") a.kind = 'i';
  else if (descr == "<u4") a.kind = 'u';
  else throw bad(path, "dtype '" + descr + "' is not supported (use little-endian float32, float16, int32 or uint32)");

  std::vector<char> data(static_cast<std::size_t>(count) * elem);
  if (!f.read(data.data(), static_cast<std::streamsize>(data.size())))
    throw bad(path, "file holds fewer bytes than its shape needs");
  if (f.peek() != std::char_traits<char>::eof()) throw bad(path, "file holds more bytes than its shape needs");
  if (a.kind == 'f' && elem == 2) {
    a.floats.resize(static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < a.floats.size(); ++i) {
      std::uint16_t h;
      std::memcpy(&h, data.data() + 2 * i, 2);
      a.floats[i] = tilekernels::f16_to_f32(h);
    }
  } else if (a.kind == 'f') {
    a.floats.resize(static_cast<std::size_t>(count));
    std::memcpy(a.floats.data(), data.data(), data.size());
  } else {
    a.words.resize(static_cast<std::size_t>(count));
    std::memcpy(a.words.data(), data.data(), data.size());
  }
  return a;
}

void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const std::vector<float>* floats,
               const std::vector<std::uint32_t>* words) {
  std::string dims;
  for (auto d : shape) dims += std::to_string(d) + ",";
  if (shape.size() > 1) dims.pop_back();
  std::string header = std::string("{'descr': '") + (floats ? "<f4" : "<u4") + "', 'fortran_order': False, 'shape': (" +
                       dims + "), }";
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) throw bad(path, "cannot create the file");
    f.write("\x93NUMPY\x01\x00", 8);
    const unsigned char len[2] = {static_cast<unsigned char>(header.size() & 0xff),
                                  static_cast<unsigned char>(header.size() >> 8)};
    f.write(reinterpret_cast<const char*>(len), 2);
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    if (floats) f.write(reinterpret_cast<const char*>(floats->data()), static_cast<std::streamsize>(floats->size() * 4));
    else f.write(reinterpret_cast<const char*>(words->data()), static_cast<std::streamsize>(words->size() * 4));
    if (!f) throw bad(path, "write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw bad(path, "cannot replace the file");
  }
}

}  // namespace tkrun
