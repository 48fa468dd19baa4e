// SPDX-License-Identifier: MIT
// aura::CacheWrite against the double-precision paged-cache reference
// (reference/aura/paged_cache.hpp): every format family (coded 2..8 bits,
// raw bf16 / f16, Hadamard and dense rotations, f32 and f16 norms, centred
// and split keys), slots
// over shuffled pages with padding (negative) slots, rows of very different
// norms and a zero row. The whole cache is compared, so slots nobody named
// must keep the poison they started with.
#include <cstring>
#include <limits>

#include "paged_cache_support.hpp"

namespace {

using namespace tktest;
using namespace tktest::aura_cache;
using tilekernels::reference::aura::Side;

constexpr std::uint64_t kSeedK = 11, kSeedV = 12;

template <class Config>
class CacheWriteTest : public DeviceTest {
 protected:
  using Cache = typename Config::cache;
  using Kernel = aura::CacheWrite<Config>;

  // Writes num_tokens rows of kv_heads heads into a cache of num_pages pages
  // (about `padding` of them with a negative slot), twice, and compares the
  // whole cache with the reference. With `fused_at` >= 0, k and v are views
  // of one fused [num_tokens, 2 kv_heads dim + 5] buffer starting that many
  // elements in. With `huge`, the rows' magnitudes lie between 1e18 and
  // 1e35 and one row holds an element of 1e38: every squared norm
  // overflows f32, every norm fits.
  void check_case(std::int64_t kv_heads, std::int64_t num_tokens, std::int64_t num_pages, double padding,
                  std::uint64_t seed, std::int64_t fused_at = -1, bool huge = false) {
    SCOPED_TRACE("kv_heads=" + std::to_string(kv_heads) + " tokens=" + std::to_string(num_tokens) +
                 " pages=" + std::to_string(num_pages) + " seed=" + std::to_string(seed));
    Context& ctx = context();
    Rng rng(seed);
    const std::size_t row = static_cast<std::size_t>(kv_heads) * Cache::dim;
    const auto n = static_cast<std::size_t>(num_tokens);
    auto make_rows = [&] {
      std::vector<float> x(n * row);
      for (std::size_t r = 0; r < n * static_cast<std::size_t>(kv_heads); ++r) {
        const float magnitude = huge ? std::exp(rng.uniform(42.0f, 80.0f))  // 1.7e18 .. 5.5e34
                                     : std::exp(rng.uniform(-4.0f, 4.0f));  // norms over ~3.5 decades
        for (std::size_t d = 0; d < Cache::dim; ++d) x[r * Cache::dim + d] = magnitude * rng.normal();
      }
      for (std::size_t d = 0; d < Cache::dim; ++d) x[d] = 0.0f;  // a zero row: norm 0, no NaN
      if (huge) x[Cache::dim + 3] = 1e38f;  // a corrected norm up to 3.4x this fits
      return rounded(Config::in_dtype, x);
    };
    const auto k = make_rows(), v = make_rows();
    const std::int64_t capacity = num_pages * Cache::page_tokens;
    std::vector<std::int32_t> perm(static_cast<std::size_t>(capacity));
    std::iota(perm.begin(), perm.end(), 0);
    for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.next() % i]);
    std::vector<std::int32_t> slots(perm.begin(), perm.begin() + num_tokens);
    for (auto& s : slots)
      if (rng.uniform() < padding) s = rng.uniform() < 0.5 ? -1 : -1000;

    const Shape in_shape{num_tokens, kv_heads, Cache::dim};
    std::optional<Tensor> k_dense, v_dense;
    std::optional<FusedRows> fused;
    TensorRef k_gpu, v_gpu;
    if (fused_at >= 0) {
      const std::int64_t kvd = kv_heads * Cache::dim;
      fused.emplace(ctx, Config::in_dtype, num_tokens, 2 * kvd + 5, fused_at);
      k_gpu = fused->view(in_shape, 1, 0);
      v_gpu = fused->view(in_shape, 1, kvd);
      fused->upload(k_gpu, k);
      fused->upload(v_gpu, v);
    } else {
      k_dense.emplace(Tensor::from_floats(ctx, Config::in_dtype, in_shape, k));
      v_dense.emplace(Tensor::from_floats(ctx, Config::in_dtype, in_shape, v));
      k_gpu = *k_dense;
      v_gpu = *v_dense;
    }
    const Tensor tables = aura::CacheTables::make(ctx, Cache::format, kSeedK, kSeedV);
    Tensor slots_gpu(ctx, DType::i32, {num_tokens});
    slots_gpu.upload(std::span<const std::int32_t>(slots));
    GpuCache<Cache> cache(ctx, kv_heads, num_pages);
    Kernel kernel(ctx);
    typename Kernel::Args args{k_gpu,         v_gpu,         slots_gpu,           tables,
                               cache.k_codes, cache.k_norms_ref(), cache.v_codes, cache.v_norms_ref(),
                               slots};
    // Centred keys: three centre rows, each token naming one at random; the
    // kernel encodes k minus its token's row.
    constexpr std::int64_t kCentres = 3;
    std::vector<float> centres;
    std::vector<std::int32_t> token_centres;
    std::optional<Tensor> centres_gpu, token_centres_gpu;
    if (Cache::k_centred) {
      centres = rng.normals(static_cast<std::size_t>(kCentres) * row, 2.0f);
      for (std::size_t t = 0; t < n; ++t) token_centres.push_back(static_cast<std::int32_t>(rng.next() % kCentres));
      centres_gpu.emplace(Tensor::from_floats(ctx, DType::f32, Cache::centre_shape(kCentres, kv_heads), centres));
      token_centres_gpu.emplace(ctx, DType::i32, Shape{num_tokens});
      token_centres_gpu->upload(std::span<const std::int32_t>(token_centres));
      args.k_centre = centres_gpu->ref();
      args.token_centres = token_centres_gpu->ref();
      args.host_token_centres = token_centres;
    }
    kernel.run(args);

    const auto format = reference_format<Cache>(static_cast<std::uint32_t>(kv_heads), static_cast<std::uint32_t>(num_pages),
                                                kSeedK, kSeedV);
    ref::PagedCache want(format), got(format);
    const auto k_stored = Cache::k_centred ? ref::centred_keys(k, token_centres, centres, static_cast<std::size_t>(kv_heads),
                                                               Cache::dim)
                                           : k;
    ref::cache_write(want, k_stored, v, slots);
    cache.read_into(got);
      std::vector<std::int64_t> token_of(static_cast<std::size_t>(capacity), -1);
    for (std::size_t t = 0; t < n; ++t)
      if (slots[t] >= 0) token_of[static_cast<std::size_t>(slots[t])] = static_cast<std::int64_t>(t);
    compare_side(Side::k, want, got, k_stored, token_of);
    compare_side(Side::v, want, got, v, token_of);

    // A second run from the poisoned state reproduces the first bit for bit.
    const auto first_k = cache.k_codes.read_words(), first_v = cache.v_codes.read_words();
    const auto first_kn = cache.k_norms ? cache.k_norms->read_words() : std::vector<std::uint32_t>{};
    const auto first_vn = cache.v_norms ? cache.v_norms->read_words() : std::vector<std::uint32_t>{};
    cache.k_codes.poison();
    cache.v_codes.poison();
    if (cache.k_norms) cache.k_norms->poison();
    if (cache.v_norms) cache.v_norms->poison();
    kernel.run(args);
    EXPECT_EQ(first_k, cache.k_codes.read_words()) << "k_codes moved";
    EXPECT_EQ(first_v, cache.v_codes.read_words()) << "v_codes moved";
    if (cache.k_norms) {
      EXPECT_EQ(first_kn, cache.k_norms->read_words()) << "k_norms moved";
    }
    if (cache.v_norms) {
      EXPECT_EQ(first_vn, cache.v_norms->read_words()) << "v_norms moved";
    }
  }

  void compare_side(Side s, const ref::PagedCache& want, const ref::PagedCache& got, const std::vector<float>& input,
                    const std::vector<std::int64_t>& token_of) {
    SCOPED_TRACE(s == Side::k ? "K" : "V");
    const ref::PagedCacheFormat& f = want.format;
    const ref::SideStore &w = want.store(s), &g = got.store(s);
    if (f.side(s).raw()) {
      EXPECT_EQ(w.raw, g.raw) << "raw values differ from the reference (or an unnamed slot changed)";
      return;
    }
    const ref::SideQuantizer& q = want.quantizer(s);
    const std::size_t words = f.words_per_token(s);
    std::size_t flips = 0, checked = 0;
    for (std::size_t page = 0; page < f.num_pages; ++page)
      for (std::size_t head = 0; head < f.kv_heads; ++head)
        for (std::size_t slot = 0; slot < f.page_tokens; ++slot) {
          const std::size_t i = f.token_index(page, head, slot);
          const std::int64_t token = token_of[page * f.page_tokens + slot];
          if (token < 0) {  // never named: still the poison
            for (std::size_t j = 0; j < words; ++j) ASSERT_EQ(g.codes[i * words + j], ~0u) << "unnamed slot written";
            ASSERT_TRUE(std::isnan(g.norms[i])) << "unnamed slot's norm written";
            continue;
          }
          const std::span<const float> x(input.data() + (static_cast<std::size_t>(token) * f.kv_heads + head) * f.dim,
                                         f.dim);
          const auto enc = ref::encode_split(x, 1, f.dim, q.hi_dims, q.rotation, q.boundaries, q.codebook,
                                             q.hi_boundaries, q.hi_codebook);
          const auto codes = ref::token_codes(got, s, page, head, slot);
          for (std::size_t d = 0; d < f.dim; ++d) {
            ++checked;
            if (codes[d] == enc.codes[d]) continue;
            ++flips;
            ASSERT_LT(enc.margin[d], 1e-5) << "code of dim " << d << " differs away from a boundary";
          }
          const double norm = ref::corrected_norm(x, codes, q.codebook, q.hi_dims, q.hi_codebook);
          const double stored = g.norms[i];
          ASSERT_TRUE(std::isfinite(stored)) << "norm of page " << page << " slot " << slot;
          if (f.side(s).norm_dtype == DType::f32)
            ASSERT_NEAR(stored, norm, 2e-6 * norm + 1e-30) << "norm of page " << page << " slot " << slot;
          else
            ASSERT_NEAR(stored, norm, 1e-3 * norm + 1e-7) << "f16 norm of page " << page << " slot " << slot;
        }
    EXPECT_LE(flips, checked / 1000 + 2) << "too many codes at boundaries";
  }
};

using Configs = ::testing::Types<
    aura::CacheWriteConfig<aura::PagedCacheConfig<128, 16, 4, 4>, DType::bf16>,
    aura::CacheWriteConfig<aura::PagedCacheConfig<96, 32, 3, 6, aura::Rotation::dense, DType::f16>, DType::f32>,
    aura::CacheWriteConfig<aura::PagedCacheConfig<64, 16, 8, 2, aura::Rotation::hadamard, DType::f16, DType::f16>,
                           DType::f16>,
    aura::CacheWriteConfig<aura::PagedCacheConfig<128, 16, 16, 4>, DType::bf16>,
    aura::CacheWriteConfig<aura::PagedCacheConfig<80, 16, 16, 16, aura::Rotation::dense, DType::f32, DType::f16>,
                           DType::f32>,
    aura::CacheWriteConfig<aura::PagedCacheConfig<256, 64, 4, 3>, DType::bf16>,
    aura::CacheWriteConfig<aura::PagedCacheConfig<128, 16, 4, 4>::centred, DType::bf16>,
    aura::CacheWriteConfig<aura::PagedCacheConfig<96, 32, 3, 6, aura::Rotation::dense, DType::f16>::centred,
                           DType::f32>,
    aura::CacheWriteConfig<aura::PagedCacheConfig<128, 16, 3, 4>::split_keys<64>, DType::bf16>,
    aura::CacheWriteConfig<aura::PagedCacheConfig<96, 32, 2, 3, aura::Rotation::dense, DType::f16>::split_keys<32>,
                           DType::f32>,
    aura::CacheWriteConfig<aura::PagedCacheConfig<64, 16, 2, 2>::split_keys<32>::centred, DType::bf16>>;
TYPED_TEST_SUITE(CacheWriteTest, Configs);

TYPED_TEST(CacheWriteTest, MatchesReferenceWithPaddingSlots) {
  this->check_case(2, 37, 5, 0.15, 100 + TypeParam::cache::dim);
  this->check_case(1, 3, 1, 0.0, 200 + TypeParam::cache::dim);
}

// k and v sliced out of one fused projection at an element offset no
// device aligns a binding to: the same cache, nothing outside the views read.
TYPED_TEST(CacheWriteTest, ReadsViewsOfAFusedBuffer) {
  this->check_case(2, 37, 5, 0.15, 300 + TypeParam::cache::dim, 3);
}

// Rows whose squares overflow f32 but whose norms do not: finite norms,
// the reference's codes (formats with f32 norms and a coded side read from
// f32 or bf16; f16 inputs cannot be that large, f16 norms cannot hold them).
TYPED_TEST(CacheWriteTest, HugeRowsGetFiniteNorms) {
  using Cache = typename TypeParam::cache;
  if (TypeParam::in_dtype == DType::f16 || Cache::format.norm_dtype != DType::f32 || Cache::format.k_raw())
    GTEST_SKIP() << "f16 input, f16 norms or a raw K side";
  this->check_case(2, 37, 5, 0.15, 400 + Cache::dim, -1, true);
}

class CacheWriteErrors : public DeviceTest {};

TEST_F(CacheWriteErrors, NamesTheBadTensorAndSlot) {
  Context& ctx = context();
  using Cache = aura::PagedCacheConfig<64, 16, 4, 16>;
  using Kernel = aura::CacheWrite<aura::CacheWriteConfig<Cache>>;
  Kernel kernel(ctx);
  const Tensor tables = aura::CacheTables::make(ctx, Cache::format, 1, 2);
  Tensor k(ctx, DType::bf16, {3, 2, 64}), v(ctx, DType::bf16, {3, 2, 64}), slots(ctx, DType::i32, {3});
  Tensor k_codes(ctx, DType::u32, {4, 2, 16, 8}), k_norms(ctx, DType::f32, {4, 2, 16});
  Tensor v_raw(ctx, DType::bf16, {4, 2, 16, 64});
  Tensor wrong(ctx, DType::f32, {3, 2, 64}), v_raw_small(ctx, DType::bf16, {3, 2, 16, 64});
  const std::vector<std::int32_t> good{0, -1, 63}, past{0, 1, 64}, twice{5, 6, 5};
  using Args = Kernel::Args;
  const Args ok{k, v, slots, tables, k_codes, k_norms.ref(), v_raw, {}, good};
  EXPECT_TRUE(kernel.can_implement(ok)) << kernel.can_implement(ok).message;
  const auto expect_error = [&](Args a, ErrorCode code, const std::string& needle) {
    expect_check_error(kernel, a, code, needle);
  };
  Args a = ok;
  a.v = wrong;
  expect_error(a, ErrorCode::dtype_mismatch, "v: expected dtype bf16, got f32");
  a = ok;
  a.k_norms.reset();
  expect_error(a, ErrorCode::invalid_argument, "k_norms: a coded side needs its norms");
  a = ok;
  a.v_norms = k_norms.ref();
  expect_error(a, ErrorCode::invalid_argument, "v_norms: a raw side has no norms");
  a = ok;
  a.v_codes = v_raw_small;
  expect_error(a, ErrorCode::shape_mismatch, "v_codes: expected 4 pages of 2 heads");
  a = ok;
  a.k_codes = v_raw;
  expect_error(a, ErrorCode::dtype_mismatch, "k_codes: expected dtype u32, got bf16");
  a = ok;
  a.k.offset = 1;
  expect_error(a, ErrorCode::invalid_argument, "k: offset 1 is not a multiple of the element size 2");
  a.k.offset = 0;
  a.k.strides = {128, 64, 2};
  expect_error(a, ErrorCode::invalid_argument, "k: the innermost dimensions must be contiguous");
  a = ok;
  a.tables = k_norms;
  expect_error(a, ErrorCode::shape_mismatch, "tables: expected shape");
  a = ok;
  a.host_slot_mapping = past;
  expect_error(a, ErrorCode::invalid_argument, "slot_mapping: slot 64 of token 2 is past the cache (64 slots)");
  a = ok;
  a.host_slot_mapping = twice;
  expect_error(a, ErrorCode::invalid_argument, "slot_mapping: slot 5 is named twice (token 2)");
}

// Without a host copy, record() cannot see slot_mapping: a slot past the
// cache is skipped by the kernel (nothing outside the cache is written), the
// others are written.
TEST_F(CacheWriteErrors, KernelSkipsSlotsPastTheCache) {
  Context& ctx = context();
  using Cache = aura::PagedCacheConfig<64, 16, 4, 4, aura::Rotation::hadamard, DType::f16>;
  using Kernel = aura::CacheWrite<aura::CacheWriteConfig<Cache, DType::f32>>;
  Kernel kernel(ctx);
  const Tensor tables = aura::CacheTables::make(ctx, Cache::format, 3, 4);
  Rng rng(5);
  const auto x = rng.normals(4 * 64);
  const auto k = Tensor::from_floats(ctx, DType::f32, {4, 1, 64}, x);
  const std::vector<std::int32_t> slots{31, 32, 1 << 30, 0};  // 32 slots: two past the cache
  Tensor slots_gpu(ctx, DType::i32, {4});
  slots_gpu.upload(std::span<const std::int32_t>(slots));
  GpuCache<Cache> cache(ctx, 1, 2);
  kernel.run({k, k, slots_gpu, tables, cache.k_codes, cache.k_norms_ref(), cache.v_codes, cache.v_norms_ref()});
  const auto codes = cache.k_codes.read_words();  // checks the sentinels too
  const auto norms = cache.k_norms->read_floats();
  EXPECT_FALSE(std::isnan(norms[31]));
  EXPECT_FALSE(std::isnan(norms[0]));
  for (std::size_t i = 1; i < 31; ++i) EXPECT_TRUE(std::isnan(norms[i])) << "slot " << i;
  EXPECT_TRUE(cache.v_codes.guards_intact());
  EXPECT_TRUE(cache.v_norms->guards_intact());
  (void)codes;
}

}  // namespace
