// SPDX-License-Identifier: MIT
// The tile walk of the persistent GDN kernels: a workgroup visits tile
// indices x, x + stride, x + 2 stride, ... A tile index is read as digits of
// radices radix = (H / Hg, Hg, chunks) and an unbounded batch digit:
//   ((b * chunks + c) * Hg + kh) * (H / Hg) + r,   head h = kh * (H / Hg) + r,
// so adding the stride digit by digit keeps divisions out of the walk's
// loop (they were ~90 of ~690 instructions per subgroup and tile in
// recompute_wu on the H100, bench/notes/2026-11-gdn-chunk-o-recompute-wu.md).
#ifndef TK_TILE_WALK_GLSL
#define TK_TILE_WALK_GLSL

struct TkDigits {
  uint r, kh, c, b;
};

TkDigits tk_digits_of(uint x, uvec3 radix) {
  TkDigits d;
  d.r = x % radix.x;
  x /= radix.x;
  d.kh = x % radix.y;
  x /= radix.y;
  d.c = x % radix.z;
  d.b = x / radix.z;
  return d;
}

// d + s, each digit of s below its radix.
TkDigits tk_digits_add(TkDigits d, TkDigits s, uvec3 radix) {
  uint x = d.r + s.r;
  uint carry = x >= radix.x ? 1u : 0u;
  d.r = x - carry * radix.x;
  x = d.kh + s.kh + carry;
  carry = x >= radix.y ? 1u : 0u;
  d.kh = x - carry * radix.y;
  x = d.c + s.c + carry;
  carry = x >= radix.z ? 1u : 0u;
  d.c = x - carry * radix.z;
  d.b += s.b + carry;
  return d;
}

#endif
