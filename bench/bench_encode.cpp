// aura::Encode (dense rotation: default path, f32 kernel, tensor-core
// kernel), aura::HadamardEncode and aura::Decode at the shapes:
// rows {8, 4096, 262144} x Dim {128, 256}, 4 bits, bf16 input. Bytes: input read once, packed codes and norms written once (the
// rotation / signs / tables are read once per workgroup from cache and not
// counted). Flops: the dense product, 2 * rows * Dim^2 (encode and decode);
// the Hadamard transform's rows * Dim * log2(Dim) additions are not counted.
#include <tilekernels/aura/codebook.hpp>
#include <tilekernels/aura/decode.hpp>
#include <tilekernels/aura/encode.hpp>
#include <tilekernels/aura/rotation.hpp>

#include <vector>

#include "common.hpp"

namespace {

using namespace tkbench;
namespace aura = tilekernels::aura;

enum Kind { dense = 0, hadamard = 1, hadamard_legacy = 2, hadamard_blocks2 = 3, hadamard_blocks4 = 4,
            hadamard_blocks8 = 5, hadamard_wg512 = 6, hadamard_portable = 7, dense_tiled = 8, hadamard_v64 = 9,
            hadamard_v16 = 10, hadamard_wide_cells = 11, hadamard_wide_cells_blocks4 = 12, dense_tc = 13,
            dense_tc_parts3 = 14, dense_tc_wg1056 = 15, dense_tc_wg264 = 16, dense_tc_no_prefetch = 17,
            dense_tc_inv512 = 18, dense_tc_bm64 = 19, dense_tc_inv512_bm64 = 20, dense_tc_inv512_parts3 = 21,
            few32 = 22, few16 = 23, few8 = 24, few32_counter = 25, few16_counter = 26, few8_counter = 27 };

// Dense kinds: dense (the default options: the tensor-core kernel where the
// device has it, above small_rows), dense_tiled (the f32 kernel), dense_tc*
// (the tensor-core kernel at any row count: default options, 3 rotation
// parts, grid caps, without the next block's prefetch, 512 invocations,
// 64-row blocks).
aura::EncodeOptions dense_options(std::int64_t kind) {
  aura::EncodeOptions o;
  if (kind == dense) return o;
  if (kind >= few32) {
    const std::uint32_t blocks[] = {32, 16, 8};
    o.small_block = blocks[(kind - few32) % 3];
    o.small_atomic64 = kind < few32_counter;
    return o;
  }
  o.small_rows = 0;
  if (kind == dense_tiled) o.tensor_cores = false;
  if (kind == dense_tc_parts3 || kind == dense_tc_inv512_parts3) o.rotation_parts = 3;
  if (kind == dense_tc_wg1056) o.tc_workgroups = 1056;
  if (kind == dense_tc_wg264) o.tc_workgroups = 264;
  if (kind == dense_tc_no_prefetch) o.tc_prefetch = false;
  if (kind == dense_tc_inv512 || kind == dense_tc_inv512_bm64 || kind == dense_tc_inv512_parts3) o.tc_invocations = 512;
  if (kind == dense_tc_bm64 || kind == dense_tc_inv512_bm64) o.tc_block_rows = 64;
  return o;
}

bool is_dense(std::int64_t kind) { return kind == dense || kind == dense_tiled || kind >= dense_tc; }
bool is_tc_kind(std::int64_t kind) { return kind >= dense_tc && kind < few32; }

aura::HadamardEncodeOptions hadamard_options(std::int64_t kind) {
  switch (kind) {
    case hadamard_legacy: return {0, 0, false, true};
    case hadamard_blocks2: return {0, 0, false, false, 2};
    case hadamard_blocks4: return {0, 0, false, false, 4};
    case hadamard_blocks8: return {0, 0, false, false, 8};
    case hadamard_wg512: return {0, 512, false, false};
    case hadamard_portable: return {0, 0, true, false};
    case hadamard_v64: return {64, 0, false, false};
    case hadamard_v16: return {16, 0, false, false};
    case hadamard_wide_cells: return {0, 0, false, false, 0, true};
    case hadamard_wide_cells_blocks4: return {0, 0, false, false, 4, true};
    default: return {};
  }
}

// Args: rows, kind (0 dense, 1 Hadamard, 2.. Hadamard variants: see Kind).
template <std::uint32_t Dim>
void BM_AuraEncode(benchmark::State& state) {
  using Config = aura::EncodeConfig<Dim, 4, DType::bf16>;
  Context& ctx = context();
  const std::int64_t rows = state.range(0);
  const bool is_hadamard = !is_dense(state.range(1));
  const double bytes = double(rows) * (Dim * 2 + Config::packed_words * 4 + 4);
  const double flops = is_hadamard ? 0.0 : 2.0 * double(rows) * Dim * Dim;
  const int sets = rotation_sets(bytes);
  std::vector<float> x(static_cast<std::size_t>(rows) * Dim);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 2001) * 1e-3f - 1.0f;
  const auto cb = aura::lloyd_max_codebook(Dim, 4);
  const auto signs = aura::hadamard_signs(Dim, 1);
  auto rotation = Tensor::from_floats(ctx, DType::f32, {Dim, Dim}, aura::hadamard_matrix(signs));
  auto sign_t = Tensor::from_floats(ctx, DType::f32, {Dim}, signs);
  auto bounds = Tensor::from_floats(ctx, DType::f32, {Config::levels - 1}, cb.boundaries);
  auto codes = Tensor::from_floats(ctx, DType::f32, {Config::levels}, cb.codebook);
  struct Set {
    Tensor input, packed, norms;
  };
  std::vector<Set> inputs;
  for (int s = 0; s < sets; ++s)
    inputs.push_back({Tensor::from_floats(ctx, DType::bf16, {rows, Dim}, x),
                      Tensor(ctx, DType::u32, {rows, Config::packed_words}), Tensor(ctx, DType::f32, {rows})});
  aura::Encode<Config> dense_kernel(ctx, dense_options(state.range(1)));
  if (!is_hadamard && is_tc_kind(state.range(1)) &&
      dense_kernel.path(rows) != aura::EncodePath::cooperative_matrix_nv) {
    state.SkipWithError("no tensor-core path on this device");
    return;
  }
  aura::HadamardEncode<Config> hadamard_kernel(ctx, hadamard_options(state.range(1)));
  run_timed(state, ctx, [&](vk::CommandBuffer cmd, int i) {
    const Set& s = inputs[static_cast<std::size_t>(i % sets)];
    if (is_hadamard)
      hadamard_kernel.record(cmd, {s.input, sign_t, bounds, codes, s.packed, s.norms});
    else
      dense_kernel.record(cmd, {s.input, rotation, bounds, codes, s.packed, s.norms});
  }, bytes, flops);
  if (!is_hadamard && dense_kernel.path(rows) == aura::EncodePath::tiled)
    state.counters["rows_per_inv"] = aura::Encode<Config>::rows_per_invocation(rows);
  if (!is_hadamard) state.counters["tensor_cores"] = dense_kernel.path(rows) == aura::EncodePath::cooperative_matrix_nv;
}

BENCHMARK(BM_AuraEncode<128>)
    ->ArgsProduct({{8, 4096, 262144}, {dense, hadamard, hadamard_legacy, hadamard_blocks2, hadamard_blocks4,
                                       hadamard_blocks8, hadamard_wg512, hadamard_portable, dense_tiled, hadamard_v64,
                                       hadamard_v16, hadamard_wide_cells, hadamard_wide_cells_blocks4}})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AuraEncode<256>)
    ->ArgsProduct({{8, 4096, 262144}, {dense, hadamard, hadamard_legacy, hadamard_blocks2, hadamard_blocks4,
                                       hadamard_blocks8, hadamard_wg512, hadamard_portable, dense_tiled, hadamard_v64,
                                       hadamard_v16, hadamard_wide_cells, hadamard_wide_cells_blocks4}})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

// The few-rows kernel (dense at 8 rows above) with each coordinate block,
// 32, 16 and 8, the norm parts combined by 64-bit atomics (few*) or by the
// arrival counter (few*_counter).
BENCHMARK(BM_AuraEncode<128>)
    ->ArgsProduct({{8, 64}, {few32, few16, few8, few32_counter, few16_counter, few8_counter}})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AuraEncode<256>)
    ->ArgsProduct({{8, 64}, {few32, few16, few8, few32_counter, few16_counter, few8_counter}})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

// The tensor-core kernel next to the dense entries above (which take it by
// default where the device has it): the defaults (2 rotation parts), 3
// parts, grid caps, no prefetch, 512 invocations, 64-row blocks.
BENCHMARK(BM_AuraEncode<128>)
    ->ArgsProduct({{4096, 262144}, {dense_tc, dense_tc_parts3, dense_tc_wg1056, dense_tc_wg264, dense_tc_no_prefetch,
                                  dense_tc_inv512, dense_tc_bm64, dense_tc_inv512_bm64, dense_tc_inv512_parts3}})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AuraEncode<256>)
    ->ArgsProduct({{4096, 262144}, {dense_tc, dense_tc_parts3, dense_tc_wg1056, dense_tc_wg264, dense_tc_no_prefetch,
                                  dense_tc_inv512, dense_tc_bm64, dense_tc_inv512_bm64, dense_tc_inv512_parts3}})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

// Decode to bf16: packed + norms read, rows x Dim bf16 written.
template <std::uint32_t Dim>
void BM_AuraDecode(benchmark::State& state) {
  using Config = aura::DecodeConfig<Dim, 4, DType::bf16>;
  Context& ctx = context();
  const std::int64_t rows = state.range(0);
  const double bytes = double(rows) * (Dim * 2 + Config::packed_words * 4 + 4);
  const double flops = 2.0 * double(rows) * Dim * Dim;
  std::vector<std::uint32_t> words(static_cast<std::size_t>(rows) * Config::packed_words);
  for (std::size_t i = 0; i < words.size(); ++i) words[i] = static_cast<std::uint32_t>(i * 2654435761u);
  std::vector<float> n(static_cast<std::size_t>(rows), 1.5f);
  const auto cb = aura::lloyd_max_codebook(Dim, 4);
  Tensor packed(ctx, DType::u32, {rows, Config::packed_words});
  packed.upload(std::span<const std::uint32_t>(words));
  auto norms = Tensor::from_floats(ctx, DType::f32, {rows}, n);
  auto rotation = Tensor::from_floats(ctx, DType::f32, {Dim, Dim}, aura::hadamard_rotation(Dim, 1));
  auto codes = Tensor::from_floats(ctx, DType::f32, {Config::levels}, cb.codebook);
  Tensor out(ctx, DType::bf16, {rows, Dim});
  aura::Decode<Config> kernel(ctx);
  run_timed(state, ctx, [&](vk::CommandBuffer cmd, int) { kernel.record(cmd, {packed, norms, rotation, codes, out}); },
            bytes, flops);
}
BENCHMARK(BM_AuraDecode<128>)->Arg(8)->Arg(262144)->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

}  // namespace
