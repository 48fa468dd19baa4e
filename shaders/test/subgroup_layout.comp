// SPDX-License-Identifier: MIT
#version 460
// Test-only: how the driver lays a workgroup out in subgroups. Invocation i
// (local index) of workgroup w writes five words at out[(w * WG + i) * 5]:
// gl_SubgroupID, gl_SubgroupInvocationID, gl_SubgroupSize, gl_NumSubgroups
// and the number of invocations in its subgroup (subgroupAdd(1), in uniform
// control flow: every invocation of the subgroup takes part).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x_id = 0) in;
layout(push_constant) uniform Push { uint group_offset; } pc;
layout(std430, binding = 0) writeonly buffer Out { uint words[]; };

void main() {
  const uint members = subgroupAdd(1u);
  const uint i = ((gl_WorkGroupID.x + pc.group_offset) * gl_WorkGroupSize.x + gl_LocalInvocationIndex) * 5u;
  words[i] = gl_SubgroupID;
  words[i + 1u] = gl_SubgroupInvocationID;
  words[i + 2u] = gl_SubgroupSize;
  words[i + 3u] = gl_NumSubgroups;
  words[i + 4u] = members;
}
