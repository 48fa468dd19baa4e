// SPDX-License-Identifier: MIT
#version 460
// Benchmark helper: the memory floor. Copies uvec4s with a grid-stride loop;
// its bytes read plus written per second is the copy bandwidth every
// benchmark quotes its floor against.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint group_offset; uint count; uint stride; } pc;
layout(std430, binding = 0) readonly buffer Src { uvec4 src[]; };
layout(std430, binding = 1) writeonly buffer Dst { uvec4 dst[]; };

void main() {
  for (uint i = gl_GlobalInvocationID.x; i < pc.count; i += pc.stride) dst[i] = src[i];
}
