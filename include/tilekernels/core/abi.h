// SPDX-License-Identifier: MIT
// The interface between a dispatcher and its shader, declared once for both
// languages. Each kernel has an <kernel>_abi.h beside its dispatcher,
// included by the C++ header and by the GLSL shader, that lists
//   TK_<KERNEL>_SPEC(F): its specialization constants, F(id, NAME, default),
//     ids 1, 2, ... in order (id 0 is the workgroup size, local_size_x_id);
//   TK_<KERNEL>_PUSH(F): its push constants, F(type, name) with type uint,
//     int or float, the first one `group_offset` (the x offset of a
//     dispatch slice, set by detail::record_dispatch).
// In GLSL, TK_DECLARE_SPEC(LIST) declares the workgroup size and every
// constant and TK_DECLARE_PUSH(LIST) the push-constant block `pc`; in C++,
// the same lists make the structs Spec and Push, whose field order is the
// id order (checked at compile time) and whose bytes are what the pipeline
// and vkCmdPushConstants receive. Shared-memory sizes that the dispatcher
// needs (to tell whether a variant fits the device) are macros of the ABI
// header that the shader uses to size its arrays, so the two cannot differ.
// tests/core/test_abi.cpp reads every
// variant's SPIR-V and checks that its SpecIds and push block agree.
#ifndef TILEKERNELS_CORE_ABI_H
#define TILEKERNELS_CORE_ABI_H

// For sizes written once in an ABI header and evaluated by both languages
// (e.g. the shared memory of a variant, from its specialization constants).
#define TK_ABI_MAX(a, b) ((a) > (b) ? (a) : (b))

// The constants of a variant built on the device's cooperative-matrix
// tiles (shaders/common/mma.glsl): the tile's M, N, K and the subgroup
// size, at ids a .. d of the kernel's list; set by detail::set_matrix_spec.
#define TK_MMA_SPEC(F, a, b, c, d) \
  F(a, MMA_M, 16)                  \
  F(b, MMA_N, 16)                  \
  F(c, MMA_K, 16)                  \
  F(d, SUBGROUP, 32)

#ifdef __cplusplus

#include <cstddef>
#include <cstdint>

#define TK_ABI_TYPE_uint std::uint32_t
#define TK_ABI_TYPE_int std::int32_t
#define TK_ABI_TYPE_float float
#define TK_ABI_SPEC_FIELD(id, name, value) std::uint32_t name = value;
#define TK_ABI_SPEC_ORDER(id, name, value) \
  static_assert(offsetof(Spec, name) == 4 * (id), "spec constant " #name " is not declared in id order");
#define TK_ABI_PUSH_FIELD(type, name) TK_ABI_TYPE_##type name{};

// struct Spec { workgroup, the listed constants }; struct Push { ... }.
#define TK_DECLARE_SPEC(LIST)                    \
  struct Spec {                                  \
    std::uint32_t workgroup = 0;                 \
    LIST(TK_ABI_SPEC_FIELD)                      \
  };                                             \
  LIST(TK_ABI_SPEC_ORDER)
#define TK_DECLARE_PUSH(LIST) \
  struct Push {               \
    LIST(TK_ABI_PUSH_FIELD)   \
  };                          \
  static_assert(offsetof(Push, group_offset) == 0, "push constants must begin with group_offset");

#else  // GLSL

#define TK_ABI_SPEC_DECL(id, name, value) layout(constant_id = id) const uint name = value;
#define TK_ABI_PUSH_DECL(type, name) type name;
#define TK_DECLARE_SPEC(LIST)          \
  layout(local_size_x_id = 0) in;      \
  LIST(TK_ABI_SPEC_DECL)
#define TK_DECLARE_PUSH(LIST) \
  layout(push_constant) uniform Push { LIST(TK_ABI_PUSH_DECL) } pc;

#endif

#endif  // TILEKERNELS_CORE_ABI_H
