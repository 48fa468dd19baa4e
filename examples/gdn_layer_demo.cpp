// SPDX-License-Identifier: MIT
// One Gated DeltaNet layer as an engine runs it (Qwen3-Next's shape: 32
// value heads, 16 key heads, K = V = 128; q/k L2 norm, gate and beta
// sigmoid in the kernels): the prompt's forward with gdn::ChunkForward,
// which leaves each sequence's state, then 16 decode steps with
// gdn::RecurrentStep updating that state in place, one token each.
//
// The result is checked against the token-by-token recurrence in double
// precision over the prompt and the decoded tokens together, on a subset
// of the heads (heads are independent; the reference is slow on a CPU).
// Usage: gdn_layer_demo [prompt_tokens]  (default 2048; 128 on a CPU device)
#include <tilekernels/gdn.hpp>
#include <tilekernels/reference/gdn/gated_delta_rule.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "warm_up.hpp"

namespace tk = tilekernels;
namespace gdn = tilekernels::gdn;
namespace ref = tilekernels::reference::gdn;

int main(int argc, char** argv) try {
  constexpr std::uint32_t K = 128, V = 128;
  constexpr std::int64_t Hg = 16, H = 32, steps = 16;
  tk::Context ctx;
  const std::int64_t P = argc > 1 ? std::atoll(argv[1]) : ctx.info().is_cpu() ? 128 : 2048;
  if (P < 1) throw tk::Error(tk::ErrorCode::invalid_argument, "the prompt needs at least one token");
  const std::int64_t total = P + steps;
  std::printf("device: %s\nGDN layer: H=%lld Hg=%lld K=%u V=%u, prompt %lld tokens, then %lld decode steps\n",
              ctx.info().name.c_str(), (long long)H, (long long)Hg, K, V, (long long)P, (long long)steps);

  // Random inputs for every token (a fixed LCG, so every run is the same),
  // rounded to bf16 as the kernels store them.
  std::uint64_t seed = 42;
  auto uniform = [&](float lo, float hi) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * static_cast<float>((seed >> 40) * (1.0 / (1ull << 24)));
  };
  auto bf16 = [&](std::size_t n) {
    std::vector<float> x(n);
    for (auto& e : x) e = tk::round_to_bf16(uniform(-1, 1));
    return x;
  };
  const auto q = bf16(std::size_t(total * Hg * K)), k = bf16(std::size_t(total * Hg * K));
  const auto v = bf16(std::size_t(total * H * V));
  std::vector<float> g(std::size_t(total * H)), beta(g.size()), A_log(H), dt_bias(H);
  for (auto& e : g) e = uniform(-3, 3);  // raw gate (gate_in_kernel)
  for (auto& e : beta) e = uniform(-3, 3);  // logits (beta_sigmoid)
  for (std::int64_t h = 0; h < H; ++h) A_log[std::size_t(h)] = std::log(uniform(0.5f, 8.0f)), dt_bias[std::size_t(h)] = uniform(-1, 1);
  gdn::GdnOptions options;
  options.qk_l2norm = options.gate_in_kernel = options.beta_sigmoid = true;

  // Token rows [first, first + n) of a [tokens, width] array.
  auto rows = [](const std::vector<float>& x, std::int64_t width, std::int64_t first, std::int64_t n) {
    return std::vector<float>(x.begin() + first * width, x.begin() + (first + n) * width);
  };
  using DT = tk::DType;
  auto a_log_t = tk::Tensor::from_floats(ctx, DT::f32, {H}, A_log), dt_bias_t = tk::Tensor::from_floats(ctx, DT::f32, {H}, dt_bias);
  tk::Tensor state(ctx, DT::f32, {1, H, K, V});

  // Prefill: the prompt as one sequence, no initial state.
  using Forward = gdn::ChunkForward<gdn::ChunkForwardConfig<64, K, V>>;
  auto pq = tk::Tensor::from_floats(ctx, DT::bf16, {1, P, Hg, K}, rows(q, Hg * K, 0, P));
  auto pk = tk::Tensor::from_floats(ctx, DT::bf16, {1, P, Hg, K}, rows(k, Hg * K, 0, P));
  auto pv = tk::Tensor::from_floats(ctx, DT::bf16, {1, P, H, V}, rows(v, H * V, 0, P));
  auto pg = tk::Tensor::from_floats(ctx, DT::f32, {1, P, H}, rows(g, H, 0, P));
  auto pb = tk::Tensor::from_floats(ctx, DT::f32, {1, P, H}, rows(beta, H, 0, P));
  tk::Tensor po(ctx, DT::bf16, {1, P, H, V});
  Forward forward(ctx);
  Forward::Args fa;
  fa.q = pq, fa.k = pk, fa.v = pv, fa.g = pg, fa.beta = pb, fa.o = po;
  fa.final_state = state.ref(), fa.A_log = a_log_t.ref(), fa.dt_bias = dt_bias_t.ref(), fa.options = options;
  tk::Tensor ws(ctx, DT::u32, {std::int64_t(Forward::workspace_bytes(forward.problem(fa)) / 4 + 1)});
  fa.workspace = tk::Workspace{ws.ref()};

  // Decode: one token per step, the state updated in place.
  using Step = gdn::RecurrentStep<gdn::RecurrentStepConfig<K, V>>;
  Step step(ctx);
  struct Token {
    tk::Tensor q, k, v, g, beta, o;
  };
  std::vector<Token> tokens;
  std::vector<Step::Args> sargs;
  for (std::int64_t s = 0; s < steps; ++s) {
    const std::int64_t t = P + s;
    tokens.push_back({tk::Tensor::from_floats(ctx, DT::bf16, {1, 1, Hg, K}, rows(q, Hg * K, t, 1)),
                      tk::Tensor::from_floats(ctx, DT::bf16, {1, 1, Hg, K}, rows(k, Hg * K, t, 1)),
                      tk::Tensor::from_floats(ctx, DT::bf16, {1, 1, H, V}, rows(v, H * V, t, 1)),
                      tk::Tensor::from_floats(ctx, DT::f32, {1, 1, H}, rows(g, H, t, 1)),
                      tk::Tensor::from_floats(ctx, DT::f32, {1, 1, H}, rows(beta, H, t, 1)),
                      tk::Tensor(ctx, DT::bf16, {1, 1, H, V})});
  }
  for (const Token& tok : tokens) {
    Step::Args a;
    a.q = tok.q, a.k = tok.k, a.v = tok.v, a.g = tok.g, a.beta = tok.beta, a.o = tok.o, a.state = state;
    a.A_log = a_log_t.ref(), a.dt_bias = dt_bias_t.ref(), a.options = options;
    sargs.push_back(a);
  }
  const Step::Plan plan = step.plan(sargs[0]);

  // Timed on a busy GPU (warm_up.hpp): after the warm-up, and after a copy
  // of itself in the same command buffer. The prefill overwrites the state,
  // so every copy computes the same thing.
  tk::GpuTimer prefill_timer(ctx), decode_timer(ctx);
  const auto layer = [&](vk::CommandBuffer cmd, bool timed) {
    if (timed) prefill_timer.start(cmd);
    forward.record(cmd, fa);
    if (timed) prefill_timer.stop(cmd);
    tk::compute_barrier(ctx, cmd);
    if (timed) decode_timer.start(cmd);
    for (const auto& a : sargs) {
      step.record(cmd, a, plan);
      tk::compute_barrier(ctx, cmd);
    }
    if (timed) decode_timer.stop(cmd);
  };
  const auto run = [&](int copies) {
    ctx.submit_and_wait([&](vk::CommandBuffer cmd) {
      for (int i = 0; i < copies; ++i) layer(cmd, false);
      layer(cmd, true);
    });
    return prefill_timer.seconds() + decode_timer.seconds();
  };
  tk::examples::warm_up(ctx, run);
  run(ctx.info().is_cpu() ? 0 : 1);
  const auto got_prompt = po.download_floats(), got_state = state.download_floats();

  // The reference on heads 0, 1, 10, 11, 20, 21, 30, 31 (key heads 0, 5, 10, 15).
  const std::vector<std::int64_t> key_heads{0, 5, 10, 15};
  const std::int64_t sHg = std::int64_t(key_heads.size()), sH = 2 * sHg;
  ref::GatedDeltaRuleProblem p;
  p.B = 1, p.T = std::size_t(total), p.Hg = std::size_t(sHg), p.H = std::size_t(sH), p.K = K, p.V = V;
  p.qk_l2norm = p.gate_in_kernel = p.beta_sigmoid = true;
  std::vector<float> rq, rk, rv, rg, rb, ra, rd;
  for (std::int64_t t = 0; t < total; ++t) {
    for (std::int64_t kh : key_heads) {
      const auto at = (t * Hg + kh) * K;
      rq.insert(rq.end(), q.begin() + at, q.begin() + at + K);
      rk.insert(rk.end(), k.begin() + at, k.begin() + at + K);
      for (std::int64_t h = 2 * kh; h < 2 * kh + 2; ++h) {
        rv.insert(rv.end(), v.begin() + (t * H + h) * V, v.begin() + (t * H + h + 1) * V);
      }
    }
    for (std::int64_t kh : key_heads)
      for (std::int64_t h = 2 * kh; h < 2 * kh + 2; ++h) {
        rg.push_back(g[std::size_t(t * H + h)]);
        rb.push_back(beta[std::size_t(t * H + h)]);
      }
  }
  for (std::int64_t kh : key_heads)
    for (std::int64_t h = 2 * kh; h < 2 * kh + 2; ++h) ra.push_back(A_log[std::size_t(h)]), rd.push_back(dt_bias[std::size_t(h)]);
  const auto r = ref::gated_delta_rule(p, {rq, rk, rv, rg, rb, ra, rd, {}});

  // Relative RMS error of the subset heads of a [tokens, H, V] output (or the [H, K, V] state).
  auto error = [&](auto&& got_at, std::int64_t t0, std::int64_t n, std::int64_t width, bool is_state) {
    double e2 = 0, r2 = 0;
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t j = 0; j < sH; ++j) {
        const std::int64_t h = 2 * key_heads[std::size_t(j / 2)] + j % 2;
        for (std::int64_t e = 0; e < width; ++e) {
          const double want = is_state ? r.final_state[std::size_t(j * width + e)]
                                       : r.o[std::size_t(((t0 + t) * sH + j) * width + e)];
          const double d = got_at(t, h, e) - want;
          e2 += d * d;
          r2 += want * want;
        }
      }
    return std::sqrt(e2 / r2);
  };
  const double e_prompt = error([&](std::int64_t t, std::int64_t h, std::int64_t e) {
    return got_prompt[std::size_t((t * H + h) * V + e)];
  }, 0, P, V, false);
  std::vector<std::vector<float>> decoded;
  for (const Token& tok : tokens) decoded.push_back(tok.o.download_floats());
  const double e_decode = error([&](std::int64_t t, std::int64_t h, std::int64_t e) {
    return decoded[std::size_t(t)][std::size_t(h * V + e)];
  }, P, steps, V, false);
  const double e_state = error([&](std::int64_t, std::int64_t h, std::int64_t e) {
    return got_state[std::size_t(h * K * V + e)];
  }, 0, 1, K * V, true);

  const double prefill_us = prefill_timer.seconds() * 1e6, decode_us = decode_timer.seconds() * 1e6;
  const double state_mib = double(H) * K * V * 4 / (1 << 20);
  std::printf("prefill (gdn::ChunkForward):  %9.1f us GPU, %.0f tokens/s\n", prefill_us, double(P) / prefill_us * 1e6);
  std::printf("decode (gdn::RecurrentStep, %s, bv=%u kpi=%u): %.1f us GPU per token (%lld steps with barriers; "
              "state %.0f MiB read and written per step)\n",
              std::string(plan.variant->name).c_str(), plan.bv, plan.kpi, decode_us / steps, (long long)steps, state_mib);
  std::printf("against the double recurrence (heads 0,1,10,11,20,21,30,31), relative RMS error:\n");
  std::printf("  prompt o %.2e (budget 1e-2: bf16 rounding points of the chunked forward)\n", e_prompt);
  std::printf("  decoded o %.2e, final state %.2e (budget 5e-3)\n", e_decode, e_state);
  const bool ok = e_prompt <= 1e-2 && e_decode <= 5e-3 && e_state <= 5e-3;
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gdn_layer_demo: %s\n", e.what());
  return 2;
}
