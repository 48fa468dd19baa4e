// SPDX-License-Identifier: MIT
// aura::Encode (dense rotation), aura::HadamardEncode and aura::Decode at
// the shapes:
// rows {8, 4096, 262144} x Dim {128, 256}, 4 bits, bf16 input. Bytes: input read once, packed codes and norms written once (the
// rotation / signs / tables are read once per workgroup from cache and not
// counted). Flops: the dense product, 2 * rows * Dim^2 (encode and decode);
// the Hadamard transform's rows * Dim * log2(Dim) additions are not counted.
#include <tilekernels/aura/codebook.hpp>
#include <tilekernels/aura/decode.hpp>
#include <tilekernels/aura/encode.hpp>
#include <tilekernels/aura/rotation.hpp>

#include <optional>
#include <vector>

#include "common.hpp"

namespace {

using namespace tkbench;
namespace aura = tilekernels::aura;

// Args: rows and a kind: the dense encode (the automatic plan with a
// workspace zeroed once, as an engine keeps it; with a zero fill recorded
// per call; or one variant of its table), or the Hadamard encode (the
// automatic plan, its portable variant, or a geometry: values per
// invocation, invocations, blocks per workgroup).
enum Kind {
  dense, dense_fill, dense_tiled, dense_tc, dense_tc_parts3, few_c8, few_c16, few_c32, few_c8_counter,
  few_c16_counter, few_c32_counter, hadamard, hadamard_portable, hadamard_blocks2, hadamard_blocks4,
  hadamard_blocks8, hadamard_wg512, hadamard_v16, hadamard_v64
};
const char* dense_variant(std::int64_t kind) {
  switch (kind) {
    case dense_tiled: return "tiled";
    case dense_tc: case dense_tc_parts3: return "tensor_core_fp16";
    case few_c8: return "few_rows_c8_atomic64";
    case few_c16: return "few_rows_c16_atomic64";
    case few_c32: return "few_rows_c32_atomic64";
    case few_c8_counter: return "few_rows_c8";
    case few_c16_counter: return "few_rows_c16";
    case few_c32_counter: return "few_rows_c32";
    default: return "auto";
  }
}

template <std::uint32_t Dim>
void BM_AuraEncode(benchmark::State& state) {
  using Config = aura::EncodeConfig<Dim, 4, DType::bf16>;
  using Dense = aura::Encode<Config>;
  using Hadamard = aura::HadamardEncode<Config>;
  Context& ctx = context();
  const std::int64_t rows = state.range(0), kind = state.range(1);
  const bool is_hadamard = kind >= hadamard;
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
  if (is_hadamard) {
    const Hadamard kernel(ctx);
    auto plan = kernel.plan({inputs[0].input, sign_t, bounds, codes, inputs[0].packed, inputs[0].norms});
    auto& g = plan.geometry;
    if (kind == hadamard_portable && !choose_variant<Hadamard>(state, ctx, "portable", {rows}, plan.variant)) return;
    if (kind == hadamard_blocks2 || kind == hadamard_blocks4 || kind == hadamard_blocks8)
      g.blocks = kind == hadamard_blocks2 ? 2 : kind == hadamard_blocks4 ? 4 : 8;
    if (kind == hadamard_wg512) g.invocations = 512;
    if (kind == hadamard_v16 || kind == hadamard_v64) {
      g.values = kind == hadamard_v16 ? 16 : 64;
      g.invocations = std::max<std::uint32_t>(256, Dim / g.values);
    }
    run_timed(state, ctx, [&](vk::CommandBuffer cmd, int i) {
      const Set& s = inputs[static_cast<std::size_t>(i % sets)];
      kernel.record(cmd, {s.input, sign_t, bounds, codes, s.packed, s.norms}, plan);
    }, bytes, flops);
    state.SetLabel(std::string(plan.variant->name));
    return;
  }
  const Dense kernel(ctx, aura::EncodeOptions{kind == dense_tc_parts3 ? 3u : 2u});
  const auto ws_bytes = std::max<std::uint64_t>(4, Dense::workspace_bytes({rows}));
  Tensor ws(ctx, DType::u32, {static_cast<std::int64_t>(ws_bytes / 4)});
  ws.buffer().fill(0);
  const std::optional<Workspace> workspace =
      Dense::workspace_bytes({rows}) ? std::optional<Workspace>(Workspace{ws.ref(), kind != dense_fill}) : std::nullopt;
  auto plan = kernel.plan({inputs[0].input, rotation, bounds, codes, inputs[0].packed, inputs[0].norms, workspace});
  if (!choose_variant<Dense>(state, ctx, dense_variant(kind), {rows, workspace.has_value()}, plan.variant)) return;
  run_timed(state, ctx, [&](vk::CommandBuffer cmd, int i) {
    const Set& s = inputs[static_cast<std::size_t>(i % sets)];
    kernel.record(cmd, {s.input, rotation, bounds, codes, s.packed, s.norms, workspace}, plan);
  }, bytes, flops);
  state.SetLabel(std::string(plan.variant->name));
}

// The headline shapes of the default plans.
BENCHMARK(BM_AuraEncode<128>)->ArgsProduct({{8, 4096, 262144}, {dense, hadamard}})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AuraEncode<256>)->ArgsProduct({{8, 4096, 262144}, {dense, hadamard}})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

// Variants and geometries behind the automatic choice (--benchmark_filter=^Sweep_).
BENCHMARK(BM_AuraEncode<128>)->Name("Sweep_AuraEncode<128>")
    ->ArgsProduct({{8, 64}, {dense_fill, few_c8, few_c16, few_c32, few_c8_counter, few_c16_counter, few_c32_counter}})
    ->ArgsProduct({{4096, 262144}, {dense_tiled, dense_tc, dense_tc_parts3, hadamard_portable, hadamard_blocks2,
                                    hadamard_blocks4, hadamard_blocks8, hadamard_wg512, hadamard_v16, hadamard_v64}})
    ->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AuraEncode<256>)->Name("Sweep_AuraEncode<256>")
    ->ArgsProduct({{8, 64}, {dense_fill, few_c8, few_c16, few_c32, few_c8_counter, few_c16_counter, few_c32_counter}})
    ->ArgsProduct({{4096, 262144}, {dense_tiled, dense_tc, dense_tc_parts3, hadamard_portable, hadamard_blocks4}})
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
