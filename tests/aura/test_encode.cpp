// SPDX-License-Identifier: MIT
// aura::Encode and aura::HadamardEncode against the double-precision
// reference: packed codes bit-exact except where a rotated value lies within
// f32 rounding of a boundary (counted and bounded), norms within 1e-5
// relative of what the kernel's codes imply (f32 sums vs double), ties,
// zero rows, NaN/Inf rows, the Hadamard kernel against the dense one.

// g++ 12 at -O2 reports the copy of Encode::Args (its disengaged
// std::optional<Workspace>) inlined into check_encode as "may be used
// uninitialized": a false positive that -Werror would turn into a failed
// build. Clang does not report it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cstring>
#include <optional>
#include <limits>

#include "test_encode_support.hpp"

namespace {

using namespace tktest;
using namespace tktest::aura_support;

// Dense encode (and, for power-of-two Dim, the Hadamard encode and the dense
// encode of the equivalent matrix) of `rows` random rows.
template <std::uint32_t Dim, std::uint32_t Bits, DType In>
void check_encode(std::size_t rows, std::uint64_t seed) {
  using Config = aura::EncodeConfig<Dim, Bits, In>;
  SCOPED_TRACE("Dim=" + std::to_string(Dim) + " Bits=" + std::to_string(Bits) + " In=" +
               std::string(dtype_name(In)) + " rows=" + std::to_string(rows) + " seed=" + std::to_string(seed));
  Context& ctx = context();
  RandomRows<Config> t(ctx, rows, seed);
  auto& packed = t.packed;
  auto& norms = t.norms;

  const auto& rot = dense_rotation(Dim);
  auto rotation = Tensor::from_floats(ctx, DType::f32, {Dim, Dim}, rot);
  aura::Encode<Config> dense(ctx);
  const typename aura::Encode<Config>::Args dense_args{t.input, rotation, t.bounds, t.codes, packed, norms};
  on_every_variant(ctx, dense, dense_args, packed, norms,
                   [&](const EncodeRun& got, const std::string& label) { t.check(got, rot, label); });

  if constexpr (std::has_single_bit(Dim)) {
    const auto signs = aura::hadamard_signs(Dim, seed);
    const auto hmat = aura::hadamard_matrix(signs);
    auto sign_t = Tensor::from_floats(ctx, DType::f32, {Dim}, signs);
    auto hrot = Tensor::from_floats(ctx, DType::f32, {Dim, Dim}, hmat);
    aura::HadamardEncode<Config> had(ctx);
    const typename aura::HadamardEncode<Config>::Args had_args{t.input, sign_t, t.bounds, t.codes, packed, norms};
    on_every_variant(ctx, had, had_args, packed, norms,
                     [&](const EncodeRun& got, const std::string& label) { t.check(got, hmat, label); });
    const auto got_h = run_twice(ctx, had, had_args, packed, norms);
    const auto ref = t.check(got_h, hmat, "hadamard");
    const auto got_d = run_twice(ctx, dense, {t.input, hrot, t.bounds, t.codes, packed, norms}, packed, norms);
    t.check(got_d, hmat, "dense with the Hadamard matrix");
    // The two kernels agree with each other wherever the value is not on a boundary.
    const auto a = reference::aura::unpack(got_h.packed, rows, Dim, Bits);
    const auto b = reference::aura::unpack(got_d.packed, rows, Dim, Bits);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i]) {
        ++differ;
        EXPECT_LT(ref.margin[i], kBoundaryMargin) << "Hadamard and dense codes differ at " << i;
      }
    EXPECT_LE(differ, rows * Dim / 1000 + 2);
  }
}

template <std::uint32_t Dim, DType In>
void check_all_bits(std::size_t rows, std::uint64_t seed) {
  check_encode<Dim, 2, In>(rows, seed);
  check_encode<Dim, 3, In>(rows, seed + 1);
  check_encode<Dim, 4, In>(rows, seed + 2);
  check_encode<Dim, 6, In>(rows, seed + 3);
  check_encode<Dim, 8, In>(rows, seed + 4);
}

template <std::uint32_t Dim>
void check_dim(std::uint64_t seed) {
  for (std::size_t rows : {1, 7}) {
    check_all_bits<Dim, DType::f32>(rows, seed);
    check_all_bits<Dim, DType::f16>(rows, seed + 10);
    check_all_bits<Dim, DType::bf16>(rows, seed + 20);
  }
}

class AuraEncode : public DeviceTest {};

TEST_F(AuraEncode, Dim64AllBitsAndDtypes) { check_dim<64>(100); }
TEST_F(AuraEncode, Dim96AllBitsAndDtypes) { check_dim<96>(200); }
TEST_F(AuraEncode, Dim128AllBitsAndDtypes) { check_dim<128>(300); }
TEST_F(AuraEncode, Dim256AllBitsAndDtypes) { check_dim<256>(400); }
TEST_F(AuraEncode, Dim512AllBitsAndDtypes) { check_dim<512>(500); }

TEST_F(AuraEncode, ThousandRows) {
  check_all_bits<128, DType::bf16>(1000, 600);
  check_encode<96, 3, DType::f16>(1000, 610);
  check_encode<64, 6, DType::f32>(1000, 620);
  check_encode<512, 4, DType::bf16>(1000, 630);
}

// Values exactly on a boundary go to the lower cell; one float either side
// goes to its side, on every variant. With input rows e_j (unit, norm
// exactly 1) the rotated row j is column j of the matrix, exactly, so every
// boundary is hit.
template <std::uint32_t Bits>
void check_ties() {
  constexpr std::uint32_t Dim = 128;
  using Config = aura::EncodeConfig<Dim, Bits, DType::f32>;
  using Kernel = aura::Encode<Config>;
  Context& ctx = context();
  const auto& cb = codebook(Dim, Bits);
  std::vector<float> mat(Dim * Dim), x(Dim * Dim, 0.0f);
  for (const auto* v : eligible_variants<Kernel>(ctx, {Dim, false})) {
    SCOPED_TRACE("Bits=" + std::to_string(Bits) + " variant " + std::string(v->name));
    const bool tc = v->path == Path::tensor_core_fp16;
    const float tiny = tc ? 0x1p-16f : std::numeric_limits<float>::min();
    std::vector<float> values;
    // The neighbours of the middle boundary 0 are +-FLT_MIN, not the
    // subnormals next to 0: GPUs may flush subnormals to zero (NVIDIA does).
    // (The tensor-core kernel counts entries below ~2^-40 max |R| as 0: it
    // gets +-2^-16.)
    for (float b : cb.boundaries) {
      values.push_back(b);
      values.push_back(b == 0.0f ? -tiny : std::nextafter(b, -1.0f));
      values.push_back(b == 0.0f ? tiny : std::nextafter(b, 1.0f));
    }
    for (std::size_t j = 0; j < Dim; ++j) {
      x[j * Dim + j] = 1.0f;
      for (std::size_t d = 0; d < Dim; ++d) mat[d * Dim + j] = values[(j * Dim + d) % values.size()];
    }
    auto input = Tensor::from_floats(ctx, DType::f32, {Dim, Dim}, x);
    auto rotation = Tensor::from_floats(ctx, DType::f32, {Dim, Dim}, mat);
    auto bounds = Tensor::from_floats(ctx, DType::f32, {Config::levels - 1}, cb.boundaries);
    auto codes = Tensor::from_floats(ctx, DType::f32, {Config::levels}, cb.codebook);
    GuardedTensor packed(ctx, DType::u32, {Dim, Config::packed_words});
    GuardedTensor norms(ctx, DType::f32, {Dim});
    // Three fp16 parts of R: exact (two keep 2^-20 of each entry, not
    // enough for values one float from a boundary: this test is about the
    // quantiser's tie rule, which three parts let it reach through R).
    Kernel kernel(ctx, aura::EncodeOptions{3});
    const auto got = reference::aura::unpack(
        run_twice(ctx, kernel, {input, rotation, bounds, codes, packed, norms}, packed, norms, v).packed, Dim, Dim, Bits);
    for (std::size_t j = 0; j < Dim; ++j)
      for (std::size_t d = 0; d < Dim; ++d) {
        const float value = mat[d * Dim + j];
        ASSERT_EQ(got[j * Dim + d], reference::aura::quantize(value, cb.boundaries)) << "value " << value;
      }
  }
}

TEST_F(AuraEncode, BoundaryTiesGoToTheLowerCell) {
  check_ties<2>();
  check_ties<3>();
  check_ties<4>();
  check_ties<6>();
  check_ties<8>();
}

// Zero rows: norm 0, the codes of the value 0 (L/2 - 1: the middle boundary
// is 0 and is not exceeded), no NaN; NaN and Inf rows do not disturb the
// others and get a non-finite norm.
template <class Kernel, std::uint32_t Dim, std::uint32_t Bits, DType In>
void check_special_rows(bool hadamard) {
  using Config = aura::EncodeConfig<Dim, Bits, In>;
  Context& ctx = context();
  Rng rng(77);
  const auto& cb = codebook(Dim, Bits);
  const std::size_t rows = 9;
  auto x = make_rows(rng, rows, Dim, In);
  for (std::size_t d = 0; d < Dim; ++d) x[0 * Dim + d] = x[4 * Dim + d] = x[8 * Dim + d] = 0.0f;
  x[2 * Dim + 5] = std::numeric_limits<float>::quiet_NaN();
  x[6 * Dim + 7] = -std::numeric_limits<float>::infinity();
  auto input = Tensor::from_floats(ctx, In, {rows, Dim}, x);
  const auto signs = hadamard ? aura::hadamard_signs(Dim, 9) : std::vector<float>(Dim, 1.0f);
  const auto mat = hadamard ? aura::hadamard_matrix(signs) : dense_rotation(Dim);
  auto rotation = Tensor::from_floats(ctx, DType::f32, {Dim, Dim}, mat);
  auto sign_t = Tensor::from_floats(ctx, DType::f32, {Dim}, signs);
  auto bounds = Tensor::from_floats(ctx, DType::f32, {Config::levels - 1}, cb.boundaries);
  auto codes = Tensor::from_floats(ctx, DType::f32, {Config::levels}, cb.codebook);
  GuardedTensor packed(ctx, DType::u32, {rows, Config::packed_words});
  GuardedTensor norms(ctx, DType::f32, {rows});
  Kernel kernel(ctx);
  typename Kernel::Args args{input, rotation, bounds, codes, packed, norms};
  if constexpr (std::is_same_v<Kernel, aura::HadamardEncode<Config>>) args.signs = sign_t;
  for (const auto* v : eligible_variants<Kernel>(ctx, encode_problem<Kernel>(rows))) {
  SCOPED_TRACE("variant " + std::string(v->name));
  const EncodeRun run = run_twice(ctx, kernel, args, packed, norms, v);
  const auto& got_norms = run.norms;
  const auto got = reference::aura::unpack(run.packed, rows, Dim, Bits);
  for (std::size_t r : {0, 4, 8}) {
    EXPECT_EQ(got_norms[r], 0.0f) << "zero row " << r;
    for (std::size_t d = 0; d < Dim; ++d) ASSERT_EQ(got[r * Dim + d], Config::levels / 2 - 1) << "zero row " << r;
  }
  EXPECT_FALSE(std::isfinite(got_norms[2])) << "NaN row";
  EXPECT_FALSE(std::isfinite(got_norms[6])) << "Inf row";
  // The other rows match the reference.
  for (std::size_t r : {1, 3, 5, 7}) {
    const std::vector<float> row(x.begin() + r * Dim, x.begin() + (r + 1) * Dim);
    const auto ref = reference::aura::encode(row, 1, Dim, Bits, mat, cb.boundaries, cb.codebook);
    for (std::size_t d = 0; d < Dim; ++d)
      if (got[r * Dim + d] != ref.codes[d]) {
        EXPECT_LT(ref.margin[d], kBoundaryMargin) << "row " << r << " d " << d;
      }
    const std::vector<std::uint32_t> mine(got.begin() + r * Dim, got.begin() + (r + 1) * Dim);
    const double expected = reference::aura::corrected_norm(row, mine, cb.codebook);
    EXPECT_LE(std::abs(got_norms[r] - expected) / expected, kNormBudget) << "row " << r;
  }
  }
}

TEST_F(AuraEncode, ZeroNanAndInfRows) {
  check_special_rows<aura::Encode<aura::EncodeConfig<128, 4, DType::bf16>>, 128, 4, DType::bf16>(false);
  check_special_rows<aura::Encode<aura::EncodeConfig<96, 3, DType::f32>>, 96, 3, DType::f32>(false);
  check_special_rows<aura::HadamardEncode<aura::EncodeConfig<128, 4, DType::bf16>>, 128, 4, DType::bf16>(true);
  check_special_rows<aura::HadamardEncode<aura::EncodeConfig<64, 6, DType::f16>>, 64, 6, DType::f16>(true);
}

// Rows whose sums of squares leave f32's range although their norms fit:
// elements around 1e30 (the squares overflow), rows of norm about 2e38 (an
// unscaled Hadamard butterfly would overflow too, and 1 / norm is
// subnormal), one element near f32's largest, and elements around 1e-27
// (the squares underflow), between rows of usual magnitude. Every variant
// must give finite norms within budget and the reference's codes.
template <std::uint32_t Dim, std::uint32_t Bits, DType In>
void check_extreme_rows(std::uint64_t seed) {
  using Config = aura::EncodeConfig<Dim, Bits, In>;
  SCOPED_TRACE("Dim=" + std::to_string(Dim) + " Bits=" + std::to_string(Bits) + " In=" + std::string(dtype_name(In)));
  Context& ctx = context();
  const std::vector<float> scales{1.0f, 1e30f, static_cast<float>(2e38 / std::sqrt(double(Dim))), 1e-27f, 0.3f, 3e29f};
  for (const std::size_t rows : {6, 200}) {
    RandomRows<Config> t(ctx, rows, seed + rows, nullptr, &scales);
    // And one element of 1.5 * 2^127 (exact in f32 and bf16) in the first
    // row: its scaling takes the largest exponent.
    t.x[3] = std::ldexp(1.5f, 127);
    t.input = Tensor::from_floats(ctx, In, {t.R(), Dim}, t.x);
    const auto& rot = dense_rotation(Dim);
    auto rotation = Tensor::from_floats(ctx, DType::f32, {Dim, Dim}, rot);
    aura::Encode<Config> dense(ctx);
    on_every_variant(ctx, dense, {t.input, rotation, t.bounds, t.codes, t.packed, t.norms}, t.packed, t.norms,
                     [&](const EncodeRun& got, const std::string& label) { t.check(got, rot, label); });
    if constexpr (std::has_single_bit(Dim)) {
      const auto signs = aura::hadamard_signs(Dim, seed);
      auto sign_t = Tensor::from_floats(ctx, DType::f32, {Dim}, signs);
      aura::HadamardEncode<Config> had(ctx);
      on_every_variant(ctx, had, {t.input, sign_t, t.bounds, t.codes, t.packed, t.norms}, t.packed, t.norms,
                       [&](const EncodeRun& got, const std::string& label) {
                         t.check(got, aura::hadamard_matrix(signs), label);
                       });
    }
  }
}

TEST_F(AuraEncode, HugeAndTinyRowsGetFiniteNormsAndTheirCodes) {
  check_extreme_rows<128, 4, DType::bf16>(800);
  check_extreme_rows<64, 3, DType::f32>(810);
  check_extreme_rows<96, 4, DType::f32>(820);
  check_extreme_rows<256, 2, DType::bf16>(830);
}

// The Hadamard kernel in every geometry (values per invocation, workgroup
// size, blocks per workgroup) on every variant, against the reference;
// `bounds_override` replaces the boundaries (e.g. duplicated ones, which
// make the quantiser fall back to its search).
struct HadamardShape {
  std::uint32_t values = 0, invocations = 0, blocks = 0;  // 0: automatic
};

template <std::uint32_t Dim, std::uint32_t Bits, DType In>
void check_hadamard(std::size_t rows, std::uint64_t seed, HadamardShape shape,
                    const std::vector<float>* bounds_override = nullptr) {
  using Config = aura::EncodeConfig<Dim, Bits, In>;
  using Kernel = aura::HadamardEncode<Config>;
  SCOPED_TRACE("Dim=" + std::to_string(Dim) + " Bits=" + std::to_string(Bits) + " In=" + std::string(dtype_name(In)) +
               " rows=" + std::to_string(rows) + " values=" + std::to_string(shape.values) +
               " invocations=" + std::to_string(shape.invocations) + " blocks=" + std::to_string(shape.blocks));
  Context& ctx = context();
  RandomRows<Config> t(ctx, rows, seed, bounds_override);
  const auto signs = aura::hadamard_signs(Dim, seed);
  auto sign_t = Tensor::from_floats(ctx, DType::f32, {Dim}, signs);
  Kernel kernel(ctx);
  const typename Kernel::Args args{t.input, sign_t, t.bounds, t.codes, t.packed, t.norms};
  auto plan = kernel.plan(args);
  if (shape.values) plan.geometry.values = shape.values;
  plan.geometry.invocations = shape.invocations ? shape.invocations : std::max<std::uint32_t>(256, Dim / plan.geometry.values);
  if (shape.blocks) plan.geometry.blocks = shape.blocks;
  for (const auto* v : eligible_variants<Kernel>(ctx, {static_cast<std::int64_t>(rows)})) {
    SCOPED_TRACE("variant " + std::string(v->name));
    plan.variant = v;
    if (v->path == Path::subgroup && !ctx.info().whole_subgroups(plan.geometry.invocations)) continue;
    kernel.prepare(plan);
    t.check(run_plan_twice(ctx, kernel, args, plan, t.packed, t.norms), aura::hadamard_matrix(signs),
            "hadamard " + std::string(v->name));
  }
}

// Every values-per-invocation, small workgroups and several blocks per
// workgroup (lavapipe compiles every geometry: keep the list short).
template <std::uint32_t Dim, std::uint32_t Bits, DType In>
void check_hadamard_shapes(std::size_t rows, std::uint64_t seed) {
  for (std::uint32_t values : {8u, 16u, 32u, 64u})
    if (values <= Dim) check_hadamard<Dim, Bits, In>(rows, seed + values, {values, 0, 0});
  check_hadamard<Dim, Bits, In>(rows, seed + 2, {16, 2 * Dim / 16, 0});  // 2 rows per workgroup
  check_hadamard<Dim, Bits, In>(rows, seed + 3, {8, Dim / 8, 0});        // 1 row
  check_hadamard<Dim, Bits, In>(rows, seed + 5, {32, 2 * Dim / 32, 3});  // 2-row blocks, 3 per workgroup
  check_hadamard<Dim, Bits, In>(rows, seed + 6, {0, 0, 2});
}

TEST_F(AuraEncode, HadamardShapesAndPaths) {
  check_hadamard_shapes<64, 4, DType::bf16>(37, 700);
  check_hadamard_shapes<128, 4, DType::bf16>(301, 710);
  check_hadamard_shapes<128, 3, DType::f32>(37, 720);
  check_hadamard_shapes<256, 6, DType::f16>(37, 730);
  check_hadamard_shapes<512, 2, DType::bf16>(19, 750);
  check_hadamard_shapes<32, 4, DType::f16>(37, 770);
  check_hadamard<512, 8, DType::bf16>(19, 760, {});
  check_hadamard<256, 4, DType::f32>(37, 740, {});
}

// Boundaries that put two in one quantiser cell (duplicates, a cluster):
// the table quantiser must notice and fall back to the search.
TEST_F(AuraEncode, HadamardCrowdedBoundaries) {
  auto b = codebook(128, 4).boundaries;
  b[6] = b[7];                   // a duplicate
  b[9] = std::nextafter(b[8], 1.0f);  // two boundaries one float apart
  check_hadamard<128, 4, DType::bf16>(301, 780, {});
  check_hadamard<128, 4, DType::bf16>(301, 781, {}, &b);
  auto b3 = codebook(64, 3).boundaries;
  for (auto& v : b3) v = 0.0f;  // degenerate: every boundary at 0
  check_hadamard<64, 3, DType::f32>(37, 783, {}, &b3);
}

TEST_F(AuraEncode, HadamardGeometryIsChecked) {
  Context& ctx = context();
  using Config = aura::EncodeConfig<64, 4, DType::bf16>;
  using Kernel = aura::HadamardEncode<Config>;
  Tensor in(ctx, DType::bf16, {5, 64}), s(ctx, DType::f32, {64}), b(ctx, DType::f32, {15}), c(ctx, DType::f32, {16}),
      p(ctx, DType::u32, {5, 8}), n(ctx, DType::f32, {5});
  Kernel kernel(ctx);
  const Kernel::Args args{in, s, b, c, p, n};
  const auto geometry_error = [&](std::uint32_t values, std::uint32_t invocations) {
    auto plan = kernel.plan(args);
    plan.geometry.values = values;
    plan.geometry.invocations = invocations;
    try {
      kernel.check(args, plan);
      return false;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("geometry"), std::string::npos) << e.what();
      return true;
    }
  };
  EXPECT_TRUE(geometry_error(128, 256));  // more values than Dim
  EXPECT_TRUE(geometry_error(24, 256));   // not a power of two
  EXPECT_TRUE(geometry_error(8, 12));     // not whole rows (Dim / 8 = 8 invocations each)
  EXPECT_FALSE(geometry_error(8, 16));
}

TEST_F(AuraEncode, ErrorsNameTheTensor) {
  Context& ctx = context();
  using Config = aura::EncodeConfig<64, 4, DType::bf16>;
  aura::Encode<Config> kernel(ctx);
  Tensor in(ctx, DType::bf16, {5, 64}), rot(ctx, DType::f32, {64, 64}), b(ctx, DType::f32, {15}),
      c(ctx, DType::f32, {16}), p(ctx, DType::u32, {5, 8}), n(ctx, DType::f32, {5});
  Tensor in_f32(ctx, DType::f32, {5, 64}), rot_small(ctx, DType::f32, {32, 64}), b16(ctx, DType::f32, {16}),
      p_wide(ctx, DType::u32, {5, 9}), n4(ctx, DType::f32, {4});
  const auto expect_error = [&](const aura::Encode<Config>::Args& args, ErrorCode code, const std::string& needle) {
    expect_check_error(kernel, args, code, needle);
  };
  EXPECT_NO_THROW(kernel.check({in, rot, b, c, p, n}));
  expect_error({in_f32, rot, b, c, p, n}, ErrorCode::dtype_mismatch, "input: expected dtype bf16, got f32");
  expect_error({in, rot_small, b, c, p, n}, ErrorCode::shape_mismatch, "rotation: expected shape [64, 64]");
  expect_error({in, rot, b16, c, p, n}, ErrorCode::shape_mismatch, "boundaries: expected shape [15]");
  expect_error({in, rot, b, b, p, n}, ErrorCode::shape_mismatch, "codebook: expected shape [16]");
  expect_error({in, rot, b, c, p_wide, n}, ErrorCode::shape_mismatch, "packed: expected shape [5, 8]");
  expect_error({in, rot, b, c, p, n4}, ErrorCode::shape_mismatch, "norms: expected shape [5]");
  aura::HadamardEncode<Config> had(ctx);
  expect_check_error(had, aura::HadamardEncode<Config>::Args{in, rot, b, c, p, n}, ErrorCode::shape_mismatch,
                     "aura.encode_hadamard: signs: expected shape [64]");
}

// More workgroups than one dispatch may have: the dispatcher splits the grid.
TEST(AuraEncodeSplit, GridLargerThanOneDispatch) {
  ContextOptions options;
  options.max_groups_per_dispatch = 3;
  options.validation = false;
  Context ctx(options);
  using Config = aura::EncodeConfig<64, 3, DType::f32>;
  const std::size_t rows = 1000;
  Rng rng(8);
  const auto& cb = codebook(64, 3);
  const auto x = make_rows(rng, rows, 64, DType::f32);
  auto input = Tensor::from_floats(ctx, DType::f32, {1000, 64}, x);
  auto rotation = Tensor::from_floats(ctx, DType::f32, {64, 64}, dense_rotation(64));
  const auto signs = aura::hadamard_signs(64, 3);
  auto sign_t = Tensor::from_floats(ctx, DType::f32, {64}, signs);
  auto bounds = Tensor::from_floats(ctx, DType::f32, {7}, cb.boundaries);
  auto codes = Tensor::from_floats(ctx, DType::f32, {8}, cb.codebook);
  GuardedTensor packed(ctx, DType::u32, {1000, 6});
  GuardedTensor norms(ctx, DType::f32, {1000});
  aura::Encode<Config>(ctx).run({input, rotation, bounds, codes, packed, norms});
  auto ref = reference::aura::encode(x, rows, 64, 3, dense_rotation(64), cb.boundaries, cb.codebook);
  auto c = compare(packed.read_words(), norms.read_floats(), ref, x, rows, 64, 3, cb.codebook);
  EXPECT_EQ(c.unexplained, 0u);
  EXPECT_LE(c.worst_norm_error, kNormBudget);
  packed.poison();
  aura::HadamardEncode<Config>(ctx).run({input, sign_t, bounds, codes, packed, norms});
  ref = reference::aura::encode(x, rows, 64, 3, aura::hadamard_matrix(signs), cb.boundaries, cb.codebook);
  c = compare(packed.read_words(), norms.read_floats(), ref, x, rows, 64, 3, cb.codebook);
  EXPECT_EQ(c.unexplained, 0u);
  EXPECT_LE(c.worst_norm_error, kNormBudget);
}

// ---- the tensor-core kernel ----------------------------------------------
// On a device with VK_KHR_cooperative_matrix fp16 tiles (skipped elsewhere),
// at its subgroup size and shared-memory limit.

template <class Config>
const tilekernels::Variant<typename aura::Encode<Config>::Problem>* tensor_core_variant(std::size_t rows) {
  for (const auto* v : eligible_variants<aura::Encode<Config>>(context(), {static_cast<std::int64_t>(rows), false}))
    if (v->path == Path::tensor_core_fp16) return v;
  return nullptr;
}

// `rows` random rows through the tensor-core kernel against the reference,
// run twice (bit for bit), with `parts` fp16 parts of R and a grid of
// `workgroups` (0: automatic).
template <std::uint32_t Dim, std::uint32_t Bits, DType In>
void check_tc(std::size_t rows, std::uint64_t seed, std::uint32_t parts = 2, std::uint32_t workgroups = 0) {
  using Config = aura::EncodeConfig<Dim, Bits, In>;
  using Kernel = aura::Encode<Config>;
  SCOPED_TRACE("Dim=" + std::to_string(Dim) + " Bits=" + std::to_string(Bits) + " In=" + std::string(dtype_name(In)) +
               " rows=" + std::to_string(rows) + " parts=" + std::to_string(parts) +
               " workgroups=" + std::to_string(workgroups) + " seed=" + std::to_string(seed));
  Context& ctx = context();
  const auto* variant = tensor_core_variant<Config>(rows);
  if (!variant && Config::fp16_least.shared_bytes > ctx.info().max_shared_memory) {
    std::printf("  [tensor cores Dim=%u Bits=%u In=%s] not run: needs %u bytes of shared memory, the device has %u\n",
                Dim, Bits, std::string(dtype_name(In)).c_str(), Config::fp16_least.shared_bytes,
                ctx.info().max_shared_memory);
    return;
  }
  ASSERT_NE(variant, nullptr);
  RandomRows<Config> t(ctx, rows, seed);
  auto rotation = Tensor::from_floats(ctx, DType::f32, {Dim, Dim}, dense_rotation(Dim));
  Kernel kernel(ctx, aura::EncodeOptions{parts});
  const typename Kernel::Args args{t.input, rotation, t.bounds, t.codes, t.packed, t.norms};
  const typename Kernel::Plan plan{variant, workgroups};
  t.check(run_plan_twice(ctx, kernel, args, plan, t.packed, t.norms), dense_rotation(Dim), "tensor cores");
}

template <std::uint32_t Dim, DType In>
void check_tc_all_bits(std::size_t rows, std::uint64_t seed) {
  check_tc<Dim, 2, In>(rows, seed);
  check_tc<Dim, 3, In>(rows, seed + 1);
  check_tc<Dim, 4, In>(rows, seed + 2);
  check_tc<Dim, 6, In>(rows, seed + 3);
  check_tc<Dim, 8, In>(rows, seed + 4);
}

template <std::uint32_t Dim>
void check_tc_dim(std::uint64_t seed) {
  if (!tensor_core_variant<aura::EncodeConfig<Dim, 4, DType::bf16>>(1)) GTEST_SKIP() << "no tensor-core variant here";
  if (context().info().is_cpu()) {
    // Each (Bits, In) is a pipeline that takes seconds to build on a CPU
    // device: there every bit width and every input type once.
    for (std::size_t rows : {1, 7, 1000}) {
      check_tc<Dim, 2, DType::f32>(rows, seed);
      check_tc<Dim, 3, DType::f16>(rows, seed + 1);
      check_tc<Dim, 4, DType::bf16>(rows, seed + 2);
      check_tc<Dim, 6, DType::f16>(rows, seed + 3);
      check_tc<Dim, 8, DType::f32>(rows, seed + 4);
    }
    return;
  }
  for (std::size_t rows : {1, 7, 1000}) {
    check_tc_all_bits<Dim, DType::f32>(rows, seed);
    check_tc_all_bits<Dim, DType::f16>(rows, seed + 10);
    check_tc_all_bits<Dim, DType::bf16>(rows, seed + 20);
  }
}

TEST_F(AuraEncode, TensorCoresDim64AllBitsAndDtypes) { check_tc_dim<64>(1100); }
TEST_F(AuraEncode, TensorCoresDim96AllBitsAndDtypes) { check_tc_dim<96>(1200); }
TEST_F(AuraEncode, TensorCoresDim128AllBitsAndDtypes) { check_tc_dim<128>(1300); }
TEST_F(AuraEncode, TensorCoresDim256AllBitsAndDtypes) { check_tc_dim<256>(1400); }

// The automatic choice takes few_rows up to 64 rows with a workspace, the
// tensor-core kernel above (Dim <= 256); three rotation parts; a capped
// grid (several blocks per workgroup).
TEST_F(AuraEncode, TensorCoresDefaultChoiceAndGrid) {
  using C128 = aura::EncodeConfig<128, 4, DType::bf16>;
  using K128 = aura::Encode<C128>;
  if (!tensor_core_variant<C128>(1)) GTEST_SKIP() << "no tensor-core variant here";
  Context& ctx = context();
  EXPECT_EQ(select_variant(ctx, K128::name, K128::variants, {64, true}).name.substr(0, 8), "few_rows");
  EXPECT_EQ(select_variant(ctx, K128::name, K128::variants, {64, false}).path, Path::tensor_core_fp16);
  EXPECT_EQ(select_variant(ctx, K128::name, K128::variants, {65, true}).path, Path::tensor_core_fp16);
  using K512 = aura::Encode<aura::EncodeConfig<512, 4, DType::bf16>>;
  EXPECT_EQ(select_variant(ctx, K512::name, K512::variants, {1000, false}).name, "tiled");
  check_tc<128, 4, DType::bf16>(4096, 1500);
  check_tc<256, 4, DType::bf16>(4096, 1501);
  check_tc<128, 4, DType::bf16>(20000, 1502, 3, 7);
  check_tc<256, 3, DType::f32>(3001, 1503, 3, 5);
  check_tc<128, 4, DType::bf16>(1000, 1504, 3);
  check_tc<256, 8, DType::f16>(1000, 1505, 3);
  check_tc<128, 6, DType::f32>(1000, 1506, 3);
  EXPECT_THROW((aura::Encode<C128>(ctx, aura::EncodeOptions{4})), Error);
}

}  // namespace
