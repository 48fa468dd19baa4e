// SPDX-License-Identifier: MIT
// Every variant's SPIR-V agrees with its kernel's ABI header (core/abi.h):
// each SpecId it declares is one the C++ Spec struct sets, and its
// push-constant block is exactly as large as the C++ Push struct. Both come
// from one macro list, so a shader that declares a constant or push field
// by hand, or a module built from the wrong header, fails here.
#include <tilekernels/aura.hpp>
#include <tilekernels/gdn.hpp>

#include <algorithm>
#include <map>
#include <set>

#include <tilekernels/spirv/test/subgroup_layout.hpp>

#include "../support.hpp"

namespace {

using namespace tktest;
namespace aura = tilekernels::aura;
namespace gdn = tilekernels::gdn;

struct Reflection {
  std::set<std::uint32_t> spec_ids;
  std::uint32_t push_bytes = 0;  // 0: no push-constant block
};

// The SpecId decorations and the size of the push-constant block (scalar
// 32-bit members, as core/abi.h allows) of a SPIR-V module.
Reflection reflect(std::span<const std::uint32_t> words) {
  constexpr std::uint32_t kDecorate = 71, kMemberDecorate = 72, kVariable = 59, kTypePointer = 32,
                          kSpecId = 1, kOffset = 35, kPushConstant = 9;
  Reflection r;
  std::map<std::uint32_t, std::uint32_t> pointee;              // pointer type -> pointee
  std::map<std::uint32_t, std::uint32_t> max_offset;           // struct -> largest member offset
  std::uint32_t push_pointer = 0;
  for (std::size_t i = 5; i < words.size();) {
    const std::uint32_t op = words[i] & 0xffffu, count = words[i] >> 16;
    if (count == 0 || i + count > words.size()) break;
    const auto* w = &words[i];
    if (op == kDecorate && count >= 4 && w[2] == kSpecId) r.spec_ids.insert(w[3]);
    if (op == kMemberDecorate && count >= 5 && w[3] == kOffset)
      max_offset[w[1]] = std::max(max_offset[w[1]], w[4]);
    if (op == kTypePointer && count >= 4) pointee[w[1]] = w[3];
    if (op == kVariable && count >= 4 && w[3] == kPushConstant) push_pointer = w[1];  // w[1]: its pointer type
    i += count;
  }
  // The variable's type is a pointer to the block struct.
  if (push_pointer) r.push_bytes = max_offset[pointee[push_pointer]] + 4;
  return r;
}

template <class Kernel>
void check_kernel() {
  using Spec = typename Kernel::Spec;
  using Push = typename Kernel::Push;
  std::size_t built = 0;
  for (const auto& v : Kernel::variants) {
    if (v.spirv.empty()) continue;  // not built by this toolchain
    ++built;
    SCOPED_TRACE(std::string(Kernel::name) + " " + std::string(v.name));
    const Reflection r = reflect(v.spirv);
    for (std::uint32_t id : r.spec_ids) EXPECT_LT(id, sizeof(Spec) / 4) << "SpecId " << id << " is not in Spec";
    EXPECT_TRUE(r.spec_ids.count(0)) << "no workgroup size specialization (local_size_x_id = 0)";
    if (r.push_bytes) {
      EXPECT_EQ(r.push_bytes, sizeof(Push)) << "push-constant block size";
    }
  }
  EXPECT_GE(built, 1u) << Kernel::name << ": no variant built";
}

TEST(Abi, EveryVariantMatchesItsHeader) {
  check_kernel<aura::FlashPass2<aura::FlashPass2Config<128>>>();
  check_kernel<aura::Decode<aura::DecodeConfig<128, 4>>>();
  check_kernel<aura::Encode<aura::EncodeConfig<128, 4>>>();
  check_kernel<aura::HadamardEncode<aura::EncodeConfig<128, 4>>>();
  check_kernel<aura::FaReduceHadamard<aura::FaReduceHadamardConfig<128>>>();
  check_kernel<aura::CacheWriteKernel>();
  check_kernel<aura::DecodeAttentionKernel>();
  check_kernel<aura::KeyCentreKernel>();
  check_kernel<gdn::ChunkO<gdn::ChunkOConfig<>>>();
  check_kernel<gdn::RecomputeWU<gdn::RecomputeWUConfig<64, 128, 128, DType::bf16>>>();
  check_kernel<gdn::L2Norm<128>>();
  check_kernel<gdn::KKTSolve<gdn::KKTSolveConfig<64, 128>>>();
}

// The reflection itself can fail: the subgroup layout probe has one push
// word and only the workgroup size as a specialization constant.
TEST(Abi, ReflectionReadsAKnownModule) {
  const Reflection r = reflect(tilekernels::spirv::test_subgroup_layout);
  EXPECT_TRUE(r.spec_ids.count(0));
  EXPECT_EQ(r.push_bytes, 4u);
}

}  // namespace
