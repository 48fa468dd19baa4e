// SPDX-License-Identifier: MIT
// 16 x 16 x 16 products of 16-bit operands into f32 accumulators, built from
// the cooperative-matrix tiles the device lists (VK_KHR_cooperative_matrix,
// subgroup scope). The host picks one M x N x K tile, each of 8 or 16, when
// it builds the pipeline, and passes it with the subgroup size as the
// specialization constants MMA_M, MMA_N, MMA_K and SUBGROUP (declared by
// the kernel's ABI list). A 16 x 16 matrix is an array of TK_MMA_PARTS
// device tiles:
//   A operand: part i * TK_MMA_RK + k holds rows M i.., columns K k..
//   B operand: part k * TK_MMA_RN + j holds rows K k.., columns N j..
//   accumulator: part i * TK_MMA_RN + j holds rows M i.., columns N j..
// Declare them as TK_MMA_A x[TK_MMA_PARTS] (arrays of them as
// x[n][TK_MMA_PARTS]); parts past those the tile needs stay unused.
// Loads and stores name a uvec4 array (shared or buffer) and take the
// offset and row stride in uvec4 units: fp16 elements 8 to a uvec4, f32
// elements 4. Row-major: element (r, c) at off + r stride + c / 8 (or / 4);
// column-major (B only): element (r, c) at off + c stride + r / 8.
// The operands are fp16 (TK_MMA_T float16_t), or bf16 where the including
// shader defines TK_MMA_T as bfloat16_t (and enables GL_EXT_bfloat16). The
// including shader enables GL_KHR_cooperative_matrix,
// GL_KHR_memory_scope_semantics and
// GL_EXT_shader_explicit_arithmetic_types_float16.
#ifndef TK_MMA_GLSL
#define TK_MMA_GLSL

const uint TK_MMA_RM = 16u / MMA_M;  // device tiles along a 16 x 16 matrix's rows
const uint TK_MMA_RN = 16u / MMA_N;  // ... its columns (B, accumulator)
const uint TK_MMA_RK = 16u / MMA_K;  // ... the product's depth
const uint TK_MMA_PARTS = 4u;        // the most device tiles one matrix takes (two of M, N, K at 8)

const uint TK_MMA_CPARTS = TK_MMA_RM * TK_MMA_RN;  // device tiles of an accumulator

#ifndef TK_MMA_T
#define TK_MMA_T float16_t
#endif
#define TK_MMA_A coopmat<TK_MMA_T, gl_ScopeSubgroup, MMA_M, MMA_K, gl_MatrixUseA>
#define TK_MMA_B coopmat<TK_MMA_T, gl_ScopeSubgroup, MMA_K, MMA_N, gl_MatrixUseB>
#define TK_MMA_C coopmat<float, gl_ScopeSubgroup, MMA_M, MMA_N, gl_MatrixUseAccumulator>
// An accumulator part converted to the operand type, to be stored as an
// operand tile (exact where its values are already of that type).
#define TK_MMA_C16 coopmat<TK_MMA_T, gl_ScopeSubgroup, MMA_M, MMA_N, gl_MatrixUseAccumulator>

#define TK_MMA_FILL(c, v)                                                        \
  [[unroll]] for (uint tk_p = 0u; tk_p < TK_MMA_RM * TK_MMA_RN; ++tk_p) (c)[tk_p] = TK_MMA_C(v)

// c += a b
#define TK_MMA(c, a, b)                                                                                          \
  [[unroll]] for (uint tk_p = 0u; tk_p < TK_MMA_RM * TK_MMA_RN * TK_MMA_RK; ++tk_p) {                           \
    const uint tk_i = tk_p / (TK_MMA_RN * TK_MMA_RK), tk_j = (tk_p / TK_MMA_RK) % TK_MMA_RN, tk_k = tk_p % TK_MMA_RK; \
    (c)[tk_i * TK_MMA_RN + tk_j] =                                                                               \
        coopMatMulAdd((a)[tk_i * TK_MMA_RK + tk_k], (b)[tk_k * TK_MMA_RN + tk_j], (c)[tk_i * TK_MMA_RN + tk_j]); \
  }

// Every part of m (n parts) loaded or stored (op: coopMatLoad or
// coopMatStore) in `layout`, part p at AT(p, off, stride).
#define TK_MMA_PARTS_(n, op, m, buf, AT, off, stride, layout) \
  [[unroll]] for (uint tk_p = 0u; tk_p < (n); ++tk_p) op((m)[tk_p], buf, AT(tk_p, off, stride), stride, layout)
#define TK_MMA_ROW_ gl_CooperativeMatrixLayoutRowMajor
#define TK_MMA_COL_ gl_CooperativeMatrixLayoutColumnMajor
#define TK_MMA_NA_ (TK_MMA_RM * TK_MMA_RK)
#define TK_MMA_NB_ (TK_MMA_RK * TK_MMA_RN)
#define TK_MMA_NC_ (TK_MMA_RM * TK_MMA_RN)

// Operands (16-bit): A row-major or column-major (element (r, c) at
// off + c stride + r / 8), B likewise.
#define TK_MMA_A_AT(p, off, stride) ((off) + ((p) / TK_MMA_RK) * MMA_M * (stride) + ((p) % TK_MMA_RK) * (MMA_K / 8u))
#define TK_MMA_A_COL_AT(p, off, stride) ((off) + ((p) % TK_MMA_RK) * MMA_K * (stride) + ((p) / TK_MMA_RK) * (MMA_M / 8u))
#define TK_MMA_B_AT(p, off, stride) ((off) + ((p) / TK_MMA_RN) * MMA_K * (stride) + ((p) % TK_MMA_RN) * (MMA_N / 8u))
#define TK_MMA_B_COL_AT(p, off, stride) ((off) + ((p) % TK_MMA_RN) * MMA_N * (stride) + ((p) / TK_MMA_RN) * (MMA_K / 8u))
#define TK_MMA_LOAD_A_ROW(m, buf, off, stride) TK_MMA_PARTS_(TK_MMA_NA_, coopMatLoad, m, buf, TK_MMA_A_AT, off, stride, TK_MMA_ROW_)
#define TK_MMA_LOAD_A_COL(m, buf, off, stride) \
  TK_MMA_PARTS_(TK_MMA_NA_, coopMatLoad, m, buf, TK_MMA_A_COL_AT, off, stride, TK_MMA_COL_)
#define TK_MMA_LOAD_B_ROW(m, buf, off, stride) TK_MMA_PARTS_(TK_MMA_NB_, coopMatLoad, m, buf, TK_MMA_B_AT, off, stride, TK_MMA_ROW_)
#define TK_MMA_LOAD_B_COL(m, buf, off, stride) \
  TK_MMA_PARTS_(TK_MMA_NB_, coopMatLoad, m, buf, TK_MMA_B_COL_AT, off, stride, TK_MMA_COL_)

// Accumulators: f32 row-major (element (r, c) at off + r stride + c / 4)
// or column-major (at off + c stride + r / 4); 16-bit (TK_MMA_C16), 8 a
// uvec4, likewise.
#define TK_MMA_C_AT(p, off, stride) ((off) + ((p) / TK_MMA_RN) * MMA_M * (stride) + ((p) % TK_MMA_RN) * (MMA_N / 4u))
#define TK_MMA_C_COL_AT(p, off, stride) ((off) + ((p) % TK_MMA_RN) * MMA_N * (stride) + ((p) / TK_MMA_RN) * (MMA_M / 4u))
#define TK_MMA_C16_AT(p, off, stride) ((off) + ((p) / TK_MMA_RN) * MMA_M * (stride) + ((p) % TK_MMA_RN) * (MMA_N / 8u))
#define TK_MMA_C16_COL_AT(p, off, stride) ((off) + ((p) % TK_MMA_RN) * MMA_N * (stride) + ((p) / TK_MMA_RN) * (MMA_M / 8u))
#define TK_MMA_LOAD_C_ROW(m, buf, off, stride) TK_MMA_PARTS_(TK_MMA_NC_, coopMatLoad, m, buf, TK_MMA_C_AT, off, stride, TK_MMA_ROW_)
#define TK_MMA_STORE_C_ROW(m, buf, off, stride) \
  TK_MMA_PARTS_(TK_MMA_NC_, coopMatStore, m, buf, TK_MMA_C_AT, off, stride, TK_MMA_ROW_)
#define TK_MMA_LOAD_C_COL(m, buf, off, stride) \
  TK_MMA_PARTS_(TK_MMA_NC_, coopMatLoad, m, buf, TK_MMA_C_COL_AT, off, stride, TK_MMA_COL_)
#define TK_MMA_STORE_C_COL(m, buf, off, stride) \
  TK_MMA_PARTS_(TK_MMA_NC_, coopMatStore, m, buf, TK_MMA_C_COL_AT, off, stride, TK_MMA_COL_)
#define TK_MMA_LOAD_C16_ROW(m, buf, off, stride) \
  TK_MMA_PARTS_(TK_MMA_NC_, coopMatLoad, m, buf, TK_MMA_C16_AT, off, stride, TK_MMA_ROW_)
#define TK_MMA_STORE_C16_ROW(m, buf, off, stride) \
  TK_MMA_PARTS_(TK_MMA_NC_, coopMatStore, m, buf, TK_MMA_C16_AT, off, stride, TK_MMA_ROW_)
#define TK_MMA_STORE_C16_COL(m, buf, off, stride) \
  TK_MMA_PARTS_(TK_MMA_NC_, coopMatStore, m, buf, TK_MMA_C16_COL_AT, off, stride, TK_MMA_COL_)

// A 16 x 16 f32 tile stored to shared scratch is read back in 32 pieces of
// 8 columns, piece p being row p / 2, columns 8 (p % 2)..; lane l takes
// pieces l, l + SUBGROUP, ...: the x-th exists where tk_mma_piece(x, l).
// Loops run x to TK_MMA_MAX_PIECES (subgroups of 4 or more), a literal
// bound so that they unroll and arrays indexed by x stay in registers.
const uint TK_MMA_PIECES = (32u + SUBGROUP - 1u) / SUBGROUP;
#define TK_MMA_MAX_PIECES 8u
bool tk_mma_piece(uint x, uint lane) { return x < TK_MMA_PIECES && lane + x * SUBGROUP < 32u; }

// The shared-memory barrier among the invocations of one subgroup. Reach it
// in control flow uniform over the workgroup: on lavapipe (Mesa 26.2) a
// subgroup barrier that only some of the subgroups reach can end the
// invocations that wait at it before their later stores.
#define TK_MMA_SYNC()              \
  {                                \
    subgroupMemoryBarrierShared(); \
    subgroupBarrier();             \
  }

#endif
