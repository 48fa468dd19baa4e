// SPDX-License-Identifier: MIT
// The loads of one chunk that both tensor-core state recurrence kernels
// issue ahead: chunk c's rows of w and k (k rows past the sequence's end
// read its last row), PW 16-byte pieces of each per invocation, and g of
// row tid % BT and of the chunk's last row; and their staging. Included
// after the kernel declares PW, MAX_PW, WG, SW, W_OFF, K_OFF, smem, pre_w,
// pre_k, pre_g and pre_glast.
void load_wkg(TkSeq seq, uint c, uint h, uint kh) {
  const uint tid = gl_LocalInvocationID.x;
  const uint slot0 = (seq.first_chunk + c) * BT, tok0 = seq.bos + c * BT;
  const uint last = min(BT, seq.len - c * BT) - 1u;
  [[unroll]] for (uint n = 0; n < MAX_PW; ++n) {
    if (n < PW) {
      const uint p = tid + n * WG, i = p / (KDIM / 8), c8 = p % (KDIM / 8);
      pre_w[n] = w_4[((slot0 + i) * pc.H + h) * (KDIM / 8) + c8];
      pre_k[n] = k_4[((tok0 + min(i, last)) * pc.Hg + kh) * (KDIM / 8) + c8];
    }
  }
  pre_g = g_f[(slot0 + tid % BT) * pc.H + h];
  pre_glast = g_f[(slot0 + last) * pc.H + h];
}

// The loaded w and k rows into shared memory at W_OFF and K_OFF (row stride
// SW uvec4), k rows from `rows` (the sequence's end) on zeroed.
void stage_wk(uint rows) {
  const uint tid = gl_LocalInvocationID.x;
  [[unroll]] for (uint m = 0; m < MAX_PW; ++m) {
    if (m < PW) {
      const uint p = tid + m * WG, i = p / (KDIM / 8), c8 = p % (KDIM / 8);
      smem[W_OFF + i * SW + c8] = pre_w[m];
      smem[K_OFF + i * SW + c8] = i < rows ? pre_k[m] : uvec4(0u);
    }
  }
}
