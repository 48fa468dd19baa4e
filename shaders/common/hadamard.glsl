// SPDX-License-Identifier: MIT
// The unnormalised Walsh-Hadamard transform H (natural order) in its three
// placements: within one invocation's registers, across a subgroup's lanes
// through shuffles, and over shared memory with barriers. A transform split
// across them applies each to its own index bits; the stages commute.
#ifndef TK_HADAMARD_GLSL
#define TK_HADAMARD_GLSL

// H's butterflies over the index bits of the array A[0, n) (n a power of
// two), in one invocation's registers.
#define TK_FWHT_REGS(A, n)                                        \
  [[unroll]] for (uint tk_h_ = 1u; tk_h_ < (n); tk_h_ <<= 1)      \
    [[unroll]] for (uint tk_i_ = 0u; tk_i_ < (n); ++tk_i_)        \
      if ((tk_i_ & tk_h_) == 0u) {                                \
        const float tk_a_ = A[tk_i_], tk_b_ = A[tk_i_ + tk_h_];   \
        A[tk_i_] = tk_a_ + tk_b_;                                 \
        A[tk_i_ + tk_h_] = tk_a_ - tk_b_;                         \
      }

// H's butterflies over the lane bits m in [first, end) (powers of two) of
// the index `lane`, for each element of A[0, n) of type T: the partner is
// lane ^ m through a shuffle, and the upper one keeps partner - own. Every
// invocation of the subgroup must call it (GL_KHR_shader_subgroup_shuffle).
#define TK_FWHT_SHUFFLE(T, A, n, lane, first, end)                \
  [[unroll]] for (uint tk_m_ = (first); tk_m_ < (end); tk_m_ <<= 1) { \
    const bool tk_up_ = ((lane) & tk_m_) != 0u;                   \
    [[unroll]] for (uint tk_i_ = 0u; tk_i_ < (n); ++tk_i_) {      \
      const T tk_y_ = subgroupShuffleXor(A[tk_i_], tk_m_);        \
      A[tk_i_] = tk_up_ ? tk_y_ - A[tk_i_] : A[tk_i_] + tk_y_;    \
    }                                                             \
  }

// Unnormalised Walsh-Hadamard transform, in natural order, of `rows` rows of
// `dim` floats (dim a power of two) accessed through the macro ELEM(index):
// rounds of radix-4 butterflies (two index bits each; radix 2 for a last
// odd bit), each followed by a barrier, spread over `count` invocations
// (this one is `self`). Every invocation of the workgroup must call it.
#define TK_FWHT_SHARED(ELEM, rows, dim, self, count)                                          \
  {                                                                                           \
    for (uint tk_h_ = 1u; tk_h_ < (dim); tk_h_ <<= 2) {                                        \
      if (4u * tk_h_ <= (dim)) {                                                              \
        for (uint tk_p_ = (self); tk_p_ < (rows) * ((dim) / 4u); tk_p_ += (count)) {          \
          const uint tk_r_ = tk_p_ / ((dim) / 4u), tk_q_ = tk_p_ % ((dim) / 4u);              \
          const uint tk_i_ = tk_r_ * (dim) + (((tk_q_ & ~(tk_h_ - 1u)) << 2) | (tk_q_ & (tk_h_ - 1u))); \
          const float tk_a_ = ELEM(tk_i_), tk_b_ = ELEM(tk_i_ + tk_h_);                       \
          const float tk_c_ = ELEM(tk_i_ + 2u * tk_h_), tk_d_ = ELEM(tk_i_ + 3u * tk_h_);     \
          const float tk_s0_ = tk_a_ + tk_b_, tk_s1_ = tk_a_ - tk_b_;                         \
          const float tk_s2_ = tk_c_ + tk_d_, tk_s3_ = tk_c_ - tk_d_;                         \
          ELEM(tk_i_) = tk_s0_ + tk_s2_;                                                      \
          ELEM(tk_i_ + tk_h_) = tk_s1_ + tk_s3_;                                              \
          ELEM(tk_i_ + 2u * tk_h_) = tk_s0_ - tk_s2_;                                         \
          ELEM(tk_i_ + 3u * tk_h_) = tk_s1_ - tk_s3_;                                         \
        }                                                                                     \
      } else {                                                                                \
        for (uint tk_p_ = (self); tk_p_ < (rows) * ((dim) / 2u); tk_p_ += (count)) {          \
          const uint tk_r_ = tk_p_ / ((dim) / 2u), tk_q_ = tk_p_ % ((dim) / 2u);              \
          const uint tk_i_ = tk_r_ * (dim) + (((tk_q_ & ~(tk_h_ - 1u)) << 1) | (tk_q_ & (tk_h_ - 1u))); \
          const float tk_a_ = ELEM(tk_i_), tk_b_ = ELEM(tk_i_ + tk_h_);                       \
          ELEM(tk_i_) = tk_a_ + tk_b_;                                                        \
          ELEM(tk_i_ + tk_h_) = tk_a_ - tk_b_;                                                \
        }                                                                                     \
      }                                                                                       \
      barrier();                                                                              \
    }                                                                                         \
  }

#endif
