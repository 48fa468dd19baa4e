// SPDX-License-Identifier: MIT
// gdn::RecomputeWU and gdn::ChunkO on variable-length batches (cu_seqlens,
// one dispatch for every sequence): intermediates token-major (FLA's layout)
// and slot-major (the forward's, gdn/chunking.hpp), on every variant the
// device has, against the double-precision references run sequence by
// sequence.
#include <tilekernels/gdn/chunk_o.hpp>
#include <tilekernels/gdn/recompute_wu.hpp>
#include <tilekernels/reference/gdn/chunk_o.hpp>
#include <tilekernels/reference/gdn/recompute_wu.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "gdn_cases.hpp"

namespace {

using namespace tktest;
using gdntest::device_varlen;
using gdntest::DeviceVarlen;
namespace gdn = tilekernels::gdn;
namespace ref = tilekernels::reference::gdn;

constexpr double kBudget = 5e-3;  // relative RMS of a bf16 output (docs/DESIGN.md)
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Sequences of every kind: short, empty, exactly one chunk, length 1, long.
const std::vector<std::int32_t> kCuSeqlens{0, 15, 15, 100, 164, 165, 300};

// Where every token of a varlen batch lies: its sequence, its row in its
// chunk, its slot.
struct Tokens {
  std::size_t T = 0, chunks = 0, bt = 0;
  std::vector<std::size_t> seq, row, rows, slot;  // per token; rows: its chunk's length

  Tokens(const std::vector<std::int32_t>& cu, std::size_t bt_) : bt(bt_) {
    for (std::size_t n = 0; n + 1 < cu.size(); ++n) {
      const std::size_t bos = std::size_t(cu[n]), len = std::size_t(cu[n + 1]) - bos;
      for (std::size_t p = 0; p < len; ++p) {
        seq.push_back(n);
        row.push_back(p % bt);
        rows.push_back(std::min(bt, len - (p - p % bt)));
        slot.push_back((chunks + p / bt) * bt + p % bt);
      }
      chunks += (len + bt - 1) / bt;
    }
    T = seq.size();
  }
  // Token-major rows of `width` values into the slots of `capacity` chunks
  // (padding rows NaN), and back.
  std::vector<float> to_slots(const std::vector<float>& x, std::size_t width, std::size_t capacity) const {
    std::vector<float> out(capacity * bt * width, kNaN);
    for (std::size_t t = 0; t < T; ++t) std::copy_n(&x[t * width], width, &out[slot[t] * width]);
    return out;
  }
  std::vector<float> from_slots(const std::vector<float>& x, std::size_t width) const {
    std::vector<float> out(T * width);
    for (std::size_t t = 0; t < T; ++t) std::copy_n(&x[slot[t] * width], width, &out[t * width]);
    return out;
  }
};

// A chunk-local cumulative log gate per token and head, falling from about 0
// to about -20 across each chunk of its sequence.
std::vector<float> chunk_gates(Rng& rng, const Tokens& tk, std::size_t H) {
  std::vector<float> g(tk.T * H);
  for (std::size_t h = 0; h < H; ++h) {
    float acc = 0.0f;
    for (std::size_t t = 0; t < tk.T; ++t) {
      acc = (tk.row[t] == 0 ? 0.0f : acc) - rng.uniform(0.0f, 40.0f / static_cast<float>(tk.bt));
      g[t * H + h] = std::max(acc, -20.0f);
    }
  }
  return g;
}

// The rows of sequence n of a token-major array with `width` values per token.
std::vector<float> rows_of(const std::vector<float>& x, const std::vector<std::int32_t>& cu, std::size_t n,
                           std::size_t width) {
  return {x.begin() + std::ptrdiff_t(cu[n] * width), x.begin() + std::ptrdiff_t(cu[n + 1] * width)};
}

Shape rows_shape(bool slots, std::size_t slot_rows, std::size_t T, std::initializer_list<std::size_t> inner) {
  Shape s = slots ? Shape{std::int64_t(slot_rows)} : Shape{1, std::int64_t(T)};
  for (auto d : inner) s.push_back(std::int64_t(d));
  return s;
}

template <class Config>
class RecomputeWUVarlen : public DeviceTest {};
using WUConfigs = ::testing::Types<gdn::RecomputeWUConfig<64, 128, 128, DType::bf16>, gdn::RecomputeWUConfig<64, 64, 64>,
                                   gdn::RecomputeWUConfig<32, 64, 64, DType::bf16>>;
TYPED_TEST_SUITE(RecomputeWUVarlen, WUConfigs);

TYPED_TEST(RecomputeWUVarlen, MatchesReferencePerSequence) {
  using Config = TypeParam;
  using Kernel = gdn::RecomputeWU<Config>;
  constexpr std::size_t K = Config::k, V = Config::v, BT = Config::bt, Hg = 2, H = 4;
  Context& ctx = context();
  const Tokens tk(kCuSeqlens, BT);
  const std::size_t T = tk.T;
  Rng rng(515 + BT + K);
  const auto k = rounded(DType::bf16, rng.normals(T * Hg * K));
  const auto v = rounded(DType::bf16, rng.normals(T * H * V));
  std::vector<float> beta(T * H), A(T * H * BT, 0.0f);
  for (auto& x : beta) x = rng.uniform(0.02f, 0.98f);
  const auto g = chunk_gates(rng, tk, H);
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t h = 0; h < H; ++h) {
      float* a = &A[(t * H + h) * BT];
      for (std::size_t j = 0; j < tk.row[t]; ++j) a[j] = 0.4f * rng.normal();
      a[tk.row[t]] = 1.0f;
      for (std::size_t j = tk.rows[t]; j < BT; ++j) a[j] = kNaN;  // past the chunk: ignored
    }
  A = rounded(Config::a_dtype, A);

  std::vector<double> want_w(T * H * K), want_u(T * H * V);
  for (std::size_t n = 0; n + 1 < kCuSeqlens.size(); ++n) {
    const std::size_t bos = std::size_t(kCuSeqlens[n]), len = std::size_t(kCuSeqlens[n + 1]) - bos;
    if (len == 0) continue;
    const auto r = ref::recompute_wu(rows_of(k, kCuSeqlens, n, Hg * K), rows_of(v, kCuSeqlens, n, H * V),
                                     rows_of(beta, kCuSeqlens, n, H), rows_of(g, kCuSeqlens, n, H),
                                     rows_of(A, kCuSeqlens, n, H * BT), 1, len, Hg, H, K, V, BT);
    std::copy(r.w.begin(), r.w.end(), want_w.begin() + std::ptrdiff_t(bos * H * K));
    std::copy(r.u.begin(), r.u.end(), want_u.begin() + std::ptrdiff_t(bos * H * V));
  }

  const gdn::Chunking ch(1, std::int64_t(T), kCuSeqlens, BT);
  const std::size_t S = std::size_t(ch.slots()), NB = std::size_t(ch.chunks());
  const DeviceVarlen dv = device_varlen(ctx, ch, kCuSeqlens);
  auto kt = Tensor::from_floats(ctx, DType::bf16, {1, std::int64_t(T), Hg, K}, k);
  auto vt = Tensor::from_floats(ctx, DType::bf16, {1, std::int64_t(T), H, V}, v);
  Kernel kernel(ctx);
  const typename Kernel::Problem problem{1, std::int64_t(T), Hg, H};
  for (const bool slots : {false, true}) {
    const auto in = [&](DType dt, const std::vector<float>& x, std::initializer_list<std::size_t> inner,
                        std::size_t width) {
      return Tensor::from_floats(ctx, dt, rows_shape(slots, S, T, inner), slots ? tk.to_slots(x, width, NB) : x);
    };
    auto beta_t = in(DType::f32, beta, {H}, H), g_t = in(DType::f32, g, {H}, H);
    auto A_t = in(Config::a_dtype, A, {H, BT}, H * BT);
    GuardedTensor w(ctx, DType::bf16, rows_shape(slots, S, T, {H, K}));
    GuardedTensor u(ctx, DType::bf16, rows_shape(slots, S, T, {H, V}));
    typename Kernel::Args args{kt, vt, beta_t, g_t, A_t, w, u, dv.cu->ref(), dv.index->ref(), kCuSeqlens};
    for (const auto* variant : eligible_variants<Kernel>(ctx, problem))
      for (std::uint32_t grid : {0u, 2u}) {
        if (grid && variant->path != Path::tensor_core_bf16) continue;
        SCOPED_TRACE(std::string(variant->name) + (slots ? " slot-major" : " token-major") + " grid " +
                     std::to_string(grid));
        w.poison();
        u.poison();
        kernel.prepare({variant, grid});
        ctx.submit_and_wait([&](vk::CommandBuffer cmd) { kernel.record(cmd, args, {variant, grid}); });
        auto got_w = w.read_floats(), got_u = u.read_floats();
        EXPECT_TRUE(w.guards_intact());
        EXPECT_TRUE(u.guards_intact());
        if (slots) got_w = tk.from_slots(got_w, H * K), got_u = tk.from_slots(got_u, H * V);
        const double ew = relative_rms(got_w, want_w), eu = relative_rms(got_u, want_u);
        EXPECT_LE(ew, kBudget) << "w";
        EXPECT_LE(eu, kBudget) << "u";
        std::printf("[recompute_wu varlen] BT=%zu K=%zu V=%zu %-22s %s grid %u: w %.3e u %.3e\n", BT, K, V,
                    std::string(variant->name).c_str(), slots ? "slots " : "tokens", grid, ew, eu);
      }
  }
}

template <class Config>
class ChunkOVarlen : public DeviceTest {};
using OConfigs = ::testing::Types<gdn::ChunkOConfig<64, 128, 128>, gdn::ChunkOConfig<32, 64, 64>,
                                  gdn::ChunkOConfig<16, 64, 128>>;
TYPED_TEST_SUITE(ChunkOVarlen, OConfigs);

TYPED_TEST(ChunkOVarlen, MatchesReferencePerSequence) {
  using Config = TypeParam;
  using Kernel = gdn::ChunkO<Config>;
  constexpr std::size_t K = Config::K, V = Config::V, BT = Config::BT, Hg = 2, H = 4;
  Context& ctx = context();
  const Tokens tk(kCuSeqlens, BT);
  const std::size_t T = tk.T;
  const gdn::Chunking ch(1, std::int64_t(T), kCuSeqlens, BT);
  const std::size_t S = std::size_t(ch.slots()), NB = std::size_t(ch.chunks()), NC = tk.chunks;
  Rng rng(616 + BT + K);
  const float qk_scale = 3.0f / std::sqrt(static_cast<float>(K));
  const auto q = rounded(DType::bf16, rng.normals(T * Hg * K, qk_scale));
  const auto k = rounded(DType::bf16, rng.normals(T * Hg * K, qk_scale));
  const auto v = rounded(DType::bf16, rng.normals(T * H * V));
  const auto h = rounded(DType::bf16, rng.normals(NC * H * V * K, 0.5f));
  const auto g = chunk_gates(rng, tk, H);
  const float scale = 1.0f / std::sqrt(static_cast<float>(K));

  std::vector<double> want(T * H * V);
  std::size_t first_chunk = 0;
  for (std::size_t n = 0; n + 1 < kCuSeqlens.size(); ++n) {
    const std::size_t bos = std::size_t(kCuSeqlens[n]), len = std::size_t(kCuSeqlens[n + 1]) - bos;
    if (len == 0) continue;
    const ref::ChunkOShape s{1, len, Hg, H, K, V, BT};
    const std::vector<float> hn(h.begin() + std::ptrdiff_t(first_chunk * H * V * K),
                                h.begin() + std::ptrdiff_t((first_chunk + s.NT()) * H * V * K));
    const auto o = ref::chunk_o(rows_of(q, kCuSeqlens, n, Hg * K), rows_of(k, kCuSeqlens, n, Hg * K),
                                rows_of(v, kCuSeqlens, n, H * V), hn, rows_of(g, kCuSeqlens, n, H), scale, s);
    std::copy(o.begin(), o.end(), want.begin() + std::ptrdiff_t(bos * H * V));
    first_chunk += s.NT();
  }

  const DeviceVarlen dv = device_varlen(ctx, ch, kCuSeqlens);
  auto qt = Tensor::from_floats(ctx, DType::bf16, {1, std::int64_t(T), Hg, K}, q);
  auto kt = Tensor::from_floats(ctx, DType::bf16, {1, std::int64_t(T), Hg, K}, k);
  GuardedTensor o(ctx, DType::bf16, {1, std::int64_t(T), H, V});
  Kernel kernel(ctx);
  // h for every chunk slot: the padding chunks' never read (NaN).
  std::vector<float> h_all(h);
  h_all.resize(NB * H * V * K, kNaN);
  const typename Kernel::Problem problem{1, std::int64_t(T), Hg, H};
  for (const bool slots : {false, true}) {
    auto vt = Tensor::from_floats(ctx, DType::bf16, rows_shape(slots, S, T, {H, V}),
                                  slots ? tk.to_slots(v, H * V, NB) : v);
    auto gt = Tensor::from_floats(ctx, DType::f32, rows_shape(slots, S, T, {H}), slots ? tk.to_slots(g, H, NB) : g);
    const Shape h_shape = slots ? Shape{std::int64_t(NB), H, V, K} : Shape{1, std::int64_t(NB), H, V, K};
    auto ht = Tensor::from_floats(ctx, DType::bf16, h_shape, h_all);
    typename Kernel::Args args{qt, kt, vt, ht, gt, o, scale, dv.cu->ref(), dv.index->ref(), kCuSeqlens};
    for (const auto* variant : eligible_variants<Kernel>(ctx, problem))
      for (std::uint32_t grid : {0u, 1u}) {
        if (grid && variant->path != Path::tensor_core_bf16) continue;
        SCOPED_TRACE(std::string(variant->name) + (slots ? " slot-major" : " token-major") + " grid " +
                     std::to_string(grid));
        o.poison();
        kernel.prepare({variant, grid});
        ctx.submit_and_wait([&](vk::CommandBuffer cmd) { kernel.record(cmd, args, {variant, grid}); });
        const auto got = o.read_floats();
        EXPECT_TRUE(o.guards_intact());
        const double e = relative_rms(got, want);
        EXPECT_LE(e, kBudget);
        std::printf("[chunk_o varlen] BT=%zu K=%zu V=%zu %-16s %s grid %u: o %.3e\n", BT, K, V,
                    std::string(variant->name).c_str(), slots ? "slots " : "tokens", grid, e);
      }
  }
}

class StageVarlenErrors : public DeviceTest {};

// cu_seqlens without the index table, and slot-major tensors of the wrong
// size, fail before any GPU work and name the tensor.
TEST_F(StageVarlenErrors, NamesTheBadTensor) {
  Context& ctx = context();
  // Two sequences of 70 tokens in chunks of 32: room for (70 + 2 x 31) / 32
  // = 4 chunks, 128 slots, whatever the lengths.
  const std::vector<std::int32_t> cu{0, 10, 70};
  using WU = gdn::RecomputeWU<gdn::RecomputeWUConfig<32, 64, 64>>;
  Tensor k(ctx, DType::bf16, {1, 70, 1, 64}), v(ctx, DType::bf16, {1, 70, 2, 64});
  Tensor beta(ctx, DType::f32, {128, 2}), g(ctx, DType::f32, {128, 2}), A(ctx, DType::f32, {128, 2, 32});
  Tensor w(ctx, DType::bf16, {128, 2, 64}), u(ctx, DType::bf16, {128, 2, 64}), w_short(ctx, DType::bf16, {96, 2, 64});
  const gdn::Chunking ch(1, 70, cu, 32);
  const DeviceVarlen dv = device_varlen(ctx, ch, cu);
  WU wu(ctx);
  WU::Args wa{k, v, beta, g, A, w, u, dv.cu->ref(), std::nullopt, cu};
  expect_check_error(wu, wa, ErrorCode::invalid_argument, "index: cu_seqlens needs it");
  wa.index = dv.index->ref();
  EXPECT_NO_THROW(wu.check(wa));
  WU::Args bad = wa;
  bad.w = w_short;
  expect_check_error(wu, bad, ErrorCode::shape_mismatch, "w: expected shape [128, 2, 64], got [96, 2, 64]");
  const std::vector<std::int32_t> cu_short{0, 10, 69};
  bad = wa;
  bad.cu_seqlens_host = cu_short;
  expect_check_error(wu, bad, ErrorCode::invalid_argument, "cu_seqlens: must end at T = 70");

  using CO = gdn::ChunkO<gdn::ChunkOConfig<32, 64, 64>>;
  Tensor q(ctx, DType::bf16, {1, 70, 1, 64}), o(ctx, DType::bf16, {1, 70, 2, 64});
  Tensor h(ctx, DType::bf16, {4, 2, 64, 64}), h_fixed(ctx, DType::bf16, {1, 4, 2, 64, 64});
  CO co(ctx);
  CO::Args oa{q, k, u, h, g, o, 0.125f, dv.cu->ref(), std::nullopt, cu};
  expect_check_error(co, oa, ErrorCode::invalid_argument, "index: cu_seqlens needs it");
  oa.index = dv.index->ref();
  EXPECT_NO_THROW(co.check(oa));
  CO::Args bad_o = oa;
  bad_o.h = h_fixed;
  expect_check_error(co, bad_o, ErrorCode::shape_mismatch, "h: expected shape [4, 2, 64, 64]");
}

}  // namespace
