// SPDX-License-Identifier: MIT
// The subgroup layout that the subgroup variants rely on where
// DeviceInfo::whole_subgroups holds, and the one known driver where it does
// not: lavapipe above LP_NATIVE_VECTOR_WIDTH=512 (bench/notes/2026-11-lavapipe.md).
#include <tilekernels/core.hpp>
#include <tilekernels/spirv/test/subgroup_layout.hpp>

#include <set>
#include <string>

#include "../support.hpp"

namespace {

using namespace tktest;

struct Member {
  std::uint32_t id, lane, size, count, members;  // what shaders/test/subgroup_layout.comp writes
};

std::vector<Member> layout(Context& ctx, std::uint32_t invocations, std::uint32_t groups) {
  const auto words = run_probe(ctx, spirv::test_subgroup_layout, 5 * invocations * groups, groups, {invocations});
  std::vector<Member> m(invocations * groups);
  for (std::size_t i = 0; i < m.size(); ++i)
    m[i] = {words[5 * i], words[5 * i + 1], words[5 * i + 2], words[5 * i + 3], words[5 * i + 4]};
  return m;
}

class Subgroups : public DeviceTest {};

// Where whole_subgroups(n) holds, a workgroup of n invocations is
// ceil(n / size) subgroups of subgroup_size (one partial subgroup, lanes
// 0..n-1, when n is smaller), so that id * size + lane numbers the
// workgroup: what the shuffle variants of fa_reduce_hadamard and
// encode_hadamard assume.
TEST_F(Subgroups, LayoutIsAsReported) {
  Context& ctx = context();
  const auto& info = ctx.info();
  if (!info.subgroup_arithmetic) GTEST_SKIP() << "no subgroup arithmetic on " << info.name;
  for (std::uint32_t n : {8u, 16u, 64u, 96u, 256u}) {
    if (n > info.max_workgroup_invocations || !info.whole_subgroups(n)) continue;
    SCOPED_TRACE("workgroup of " + std::to_string(n) + ", subgroup size " + std::to_string(info.subgroup_size));
    const std::uint32_t size = info.subgroup_size;
    const auto members = layout(ctx, n, 3);
    for (std::uint32_t w = 0; w < 3; ++w) {
      std::set<std::uint32_t> numbers;
      for (std::uint32_t i = 0; i < n; ++i) {
        const Member& m = members[w * n + i];
        ASSERT_EQ(m.size, size) << "gl_SubgroupSize of invocation " << i;
        ASSERT_EQ(m.count, (n + size - 1) / size) << "gl_NumSubgroups of invocation " << i;
        ASSERT_EQ(m.members, std::min(n, size)) << "invocations in the subgroup of invocation " << i;
        numbers.insert(m.id * size + m.lane);
      }
      EXPECT_EQ(numbers.size(), n) << "id * size + lane repeats a number";
      EXPECT_LT(*numbers.rbegin(), n) << "id * size + lane leaves the workgroup";
    }
  }
}

// lavapipe runs compute shaders in vectors of min(width / 32, 16) lanes
// (LP_NATIVE_VECTOR_WIDTH = width), one subgroup each, but reports
// subgroupSize = width / 32 and returns it as gl_SubgroupSize: above 512
// bits a workgroup of 64 comes out as 4 subgroups of 16 invocations that say
// they hold 32 or 64. The Context then marks the device's subgroups as not
// as reported and the kernels use no subgroup-size-dependent variant. This
// test keeps that rule honest: it fails when the driver changes.
TEST_F(Subgroups, LavapipeWideVectorsRunSixteenLanes) {
  Context& ctx = context();
  const auto& info = ctx.info();
  if (info.driver_id != vk::DriverId::eMesaLlvmpipe) GTEST_SKIP() << "not lavapipe";
  const bool wide = info.subgroup_size > 16;
  EXPECT_EQ(info.subgroups_as_reported, !wide);
  if (!wide) return;
  EXPECT_FALSE(info.whole_subgroups(64));
  EXPECT_FALSE(info.allows_subgroup_size(info.subgroup_size));
  const auto members = layout(ctx, 64, 1);
  std::uint32_t sixteen = 0;
  for (const Member& m : members) sixteen += m.members == 16 && m.count == 4 && m.size == info.subgroup_size;
  EXPECT_EQ(sixteen, 64u) << "lavapipe no longer runs " << info.subgroup_size
                          << "-wide subgroups as 16 lanes: revisit DeviceInfo::subgroups_as_reported in Context::read_info";
}

}  // namespace
