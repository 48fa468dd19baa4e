// SPDX-License-Identifier: MIT
#version 460
// Benchmark helper: a near-empty dispatch, to find what the per-dispatch
// cost under a compute barrier depends on. Workgroup size, shared memory
// declared and whether it stores anything are specialization constants.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint SHARED_WORDS = 1;
layout(constant_id = 2) const uint WRITE = 0;
layout(std430, binding = 0) buffer Out { uint data[]; };
shared uint scratch[SHARED_WORDS];

void main() {
  uint v = gl_WorkGroupID.x;
  if (SHARED_WORDS > 1) {
    scratch[gl_LocalInvocationIndex % SHARED_WORDS] = gl_LocalInvocationIndex;
    barrier();
    v += scratch[(gl_LocalInvocationIndex + 1) % SHARED_WORDS];
  }
  if (WRITE != 0 && gl_LocalInvocationIndex == 0) data[gl_WorkGroupID.x] = v;
}
