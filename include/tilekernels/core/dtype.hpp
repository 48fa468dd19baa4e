// SPDX-License-Identifier: MIT
// Element types of tensors, and the host side of the 16-bit float conversions.
//
// The GLSL side lives in shaders/common/convert.glsl; both round to nearest
// even, keep NaN a quiet NaN with its sign, and agree bit for bit (tested).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tilekernels {

enum class DType : std::uint32_t { f32 = 0, f16 = 1, bf16 = 2, u32 = 3, i32 = 4 };

constexpr std::size_t dtype_size(DType t) noexcept {
  return (t == DType::f16 || t == DType::bf16) ? 2 : 4;
}

constexpr std::string_view dtype_name(DType t) noexcept {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::u32: return "u32";
    case DType::i32: return "i32";
  }
  return "?";
}

constexpr bool is_float(DType t) noexcept { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

// ---- bf16 -----------------------------------------------------------------

constexpr std::uint16_t f32_to_bf16(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

constexpr float bf16_to_f32(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

// Rounds a float to the nearest bf16 value and widens it back.
constexpr float round_to_bf16(float value) noexcept { return bf16_to_f32(f32_to_bf16(value)); }

// ---- f16 (IEEE binary16) ----------------------------------------------------

constexpr std::uint16_t f32_to_f16(float value) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t x = bits & 0x7fffffffu;
  std::uint32_t h;
  if (x > 0x7f800000u) {
    h = 0x7e00u | ((x >> 13) & 0x3ffu);  // NaN: quiet, top payload bits kept
  } else if (x >= 0x477ff000u) {
    h = 0x7c00u;  // >= 65520 (the midpoint above the largest half) and Inf
  } else if (x >= 0x38800000u) {
    const std::uint32_t m = x - 0x38000000u;  // rebias the exponent 127 -> 15
    h = (m + 0x0fffu + ((m >> 13) & 1u)) >> 13;
  } else if (x >= 0x33000000u) {
    // Subnormal half: count units of 2^-24, rounding the dropped bits to even.
    const std::uint32_t shift = 126u - (x >> 23);
    const std::uint32_t mant = (x & 0x7fffffu) | 0x800000u;
    const std::uint32_t q = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    h = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
  } else {
    h = 0;  // below half the smallest subnormal
  }
  return static_cast<std::uint16_t>(sign | h);
}

constexpr float f16_to_f32(std::uint16_t bits) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t e = (bits >> 10) & 0x1fu;
  const std::uint32_t m = bits & 0x3ffu;
  if (e == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  if (e != 0) return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
  // Subnormal or zero: m * 2^-24 is exact in f32.
  const float magnitude = static_cast<float>(m) * 5.9604644775390625e-8f;
  return sign ? -magnitude : magnitude;
}

constexpr float round_to_f16(float value) noexcept { return f16_to_f32(f32_to_f16(value)); }

// Widens one stored element of a float dtype to float.
constexpr float widen(DType t, std::uint32_t bits) noexcept {
  switch (t) {
    case DType::f16: return f16_to_f32(static_cast<std::uint16_t>(bits));
    case DType::bf16: return bf16_to_f32(static_cast<std::uint16_t>(bits));
    default: return std::bit_cast<float>(bits);
  }
}

// Narrows a float to the storage bits of a float dtype.
constexpr std::uint32_t narrow(DType t, float value) noexcept {
  switch (t) {
    case DType::f16: return f32_to_f16(value);
    case DType::bf16: return f32_to_bf16(value);
    default: return std::bit_cast<std::uint32_t>(value);
  }
}

// The value a float takes after a round trip through a float dtype.
constexpr float round_to(DType t, float value) noexcept { return widen(t, narrow(t, value)); }

}  // namespace tilekernels
