// SPDX-License-Identifier: MIT
// Inputs and layout helpers shared by the Gated DeltaNet stage, forward and
// decode tests: seeded problems with every option of FLA's API (as
// tests/gdn/test_gdn_reference.cpp draws them: bf16 q, k, v; per-token gates
// from ~1 to ~exp(-20) across heads; beta up to 2 with the doubled
// sigmoid), and the mapping between token rows and the slots of the
// chunked intermediates (tilekernels/gdn/chunking.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <tilekernels/gdn/chunk_index.hpp>
#include <tilekernels/gdn/chunking.hpp>
#include <tilekernels/reference/gdn/chunk_forward.hpp>
#include <tilekernels/reference/gdn/gated_delta_rule.hpp>

#include "../support.hpp"

namespace gdntest {

using namespace tktest;
namespace ref = tilekernels::reference::gdn;
namespace gdn = tilekernels::gdn;

struct Opts {
  const char* name = "plain";
  bool l2 = false, gate = false, dt_bias = false, sigmoid = false, neg = false, vk = false, h0 = true;
  double scale = 0;
};

inline const Opts kPlain{"plain"};
inline const Opts kOptionSets[] = {
    {"plain"},
    {"l2norm", true},
    {"gate+dt_bias", false, true, true},
    {"gate", false, true},
    {"sigmoid+neg_eigval", false, false, false, true, true},
    {"state_vk", false, false, false, false, false, true},
    {"all", true, true, true, true, false, true},
    {"no_h0+scale0.3", false, false, false, false, false, false, false, 0.3},
};

inline gdn::GdnOptions gdn_options(const Opts& o) {
  gdn::GdnOptions g;
  g.qk_l2norm = o.l2;
  g.gate_in_kernel = o.gate;
  g.beta_sigmoid = o.sigmoid;
  g.allow_neg_eigval = o.neg;
  g.state_layout = o.vk ? gdn::StateLayout::vk : gdn::StateLayout::kv;
  return g;
}

struct Case {
  ref::GatedDeltaRuleProblem p;
  Opts o;
  std::vector<float> q, k, v, g, beta, A_log, dt_bias, h0;
  ref::GatedDeltaRuleInputs in() const { return {q, k, v, g, beta, A_log, dt_bias, h0}; }
};

inline Case make_case(std::size_t B, std::size_t T, std::size_t Hg, std::size_t H, std::size_t K, std::size_t V,
                      std::vector<std::int32_t> cu, const Opts& o, std::uint64_t seed) {
  Case c;
  c.o = o;
  ref::GatedDeltaRuleProblem& p = c.p;
  p.B = B, p.T = T, p.Hg = Hg, p.H = H, p.K = K, p.V = V, p.scale = o.scale, p.cu_seqlens = std::move(cu);
  p.qk_l2norm = o.l2, p.gate_in_kernel = o.gate, p.beta_sigmoid = o.sigmoid, p.allow_neg_eigval = o.neg;
  p.state_layout = o.vk ? ref::StateLayout::vk : ref::StateLayout::kv;
  Rng rng(seed);
  const std::size_t tok = p.tokens();
  const auto bf = [](double x) { return tilekernels::round_to_bf16(float(x)); };
  for (std::size_t i = 0; i < tok * Hg * K; ++i) c.q.push_back(bf(rng.normal() / std::sqrt(double(K)) * 2.0));
  // k: raw with qk_l2norm (the kernels normalise), else unit rows as FLA's tests feed it.
  for (std::size_t r = 0; r < tok * Hg; ++r) {
    std::vector<double> row(K);
    double ss = 0;
    for (double& x : row) {
      x = rng.normal();
      ss += x * x;
    }
    for (double x : row) c.k.push_back(bf(o.l2 ? 3.0 * x : x / std::sqrt(ss)));
  }
  for (std::size_t i = 0; i < tok * H * V; ++i) c.v.push_back(bf(rng.normal()));
  for (std::size_t t = 0; t < tok; ++t)
    for (std::size_t h = 0; h < H; ++h) {
      // head h decays per token by exp(-20 f) .. exp(-15 f), f from 0 to 1 across heads
      const double f = H == 1 ? 0.3 : double(h) / double(H - 1);
      const double decay_log = -20.0 * f * rng.uniform(0.75f, 1.0f) - rng.uniform(0.0f, 0.05f);
      c.g.push_back(float(o.gate ? 2.0 * rng.normal() : decay_log));
      c.beta.push_back(o.sigmoid ? float(2.0 * rng.normal()) : rng.uniform(0.05f, 0.95f));
    }
  if (o.gate) {
    if (!c.g.empty()) c.g[c.g.size() / 2] = 25.0f;  // past softplus's cutoff
    for (std::size_t h = 0; h < H; ++h) {
      const double f = H == 1 ? 0.5 : double(h) / double(H - 1);  // exp(A_log) from 0.01 to 10
      c.A_log.push_back(float(std::log(0.01) + f * (std::log(10.0) - std::log(0.01))));
      if (o.dt_bias) c.dt_bias.push_back(float(0.5 * rng.normal()));
    }
  }
  if (o.h0)
    for (std::size_t i = 0; i < p.state_elements(); ++i) c.h0.push_back(float(0.5 * rng.normal()));
  return c;
}

inline std::vector<std::int64_t> dims(std::initializer_list<std::size_t> d) {
  std::vector<std::int64_t> s;
  for (auto x : d) s.push_back(static_cast<std::int64_t>(x));
  return s;
}

inline gdn::Chunking chunking_of(const Case& c, std::uint32_t bt) {
  return gdn::Chunking(std::int64_t(c.p.B), std::int64_t(c.p.T), c.p.cu_seqlens, bt);
}

// Rows of `width` values per token, taken from their slots (valid tokens only).
inline std::vector<float> tokens_from_slots(const gdn::Chunking& ch, const std::vector<float>& slots,
                                            std::size_t width) {
  std::vector<float> out(static_cast<std::size_t>(ch.B() * ch.T()) * width);
  ch.for_each_sequence([&](std::int64_t, std::int64_t bos, std::int64_t len, std::int64_t first) {
    for (std::int64_t t = 0; t < len; ++t)
      for (std::size_t e = 0; e < width; ++e)
        out[std::size_t(bos + t) * width + e] = slots[std::size_t(first * ch.bt() + t) * width + e];
  });
  return out;
}

// The inverse: token rows placed in their slots, padding slots zero.
inline std::vector<float> slots_from_tokens(const gdn::Chunking& ch, std::span<const double> tokens,
                                            std::size_t width) {
  std::vector<float> out(static_cast<std::size_t>(ch.slots()) * width, 0.0f);
  ch.for_each_sequence([&](std::int64_t, std::int64_t bos, std::int64_t len, std::int64_t first) {
    for (std::int64_t t = 0; t < len; ++t)
      for (std::size_t e = 0; e < width; ++e)
        out[std::size_t(first * ch.bt() + t) * width + e] = float(tokens[std::size_t(bos + t) * width + e]);
  });
  return out;
}

inline std::vector<float> floats(std::span<const double> x) { return {x.begin(), x.end()}; }

// Kernel's tensor_core_fp16 variant without its own rule (which keeps CPU
// devices to chunks of 16), for tests that force it; nullptr, with the
// reason in `why`, where the device or build cannot run it.
template <class Kernel>
const Variant<typename Kernel::Problem>* forced_fp16(std::string& why) {
  static const Variant<typename Kernel::Problem> forced = [] {
    const auto& table = Kernel::variants;
    const auto it = std::find_if(table.begin(), table.end(), [](const auto& v) { return v.path == Path::tensor_core_fp16; });
    if (it == table.end()) throw std::logic_error(std::string(Kernel::name) + " has no tensor_core_fp16 variant");
    Variant<typename Kernel::Problem> v = *it;
    v.applies = nullptr;
    return v;
  }();
  const Status s = eligibility(context(), forced, typename Kernel::Problem{});
  why = "tensor_core_fp16: " + s.message;
  return s ? &forced : nullptr;
}

// The device copy of a variable-length case's cu_seqlens and the index
// table gdn::ChunkIndex builds from it on the device (neither for fixed
// length); set() puts both into a stage's Args.
struct DeviceVarlen {
  std::optional<Tensor> cu, index;
  template <class Args>
  void set(Args& a) const {
    if (!cu) return;
    a.cu_seqlens = cu->ref();
    a.index = index->ref();
  }
};
inline DeviceVarlen device_varlen(Context& ctx, const gdn::Chunking& ch, std::span<const std::int32_t> cu) {
  DeviceVarlen d;
  if (!ch.varlen()) return d;
  d.cu.emplace(ctx, DType::i32, Shape{static_cast<std::int64_t>(cu.size())});
  d.cu->upload(cu);
  d.index.emplace(ctx, DType::u32, Shape{static_cast<std::int64_t>(ch.index_bytes() / 4)});
  const auto build = [&](auto index_kernel) { index_kernel.run({*d.cu, *d.index, ch.T()}); };
  switch (ch.bt()) {
    case 16: build(gdn::ChunkIndex<16>(ctx)); break;
    case 32: build(gdn::ChunkIndex<32>(ctx)); break;
    default: build(gdn::ChunkIndex<64>(ctx)); break;
  }
  return d;
}

}  // namespace gdntest
