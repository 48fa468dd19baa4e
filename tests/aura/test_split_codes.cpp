// SPDX-License-Identifier: MIT
// Split codes in the standalone kernels (EncodeConfig / DecodeConfig's
// HiDims: the first HiDims rotated coordinates at Bits + 1 bits, the paged
// cache's split keys): aura::Encode against the double-precision
// reference (codes, their packing, norms; calls that would take few_rows
// take the tiled variant), aura::Decode against the dequantisation in
// double written here, and the tables' errors.
#include <tilekernels/aura/decode.hpp>
#include <tilekernels/reference/aura/packing.hpp>

#include "test_encode_support.hpp"

namespace {

using namespace tktest;
using namespace tktest::aura_support;
namespace ref = tilekernels::reference::aura;

template <std::uint32_t Dim, std::uint32_t Bits, DType In, std::uint32_t HiDims>
void check_encode(std::size_t rows, std::uint64_t seed) {
  using Config = aura::EncodeConfig<Dim, Bits, In, HiDims>;
  SCOPED_TRACE("Dim=" + std::to_string(Dim) + " Bits=" + std::to_string(Bits) + " HiDims=" + std::to_string(HiDims) +
               " rows=" + std::to_string(rows));
  Context& ctx = context();
  Rng rng(seed);
  const auto R = static_cast<std::int64_t>(rows);
  const auto x = make_rows(rng, rows, Dim, In);
  const auto &lo = codebook(Dim, Bits), &hi = codebook(Dim, Bits + 1);
  const auto& rot = dense_rotation(Dim);
  const auto input = Tensor::from_floats(ctx, In, {R, Dim}, x);
  const auto rotation = Tensor::from_floats(ctx, DType::f32, {Dim, Dim}, rot);
  const auto table = [&](const std::vector<float>& v) {
    return Tensor::from_floats(ctx, DType::f32, {static_cast<std::int64_t>(v.size())}, v);
  };
  const Tensor bounds = table(lo.boundaries), cb = table(lo.codebook), hi_bounds = table(hi.boundaries),
               hi_cb = table(hi.codebook);
  GuardedTensor packed(ctx, DType::u32, {R, Config::packed_words}), norms(ctx, DType::f32, {R});
  aura::Encode<Config> kernel(ctx);
  typename aura::Encode<Config>::Args args{input, rotation, bounds, cb, packed.ref(), norms.ref()};
  args.hi_boundaries = hi_bounds.ref();
  args.hi_codebook = hi_cb.ref();
  const auto plan = kernel.plan(kernel.problem(args), aura::Encode<Config>::workspace_bytes({R}));
  EXPECT_EQ(plan.variant->name, "tiled");
  kernel.run(args);

  const auto words = packed.read_words();
  const auto got_norms = norms.read_floats();
  const auto codes = ref::unpack_split(words, rows, Dim, Bits, HiDims);
  EXPECT_EQ(words, ref::pack_split(codes, rows, Dim, Bits, HiDims)) << "bits outside every code";
  const auto want =
      ref::encode_split(x, rows, Dim, HiDims, rot, lo.boundaries, lo.codebook, hi.boundaries, hi.codebook);
  std::size_t flips = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t d = 0; d < Dim; ++d) {
      const std::size_t i = r * Dim + d;
      if (codes[i] == want.codes[i]) continue;
      ++flips;
      ASSERT_LT(want.margin[i], kBoundaryMargin) << "row " << r << " dim " << d << " differs away from a boundary";
    }
    const double norm = ref::corrected_norm(std::span(x).subspan(r * Dim, Dim), std::span(codes).subspan(r * Dim, Dim),
                                            lo.codebook, HiDims, hi.codebook);
    ASSERT_NEAR(got_norms[r], norm, 2e-6 * norm + 1e-30) << "norm of row " << r;
  }
  EXPECT_LE(flips, rows * Dim / 1000 + 2);
  packed.poison();
  norms.poison();
  kernel.run(args);
  EXPECT_EQ(words, packed.read_words()) << "codes moved between runs";
}

template <std::uint32_t Dim, std::uint32_t Bits, DType Out, std::uint32_t HiDims>
void check_decode(std::size_t rows, std::uint64_t seed) {
  using Config = aura::DecodeConfig<Dim, Bits, Out, HiDims>;
  SCOPED_TRACE("Dim=" + std::to_string(Dim) + " Bits=" + std::to_string(Bits) + " HiDims=" + std::to_string(HiDims));
  Context& ctx = context();
  Rng rng(seed);
  const auto R = static_cast<std::int64_t>(rows);
  const auto& [words, norm_values, packed, norms] = random_packed_rows(ctx, rng, rows, Config::packed_words);
  const auto &lo = codebook(Dim, Bits), &hi = codebook(Dim, Bits + 1);
  const auto& rot = dense_rotation(Dim);
  const auto rotation = Tensor::from_floats(ctx, DType::f32, {Dim, Dim}, rot);
  const auto cb = Tensor::from_floats(ctx, DType::f32, {Config::levels}, lo.codebook);
  const auto hi_cb = Tensor::from_floats(ctx, DType::f32, {Config::hi_levels}, hi.codebook);
  GuardedTensor out(ctx, Out, {R, Dim});
  aura::Decode<Config> kernel(ctx);
  kernel.run({packed, norms, rotation, cb, out.ref(), hi_cb.ref()});
  const auto got = out.read_floats();
  // x[j] = norm * sum_d R[d, j] c_d, c_d from the codebook of d's part.
  std::vector<double> want(rows * Dim, 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    const auto row = std::span(words).subspan(r * Config::packed_words, Config::packed_words);
    for (std::size_t d = 0; d < Dim; ++d) {
      const bool high = d < HiDims;
      const std::uint32_t b = high ? Bits + 1 : Bits;
      const std::size_t bit = high ? d * b : HiDims * (Bits + 1) + (d - HiDims) * Bits;
      std::uint64_t pair = row[bit / 32];
      if (bit / 32 + 1 < row.size()) pair |= std::uint64_t{row[bit / 32 + 1]} << 32;
      const auto code = static_cast<std::uint32_t>(pair >> (bit % 32)) & ((1u << b) - 1u);
      const double c = (high ? hi.codebook : lo.codebook)[code];
      for (std::size_t j = 0; j < Dim; ++j) want[r * Dim + j] += norm_values[r] * double(rot[d * Dim + j]) * c;
    }
  }
  EXPECT_LE(relative_rms(got, want), Out == DType::f32 ? 1e-5 : 5e-3);
}

class SplitCodes : public DeviceTest {};

TEST_F(SplitCodes, EncodeMatchesReference) {
  check_encode<128, 3, DType::bf16, 64>(37, 4100);
  check_encode<128, 3, DType::bf16, 64>(1500, 4101);
  check_encode<96, 2, DType::f32, 32>(70, 4102);
  check_encode<256, 2, DType::f16, 128>(9, 4103);
}

TEST_F(SplitCodes, DecodeMatchesReference) {
  check_decode<128, 3, DType::f32, 64>(9, 4200);
  check_decode<96, 2, DType::bf16, 32>(33, 4201);
  check_decode<256, 3, DType::f32, 96>(5, 4202);
}

// The tables above the split: required with split codes, refused without,
// of their own length; HadamardEncode's and the configs' compile-time rules
// are tests/compile_fail/encode_split_*.cpp.
TEST_F(SplitCodes, TablesAreChecked) {
  Context& ctx = context();
  Tensor input(ctx, DType::bf16, {3, 128}), rotation(ctx, DType::f32, {128, 128}), bounds(ctx, DType::f32, {7}),
      cb(ctx, DType::f32, {8}), hi_bounds(ctx, DType::f32, {15}), hi_cb(ctx, DType::f32, {16}),
      packed(ctx, DType::u32, {3, 14}), norms(ctx, DType::f32, {3});
  using Split = aura::Encode<aura::EncodeConfig<128, 3, DType::bf16, 64>>;
  Split split(ctx);
  Split::Args a{input, rotation, bounds, cb, packed, norms};
  expect_check_error(split, a, ErrorCode::invalid_argument, "hi_boundaries: split codes need it; none given");
  a.hi_boundaries = hi_bounds.ref();
  a.hi_codebook = cb.ref();
  expect_check_error(split, a, ErrorCode::shape_mismatch, "hi_codebook: expected shape [16]");
  a.hi_codebook = hi_cb.ref();
  EXPECT_TRUE(split.can_implement(a)) << split.can_implement(a).message;

  Tensor plain_packed(ctx, DType::u32, {3, 12});
  aura::Encode<aura::EncodeConfig<128, 3>> plain(ctx);
  aura::Encode<aura::EncodeConfig<128, 3>>::Args b{input, rotation, bounds, cb, plain_packed, norms};
  b.hi_codebook = hi_cb.ref();
  expect_check_error(plain, b, ErrorCode::invalid_argument, "hi_codebook: only split codes take it");

  using Decode = aura::Decode<aura::DecodeConfig<128, 3, DType::f32, 64>>;
  Decode decode(ctx);
  Tensor out(ctx, DType::f32, {3, 128});
  expect_check_error(decode, Decode::Args{packed, norms, rotation, cb, out}, ErrorCode::invalid_argument,
                     "hi_codebook: split codes need it; none given");
  expect_check_error(decode, Decode::Args{plain_packed, norms, rotation, cb, out, hi_cb.ref()},
                     ErrorCode::shape_mismatch, "packed: expected shape [3, 14]");
}

}  // namespace
