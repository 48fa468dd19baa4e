// SPDX-License-Identifier: MIT
// Device-side indices cannot escape (docs/DESIGN.md, "Indices on the
// device"): block_table, seq_lens, slot_mapping and cu_seqlens hold garbage
// in device memory (negative, past the end, INT_MIN, INT_MAX) and no host
// copy is given. Every output and the cache sit between guard regions of
// sentinels that must come back unchanged, the device must survive, and
// the garbage must act as the documented sanitised values:
//   block_table entries   clamped into [0, num_pages)
//   seq_lens              clamped into [0, max_pages * page_tokens]; a row
//                         with no key gets output 0 and lse -inf
//   slot_mapping          negative or >= the cache's slots: the row is skipped
//   cu_seqlens (forward)  clamped into [0, T], then each the largest of it
//                         and those before it; tokens outside every
//                         sequence are not written
//   cu_seqlens (step)     sequence n: [clamp(cu[n], 0, T), clamp(cu[n+1], that, T))
//   token_centres, seq_centres   clamped into [0, centres)
//   key centre starts     entry i: [clamp(s[i], 0, T), clamp(s[i+1], that, T)),
//                         rows outside [0, centres) write nothing
// Each case runs the kernel on the garbage and on the sanitised values
// (separately poisoned outputs) and compares the results bit for bit.
#include <tilekernels/aura.hpp>
#include <tilekernels/gdn.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "../support.hpp"

namespace {

using namespace tktest;
namespace aura = tilekernels::aura;
namespace gdn = tilekernels::gdn;

constexpr std::int32_t kMin = INT_MIN, kMax = INT_MAX;

Tensor ints(Context& ctx, const std::vector<std::int32_t>& v) {
  Tensor t(ctx, DType::i32, {static_cast<std::int64_t>(v.size())});
  t.upload(std::span<const std::int32_t>(v));
  return t;
}

std::int32_t clamp32(std::int64_t x, std::int64_t lo, std::int64_t hi) {
  return static_cast<std::int32_t>(std::clamp(x, lo, hi));
}

void expect_same_words(const std::vector<std::uint32_t>& a, const std::vector<std::uint32_t>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << what << ": garbage and sanitised indices differ";
}

using PC = aura::PagedCacheConfig<64, 16, 4, 4>;
constexpr std::int64_t kPages = 6, kKvHeads = 2, kDim = 64, kSlots = kPages * PC::page_tokens;

// A cache of kPages pages (codes and norms between guards, poisoned).
struct GuardedCache {
  GuardedTensor k_codes, k_norms, v_codes, v_norms;
  explicit GuardedCache(Context& ctx)
      : k_codes(ctx, PC::store_dtype(4), PC::store_shape(4, kPages, kKvHeads)),
        k_norms(ctx, PC::norm_dtype, PC::norm_shape(kPages, kKvHeads)),
        v_codes(ctx, PC::store_dtype(4), PC::store_shape(4, kPages, kKvHeads)),
        v_norms(ctx, PC::norm_dtype, PC::norm_shape(kPages, kKvHeads)) {
    for (auto* t : {&k_codes, &k_norms, &v_codes, &v_norms}) t->poison();
  }
  aura::CacheWriteArgs append(const TensorRef& k, const TensorRef& v, const TensorRef& slots, const TensorRef& tables) const {
    return {k, v, slots, tables, k_codes, k_norms.ref(), v_codes, v_norms.ref(), {}};
  }
  std::vector<std::uint32_t> words() const {
    std::vector<std::uint32_t> all;
    for (const auto* t : {&k_codes, &k_norms, &v_codes, &v_norms}) {
      const auto w = t->read_words();
      all.insert(all.end(), w.begin(), w.end());
    }
    return all;
  }
};

class DeviceIndexGuards : public DeviceTest {};

TEST_F(DeviceIndexGuards, CacheWriteSkipsSlotsOutsideTheCache) {
  Context& ctx = context();
  Rng rng(91);
  const std::vector<std::int32_t> garbage{-1, kSlots, kSlots + 1, kMax, kMin, 5, 40, -40, 1 << 30, kSlots - 1};
  std::vector<std::int32_t> sane;
  for (auto s : garbage) sane.push_back(s >= 0 && s < kSlots ? s : -1);
  const auto n = static_cast<std::int64_t>(garbage.size());
  auto k = Tensor::from_floats(ctx, DType::bf16, {n, kKvHeads, kDim}, rng.normals(std::size_t(n * kKvHeads * kDim)));
  auto v = Tensor::from_floats(ctx, DType::bf16, {n, kKvHeads, kDim}, rng.normals(std::size_t(n * kKvHeads * kDim)));
  const Tensor tables = aura::CacheTables::make(ctx, PC::format, 3, 4);
  const aura::CacheWrite<aura::CacheWriteConfig<PC>> writer(ctx);
  const Tensor bad = ints(ctx, garbage), good = ints(ctx, sane);
  GuardedCache a(ctx), b(ctx);
  writer.run(a.append(k, v, bad, tables));
  writer.run(b.append(k, v, good, tables));
  const auto wa = a.words(), wb = b.words();
  expect_same_words(wa, wb, "cache");
  // The skipped rows left the cache as it was: only the three valid slots'
  // words changed.
  std::size_t changed = 0;
  for (auto w : wa) changed += w != 0xffffffffu;
  const std::size_t per_slot = std::size_t(kKvHeads) * (PC::k_words + 1 + PC::v_words + 1);
  EXPECT_LE(changed, 3 * per_slot);
  EXPECT_GT(changed, 0u);
}

TEST_F(DeviceIndexGuards, DecodeAttentionClampsPagesAndLengths) {
  Context& ctx = context();
  Rng rng(92);
  constexpr std::int64_t seqs = 4, q_len = 2, q_heads = 4, max_pages = 3;
  // A cache filled with every slot.
  const Tensor tables = aura::CacheTables::make(ctx, PC::format, 5, 6);
  GuardedCache cache(ctx);
  {
    std::vector<std::int32_t> all(kSlots);
    for (std::int32_t i = 0; i < kSlots; ++i) all[std::size_t(i)] = i;
    auto k = Tensor::from_floats(ctx, DType::bf16, {kSlots, kKvHeads, kDim}, rng.normals(std::size_t(kSlots * kKvHeads * kDim)));
    auto v = Tensor::from_floats(ctx, DType::bf16, {kSlots, kKvHeads, kDim}, rng.normals(std::size_t(kSlots * kKvHeads * kDim)));
    const Tensor slots = ints(ctx, all);
    aura::CacheWrite<aura::CacheWriteConfig<PC>>(ctx).run(cache.append(k, v, slots, tables));
  }
  const std::vector<std::int32_t> table{-1, 7, kMax, 2, kMin, 5, 0, 1, 100, 3, -100, 4};
  const std::vector<std::int32_t> lens{-7, kMax, 0, 30};
  std::vector<std::int32_t> table_sane, lens_sane;
  for (auto p : table) table_sane.push_back(clamp32(p, 0, kPages - 1));
  for (auto l : lens) lens_sane.push_back(clamp32(l, 0, max_pages * PC::page_tokens));

  using Kernel = aura::DecodeAttention<aura::DecodeAttentionConfig<PC, DType::bf16, DType::f32>>;
  const Kernel kernel(ctx, {.max_num_seqs = seqs, .max_q_len = q_len, .q_heads = q_heads, .kv_heads = kKvHeads});
  auto q = Tensor::from_floats(ctx, DType::bf16, {seqs, q_len, q_heads, kDim}, rng.normals(std::size_t(seqs * q_len * q_heads * kDim)));
  const auto run = [&](const std::vector<std::int32_t>& t, const std::vector<std::int32_t>& l) {
    Tensor table_t(ctx, DType::i32, {seqs, max_pages});
    table_t.upload(std::span<const std::int32_t>(t));
    const Tensor lens_t = ints(ctx, l);
    GuardedTensor out(ctx, DType::f32, {seqs, q_len, q_heads, kDim}), lse(ctx, DType::f32, {seqs, q_len, q_heads});
    out.poison(), lse.poison();
    aura::DecodeAttentionArgs a;
    a.q = q, a.k_codes = cache.k_codes, a.k_norms = cache.k_norms.ref(), a.v_codes = cache.v_codes,
    a.v_norms = cache.v_norms.ref(), a.block_table = table_t, a.seq_lens = lens_t, a.tables = tables;
    a.output = out, a.lse = lse.ref();
    kernel.run(a);
    return std::pair{out.read_words(), lse.read_floats()};
  };
  const auto [out_bad, lse_bad] = run(table, lens);
  const auto [out_good, lse_good] = run(table_sane, lens_sane);
  expect_same_words(out_bad, out_good, "output");
  ASSERT_EQ(lse_bad.size(), lse_good.size());
  EXPECT_EQ(0, std::memcmp(lse_bad.data(), lse_good.data(), lse_bad.size() * 4)) << "lse";
  // Sequences 0 and 2 have no key: output 0, lse -inf; 1 and 3 finite.
  const std::size_t row = std::size_t(q_len * q_heads * kDim), lrow = std::size_t(q_len * q_heads);
  for (std::size_t s = 0; s < std::size_t(seqs); ++s) {
    const bool empty = s == 0 || s == 2;
    for (std::size_t i = 0; i < row; ++i) {
      float x;
      std::memcpy(&x, &out_bad[s * row + i], 4);
      if (empty) ASSERT_EQ(x, 0.0f) << "sequence " << s << " element " << i;
      else ASSERT_TRUE(std::isfinite(x)) << "sequence " << s << " element " << i;
    }
    for (std::size_t i = 0; i < lrow; ++i) {
      const float x = lse_bad[s * lrow + i];
      if (empty) ASSERT_TRUE(std::isinf(x) && x < 0) << "sequence " << s;
      else ASSERT_TRUE(std::isfinite(x)) << "sequence " << s;
    }
  }
}

// A centred cache: garbage centre rows (per token for the writer, per
// sequence for the attention) act as the clamped rows, and garbage prompt
// ranges and rows of KeyCentre as the sanitised ones (nothing outside
// k_centre written).
TEST_F(DeviceIndexGuards, CentreIndicesAreClamped) {
  Context& ctx = context();
  Rng rng(94);
  using CPC = PC::centred;
  constexpr std::int64_t centres = 3, tokens = kSlots;  // every slot written
  const Tensor tables = aura::CacheTables::make(ctx, CPC::format, 7, 8);
  const auto centre = Tensor::from_floats(ctx, DType::f32, CPC::centre_shape(centres, kKvHeads),
                                          rng.normals(std::size_t(centres * kKvHeads * kDim), 2.0f));
  auto k = Tensor::from_floats(ctx, DType::bf16, {tokens, kKvHeads, kDim}, rng.normals(std::size_t(tokens * kKvHeads * kDim)));
  std::vector<std::int32_t> slot_ids(tokens);
  for (std::int32_t i = 0; i < tokens; ++i) slot_ids[std::size_t(i)] = i;
  const Tensor slots = ints(ctx, slot_ids);
  const std::int32_t pattern[] = {-1, kMax, kMin, 3, 2, 100, -100, 1};
  std::vector<std::int32_t> garbage, sane;
  for (std::int64_t t = 0; t < tokens; ++t) {
    garbage.push_back(pattern[t % 8]);
    sane.push_back(clamp32(garbage.back(), 0, centres - 1));
  }

  const aura::CacheWrite<aura::CacheWriteConfig<CPC>> writer(ctx);
  const auto write = [&](const std::vector<std::int32_t>& rows, GuardedCache& cache) {
    const Tensor rows_t = ints(ctx, rows);
    aura::CacheWriteArgs a = cache.append(k, k, slots, tables);
    a.k_centre = centre.ref(), a.token_centres = rows_t.ref();
    writer.run(a);
  };
  GuardedCache a(ctx), b(ctx);
  write(garbage, a);
  write(sane, b);
  expect_same_words(a.words(), b.words(), "cache");

  constexpr std::int64_t seqs = 4, q_heads = 4, max_pages = 2;
  using Kernel = aura::DecodeAttention<aura::DecodeAttentionConfig<CPC, DType::bf16, DType::f32>>;
  const Kernel kernel(ctx, {.max_num_seqs = seqs, .max_q_len = 1, .q_heads = q_heads, .kv_heads = kKvHeads});
  auto q = Tensor::from_floats(ctx, DType::bf16, {seqs, 1, q_heads, kDim}, rng.normals(std::size_t(seqs * q_heads * kDim)));
  Tensor table(ctx, DType::i32, {seqs, max_pages});
  table.upload(std::span<const std::int32_t>(std::vector<std::int32_t>{0, 1, 1, 0, 0, 0, 1, 1}));
  const Tensor lens = ints(ctx, {20, 9, 2, 17});
  const auto attend = [&](const std::vector<std::int32_t>& rows) {
    const Tensor rows_t = ints(ctx, rows);
    GuardedTensor out(ctx, DType::f32, {seqs, 1, q_heads, kDim});
    aura::DecodeAttentionArgs d;
    d.q = q, d.k_codes = b.k_codes, d.k_norms = b.k_norms.ref(), d.v_codes = b.v_codes, d.v_norms = b.v_norms.ref();
    d.block_table = table, d.seq_lens = lens, d.tables = tables, d.output = out;
    d.k_centre = centre.ref(), d.seq_centres = rows_t.ref();
    d.options.softcap = 2.0f;  // the centre's term enters before the cap
    kernel.run(d);
    return out.read_words();
  };
  const std::vector<std::int32_t> seq_garbage{kMin, kMax, -1, 7};
  std::vector<std::int32_t> seq_sane;
  for (auto c : seq_garbage) seq_sane.push_back(clamp32(c, 0, centres - 1));
  expect_same_words(attend(seq_garbage), attend(seq_sane), "output");

  const aura::KeyCentre<aura::CacheWriteConfig<CPC>> key_centre(ctx);
  const auto set = [&](const std::vector<std::int32_t>& starts, const std::vector<std::int32_t>& rows) {
    const Tensor starts_t = ints(ctx, starts), rows_t = ints(ctx, rows);
    GuardedTensor out(ctx, DType::f32, CPC::centre_shape(centres, kKvHeads));
    out.poison();
    key_centre.run({k, starts_t, rows_t, out.ref()});
    return out.read_words();  // checks the guards
  };
  // Entries: [-5, 3) -> [0, 3) on row kMax (none); [3, kMax) -> [3, T) on
  // row 1; [kMax, 2) -> [T, T) (empty) on row 0; [2, kMin) -> [2, 2) on row 2.
  constexpr std::int32_t T = tokens;
  const std::vector<std::int32_t> starts_garbage{-5, 3, kMax, 2, kMin}, starts_sane{0, 3, T, T, T};
  const std::vector<std::int32_t> rows_garbage{kMax, 1, 0, 2}, rows_sane{-1, 1, -1, -1};
  const auto centred_bad = set(starts_garbage, rows_garbage);
  expect_same_words(centred_bad, set(starts_sane, rows_sane), "k_centre");
  std::size_t written = 0;
  for (auto w : centred_bad) written += w != 0xffffffffu;
  EXPECT_EQ(written, std::size_t(kKvHeads * kDim)) << "only row 1 is set";
}

// Inputs of a Gated DeltaNet call of T tokens (B = 1).
struct GdnInputs {
  static constexpr std::int64_t Hg = 1, H = 2, K = 64, V = 64;
  Tensor q, k, v, g, beta, h0;
  GdnInputs(Context& ctx, std::int64_t T, std::int64_t N, Rng& rng)
      : q(Tensor::from_floats(ctx, DType::bf16, {1, T, Hg, K}, rng.normals(std::size_t(T * Hg * K), 0.1f))),
        k(Tensor::from_floats(ctx, DType::bf16, {1, T, Hg, K}, rng.normals(std::size_t(T * Hg * K), 0.1f))),
        v(Tensor::from_floats(ctx, DType::bf16, {1, T, H, V}, rng.normals(std::size_t(T * H * V)))),
        g(Tensor::from_floats(ctx, DType::f32, {1, T, H}, uniform(rng, std::size_t(T * H), -0.3f, -0.01f))),
        beta(Tensor::from_floats(ctx, DType::f32, {1, T, H}, uniform(rng, std::size_t(T * H), 0.1f, 0.9f))),
        h0(Tensor::from_floats(ctx, DType::f32, {N, H, K, V}, rng.normals(std::size_t(N * H * K * V), 0.1f))) {}
  static std::vector<float> uniform(Rng& rng, std::size_t n, float lo, float hi) {
    std::vector<float> x(n);
    for (auto& e : x) e = rng.uniform(lo, hi);
    return x;
  }
};

TEST_F(DeviceIndexGuards, ChunkForwardClampsOffsets) {
  Context& ctx = sync_context();
  Rng rng(93);
  constexpr std::int64_t T = 100, N = 4;
  using In = GdnInputs;
  const In in(ctx, T, N, rng);
  const std::vector<std::int32_t> garbage{-5, 30, 20, kMax, kMin};
  std::vector<std::int32_t> sane;
  std::int32_t running = 0;
  for (auto c : garbage) sane.push_back(running = std::max(running, clamp32(c, 0, T)));
  using Kernel = gdn::ChunkForward<gdn::ChunkForwardConfig<64, 64, 64>>;
  const Kernel kernel(ctx);
  const auto run = [&](const std::vector<std::int32_t>& cu) {
    const Tensor cu_t = ints(ctx, cu);
    GuardedTensor o(ctx, DType::bf16, {1, T, In::H, In::V}), ht(ctx, DType::f32, {N, In::H, In::K, In::V});
    o.poison(), ht.poison();
    Kernel::Args a;
    a.q = in.q, a.k = in.k, a.v = in.v, a.g = in.g, a.beta = in.beta, a.o = o;
    a.initial_state = in.h0.ref(), a.final_state = ht.ref(), a.cu_seqlens = cu_t.ref();
    kernel.run(a);
    return std::pair{o.read_words(), ht.read_words()};
  };
  const auto [o_bad, h_bad] = run(garbage);
  const auto [o_good, h_good] = run(sane);
  expect_same_words(o_bad, o_good, "o");
  expect_same_words(h_bad, h_good, "final state");
}

TEST_F(DeviceIndexGuards, RecurrentStepClampsOffsets) {
  Context& ctx = sync_context();
  Rng rng(94);
  constexpr std::int64_t T = 12, N = 4;
  using In = GdnInputs;
  const In in(ctx, T, N, rng);
  using Kernel = gdn::RecurrentStep<gdn::RecurrentStepConfig<64, 64>>;
  const Kernel kernel(ctx, {.qk_dtype = DType::bf16, .v_dtype = DType::bf16});
  const auto run = [&](const std::vector<std::int32_t>& cu) {
    const Tensor cu_t = ints(ctx, cu);
    GuardedTensor o(ctx, DType::bf16, {1, T, In::H, In::V}), state(ctx, DType::f32, {N, In::H, In::K, In::V});
    o.poison(), state.poison();
    // The state starts as h0 (the step updates it in place).
    ctx.submit_and_wait([&](vk::CommandBuffer cmd) {
      const TensorRef s = state.ref();
      cmd.copyBuffer(in.h0.buffer().handle(), s.buffer, vk::BufferCopy(0, s.offset, s.size), ctx.dispatcher());
    });
    Kernel::Args a;
    a.q = in.q, a.k = in.k, a.v = in.v, a.g = in.g, a.beta = in.beta, a.state = state, a.o = o;
    a.cu_seqlens = cu_t.ref();
    kernel.run(a);
    return std::pair{o.read_words(), state.read_words()};
  };
  // Out of range but in order once clamped: the same as the clamped offsets.
  const std::vector<std::int32_t> garbage{-3, 2, 2, 9, kMax};
  std::vector<std::int32_t> sane{0, 2, 2, 9, static_cast<std::int32_t>(T)};
  const auto [o_bad, s_bad] = run(garbage);
  const auto [o_good, s_good] = run(sane);
  expect_same_words(o_bad, o_good, "o");
  expect_same_words(s_bad, s_good, "state");
  // Out of order: sequences may overlap, and which one's o a shared token
  // keeps is unspecified, but nothing is written outside the tensors (the
  // guards) and the device survives.
  const auto [o_wild, s_wild] = run({0, 8, 3, kMin, 5});
  EXPECT_EQ(o_wild.size(), o_good.size());
}

}  // namespace
