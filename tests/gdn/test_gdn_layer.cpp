// SPDX-License-Identifier: MIT
// A GDN layer's life: chunked prefill (gdn::ChunkForward) of two prompts,
// then decode steps (gdn::RecurrentStep) on the state it leaves, one token,
// four (speculative) and a ragged step, all recorded in one command buffer
// on the synchronization-validation Context. Prompt plus decoded tokens
// must equal one token-by-token recurrence over the whole sequences (the
// double reference): within 1e-2 for the prompt's o (FLA's bf16 rounding
// points, as tests/gdn/test_chunk_forward.cpp), within 5e-3 for the
// decoded o and the final state (what remains of those roundings in the
// state the prefill hands over).
#include <tilekernels/gdn/chunk_forward.hpp>
#include <tilekernels/gdn/recurrent_step.hpp>

#include <numeric>

#include "gdn_cases.hpp"

namespace {

using namespace gdntest;

constexpr double kBudgetPrompt = 1e-2;
constexpr double kBudgetDecode = 5e-3;

// Rows `tokens` (flat token indices) of a [tokens, width] array.
std::vector<float> gather(const std::vector<float>& x, std::size_t width, const std::vector<std::size_t>& tokens) {
  std::vector<float> out;
  for (std::size_t t : tokens) out.insert(out.end(), x.begin() + std::ptrdiff_t(t * width), x.begin() + std::ptrdiff_t((t + 1) * width));
  return out;
}
std::vector<double> gather(const std::vector<double>& x, std::size_t width, const std::vector<std::size_t>& tokens) {
  std::vector<double> out;
  for (std::size_t t : tokens) out.insert(out.end(), x.begin() + std::ptrdiff_t(t * width), x.begin() + std::ptrdiff_t((t + 1) * width));
  return out;
}

template <std::uint32_t K, std::uint32_t V>
void prefill_then_decode(const Opts& opts, std::uint64_t seed) {
  using Forward = gdn::ChunkForward<gdn::ChunkForwardConfig<64, K, V>>;
  using Step = gdn::RecurrentStep<gdn::RecurrentStepConfig<K, V>>;
  Context& ctx = sync_context();
  const std::size_t Hg = 1, H = 2;
  const std::vector<std::size_t> prompt{70, 80};
  // Decode steps: tokens per sequence; the second is speculative, the
  // third ragged (cu_seqlens).
  const std::vector<std::vector<std::size_t>> steps{{1, 1}, {4, 4}, {1, 3}};
  const std::vector<bool> ragged{false, false, true};
  std::vector<std::int32_t> cu_full{0};
  for (std::size_t n = 0; n < prompt.size(); ++n) {
    std::size_t len = prompt[n];
    for (const auto& s : steps) len += s[n];
    cu_full.push_back(cu_full.back() + std::int32_t(len));
  }
  Opts o = opts;
  o.h0 = true;
  const Case c = make_case(1, std::size_t(cu_full.back()), Hg, H, K, V, cu_full, o, seed);
  const auto exact = ref::gated_delta_rule(c.p, c.in());

  // Token rows of the prompt and of each step, in the order the kernels see them.
  std::vector<std::size_t> prompt_rows;
  std::vector<std::int32_t> prompt_cu{0};
  for (std::size_t n = 0; n < prompt.size(); ++n) {
    for (std::size_t t = 0; t < prompt[n]; ++t) prompt_rows.push_back(std::size_t(cu_full[n]) + t);
    prompt_cu.push_back(prompt_cu.back() + std::int32_t(prompt[n]));
  }
  std::vector<std::vector<std::size_t>> step_rows(steps.size());
  std::vector<std::size_t> done = prompt;
  for (std::size_t s = 0; s < steps.size(); ++s)
    for (std::size_t n = 0; n < prompt.size(); ++n)
      for (std::size_t t = 0; t < steps[s][n]; ++t) step_rows[s].push_back(std::size_t(cu_full[n]) + done[n]++);

  const std::int64_t N = std::int64_t(prompt.size()), Hi = std::int64_t(H), Hgi = std::int64_t(Hg);
  const auto rows_tensor = [&](const std::vector<std::size_t>& rows, std::int64_t B, std::int64_t T) {
    struct Inputs {
      Tensor q, k, v, g, beta;
    };
    return Inputs{Tensor::from_floats(ctx, DType::bf16, {B, T, Hgi, K}, gather(c.q, Hg * K, rows)),
                  Tensor::from_floats(ctx, DType::bf16, {B, T, Hgi, K}, gather(c.k, Hg * K, rows)),
                  Tensor::from_floats(ctx, DType::bf16, {B, T, Hi, V}, gather(c.v, H * V, rows)),
                  Tensor::from_floats(ctx, DType::f32, {B, T, Hi}, gather(c.g, H, rows)),
                  Tensor::from_floats(ctx, DType::f32, {B, T, Hi}, gather(c.beta, H, rows))};
  };
  std::optional<Tensor> a_log, dt_bias;
  if (o.gate) a_log.emplace(Tensor::from_floats(ctx, DType::f32, {Hi}, c.A_log));
  if (!c.dt_bias.empty()) dt_bias.emplace(Tensor::from_floats(ctx, DType::f32, {Hi}, c.dt_bias));
  const Shape state_shape = o.vk ? Shape{N, Hi, V, K} : Shape{N, Hi, K, V};
  auto h0 = Tensor::from_floats(ctx, DType::f32, state_shape, c.h0);
  Tensor state(ctx, DType::f32, state_shape);

  const std::int64_t P = prompt_cu.back();
  auto pin = rows_tensor(prompt_rows, 1, P);
  Tensor cu_prompt(ctx, DType::i32, {N + 1});
  cu_prompt.upload(std::span<const std::int32_t>(prompt_cu));
  GuardedTensor o_prompt(ctx, DType::bf16, {1, P, Hi, V});
  Forward fwd(ctx, gdn::GdnEnvelope{gdn_options(o)});
  typename Forward::Args fa;
  fa.q = pin.q, fa.k = pin.k, fa.v = pin.v, fa.g = pin.g, fa.beta = pin.beta, fa.o = o_prompt;
  fa.initial_state = h0.ref(), fa.final_state = state.ref();
  if (a_log) fa.A_log = a_log->ref();
  if (dt_bias) fa.dt_bias = dt_bias->ref();
  fa.cu_seqlens = cu_prompt.ref(), fa.cu_seqlens_host = prompt_cu;
  fa.options = gdn_options(o);
  Tensor ws(ctx, DType::u32, {std::int64_t(Forward::workspace_bytes(fwd.problem(fa)) / 4 + 1)});
  fa.workspace = Workspace{ws.ref()};

  Step step(ctx, {.qk_dtype = DType::bf16, .v_dtype = DType::bf16});
  std::vector<decltype(rows_tensor({}, 1, 1))> sin;
  std::vector<GuardedTensor> souts;
  std::vector<std::vector<std::int32_t>> step_cu(steps.size());
  std::vector<Tensor> cu_dev;
  std::vector<typename Step::Args> sargs;
  souts.reserve(steps.size()), sin.reserve(steps.size()), cu_dev.reserve(steps.size());
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const std::int64_t tokens = std::int64_t(step_rows[s].size());
    const std::int64_t B = ragged[s] ? 1 : N, T = ragged[s] ? tokens : tokens / N;
    sin.push_back(rows_tensor(step_rows[s], B, T));
    souts.emplace_back(ctx, DType::bf16, Shape{B, T, Hi, V});
    typename Step::Args a;
    a.q = sin[s].q, a.k = sin[s].k, a.v = sin[s].v, a.g = sin[s].g, a.beta = sin[s].beta;
    a.state = state, a.o = souts[s];
    if (a_log) a.A_log = a_log->ref();
    if (dt_bias) a.dt_bias = dt_bias->ref();
    if (ragged[s]) {
      step_cu[s] = {0};
      for (std::size_t n = 0; n < prompt.size(); ++n) step_cu[s].push_back(step_cu[s].back() + std::int32_t(steps[s][n]));
      cu_dev.emplace_back(ctx, DType::i32, Shape{N + 1});
      cu_dev.back().upload(std::span<const std::int32_t>(step_cu[s]));
      a.cu_seqlens = cu_dev.back().ref(), a.cu_seqlens_host = step_cu[s];
    }
    a.options = gdn_options(o);
    sargs.push_back(a);
  }

  ctx.submit_and_wait([&](vk::CommandBuffer cmd) {
    fwd.record(cmd, fa);
    for (const auto& a : sargs) {
      compute_barrier(ctx, cmd);
      step.record(cmd, a);
    }
  });

  const double e_prompt = relative_rms(o_prompt.read_floats(), gather(exact.o, H * V, prompt_rows));
  EXPECT_LE(e_prompt, kBudgetPrompt) << "prompt o";
  std::printf("[gdn layer] %s K=%u V=%u: prompt o %.2e", o.name, K, V, e_prompt);
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const double e = relative_rms(souts[s].read_floats(), gather(exact.o, H * V, step_rows[s]));
    EXPECT_LE(e, kBudgetDecode) << "decode step " << s << " o";
    std::printf(", step %zu o %.2e", s, e);
  }
  const double e_state = relative_rms(state.download_floats(), exact.final_state);
  EXPECT_LE(e_state, kBudgetDecode) << "final state";
  std::printf(", final state %.2e\n", e_state);
}

class GdnLayerTest : public DeviceTest {};

TEST_F(GdnLayerTest, ChunkedPrefillThenRecurrentDecodeIsOneRecurrence) {
  prefill_then_decode<64, 64>(kPlain, 3000);
  prefill_then_decode<64, 64>(kOptionSets[6], 3001);  // every option, [V, K] states
  prefill_then_decode<128, 128>(kOptionSets[1], 3002);
}

}  // namespace
