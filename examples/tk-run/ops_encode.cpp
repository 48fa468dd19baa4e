// SPDX-License-Identifier: MIT
// tk-run ops aura.codebook, aura.rotation, aura.encode.
#include <tilekernels/aura/codebook.hpp>
#include <tilekernels/aura/encode.hpp>
#include <tilekernels/aura/rotation.hpp>

#include <bit>

#include "op.hpp"

namespace {

using namespace tkrun;
using tilekernels::DType;
using tilekernels::Tensor;

// Dims the encode op is instantiated for (EncodeConfig allows any multiple
// of 32 up to 512; these are the common head dims).
#define TK_ENCODE_DIMS 32, 64, 96, 128, 160, 192, 256, 384, 512

void run_codebook(tilekernels::Context&, Invocation& inv) {
  const std::int64_t dim = inv.int_param("dim"), bits = inv.int_param("bits");
  if (dim < 3 || dim > 65536) throw UsageError("parameter 'dim' must be in [3, 65536], got " + std::to_string(dim));
  if (bits < 1 || bits > 8) throw UsageError("parameter 'bits' must be in [1, 8], got " + std::to_string(bits));
  const auto cb = tilekernels::aura::lloyd_max_codebook(static_cast<std::uint32_t>(dim), static_cast<std::uint32_t>(bits));
  const std::int64_t levels = std::int64_t{1} << bits;
  inv.put("boundaries", {levels - 1}, cb.boundaries);
  inv.put("codebook", {levels}, cb.codebook);
}

void run_rotation(tilekernels::Context&, Invocation& inv) {
  const std::int64_t dim = inv.int_param("dim");
  const std::uint64_t seed = inv.seed_param("seed");  // as aura.cache_write's k_seed and v_seed
  const std::string kind = inv.param("kind");
  if (kind != "dense" && kind != "hadamard")
    throw UsageError("parameter 'kind' must be dense or hadamard, got '" + printable(kind, 60) + "'");
  const std::int64_t most = kind == "dense" ? 512 : 4096;
  if (dim < 1 || dim > most)
    throw UsageError("parameter 'dim' must be in [1, " + std::to_string(most) + "] for kind=" + kind + ", got " +
                     std::to_string(dim));
  const auto d = static_cast<std::uint32_t>(dim);
  if (kind == "dense") {
    if (inv.wants("signs")) throw UsageError("output 'signs' exists only for kind=hadamard");
    inv.put("rotation", {dim, dim}, tilekernels::aura::dense_rotation(d, seed));
  } else {
    if (!std::has_single_bit(d)) throw UsageError("kind=hadamard needs 'dim' a power of two, got " + std::to_string(dim));
    const auto signs = tilekernels::aura::hadamard_signs(d, seed);
    inv.put("rotation", {dim, dim}, tilekernels::aura::hadamard_matrix(signs));
    if (inv.wants("signs")) inv.put("signs", {dim}, signs);
  }
}

void run_encode(tilekernels::Context& ctx, Invocation& inv) {
  const DType in_dtype = float_dtype_param(inv, "in_dtype");
  const std::int64_t dim = inv.int_param("dim"), bits = inv.int_param("bits");
  const bool use_signs = inv.has_input("signs");
  if (use_signs == inv.has_input("rotation"))
    throw UsageError("give exactly one of the inputs 'rotation' (dense kernel) and 'signs' (Hadamard kernel)");
  with_value<TK_ENCODE_DIMS>("dim", dim, [&](auto d) {
    with_value<2, 3, 4, 6, 8>("bits", bits, [&](auto b) {
      with_float_dtype(in_dtype, [&](auto t) {
        using Config = tilekernels::aura::EncodeConfig<decltype(d)::value, decltype(b)::value, decltype(t)::value>;
        const Shape in_shape = inv.input_shape("input");
        if (in_shape.size() != 2 || in_shape[1] != dim)
          throw UsageError("input 'input': expected shape [rows, " + std::to_string(dim) + "], got " +
                           tilekernels::shape_string(in_shape));
        const std::int64_t rows = in_shape[0];
        const std::int64_t levels = Config::levels, words = Config::packed_words;
        const auto input = inv.upload(ctx, in_dtype, in_shape, inv.floats("input", in_shape), "input 'input'");
        const auto bounds =
            inv.upload(ctx, DType::f32, {levels - 1}, inv.floats("boundaries", {levels - 1}), "input 'boundaries'");
        const auto codes = inv.upload(ctx, DType::f32, {levels}, inv.floats("codebook", {levels}), "input 'codebook'");
        Tensor packed = inv.alloc(ctx, DType::u32, {rows, words}, "output 'packed'");
        Tensor norms = inv.alloc(ctx, DType::f32, {rows}, "output 'norms'");
        if (use_signs) {
          if constexpr (std::has_single_bit(decltype(d)::value)) {
            const auto signs = inv.upload(ctx, DType::f32, {dim}, inv.floats("signs", {dim}), "input 'signs'");
            tilekernels::aura::HadamardEncode<Config>(ctx).run({input, signs, bounds, codes, packed, norms});
          } else {
            throw UsageError("input 'signs' (Hadamard kernel) needs 'dim' a power of two, got " + std::to_string(dim));
          }
        } else {
          const auto rotation =
              inv.upload(ctx, DType::f32, {dim, dim}, inv.floats("rotation", {dim, dim}), "input 'rotation'");
          tilekernels::aura::Encode<Config>(ctx).run({input, rotation, bounds, codes, packed, norms});
        }
        inv.put_words("packed", {rows, words}, packed.download<std::uint32_t>());
        inv.put("norms", {rows}, norms.download_floats());
      });
    });
  });
}

const Registrar codebook{Op{
    "aura.codebook",
    "Lloyd-Max boundaries and codebook for one coordinate of a random unit vector in dim dimensions (bit-identical "
    "everywhere)",
    {{"dim", "128", "vector dimension, >= 3"}, {"bits", "4", "bits per code, 1..8"}},
    {},
    {{"boundaries", "f32", "[2^bits - 1]"}, {"codebook", "f32", "[2^bits]"}},
    run_codebook}};

const Registrar rotation{Op{
    "aura.rotation",
    "rotation matrix R from a seed (rotated[d] = sum_j R[d, j] x[j]): dense random orthogonal, or randomised "
    "Hadamard H diag(signs) / sqrt(dim)",
    {{"dim", "128", "dimension: dense 1..512, hadamard a power of two up to 4096"},
     {"seed", "0", "seed (identical output on every machine)"},
     {"kind", "dense", "dense or hadamard"}},
    {},
    {{"rotation", "f32", "[dim, dim]"}, {"signs", "f32", "[dim] (kind=hadamard)", true}},
    run_rotation}};

const Registrar encode{Op{
    "aura.encode",
    "fused encode: norm, rotation (dense 'rotation' or Hadamard 'signs'), Lloyd-Max codes packed at bit d*bits, "
    "norm-correction factors",
    {{"dim", "128", "row length: a multiple of 32 in 32..512 (32, 64, 96, 128, 160, 192, 256, 384, 512)"},
     {"bits", "4", "bits per code: 2, 3, 4, 6 or 8"},
     {"in_dtype", "bf16", "dtype the input is stored in (f32, f16, bf16); the input is rounded to it"}},
    {{"input", "in_dtype", "[rows, dim]"},
     {"rotation", "f32", "[dim, dim] (dense kernel; give this or signs)", true},
     {"signs", "f32", "[dim] (Hadamard kernel, dim a power of two)", true},
     {"boundaries", "f32", "[2^bits - 1]"},
     {"codebook", "f32", "[2^bits]"}},
    {{"packed", "u32", "[rows, dim * bits / 32]"}, {"norms", "f32", "[rows]"}},
    run_encode}};

}  // namespace
