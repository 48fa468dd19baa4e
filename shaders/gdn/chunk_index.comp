// SPDX-License-Identifier: MIT
#version 460
// The index table of a variable-length Gated DeltaNet call
// (include/tilekernels/gdn/chunking.hpp), built on the device from
// cu_seqlens so that a recorded command buffer serves any lengths: entry n
// < N is sequence n's (bos, len, first chunk, 0), entry N + c chunk c's
// (sequence, first token, rows, chunk within its sequence), chunks past the
// last (0, 0, 0, 0): padding that every stage skips.
//
// The offsets are read clamped into [0, T] and made non-decreasing (each
// the largest of it and the offsets before it): sequence n is tokens
// [o_n, o_(n+1)) of those, so whatever cu_seqlens holds, every token and
// chunk lies inside the call's tensors and the chunks fit the table
// (sum ceil(len / BT) <= chunks for any lengths summing to at most T).
//
// One workgroup of 256 invocations walks the sequences 256 at a time: a
// scan for the running maximum of the offsets, a scan for the first chunks,
// then each invocation writes its sequence's entries. No subgroup operation.
#extension GL_GOOGLE_include_directive : require
#include "tilekernels/gdn/chunk_index_abi.h"

TK_DECLARE_SPEC(TK_CHUNK_INDEX_SPEC)
TK_DECLARE_PUSH(TK_CHUNK_INDEX_PUSH)

layout(std430, binding = 0) readonly buffer Cu { int cu[]; };
layout(std430, binding = 1) writeonly buffer Index { uvec4 index_[]; };

const uint WG = 256u;
shared uint s_scan[WG];
shared uint s_carry_end, s_carry_first;

// Inclusive scan of `x` over the workgroup, by maximum or by sum.
uint scan(uint x, uint inv, bool maximum) {
  s_scan[inv] = x;
  barrier();
  for (uint d = 1u; d < WG; d <<= 1) {
    const uint other = inv >= d ? s_scan[inv - d] : 0u;
    barrier();
    x = maximum ? max(x, other) : x + other;
    s_scan[inv] = x;
    barrier();
  }
  return x;
}

void main() {
  const uint inv = gl_LocalInvocationID.x;
  if (inv == 0u) {
    s_carry_end = uint(clamp(cu[0], 0, int(pc.T)));
    s_carry_first = 0u;
  }
  barrier();
  for (uint base = 0u; base < pc.N; base += WG) {
    const uint n = base + inv;
    const bool live = n < pc.N;
    // The sequence's end: the largest clamped offset up to n + 1.
    const uint end_raw = live ? uint(clamp(cu[n + 1u], 0, int(pc.T))) : 0u;
    const uint carry_end = s_carry_end, carry_first = s_carry_first;
    const uint end = max(scan(end_raw, inv, true), carry_end);
    const uint bos = inv == 0u ? carry_end : max(s_scan[inv - 1u], carry_end);
    barrier();
    const uint len = live ? end - bos : 0u;
    const uint count = (len + BT - 1u) / BT;
    const uint first = scan(count, inv, false) - count + carry_first;
    if (live) {
      index_[n] = uvec4(bos, len, first, 0u);
      for (uint c = 0u; c < count; ++c)
        if (first + c < pc.chunks) index_[pc.N + first + c] = uvec4(n, bos + c * BT, min(BT, len - c * BT), c);
    }
    barrier();
    if (inv == WG - 1u) {
      s_carry_end = end;
      s_carry_first = first + count;
    }
    barrier();
  }
  for (uint c = s_carry_first + inv; c < pc.chunks; c += WG) index_[pc.N + c] = uvec4(0u);
}
