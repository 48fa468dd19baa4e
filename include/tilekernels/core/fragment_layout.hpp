// SPDX-License-Identifier: MIT
// The fragment layout of a device's 16 x 16 cooperative matrices, read back
// from the device.
//
// Vulkan leaves to the implementation which lane of a subgroup holds which
// element of a cooperative matrix. A variant that builds an operand element
// by element in registers, or reads an accumulator's elements by position,
// is correct only on the layout it was written for. The ones here are
// written for mma.sync's m16n8k16 layout at subgroups of 32 (MmaLayout),
// and a Context reads the layout each driver actually uses when it is
// created (ContextOptions::probe_fragment_layouts, shaders/core/fragment_layout_*),
// so that eligibility rests on what the driver does, not on who made it.
#pragma once

#include <cstdint>
#include <span>

#include "tilekernels/core/device_info.hpp"

namespace tilekernels::detail {

// What the probe shaders write (shaders/common/fragment_layout.glsl): for
// matrix m (0 A, 1 B, 2 accumulator) and lane l, 17 words from
// (m 32 + l) 17: the fragment's length, then the position r 16 + c of each
// of its first 16 elements.
inline constexpr std::uint32_t fragment_probe_lanes = 32;
inline constexpr std::uint32_t fragment_probe_words = 3 * fragment_probe_lanes * 17;

// Where the m16n8k16 layout puts element i of lane l = 4 g + j, as
// r 16 + c: A and the accumulator at row g + 8 (i >> 2), column
// 2 j + (i & 1) + 8 ((i >> 1) & 1); B (K x N) at the transpose of that.
constexpr std::uint32_t m16n8k16_position(std::uint32_t matrix, std::uint32_t lane, std::uint32_t i) {
  const std::uint32_t outer = lane / 4 + 8 * (i >> 2);
  const std::uint32_t inner = 2 * (lane % 4) + (i & 1) + 8 * ((i >> 1) & 1);
  return matrix == 1 ? inner * 16 + outer : outer * 16 + inner;
}

// Which of the three fragments the probe's words show in the m16n8k16
// layout: every lane holds 8 elements, each where that layout puts it.
inline MmaLayout read_mma_layout(std::span<const std::uint32_t> words) {
  if (words.size() < fragment_probe_words) return {};
  bool same[3] = {true, true, true};
  for (std::uint32_t m = 0; m < 3; ++m)
    for (std::uint32_t l = 0; l < fragment_probe_lanes; ++l) {
      const std::uint32_t* lane = &words[(m * fragment_probe_lanes + l) * 17];
      if (lane[0] != 8) same[m] = false;
      for (std::uint32_t i = 0; i < 8; ++i)
        if (lane[1 + i] != m16n8k16_position(m, l, i)) same[m] = false;
    }
  return MmaLayout{same[0], same[1], same[2]};
}

}  // namespace tilekernels::detail
