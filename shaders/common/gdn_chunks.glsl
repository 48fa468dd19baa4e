// SPDX-License-Identifier: MIT
// Sequences and chunks of the Gated DeltaNet forward, as
// include/tilekernels/gdn/chunking.hpp lays them out: without cu_seqlens
// they follow from T and the chunks per row; with it, from the index
// table, which the including shader reads through TK_GDN_INDEX(i) (its
// uvec4 entry i), defined before this file is included.
#ifndef TK_GDN_CHUNKS_GLSL
#define TK_GDN_CHUNKS_GLSL

struct TkSeq {
  uint bos;          // first token
  uint len;          // tokens (may be 0)
  uint first_chunk;  // global index of its first chunk
};

struct TkChunk {
  uint seq;    // sequence
  uint first;  // token of row 0
  uint rows;   // 1..BT; 0 for the padding chunks past a variable-length call's last
  uint local;  // chunk within its sequence
};

// The last row a chunk's loads may read: rows - 1, or row 0 of token 0 for
// a padding chunk (its loads are in bounds and unused; nothing of it is
// stored but its slots, which the later stages never read as data).
uint tk_last_row(uint rows) { return max(rows, 1u) - 1u; }

TkSeq tk_gdn_seq(uint n, uint T, uint row_chunks, bool varlen) {
  TkSeq s;
  if (varlen) {
    const uvec4 e = TK_GDN_INDEX(n);
    s.bos = e.x;
    s.len = e.y;
    s.first_chunk = e.z;
  } else {
    s.bos = n * T;
    s.len = T;
    s.first_chunk = n * row_chunks;
  }
  return s;
}

TkChunk tk_gdn_chunk(uint c, uint N, uint T, uint row_chunks, uint bt, bool varlen) {
  TkChunk k;
  if (varlen) {
    const uvec4 e = TK_GDN_INDEX(N + c);
    k.seq = e.x;
    k.first = e.y;
    k.rows = e.z;
    k.local = e.w;
  } else {
    k.seq = c / row_chunks;
    k.local = c - k.seq * row_chunks;
    k.first = k.seq * T + k.local * bt;
    k.rows = min(bt, T - k.local * bt);
  }
  return k;
}

// One chunk as recompute_wu and chunk_o read it: q, k, v and o rows are
// tokens `token + r`; the intermediates' rows (g, beta, A, w, u, v_new) are
// `slot + r`, where slot is chunk * BT for slot-major intermediates and the
// token for token-major ones; h is row `chunk`.
struct TkTileRows {
  uint token;
  uint slot;
  uint rows;   // 1..BT, 0 for padding (TkChunk)
  uint chunk;  // global chunk
};

// The index entry of global chunk c (unused without the table).
uvec4 tk_gdn_entry(uint N, uint c, bool varlen) { return varlen ? TK_GDN_INDEX(N + c) : uvec4(0u); }

// Chunk c of batch row b (fixed length, c < row_chunks), or global chunk c
// with its entry e (varlen; b is 0).
TkTileRows tk_gdn_rows(uint b, uint c, uvec4 e, uint T, uint row_chunks, uint bt, bool varlen, bool slots) {
  TkTileRows t;
  if (varlen) {
    t.chunk = c;
    t.token = e.y;
    t.rows = e.z;
  } else {
    t.chunk = b * row_chunks + c;
    t.token = b * T + c * bt;
    t.rows = min(bt, T - c * bt);
  }
  t.slot = slots ? t.chunk * bt : t.token;
  return t;
}

// softplus as FLA computes it: x itself above 20, else log(1 + e^x).
float tk_softplus(float x) { return x > 20.0 ? x : log(1.0 + exp(x)); }

#endif
