// SPDX-License-Identifier: MIT
// A kernel's implementations as one declared table.
//
// Every kernel lists its variants in order of preference (fastest first,
// the portable one last): each states its SPIR-V module, the device
// features it needs, its workgroup size and shared memory, and the shapes
// it handles. record() checks the arguments, takes the first variant that
// is eligible on the Context for the call's shape, and records it. The
// same table is what tests, benchmarks and tk-run iterate over.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tilekernels/core/context.hpp"
#include "tilekernels/core/error.hpp"
#include "tilekernels/core/pipeline.hpp"

namespace tilekernels {

// The kinds of implementation, named the same way for every kernel.
enum class Path : std::uint8_t {
  portable,          // any Vulkan 1.2 device: no subgroup operations, <= 32 KiB of shared memory
  subgroup,          // subgroup shuffles or reductions, correct for any subgroup size
  tensor_core_fp16,  // cooperative matrices with fp16 operands, f32 accumulators
  tensor_core_bf16,  // VK_KHR_cooperative_matrix + VK_KHR_shader_bfloat16: bf16 operands, f32 accumulators
};

constexpr std::string_view to_string(Path p) noexcept {
  switch (p) {
    case Path::portable: return "portable";
    case Path::subgroup: return "subgroup";
    case Path::tensor_core_fp16: return "tensor_core_fp16";
    case Path::tensor_core_bf16: return "tensor_core_bf16";
  }
  return "?";
}

// What a variant needs of the device beyond Vulkan 1.2 with push descriptors.
struct DeviceNeeds {
  bool subgroup_shuffle = false;
  bool subgroup_arithmetic = false;
  // VK_KHR_cooperative_matrix fp16 tiles (DeviceInfo::fp16_tile,
  // shaders/common/mma.glsl). With subgroup_size 0, at the device's
  // subgroup size, whatever it is: the variant's `invocations` then counts
  // subgroups of 32 (detail::matrix_workgroup scales it).
  bool cooperative_matrix_fp16 = false;
  bool cooperative_matrix_bf16 = false;
  bool int64_atomics = false;
  std::uint32_t subgroup_size = 0;  // the code assumes subgroups of exactly this size (0: any size)
};

// The answer of a kernel's can_implement(): success, or the error record()
// would throw.
struct Status {
  bool ok = true;
  ErrorCode code = ErrorCode::invalid_argument;
  std::string message;

  explicit operator bool() const noexcept { return ok; }
  static Status success() { return {}; }
  static Status failure(ErrorCode code, std::string message) { return {false, code, std::move(message)}; }
};

// One implementation of a kernel; `Problem` is the kernel's runtime shape.
template <class Problem>
struct Variant {
  std::string_view name;                 // unique within the kernel: its path, or path_qualifier
  Path path;
  std::span<const std::uint32_t> spirv;  // empty when this build's shader compiler could not compile it
  DeviceNeeds needs;
  std::uint32_t invocations = 0;   // workgroup size it needs (the least, for kernels that size it per call)
  std::uint32_t shared_bytes = 0;  // shared memory it needs (likewise)
  // The shapes (and device properties beyond `needs`) it handles beyond the
  // Config's static rules; null: all.
  Status (*applies)(const DeviceInfo&, const Problem&) = nullptr;
};

namespace detail {
// The workgroup of a variant on the device's fp16 matrix tiles with
// `subgroups` subgroups: they run at the device's subgroup size.
inline std::uint32_t matrix_workgroup(const DeviceInfo& info, std::uint32_t subgroups) {
  return subgroups * info.subgroup_size;
}
}  // namespace detail

// Whether `v` can run `problem` on `ctx`, and if not, why.
template <class Problem>
Status eligibility(const Context& ctx, const Variant<Problem>& v, const Problem& problem) {
  const auto no = [&](const std::string& why) { return Status::failure(ErrorCode::unsupported, why); };
  const auto& info = ctx.info();
  if (v.spirv.empty()) return no("not built (the shader compiler of this build lacks its GLSL extensions)");
  if (ctx.force_portable() && v.path != Path::portable) return no("the portable path is forced");
  if (ctx.path() == PathPreference::subgroup && (v.path == Path::tensor_core_fp16 || v.path == Path::tensor_core_bf16))
    return no("matrix units are off (PathPreference::subgroup)");
  const auto& n = v.needs;
  if (n.subgroup_shuffle && !info.subgroup_shuffle) return no("the device has no subgroup shuffles in compute");
  if (n.subgroup_arithmetic && !info.subgroup_arithmetic) return no("the device has no subgroup arithmetic in compute");
  if (n.cooperative_matrix_fp16 && !info.cooperative_matrix_fp16) {
    std::string seen;
    for (const auto& t : info.fp16_tiles_listed)
      seen += (seen.empty() ? "" : ", ") + std::to_string(t.m) + "x" + std::to_string(t.n) + "x" + std::to_string(t.k);
    return no("the device (or Context) has no VK_KHR_cooperative_matrix fp16 x fp16 -> f32 subgroup tile with M, N "
              "and K of 8 or 16 (it lists " + (seen.empty() ? std::string("none") : seen) + ")");
  }
  const bool any_subgroup = n.cooperative_matrix_fp16 && n.subgroup_size == 0;
  if (any_subgroup && !(info.subgroups_as_reported && info.subgroup_size >= 4))
    return no("its subgroups are not what the device reports, or fewer than 4 invocations");
  if (n.cooperative_matrix_bf16 && !info.cooperative_matrix_bf16)
    return no("the device (or Context) has no bf16 VK_KHR_cooperative_matrix");
  if (n.int64_atomics && !info.int64_atomics) return no("the device (or Context) has no 64-bit buffer atomics");
  if (n.subgroup_size && !info.allows_subgroup_size(n.subgroup_size))
    return no("needs subgroups of " + std::to_string(n.subgroup_size) + " invocations");
  const std::uint32_t invocations = any_subgroup ? detail::matrix_workgroup(info, v.invocations / 32) : v.invocations;
  if (invocations > info.max_workgroup_invocations)
    return no("needs workgroups of " + std::to_string(invocations) + " invocations, the device allows " +
              std::to_string(info.max_workgroup_invocations));
  if (v.shared_bytes > info.max_shared_memory)
    return no("needs " + std::to_string(v.shared_bytes) + " bytes of shared memory, the device has " +
              std::to_string(info.max_shared_memory));
  if (v.applies) return v.applies(info, problem);
  return Status::success();
}

// The first eligible variant of `variants`; throws Error(unsupported)
// listing why each was refused when there is none.
template <class Problem, std::size_t N>
const Variant<Problem>& select_variant(const Context& ctx, std::string_view kernel,
                                       const std::array<Variant<Problem>, N>& variants, const Problem& problem) {
  std::string why;
  for (const auto& v : variants) {
    const Status s = eligibility(ctx, v, problem);
    if (s) return v;
    why += "; " + std::string(v.name) + ": " + s.message;
  }
  throw Error(ErrorCode::unsupported, std::string(kernel) + ": no variant runs this call on '" + ctx.info().name +
                                          "'" + why);
}

namespace detail {

// Runs `f` (checks that throw tilekernels::Error) and reports the outcome
// as a Status: what can_implement() returns.
template <class F>
Status status_of(F&& f) noexcept {
  try {
    try {
      f();
      return Status::success();
    } catch (const Error& e) {
      return Status::failure(e.code(), e.what());
    } catch (const std::exception& e) {
      return Status::failure(ErrorCode::invalid_argument, e.what());
    }
  } catch (...) {  // copying a message ran out of memory
    return Status{false, ErrorCode::invalid_argument, {}};
  }
}

// The subgroup size a pipeline of `v` must require (0: the driver's choice
// already fits). Requiring it also asks for full subgroups.
template <class Problem>
std::uint32_t required_subgroup_size(const Context& ctx, const Variant<Problem>& v) {
  auto n = v.needs.subgroup_size;
  if (n == 0 && v.needs.cooperative_matrix_fp16) n = ctx.info().subgroup_size;
  if (n == 0) return 0;
  return ctx.info().subgroup_size_control ? n : 0;
}

// The specialization constants of variant `v` on the device's fp16 matrix
// tiles (TK_MMA_SPEC): the tile and the subgroup size it runs at.
template <class Spec, class Problem>
void set_matrix_spec(Spec& spec, const DeviceInfo& info, const Variant<Problem>& v) {
  spec.MMA_M = info.fp16_tile.m;
  spec.MMA_N = info.fp16_tile.n;
  spec.MMA_K = info.fp16_tile.k;
  spec.SUBGROUP = v.needs.subgroup_size ? v.needs.subgroup_size : info.subgroup_size;
}

}  // namespace detail
}  // namespace tilekernels
