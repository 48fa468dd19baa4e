// SPDX-License-Identifier: MIT
// The interface of shaders/gdn/recurrent_step.comp (see core/abi.h).
#ifndef TILEKERNELS_GDN_RECURRENT_STEP_ABI_H
#define TILEKERNELS_GDN_RECURRENT_STEP_ABI_H
#include "tilekernels/core/abi.h"
#include "tilekernels/gdn/options_abi.h"

// KDIM, VDIM: head sizes; BV: state columns per workgroup; KPI: state rows
// per invocation; QL: column quads on adjacent lanes; QK_DTYPE, V_DTYPE:
// storage dtypes of q/k and of v/o (tilekernels::DType codes); VIEWS: what
// the host knows of the views q, k, v, g, beta and o (TK_STEP_VIEWS_*):
// DENSE, each the dense [tokens, heads, row] at the start of its binding
// (the addresses then come from the head sizes, known when compiling, and
// the heads in the push constants); ALIGNED, any views whose offsets and
// strides are multiples of 16 elements (q, k) and of 4 (v, o), loaded and
// stored as whole vectors; ANY, any views.
#define TK_STEP_VIEWS_ANY 0u
#define TK_STEP_VIEWS_ALIGNED 1u
#define TK_STEP_VIEWS_DENSE 2u

#define TK_RECURRENT_STEP_SPEC(F) \
  F(1, KDIM, 128)                 \
  F(2, VDIM, 128)                 \
  F(3, BV, 32)                    \
  F(4, KPI, 8)                    \
  F(5, QL, 1)                     \
  F(6, QK_DTYPE, 2)               \
  F(7, V_DTYPE, 2)                \
  F(8, VIEWS, 2)

// T: tokens per batch row (all tokens with cu_seqlens); H, Hg: value and
// key heads, ratio = H / Hg; varlen: 1 to read cu_seqlens; scale: the
// factor on q; options: TK_GDN_OPT_* bits (gate, beta, L2NORM, STATE_VK,
// TOKEN_STATES); for each of the views q, k, v, g, beta and o where it is
// in its binding (core/dispatch.hpp ViewLayout): element offset, elements
// per token, elements per head (unread with VIEWS = DENSE).
#define TK_RECURRENT_STEP_PUSH(F) \
  F(uint, group_offset)           \
  F(uint, T)                      \
  F(uint, H)                      \
  F(uint, Hg)                     \
  F(uint, ratio)                  \
  F(uint, varlen)                 \
  F(float, scale)                 \
  F(uint, options)                \
  F(uint, q_at)                   \
  F(uint, q_token)                \
  F(uint, q_head)                 \
  F(uint, k_at)                   \
  F(uint, k_token)                \
  F(uint, k_head)                 \
  F(uint, v_at)                   \
  F(uint, v_token)                \
  F(uint, v_head)                 \
  F(uint, g_at)                   \
  F(uint, g_token)                \
  F(uint, g_head)                 \
  F(uint, beta_at)                \
  F(uint, beta_token)             \
  F(uint, beta_head)              \
  F(uint, o_at)                   \
  F(uint, o_token)                \
  F(uint, o_head)

#endif
