// SPDX-License-Identifier: MIT
// splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014; the constants of Vigna's reference code): the one
// copy of the generator that seeds the library's rotations and makes the
// tests', benchmarks' and examples' inputs.
#pragma once

#include <cstdint>

namespace tilekernels {

// Advances `state` by the golden-ratio increment and returns the mixed value.
constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace tilekernels
