// aura::Encode and aura::HadamardEncode against the double-precision
// reference: packed codes bit-exact except where a rotated value lies within
// f32 rounding of a boundary (counted and bounded), norms within 1e-5
// relative of what the kernel's codes imply (f32 sums vs double), ties,
// zero rows, NaN/Inf rows, the Hadamard kernel against the dense one.
#include <cstring>
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
  const auto got = run_twice<Config>(ctx, dense, typename aura::Encode<Config>::Args{t.input, rotation, t.bounds, t.codes, packed, norms}, packed, norms);
  t.check(got, rot, "dense");

  if constexpr (std::has_single_bit(Dim)) {
    const auto signs = aura::hadamard_signs(Dim, seed);
    const auto hmat = aura::hadamard_matrix(signs);
    auto sign_t = Tensor::from_floats(ctx, DType::f32, {Dim}, signs);
    auto hrot = Tensor::from_floats(ctx, DType::f32, {Dim, Dim}, hmat);
    packed.poison();
    norms.poison();
    aura::HadamardEncode<Config> had(ctx);
    const auto got_h = run_twice<Config>(ctx, had, typename aura::HadamardEncode<Config>::Args{t.input, sign_t, t.bounds, t.codes, packed, norms}, packed, norms);
    const auto ref = t.check(got_h, hmat, "hadamard");
    packed.poison();
    norms.poison();
    const auto got_d = run_twice<Config>(ctx, dense, typename aura::Encode<Config>::Args{t.input, hrot, t.bounds, t.codes, packed, norms}, packed, norms);
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
// goes to its side. With input rows e_j (unit, norm exactly 1) the rotated
// row j is column j of the matrix, exactly, so every boundary is hit.
// On the tensor-core path with R as three fp16 parts (exact; the default
// two parts keep 2^-20 of each entry, not enough for values one float from
// a boundary: this test is about the quantiser's tie rule, which the three
// parts let it reach through the rotation).
template <std::uint32_t Bits>
void check_ties(aura::EncodeOptions options = {}) {
  options.rotation_parts = 3;
  constexpr std::uint32_t Dim = 128;
  using Config = aura::EncodeConfig<Dim, Bits, DType::f32>;
  const auto path = aura::Encode<Config>(context(), options).path(Dim);
  SCOPED_TRACE("Bits=" + std::to_string(Bits) + " path=" + aura::path_name(path));
  const bool tc = path == aura::EncodePath::cooperative_matrix_nv || path == aura::EncodePath::cooperative_matrix_nv_emulated;
  const float tiny = tc ? 0x1p-16f : std::numeric_limits<float>::min();
  Context& ctx = context();
  const auto& cb = codebook(Dim, Bits);
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
  std::vector<float> mat(Dim * Dim), x(Dim * Dim, 0.0f);
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
  aura::Encode<Config>(ctx, options).run({input, rotation, bounds, codes, packed, norms});
  const auto got = reference::aura::unpack(packed.read_words(), Dim, Dim, Bits);
  for (std::size_t j = 0; j < Dim; ++j)
    for (std::size_t d = 0; d < Dim; ++d) {
      const float v = mat[d * Dim + j];
      ASSERT_EQ(got[j * Dim + d], reference::aura::quantize(v, cb.boundaries)) << "value " << v;
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
void check_special_rows(bool hadamard, aura::EncodeOptions options = {}) {
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
  if constexpr (std::is_same_v<Kernel, aura::HadamardEncode<Config>>)
    Kernel(ctx).run({input, sign_t, bounds, codes, packed, norms});
  else
    Kernel(ctx, options).run({input, rotation, bounds, codes, packed, norms});
  const auto words = packed.read_words();
  const auto got_norms = norms.read_floats();
  const auto got = reference::aura::unpack(words, rows, Dim, Bits);
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

TEST_F(AuraEncode, ZeroNanAndInfRows) {
  check_special_rows<aura::Encode<aura::EncodeConfig<128, 4, DType::bf16>>, 128, 4, DType::bf16>(false);
  check_special_rows<aura::Encode<aura::EncodeConfig<96, 3, DType::f32>>, 96, 3, DType::f32>(false);
  check_special_rows<aura::HadamardEncode<aura::EncodeConfig<128, 4, DType::bf16>>, 128, 4, DType::bf16>(true);
  check_special_rows<aura::HadamardEncode<aura::EncodeConfig<64, 6, DType::f16>>, 64, 6, DType::f16>(true);
}

// The register Hadamard kernel in every shape option (values per invocation,
// workgroup size, with and without subgroup shuffles) and the previous
// kernel, against the reference; `bounds_override` replaces the boundaries
// (e.g. duplicated ones, which make the quantiser fall back to its search).
template <std::uint32_t Dim, std::uint32_t Bits, DType In>
void check_hadamard(std::size_t rows, std::uint64_t seed, aura::HadamardEncodeOptions options,
                    const std::vector<float>* bounds_override = nullptr) {
  using Config = aura::EncodeConfig<Dim, Bits, In>;
  SCOPED_TRACE("Dim=" + std::to_string(Dim) + " Bits=" + std::to_string(Bits) + " In=" + std::string(dtype_name(In)) +
               " rows=" + std::to_string(rows) + " values=" + std::to_string(options.values_per_invocation) +
               " invocations=" + std::to_string(options.invocations) + " portable=" + std::to_string(options.portable) +
               " legacy=" + std::to_string(options.legacy));
  Context& ctx = context();
  RandomRows<Config> t(ctx, rows, seed, bounds_override);
  const auto signs = aura::hadamard_signs(Dim, seed);
  auto sign_t = Tensor::from_floats(ctx, DType::f32, {Dim}, signs);
  aura::HadamardEncode<Config> had(ctx, options);
  const auto got = run_twice<Config>(ctx, had, typename aura::HadamardEncode<Config>::Args{t.input, sign_t, t.bounds, t.codes, t.packed, t.norms},
                                     t.packed, t.norms);
  t.check(got, aura::hadamard_matrix(signs), "hadamard");
}

// Every values-per-invocation with subgroup shuffles where the device has
// them; the portable module, small workgroups and the previous kernel once
// each (lavapipe compiles every variant: keep the list short).
template <std::uint32_t Dim, std::uint32_t Bits, DType In>
void check_hadamard_shapes(std::size_t rows, std::uint64_t seed) {
  for (std::uint32_t values : {8u, 16u, 32u, 64u})
    if (values <= Dim) check_hadamard<Dim, Bits, In>(rows, seed + values, {values, 0, false, false});
  check_hadamard<Dim, Bits, In>(rows, seed + 1, {0, 0, true, false});                // portable
  check_hadamard<Dim, Bits, In>(rows, seed + 2, {16, 2 * Dim / 16, false, false});  // 2 rows per workgroup
  check_hadamard<Dim, Bits, In>(rows, seed + 3, {8, Dim / 8, true, false});         // 1 row, portable
  check_hadamard<Dim, Bits, In>(rows, seed + 4, {0, 0, false, true});               // the previous kernel
  check_hadamard<Dim, Bits, In>(rows, seed + 5, {0, 2 * Dim / 32, false, false, 3});  // 2-row blocks, 3 per workgroup
  check_hadamard<Dim, Bits, In>(rows, seed + 6, {0, 0, true, false, 2});
  check_hadamard<Dim, Bits, In>(rows, seed + 7, {0, 0, false, false, 0, true});  // 16-byte cell entries
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
  check_hadamard<128, 4, DType::bf16>(301, 782, {0, 0, true, false}, &b);
  auto b3 = codebook(64, 3).boundaries;
  for (auto& v : b3) v = 0.0f;  // degenerate: every boundary at 0
  check_hadamard<64, 3, DType::f32>(37, 783, {}, &b3);
}

TEST_F(AuraEncode, HadamardOptionsAreChecked) {
  Context& ctx = context();
  using Config = aura::EncodeConfig<64, 4, DType::bf16>;
  EXPECT_THROW((aura::HadamardEncode<Config>(ctx, {128, 0, false, false}).geometry()), Error);
  EXPECT_THROW((aura::HadamardEncode<Config>(ctx, {24, 0, false, false}).geometry()), Error);
  EXPECT_THROW((aura::HadamardEncode<Config>(ctx, {8, 12, false, false}).geometry()), Error);
  EXPECT_NO_THROW((aura::HadamardEncode<Config>(ctx, {8, 16, false, false}).geometry()));
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
// On a device with VK_NV_cooperative_matrix the kernel itself (skipped
// elsewhere); on any device its emulation variant (plain loops in place of
// the cooperative-matrix calls), which checks the staging, scaling,
// quantising and packing on CPU drivers.

aura::EncodeOptions tc_options(bool emulate, std::uint32_t parts = 2, std::uint32_t workgroups = 0,
                               bool prefetch = true, std::uint32_t invocations = 0, std::uint32_t block_rows = 0) {
  aura::EncodeOptions o;
  o.small_rows = 0;
  o.tc_emulate = emulate;
  o.rotation_parts = parts;
  o.tc_workgroups = workgroups;
  o.tc_prefetch = prefetch;
  o.tc_invocations = invocations;
  o.tc_block_rows = block_rows;
  return o;
}

template <class Config>
bool tc_available() {
  return aura::Encode<Config>(context()).tensor_cores_available();
}

template <class Config>
bool tc_emulation_available() {
  return aura::Encode<Config>(context(), tc_options(true)).path(1) == aura::EncodePath::cooperative_matrix_nv_emulated;
}

// `rows` random rows through the tensor-core kernel (or its emulation)
// against the reference, run twice (bit for bit).
template <std::uint32_t Dim, std::uint32_t Bits, DType In>
void check_tc(std::size_t rows, std::uint64_t seed, aura::EncodeOptions options) {
  using Config = aura::EncodeConfig<Dim, Bits, In>;
  SCOPED_TRACE("Dim=" + std::to_string(Dim) + " Bits=" + std::to_string(Bits) + " In=" + std::string(dtype_name(In)) +
               " rows=" + std::to_string(rows) + " parts=" + std::to_string(options.rotation_parts) +
               " emulate=" + std::to_string(options.tc_emulate) + " seed=" + std::to_string(seed));
  Context& ctx = context();
  RandomRows<Config> t(ctx, rows, seed);
  auto rotation = Tensor::from_floats(ctx, DType::f32, {Dim, Dim}, dense_rotation(Dim));
  aura::Encode<Config> kernel(ctx, options);
  const auto expected = options.tc_emulate ? aura::EncodePath::cooperative_matrix_nv_emulated
                                           : aura::EncodePath::cooperative_matrix_nv;
  ASSERT_EQ(kernel.path(static_cast<std::int64_t>(rows)), expected);
  const auto got = run_twice<Config>(
      ctx, kernel, typename aura::Encode<Config>::Args{t.input, rotation, t.bounds, t.codes, t.packed, t.norms},
      t.packed, t.norms);
  t.check(got, dense_rotation(Dim), options.tc_emulate ? "tensor cores (emulated)" : "tensor cores");
}

template <std::uint32_t Dim, DType In>
void check_tc_all_bits(std::size_t rows, std::uint64_t seed) {
  check_tc<Dim, 2, In>(rows, seed, tc_options(false));
  check_tc<Dim, 3, In>(rows, seed + 1, tc_options(false));
  check_tc<Dim, 4, In>(rows, seed + 2, tc_options(false));
  check_tc<Dim, 6, In>(rows, seed + 3, tc_options(false));
  check_tc<Dim, 8, In>(rows, seed + 4, tc_options(false));
}

template <std::uint32_t Dim>
void check_tc_dim(std::uint64_t seed) {
  if (!tc_available<aura::EncodeConfig<Dim, 4, DType::bf16>>()) GTEST_SKIP() << "no tensor-core path on this device";
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

// The default options take the tensor-core kernel above small_rows (two
// rotation parts, as the tests above); three parts; a capped grid (several blocks per workgroup), with and
// without the prefetch of the next block; Dim 512 keeps the f32 kernel.
TEST_F(AuraEncode, TensorCoresDefaultPathAndOptions) {
  using C128 = aura::EncodeConfig<128, 4, DType::bf16>;
  if (!tc_available<C128>()) GTEST_SKIP() << "no tensor-core path on this device";
  Context& ctx = context();
  EXPECT_EQ(aura::Encode<C128>(ctx).path(64), aura::EncodePath::few_rows);
  EXPECT_EQ(aura::Encode<C128>(ctx).path(65), aura::EncodePath::cooperative_matrix_nv);
  aura::EncodeOptions portable;
  portable.tensor_cores = false;
  EXPECT_EQ(aura::Encode<C128>(ctx, portable).path(65), aura::EncodePath::tiled);
  EXPECT_EQ((aura::Encode<aura::EncodeConfig<512, 4, DType::bf16>>(ctx).path(1000)), aura::EncodePath::tiled);
  check_tc<128, 4, DType::bf16>(4096, 1500, aura::EncodeOptions{});
  check_tc<256, 4, DType::bf16>(4096, 1501, aura::EncodeOptions{});
  check_tc<128, 4, DType::bf16>(20000, 1502, tc_options(false, 3, 7));
  check_tc<256, 3, DType::f32>(3001, 1503, tc_options(false, 3, 5));
  check_tc<128, 4, DType::bf16>(3001, 1507, tc_options(false, 3, 5, false));
  check_tc<256, 4, DType::f16>(1001, 1508, tc_options(false, 3, 0, false));
  check_tc<128, 4, DType::bf16>(1000, 1504, tc_options(false, 3));
  check_tc<256, 8, DType::f16>(1000, 1505, tc_options(false, 3));
  check_tc<128, 6, DType::f32>(1000, 1506, tc_options(false, 3));
  // 512 invocations; 64-row blocks; both.
  check_tc<128, 4, DType::bf16>(5000, 1510, tc_options(false, 3, 0, true, 512));
  check_tc<256, 4, DType::bf16>(5000, 1511, tc_options(false, 3, 0, true, 512));
  check_tc<128, 6, DType::f32>(1000, 1512, tc_options(false, 3, 0, true, 512));
  check_tc<256, 3, DType::f16>(1000, 1513, tc_options(false, 3, 0, true, 512));
  check_tc<96, 8, DType::bf16>(1000, 1514, tc_options(false, 3, 0, true, 512));
  check_tc<128, 4, DType::bf16>(5000, 1515, tc_options(false, 3, 0, true, 256, 64));
  check_tc<64, 8, DType::f16>(1000, 1516, tc_options(false, 3, 0, true, 256, 64));
  check_tc<128, 4, DType::bf16>(5000, 1517, tc_options(false, 3, 0, true, 512, 64));
  check_tc<256, 2, DType::f32>(1000, 1518, tc_options(false, 2, 0, true, 512, 32));
  EXPECT_THROW((aura::Encode<C128>(ctx, tc_options(false, 4))), Error);
  EXPECT_THROW((aura::Encode<C128>(ctx, tc_options(false, 3, 0, true, 384))), Error);
  EXPECT_THROW((aura::Encode<C128>(ctx, tc_options(false, 3, 0, true, 0, 48))), Error);
}

TEST_F(AuraEncode, TensorCoresTiesZeroNanAndInfRows) {
  if (!tc_available<aura::EncodeConfig<128, 4, DType::f32>>()) GTEST_SKIP() << "no tensor-core path on this device";
  const auto o = tc_options(false);
  check_ties<2>(o);
  check_ties<3>(o);
  check_ties<4>(o);
  check_ties<6>(o);
  check_ties<8>(o);
  aura::EncodeOptions wide = o;
  wide.tc_invocations = 512;
  check_ties<4>(wide);
  check_special_rows<aura::Encode<aura::EncodeConfig<128, 4, DType::bf16>>, 128, 4, DType::bf16>(false, o);
  check_special_rows<aura::Encode<aura::EncodeConfig<96, 3, DType::f32>>, 96, 3, DType::f32>(false, o);
  check_special_rows<aura::Encode<aura::EncodeConfig<256, 8, DType::f16>>, 256, 8, DType::f16>(false, o);
}

// The emulation variant on any device (lavapipe included): a few shapes,
// geometries and both rotation splits; kept small (plain loops on a CPU).
TEST_F(AuraEncode, TensorCoreKernelEmulated) {
  if (!tc_emulation_available<aura::EncodeConfig<128, 4, DType::bf16>>())
    GTEST_SKIP() << "the build has no tensor-core shader (glslc without GL_NV_cooperative_matrix)";
  check_tc<128, 4, DType::bf16>(300, 1600, tc_options(true, 3, 2));
  check_tc<128, 2, DType::bf16>(200, 1605, tc_options(true, 3, 2, false));
  check_tc<96, 3, DType::f16>(37, 1601, tc_options(true));
  check_tc<256, 6, DType::f32>(40, 1602, tc_options(true));
  check_tc<64, 8, DType::f32>(7, 1603, tc_options(true, 2));
  check_tc<32, 2, DType::bf16>(17, 1604, tc_options(true));
  check_tc<128, 4, DType::bf16>(100, 1606, tc_options(true, 3, 0, true, 512, 32));
  check_tc<128, 8, DType::bf16>(150, 1608, tc_options(true, 3, 1));
  check_tc<256, 3, DType::f16>(40, 1607, tc_options(true, 3, 2, false, 512));
  check_ties<4>(tc_options(true));
  check_special_rows<aura::Encode<aura::EncodeConfig<128, 4, DType::bf16>>, 128, 4, DType::bf16>(false, tc_options(true));
  check_special_rows<aura::Encode<aura::EncodeConfig<96, 3, DType::f32>>, 96, 3, DType::f32>(false, tc_options(true));
}

}  // namespace
