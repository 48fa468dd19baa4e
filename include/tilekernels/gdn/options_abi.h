// SPDX-License-Identifier: MIT
// Option bits of the Gated DeltaNet stage shaders (specialization constant
// OPTIONS), shared by C++ (gdn::detail::option_bits) and GLSL.
#ifndef TILEKERNELS_GDN_OPTIONS_ABI_H
#define TILEKERNELS_GDN_OPTIONS_ABI_H

#define TK_GDN_OPT_GATE_IN_KERNEL 1u  // g is raw: -exp(A_log) softplus(g + dt_bias)
#define TK_GDN_OPT_DT_BIAS 2u         // dt_bias is given (with the in-kernel gate)
#define TK_GDN_OPT_BETA_SIGMOID 4u    // beta holds logits
#define TK_GDN_OPT_NEG_EIGVAL 8u      // the sigmoid is doubled
#define TK_GDN_OPT_STATE_VK 16u       // caller states are [V, K]
#define TK_GDN_OPT_L2NORM 32u         // q, k are L2-normalised in the kernel (decode step)
#define TK_GDN_OPT_H0 64u             // an initial state is given
#define TK_GDN_OPT_HT 128u            // the final state is written
#define TK_GDN_OPT_TOKEN_STATES 256u  // the state after every token is written (decode step)

#endif
