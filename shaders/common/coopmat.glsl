// SPDX-License-Identifier: MIT
// 16 x 16 subgroup matrices for the Gated DeltaNet tensor-core stages,
// spelled once for two back ends:
// - VK_KHR_cooperative_matrix with bf16 operands and f32 accumulators (the
//   including shader enables GL_KHR_cooperative_matrix, GL_EXT_bfloat16 and
//   GL_KHR_memory_scope_semantics);
// - TK_COOPMAT_EMULATE: the same operations in plain GLSL (below), so
//   that a device without tensor cores (lavapipe) runs the tensor-core
//   kernels' own code in the tests. Shaders must not depend on where an
//   element sits in a fragment: they learn its position from index tiles
//   loaded as accumulators, as on real hardware, and name their subgroup
//   TK_CM_SUBGROUP_ID (in the emulation, a virtual subgroup of 32).
//
// Types: TK_CM_ACC (f32 accumulator), TK_CM_ACC16 (bf16 accumulator, for
// stores and for bf16 data that enters an accumulator), TK_CM_A, TK_CM_B
// (bf16 operands). Elements of accumulators: TK_CM_LEN(m), TK_CM_EL(m, i); of
// bf16 operands: TK_CM_SET16(m, i, x), where the host allows it.
// Loads and stores name the array (a shared or buffer array) and take the
// offset and row stride in units of its element type:
//   *16_*: bf16 elements in a uvec4 array (8 per uvec4),
//   *32_*: f32 elements in a uvec4 array (4 per uvec4),
//   *F_*:  f32 elements in a float array;
// _ROW / _COL: row-major, or column-major (element (r, c) at c stride + r).
//
// fp16 operands (fp16 x fp16 -> f32, 16x16x16; the including shader
// enables GL_KHR_cooperative_matrix when TK_COOPMAT_EMULATE is 0):
// TK_CMH_ACC (f32 accumulator), TK_CMH_A, TK_CMH_B (fp16 operands),
// TK_CMH_MMA, TK_CMH_LOADH_ROW / _COL (fp16 elements in a uvec4 array),
// TK_CMH_LOAD32_ROW, TK_CMH_STORE32_ROW (f32 elements in a uvec4 array).
// TK_CM_SYNC(): the shared-memory barrier among the invocations of one
// (virtual) subgroup; in the emulation a workgroup barrier, so it must be
// reached in uniform control flow.
#ifndef TK_COOPMAT_GLSL
#define TK_COOPMAT_GLSL

#ifndef TK_COOPMAT_EMULATE
#define TK_COOPMAT_EMULATE 0
#endif

// For loops whose bodies hold matrix operations: unrolled on hardware (so
// that fragment arrays stay in registers), kept as loops in the emulation
// (whose every operation is a loop: unrolling multiplies lavapipe's
// compile time).
#if TK_COOPMAT_EMULATE
#define TK_CM_UNROLL [[dont_unroll]]
#else
#define TK_CM_UNROLL [[unroll]]
#endif

#if !TK_COOPMAT_EMULATE

#define TK_CM_ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define TK_CM_ACC16 coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define TK_CM_A coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define TK_CM_B coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define TK_CM_SUBGROUP_ID gl_SubgroupID
#define TK_CM_LEN(m) (m).length()
#define TK_CM_EL(m, i) (m)[i]
#define TK_CM_FILL(T, v) T(v)
#define TK_CM_MMA(a, b, c) coopMatMulAdd(a, b, c)
// Exact when the f32 values are already bf16 (the callers round them with
// tk_round_bf16_split: the device's own conversion need not round to nearest even).
#define TK_CM_TO_ACC16(x) TK_CM_ACC16(x)
#define TK_CM_TO_ACC(x) TK_CM_ACC(x)
// Element i of a bf16 operand set to x (a bf16 value held in f32: the
// device's conversion need not round to nearest even). Only for kernels
// whose host checked that operand and accumulator elements of the same
// index sit at the same position (the emulation's do).
#define TK_CM_SET16(m, i, x) (m)[i] = bfloat16_t(x)
#define TK_CM_LOAD16_ROW(m, buf, off, stride) coopMatLoad(m, buf, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define TK_CM_LOAD16_COL(m, buf, off, stride) coopMatLoad(m, buf, off, stride, gl_CooperativeMatrixLayoutColumnMajor)
#define TK_CM_LOAD32_ROW TK_CM_LOAD16_ROW
#define TK_CM_LOAD32_COL TK_CM_LOAD16_COL
#define TK_CM_LOADF_ROW TK_CM_LOAD16_ROW
#define TK_CM_LOADF_COL TK_CM_LOAD16_COL
#define TK_CM_STORE16_ROW(m, buf, off, stride) coopMatStore(m, buf, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define TK_CM_STORE16_COL(m, buf, off, stride) coopMatStore(m, buf, off, stride, gl_CooperativeMatrixLayoutColumnMajor)
#define TK_CM_STORE32_ROW TK_CM_STORE16_ROW
#define TK_CM_STORE32_COL TK_CM_STORE16_COL
#define TK_CM_STOREF_ROW TK_CM_STORE16_ROW
#define TK_CM_STOREF_COL TK_CM_STORE16_COL

#define TK_CMH_ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define TK_CMH_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define TK_CMH_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define TK_CMH_MMA(a, b, c) coopMatMulAdd(a, b, c)
#define TK_CMH_LOADH_ROW(m, buf, off, stride) coopMatLoad(m, buf, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define TK_CMH_LOADH_COL(m, buf, off, stride) coopMatLoad(m, buf, off, stride, gl_CooperativeMatrixLayoutColumnMajor)
#define TK_CMH_LOAD32_ROW TK_CMH_LOADH_ROW
#define TK_CMH_STORE32_ROW(m, buf, off, stride) coopMatStore(m, buf, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define TK_CM_SYNC()              \
  {                               \
    subgroupMemoryBarrierShared(); \
    subgroupBarrier();            \
  }

#else  // TK_COOPMAT_EMULATE

// Every invocation holds the whole 16 x 16 matrix (element i at row i / 16,
// column i % 16), and the 32 invocations of a virtual subgroup
// (gl_LocalInvocationID.x / 32) hold equal copies: they only split the
// stores (invocation l of 32: row (or, column-major, column) l / 2, the 8
// elements from 8 (l % 2)). No invocation reads another's registers, so it
// is correct for any hardware subgroup size, with no subgroup operation;
// slow, for tests.
struct TkFrag {
  float e[256];
};
#define TK_CM_ACC TkFrag
#define TK_CM_ACC16 TkFrag
#define TK_CM_A TkFrag
#define TK_CM_B TkFrag
#define TK_CM_SUBGROUP_ID (gl_LocalInvocationID.x / 32u)
#define TK_CM_LEN(m) 256
#define TK_CM_EL(m, i) (m).e[i]
uint tk_cm_lane() { return gl_LocalInvocationID.x % 32u; }

TkFrag tk_cm_fill(float v) {
  TkFrag f;
  [[dont_unroll]] for (uint i = 0u; i < 256u; ++i) f.e[i] = v;
  return f;
}
#define TK_CM_FILL(T, v) tk_cm_fill(v)

// bf16 fragments hold bf16 values (rounded to nearest even, as the real
// kernels round before converting).
TkFrag tk_cm_round16(TkFrag x) {
  [[dont_unroll]] for (uint i = 0u; i < 256u; ++i) x.e[i] = uintBitsToFloat(tk_bf16_high(x.e[i]) & 0xffff0000u);
  return x;
}
#define TK_CM_TO_ACC16(x) tk_cm_round16(x)
#define TK_CM_TO_ACC(x) (x)
#define TK_CM_SET16(m, i, x) (m).e[i] = (x)

TkFrag tk_cm_mma(TkFrag a, TkFrag b, TkFrag c) {
  [[dont_unroll]] for (uint r = 0u; r < 16u; ++r)
    [[dont_unroll]] for (uint col = 0u; col < 16u; ++col) {
      float s = c.e[r * 16u + col];
      [[dont_unroll]] for (uint k = 0u; k < 16u; ++k) s = fma(a.e[r * 16u + k], b.e[k * 16u + col], s);
      c.e[r * 16u + col] = s;
    }
  return c;
}
#define TK_CM_MMA(a, b, c) tk_cm_mma(a, b, c)

float tk_cm_half(uvec4 q, uint h) {
  const uint w = q[h >> 1];
  return uintBitsToFloat((h & 1u) != 0u ? (w & 0xffff0000u) : (w << 16));
}

// Element (r, c) at word/half index ((off) + r stride) * per + c, or
// ((off) + c stride) * per + r column-major.
#define TK_CM_INDEX_(off, stride, per, r, c, COLMAJOR) \
  ((COLMAJOR) ? ((off) + (c) * (stride)) * (per) + (r) : ((off) + (r) * (stride)) * (per) + (c))

#define TK_CM_LOAD16_(m, buf, off, stride, COLMAJOR)                             \
  {                                                                              \
    [[dont_unroll]] for (uint tk_e_ = 0u; tk_e_ < 256u; ++tk_e_) {                               \
      const uint tk_h_ = TK_CM_INDEX_(off, stride, 8u, tk_e_ / 16u, tk_e_ % 16u, COLMAJOR); \
      (m).e[tk_e_] = tk_cm_half(buf[tk_h_ >> 3], tk_h_ & 7u);                    \
    }                                                                            \
  }
#define TK_CM_LOAD16_ROW(m, buf, off, stride) TK_CM_LOAD16_(m, buf, off, stride, false)
#define TK_CM_LOAD16_COL(m, buf, off, stride) TK_CM_LOAD16_(m, buf, off, stride, true)

#define TK_CM_LOAD32_(m, buf, off, stride, COLMAJOR)                             \
  {                                                                              \
    [[dont_unroll]] for (uint tk_e_ = 0u; tk_e_ < 256u; ++tk_e_) {                               \
      const uint tk_w_ = TK_CM_INDEX_(off, stride, 4u, tk_e_ / 16u, tk_e_ % 16u, COLMAJOR); \
      (m).e[tk_e_] = uintBitsToFloat(buf[tk_w_ >> 2][tk_w_ & 3u]);               \
    }                                                                            \
  }
#define TK_CM_LOAD32_ROW(m, buf, off, stride) TK_CM_LOAD32_(m, buf, off, stride, false)
#define TK_CM_LOAD32_COL(m, buf, off, stride) TK_CM_LOAD32_(m, buf, off, stride, true)

#define TK_CM_LOADF_(m, buf, off, stride, COLMAJOR)                              \
  {                                                                              \
    [[dont_unroll]] for (uint tk_e_ = 0u; tk_e_ < 256u; ++tk_e_)                                 \
      (m).e[tk_e_] = buf[TK_CM_INDEX_(off, stride, 1u, tk_e_ / 16u, tk_e_ % 16u, COLMAJOR)]; \
  }
#define TK_CM_LOADF_ROW(m, buf, off, stride) TK_CM_LOADF_(m, buf, off, stride, false)
#define TK_CM_LOADF_COL(m, buf, off, stride) TK_CM_LOADF_(m, buf, off, stride, true)

// The 8 bf16 (already bf16 values) of this invocation's share, packed.
uvec4 tk_cm_share16(TkFrag m, bool colmajor) {
  const uint line = tk_cm_lane() >> 1, first = (tk_cm_lane() & 1u) * 8u;
  uvec4 q;
  [[dont_unroll]] for (uint j = 0u; j < 4u; ++j) {
    const uint e0 = colmajor ? (first + 2u * j) * 16u + line : line * 16u + first + 2u * j;
    const uint e1 = colmajor ? e0 + 16u : e0 + 1u;
    q[j] = (floatBitsToUint(m.e[e0]) >> 16) | (floatBitsToUint(m.e[e1]) & 0xffff0000u);
  }
  return q;
}
#define TK_CM_STORE16_ROW(m, buf, off, stride) \
  { buf[(off) + (tk_cm_lane() >> 1) * (stride) + (tk_cm_lane() & 1u)] = tk_cm_share16(m, false); }
#define TK_CM_STORE16_COL(m, buf, off, stride) \
  { buf[(off) + (tk_cm_lane() >> 1) * (stride) + (tk_cm_lane() & 1u)] = tk_cm_share16(m, true); }

#define TK_CM_STORE32_(m, buf, off, stride, COLMAJOR)                            \
  {                                                                              \
    [[dont_unroll]] for (uint tk_i_ = 0u; tk_i_ < 8u; ++tk_i_) {                                 \
      const uint tk_r_ = tk_cm_lane() >> 1, tk_c_ = (tk_cm_lane() & 1u) * 8u + tk_i_; \
      const uint tk_w_ = TK_CM_INDEX_(off, stride, 4u, tk_r_, tk_c_, COLMAJOR);  \
      buf[tk_w_ >> 2][tk_w_ & 3u] = floatBitsToUint((m).e[tk_r_ * 16u + tk_c_]); \
    }                                                                            \
  }
#define TK_CM_STORE32_ROW(m, buf, off, stride) TK_CM_STORE32_(m, buf, off, stride, false)
#define TK_CM_STORE32_COL(m, buf, off, stride) TK_CM_STORE32_(m, buf, off, stride, true)

#define TK_CM_STOREF_(m, buf, off, stride, COLMAJOR)                             \
  {                                                                              \
    [[dont_unroll]] for (uint tk_i_ = 0u; tk_i_ < 8u; ++tk_i_) {                                 \
      const uint tk_r_ = tk_cm_lane() >> 1, tk_c_ = (tk_cm_lane() & 1u) * 8u + tk_i_; \
      buf[TK_CM_INDEX_(off, stride, 1u, tk_r_, tk_c_, COLMAJOR)] = (m).e[tk_r_ * 16u + tk_c_]; \
    }                                                                            \
  }
#define TK_CM_STOREF_ROW(m, buf, off, stride) TK_CM_STOREF_(m, buf, off, stride, false)
#define TK_CM_STOREF_COL(m, buf, off, stride) TK_CM_STOREF_(m, buf, off, stride, true)

// fp16 operands: the same fragments holding fp16 values.
#define TK_CMH_ACC TkFrag
#define TK_CMH_A TkFrag
#define TK_CMH_B TkFrag
#define TK_CMH_MMA(a, b, c) tk_cm_mma(a, b, c)
#define TK_CMH_LOADH_(m, buf, off, stride, COLMAJOR)                                        \
  {                                                                                          \
    [[dont_unroll]] for (uint tk_e_ = 0u; tk_e_ < 256u; ++tk_e_) {                           \
      const uint tk_h_ = TK_CM_INDEX_(off, stride, 8u, tk_e_ / 16u, tk_e_ % 16u, COLMAJOR); \
      (m).e[tk_e_] = unpackHalf2x16(buf[tk_h_ >> 3][(tk_h_ >> 1) & 3u])[tk_h_ & 1u];       \
    }                                                                                        \
  }
#define TK_CMH_LOADH_ROW(m, buf, off, stride) TK_CMH_LOADH_(m, buf, off, stride, false)
#define TK_CMH_LOADH_COL(m, buf, off, stride) TK_CMH_LOADH_(m, buf, off, stride, true)
#define TK_CMH_LOAD32_ROW(m, buf, off, stride) TK_CM_LOAD32_(m, buf, off, stride, false)
#define TK_CMH_STORE32_ROW(m, buf, off, stride) TK_CM_STORE32_(m, buf, off, stride, false)
#define TK_CM_SYNC() barrier()

#endif  // TK_COOPMAT_EMULATE

#include "index_tile.glsl"

#endif
