// SPDX-License-Identifier: MIT
// Helpers shared by the AURA encode/decode tests: cached codebooks and
// rotations (the 512-dim dense rotation takes a fraction of a second), and
// the code comparison that tolerates only values within f32 rounding of a
// boundary.
#pragma once

#include <tilekernels/aura/codebook.hpp>
#include <tilekernels/aura/encode.hpp>
#include <tilekernels/aura/rotation.hpp>
#include <tilekernels/reference/aura/encode.hpp>

#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "../support.hpp"

namespace tktest::aura_support {

namespace aura = tilekernels::aura;

// A rotated value closer than this to a boundary may be quantised to either
// side by f32 arithmetic (dot products of <= 512 terms of unit-scale values
// carry errors of a few 1e-7).
inline constexpr double kBoundaryMargin = 4e-6;

inline const aura::Codebook& codebook(std::uint32_t dim, std::uint32_t bits) {
  static std::map<std::pair<std::uint32_t, std::uint32_t>, aura::Codebook> cache;
  auto it = cache.find({dim, bits});
  if (it == cache.end()) it = cache.emplace(std::pair{dim, bits}, aura::lloyd_max_codebook(dim, bits)).first;
  return it->second;
}

inline const std::vector<float>& dense_rotation(std::uint32_t dim) {
  static std::map<std::uint32_t, std::vector<float>> cache;
  auto it = cache.find(dim);
  if (it == cache.end()) it = cache.emplace(dim, aura::dense_rotation(dim, 1234 + dim)).first;
  return it->second;
}

// Rows of normals with magnitudes spread over 1e-3 .. 1e3, or row r times
// row_scales[r % size] where given.
inline std::vector<float> make_rows(Rng& rng, std::size_t rows, std::size_t dim, DType dtype,
                                    const std::vector<float>* row_scales = nullptr) {
  std::vector<float> x(rows * dim);
  for (std::size_t r = 0; r < rows; ++r) {
    const float scale =
        row_scales ? (*row_scales)[r % row_scales->size()] : std::pow(10.0f, rng.uniform(-3.0f, 3.0f));
    for (std::size_t d = 0; d < dim; ++d) x[r * dim + d] = rng.normal() * scale;
  }
  return rounded(dtype, x);
}

// What aura::Decode reads: rows of random words (every bit a code bit) and
// norms in [0.01, 50) (row 0's 0 where zero_first: a zero row decodes to
// zeros), uploaded.
struct PackedRows {
  std::vector<std::uint32_t> words;
  std::vector<float> norms;
  Tensor packed, norms_tensor;
};
inline PackedRows random_packed_rows(Context& ctx, Rng& rng, std::size_t rows, std::size_t words_per_row,
                                     bool zero_first = false) {
  std::vector<std::uint32_t> words(rows * words_per_row);
  for (auto& w : words) w = static_cast<std::uint32_t>(rng.next());
  std::vector<float> norms(rows);
  for (auto& v : norms) v = rng.uniform(0.01f, 50.0f);
  if (zero_first) norms[0] = 0.0f;
  const auto R = static_cast<std::int64_t>(rows);
  Tensor packed(ctx, DType::u32, {R, static_cast<std::int64_t>(words_per_row)});
  packed.upload(std::span<const std::uint32_t>(words));
  Tensor norms_tensor = Tensor::from_floats(ctx, DType::f32, {R}, norms);
  return PackedRows{std::move(words), std::move(norms), std::move(packed), std::move(norms_tensor)};
}

struct CodeComparison {
  std::size_t mismatches = 0;       // codes that differ from the reference
  std::size_t unexplained = 0;      // ... of which not within kBoundaryMargin of a boundary
  double worst_norm_error = 0;      // relative, against the norm implied by the kernel's codes
};

// Compares packed codes with the reference and the norms with what the
// kernel's own codes imply (so a tolerated code flip does not fail the norm).
inline CodeComparison compare(const std::vector<std::uint32_t>& packed, const std::vector<float>& norms,
                              const reference::aura::EncodeResult& ref, const std::vector<float>& input,
                              std::size_t rows, std::size_t dim, std::uint32_t bits,
                              const std::vector<float>& codebook) {
  CodeComparison c;
  const auto codes = reference::aura::unpack(packed, rows, dim, bits);
  for (std::size_t i = 0; i < rows * dim; ++i)
    if (codes[i] != ref.codes[i]) {
      ++c.mismatches;
      if (!(ref.margin[i] < kBoundaryMargin)) ++c.unexplained;
    }
  for (std::size_t r = 0; r < rows; ++r) {
    const double expected = reference::aura::corrected_norm(
        std::span(input).subspan(r * dim, dim), std::span(codes).subspan(r * dim, dim), codebook);
    const double err = expected == 0 ? std::abs(norms[r]) : std::abs(norms[r] - expected) / expected;
    c.worst_norm_error = std::max(c.worst_norm_error, std::isnan(err) ? 1e30 : err);
  }
  return c;
}

// Running an encode kernel twice (bit-identical results required), and
// random rows with their tables and guarded outputs.
inline constexpr double kNormBudget = 1e-5;  // norms, relative

struct EncodeRun {
  std::vector<std::uint32_t> packed;
  std::vector<float> norms;
};

// Runs `plan` of an encode kernel twice on `args` and returns the first
// result; the second must equal it bit for bit.
template <class Kernel>
EncodeRun run_plan_twice(Context& ctx, const Kernel& kernel, const typename Kernel::Args& args,
                         const typename Kernel::Plan& plan, GuardedTensor& packed, GuardedTensor& norms) {
  const auto run = [&](const typename Kernel::Args& a) {
    packed.poison();
    norms.poison();
    ctx.submit_and_wait([&](vk::CommandBuffer cmd) { kernel.record(cmd, a, plan); });
    return EncodeRun{packed.read_words(), norms.read_floats()};
  };
  const EncodeRun first = run(args);
  typename Kernel::Args again_args = args;
  if constexpr (requires { again_args.workspace; }) {
    if (again_args.workspace) again_args.workspace->zeroed = true;  // the first run must have left it so
  }
  const EncodeRun again = run(again_args);
  EXPECT_EQ(first.packed, again.packed) << "packed codes moved between two runs";
  EXPECT_EQ(0, std::memcmp(first.norms.data(), again.norms.data(), first.norms.size() * 4)) << "norms moved";
  return first;
}

// Runs `variant` of an encode kernel (null: the automatic choice) twice on
// `args`. A kernel that can use a workspace gets one of NaN words between
// sentinels: the first run zero-fills what must start zero, the second
// declares it zero.
template <class Kernel>
EncodeRun run_twice(Context& ctx, Kernel& kernel, typename Kernel::Args args, GuardedTensor& packed,
                    GuardedTensor& norms, const Variant<typename Kernel::Problem>* variant = nullptr) {
  std::optional<GuardedTensor> ws;
  if constexpr (requires { args.workspace; }) {
    if (const auto bytes = Kernel::workspace_bytes({args.input.shape[0]})) {
      ws.emplace(ctx, DType::u32, Shape{static_cast<std::int64_t>(bytes / 4)});
      args.workspace = Workspace{ws->ref()};
    }
  }
  auto plan = kernel.plan(args);
  if (variant) {
    plan.variant = variant;
    if constexpr (requires { plan.tm; })
      if (variant->name == "tiled" && plan.tm == 0) plan.tm = Kernel::rows_per_invocation(args.input.shape[0]);
    kernel.prepare(plan);
  }
  const EncodeRun first = run_plan_twice(ctx, kernel, args, plan, packed, norms);
  if (ws) {
    EXPECT_TRUE(ws->guards_intact()) << "the kernel wrote outside its workspace";
  }
  return first;
}

// The problem an encode kernel sees for `rows` rows (with a workspace where
// it takes one), so that tests can list its eligible variants.
template <class Kernel>
typename Kernel::Problem encode_problem(std::size_t rows) {
  typename Kernel::Problem p;
  p.rows = static_cast<std::int64_t>(rows);
  if constexpr (requires { p.workspace; }) p.workspace = true;
  return p;
}

// Calls check(run, label) for every variant of Kernel this device has for
// `rows` rows, run being run_twice's result; of the few_rows variants only
// the automatic one (test_encode_few_rows.cpp runs them all).
template <class Kernel, class Check>
void on_every_variant(Context& ctx, Kernel& kernel, const typename Kernel::Args& args, GuardedTensor& packed,
                      GuardedTensor& norms, Check&& check) {
  const auto variants = eligible_variants<Kernel>(ctx, encode_problem<Kernel>(static_cast<std::size_t>(args.input.shape[0])));
  ASSERT_FALSE(variants.empty());
  EXPECT_EQ(variants.back()->path, Path::portable);
  bool few_rows = false;
  for (const auto* v : variants) {
    if (v->name.substr(0, 8) == "few_rows") {
      if (few_rows) continue;
      few_rows = true;
    }
    // Each (Dim, Bits, In) of the matrix-unit variant is a pipeline that
    // takes seconds to build on a CPU device: the tensor-core tests cover
    // it there.
    if (v->path == Path::tensor_core_fp16 && ctx.info().is_cpu()) continue;
    SCOPED_TRACE("variant " + std::string(v->name));
    check(run_twice(ctx, kernel, args, packed, norms, v), std::string(Kernel::name) + " " + std::string(v->name));
  }
}

// Random rows of one (Dim, Bits, In) with the codebook's tables and
// NaN-guarded outputs; `bounds_override` replaces the boundaries,
// `row_scales` the rows' random magnitudes (make_rows).
template <class Config>
struct RandomRows {
  RandomRows(Context& ctx, std::size_t rows_, std::uint64_t seed, const std::vector<float>* bounds_override = nullptr,
             const std::vector<float>* row_scales = nullptr)
      : rows(rows_),
        cb(codebook(Config::dim, Config::bits)),
        boundaries(bounds_override ? *bounds_override : cb.boundaries),
        x(make_x(seed, row_scales)),
        input(Tensor::from_floats(ctx, Config::in_dtype, {R(), Config::dim}, x)),
        bounds(Tensor::from_floats(ctx, DType::f32, {Config::levels - 1}, boundaries)),
        codes(Tensor::from_floats(ctx, DType::f32, {Config::levels}, cb.codebook)),
        packed(ctx, DType::u32, {R(), Config::packed_words}),
        norms(ctx, DType::f32, {R()}) {}

  std::int64_t R() const { return static_cast<std::int64_t>(rows); }
  std::vector<float> make_x(std::uint64_t seed, const std::vector<float>* row_scales) const {
    Rng rng(seed);
    return make_rows(rng, rows, Config::dim, Config::in_dtype, row_scales);
  }

  // Checks `got` against the reference encode with `rotation`: codes exact
  // away from boundaries, few flips near them, norms within budget.
  reference::aura::EncodeResult check(const EncodeRun& got, const std::vector<float>& rotation,
                                      const std::string& label) const {
    const char* what = label.c_str();
    const auto ref = reference::aura::encode(x, rows, Config::dim, Config::bits, rotation, boundaries, cb.codebook);
    const auto c = compare(got.packed, got.norms, ref, x, rows, Config::dim, Config::bits, cb.codebook);
    EXPECT_EQ(c.unexplained, 0u) << what << ": codes differ from the reference away from any boundary";
    EXPECT_LE(c.mismatches, rows * Config::dim / 1000 + 2) << what << ": too many codes within rounding of a boundary";
    EXPECT_LE(c.worst_norm_error, kNormBudget) << what << ": norm relative error";
    if (c.mismatches)
      std::printf("  [%s Dim=%u Bits=%u rows=%zu] %zu code(s) within %.0e of a boundary differ\n", what, Config::dim,
                  Config::bits, rows, c.mismatches, kBoundaryMargin);
    return ref;
  }

  std::size_t rows;
  const aura::Codebook& cb;
  std::vector<float> boundaries;
  std::vector<float> x;
  Tensor input, bounds, codes;
  GuardedTensor packed, norms;
};

}  // namespace tktest::aura_support
