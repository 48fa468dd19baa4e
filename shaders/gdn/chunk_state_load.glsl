// SPDX-License-Identifier: MIT
// The loads of one chunk that both matrix state recurrence kernels issue
// ahead: chunk c's rows of w and k (k rows past the sequence's end read
// its last row), PW 16-byte pieces of each per invocation, g of rows tid,
// tid + WG, ... (GPI of them, clamped to the chunk) and of the chunk's last
// row; and their staging. Included after the kernel declares PW, MAX_PW,
// GPI, MAX_GPI, WG, SW, W_OFF, K_OFF, smem, s_f, pre_w, pre_k, pre_g and
// pre_glast.
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
  [[unroll]] for (uint n = 0; n < MAX_GPI; ++n)
    if (n < GPI) pre_g[n] = g_f[(slot0 + min(tid + n * WG, BT - 1u)) * pc.H + h];
  pre_glast = g_f[(slot0 + last) * pc.H + h];
}

// The rows' factors exp(g_last - g_i) of the update's operand into s_f.
void stage_factors(float g_last) {
  [[unroll]] for (uint n = 0; n < MAX_GPI; ++n) {
    const uint i = gl_LocalInvocationID.x + n * WG;
    if (n < GPI && i < BT) s_f[i] = exp(g_last - pre_g[n]);
  }
}

// The loaded w and k rows into shared memory at W_OFF and K_OFF (row stride
// SW uvec4), k rows from `rows` (the sequence's end) on zeroed, as operands
// (TK_TO_OPERAND, defined by the kernel: w and k times 2^shift_w and
// 2^shift_k where its operands are fp16).
void stage_wk(uint rows, int shift_w, int shift_k) {
  const uint tid = gl_LocalInvocationID.x;
  [[unroll]] for (uint m = 0; m < MAX_PW; ++m) {
    if (m < PW) {
      const uint p = tid + m * WG, i = p / (KDIM / 8), c8 = p % (KDIM / 8);
      smem[W_OFF + i * SW + c8] = TK_TO_OPERAND(pre_w[m], shift_w);
      smem[K_OFF + i * SW + c8] = i < rows ? TK_TO_OPERAND(pre_k[m], shift_k) : uvec4(0u);
    }
  }
}
