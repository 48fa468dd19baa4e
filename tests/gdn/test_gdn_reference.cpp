// SPDX-License-Identifier: MIT
// Self-test of the Gated DeltaNet double-precision references (CPU only, no
// device): the chunked forward (reference/gdn/chunk_forward.hpp) against the
// token-by-token recurrence (reference/gdn/gated_delta_rule.hpp). Exact
// chunking must equal the recurrence to double rounding; FLA's bf16 rounding
// points must stay within FLA's own bar (5e-3); variable-length batches must
// equal their sequences run one by one; a chunked prefill handed to the
// recurrence must continue it. Inputs: seeded, bf16 where the kernels take
// bf16, gates per token from ~1 to ~exp(-20), K != V so that a transposed
// state cannot pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <tilekernels/core/dtype.hpp>
#include <tilekernels/core/splitmix.hpp>
#include <tilekernels/reference/gdn/chunk_forward.hpp>
#include <tilekernels/reference/gdn/gated_delta_rule.hpp>

namespace {

namespace ref = tilekernels::reference::gdn;
using ref::Rounding;
using ref::StateLayout;
using Problem = ref::GatedDeltaRuleProblem;

constexpr double kExact = 1e-10;  // chunked vs token by token, both in double
constexpr double kF32Handoff = 1e-6;  // a state passed on as f32, or inputs precomputed in f32
// FLA's rounding points against the exact recurrence. On inputs drawn as
// FLA's own test_chunk draws them (positive q, k, v; mild gates) FLA holds
// itself to 5e-3 (docs/DESIGN.md's bf16 budget); this reference measures 2.1-2.5e-3
// there. On the harsher inputs used elsewhere here (zero-mean v, gates to
// exp(-20), beta up to 2) the same rounding points alone give a median of
// 3.8e-3 and up to 5.8e-3, so those checks take the 1e-2 below which FLA's
// CI only warns.
// GPU stages are to be held to the Rounding::fla reference, not to these.
constexpr double kBudget = 5e-3;
constexpr double kHarshBudget = 1e-2;

class Rng {  // splitmix64: the same numbers on every machine
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  double uniform(double lo, double hi) { return lo + (hi - lo) * double(next() >> 11) * 0x1.0p-53; }
  double normal() {
    const double u = uniform(1e-300, 1.0), w = uniform(0.0, 1.0);
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * w);
  }

 private:
  std::uint64_t next() { return tilekernels::splitmix64(s_); }
  std::uint64_t s_;
};

float bf16(double x) { return tilekernels::round_to_bf16(float(x)); }

// relative RMS error ||a - b|| / ||b||; NaN never passes.
double rel(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  const double r = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return std::isnan(r) ? INFINITY : r;
}

struct Options {
  const char* name;
  bool l2 = false, gate = false, dt_bias = false, sigmoid = false, neg = false, vk = false, no_h0 = false;
  double scale = 0;
};
const Options kOptionSets[] = {
    {"plain"},
    {"l2norm", true},
    {"gate+dt_bias", false, true, true},
    {"gate", false, true},
    {"sigmoid", false, false, false, true},
    {"sigmoid+neg_eigval", false, false, false, true, true},
    {"state_vk", false, false, false, false, false, true},
    {"all", true, true, true, true, false, true},
    {"no_h0", false, false, false, false, false, false, true},
    {"scale0.3", false, false, false, false, false, false, false, 0.3},
};

Problem make_problem(std::size_t B, std::size_t T, std::size_t Hg, std::size_t H, const Options& o,
                     std::size_t K = 16, std::size_t V = 8) {
  Problem p;
  p.B = B, p.T = T, p.Hg = Hg, p.H = H, p.K = K, p.V = V, p.scale = o.scale;
  p.qk_l2norm = o.l2, p.gate_in_kernel = o.gate, p.beta_sigmoid = o.sigmoid, p.allow_neg_eigval = o.neg;
  p.state_layout = o.vk ? StateLayout::vk : StateLayout::kv;
  return p;
}

// Owns one problem's inputs.
struct Case {
  Problem p;
  std::vector<float> q, k, v, g, beta, A_log, dt_bias, h0;
  ref::GatedDeltaRuleInputs in() const { return {q, k, v, g, beta, A_log, dt_bias, h0}; }
};

Case make_case(const Problem& p, const Options& o, std::uint64_t seed) {
  Rng rng(seed);
  Case c{p, {}, {}, {}, {}, {}, {}, {}, {}};
  const std::size_t tok = p.tokens(), K = p.K;
  for (std::size_t i = 0; i < tok * p.Hg * K; ++i) c.q.push_back(bf16(rng.normal()));
  // k: raw with qk_l2norm (the reference normalises), else unit rows as FLA's tests feed it.
  for (std::size_t r = 0; r < tok * p.Hg; ++r) {
    std::vector<double> row(K);
    double ss = 0;
    for (double& x : row) {
      x = rng.normal();
      ss += x * x;
    }
    for (double x : row) c.k.push_back(bf16(o.l2 ? 3.0 * x : x / std::sqrt(ss)));
  }
  for (std::size_t i = 0; i < tok * p.H * p.V; ++i) c.v.push_back(bf16(rng.normal()));
  for (std::size_t t = 0; t < tok; ++t)
    for (std::size_t h = 0; h < p.H; ++h) {
      // Head h decays per token by exp(-20 f) to exp(-15 f), f from 0 to 1 across heads.
      const double f = p.H == 1 ? 0.3 : double(h) / double(p.H - 1);
      const double decay_log = -20.0 * f * rng.uniform(0.75, 1.0) - rng.uniform(0, 0.05);
      c.g.push_back(float(o.gate ? 2.0 * rng.normal() : decay_log));
      c.beta.push_back(o.sigmoid ? float(2.0 * rng.normal()) : float(rng.uniform(0.05, 0.95)));
    }
  if (o.gate) {
    if (!c.g.empty()) c.g[c.g.size() / 2] = 25.0f;  // past softplus's cutoff
    for (std::size_t h = 0; h < p.H; ++h) {
      const double f = p.H == 1 ? 0.5 : double(h) / double(p.H - 1);  // exp(A_log) from 0.01 to 10
      c.A_log.push_back(float(std::log(0.01) + f * (std::log(10.0) - std::log(0.01))));
      if (o.dt_bias) c.dt_bias.push_back(float(0.5 * rng.normal()));
    }
  }
  if (!o.no_h0)
    for (std::size_t i = 0; i < p.state_elements(); ++i) c.h0.push_back(float(0.5 * rng.normal()));
  return c;
}

// The inputs of the given flat tokens, as a case of problem p (h0 from the caller).
Case subset(const Case& c, const Problem& p, const std::vector<std::size_t>& tokens, std::vector<float> h0) {
  Case s{p, {}, {}, {}, {}, {}, c.A_log, c.dt_bias, std::move(h0)};
  auto take = [](std::vector<float>& dst, const std::vector<float>& src, std::size_t t, std::size_t row) {
    dst.insert(dst.end(), src.begin() + std::ptrdiff_t(t * row), src.begin() + std::ptrdiff_t((t + 1) * row));
  };
  for (std::size_t t : tokens) {
    take(s.q, c.q, t, p.Hg * p.K);
    take(s.k, c.k, t, p.Hg * p.K);
    take(s.v, c.v, t, p.H * p.V);
    take(s.g, c.g, t, p.H);
    take(s.beta, c.beta, t, p.H);
  }
  return s;
}

std::vector<std::size_t> range(std::size_t first, std::size_t count) {
  std::vector<std::size_t> r(count);
  for (std::size_t i = 0; i < count; ++i) r[i] = first + i;
  return r;
}

std::vector<double> slice(const std::vector<double>& x, std::size_t first, std::size_t count) {
  return {x.begin() + std::ptrdiff_t(first), x.begin() + std::ptrdiff_t(first + count)};
}

std::string describe(const Problem& p, std::size_t BT, const char* options) {
  return "B=" + std::to_string(p.B) + " T=" + std::to_string(p.T) + " Hg=" + std::to_string(p.Hg) +
         " H=" + std::to_string(p.H) + " K=" + std::to_string(p.K) + " V=" + std::to_string(p.V) +
         " BT=" + std::to_string(BT) + " cu_seqlens=" + std::to_string(p.cu_seqlens.size()) + " " + options;
}

// h[c] must be the state before the chunk's first token: h0, or the state after the previous token.
void expect_h_matches_token_states(const Case& c, const ref::ChunkForwardResult& f, const ref::GatedDeltaRuleResult& r,
                                   std::size_t BT, double tol) {
  const std::size_t blk = c.p.H * c.p.K * c.p.V;
  for (const ref::ChunkSpan& s : ref::chunk_spans(c.p, BT)) {
    std::vector<double> want(blk, 0.0);
    if (s.first > c.p.bos(s.seq))
      want = slice(r.token_states, (s.first - 1) * blk, blk);
    else if (!c.h0.empty())
      want.assign(c.h0.begin() + std::ptrdiff_t(s.seq * blk), c.h0.begin() + std::ptrdiff_t((s.seq + 1) * blk));
    EXPECT_LE(rel(slice(f.h, s.index * blk, blk), want), tol) << "chunk " << s.index;
  }
}

void compare_chunked_with_recurrence(const Case& c, std::size_t BT, const char* options) {
  SCOPED_TRACE(describe(c.p, BT, options));
  const ref::GatedDeltaRuleResult r = ref::gated_delta_rule(c.p, c.in(), true);
  const ref::ChunkForwardResult exact = ref::chunk_forward(c.p, c.in(), BT, Rounding::none);
  EXPECT_LE(rel(exact.o, r.o), kExact);
  EXPECT_LE(rel(exact.final_state, r.final_state), kExact);
  expect_h_matches_token_states(c, exact, r, BT, kExact);
  const ref::ChunkForwardResult fla = ref::chunk_forward(c.p, c.in(), BT, Rounding::fla);
  EXPECT_LE(rel(fla.o, r.o), kHarshBudget);
  EXPECT_LE(rel(fla.final_state, r.final_state), kHarshBudget);
}

TEST(GdnReference, HandComputedTwoTokens) {
  Problem p = make_problem(1, 2, 1, 1, kOptionSets[0], 1, 1);
  p.scale = 1.0;
  const std::vector<float> q{0.5f, -1.0f}, k{0.8f, 0.6f}, v{2.0f, -1.0f}, g{-0.3f, -1.2f}, beta{0.6f, 0.9f},
      h0{1.5f};
  const ref::GatedDeltaRuleInputs in{q, k, v, g, beta, {}, {}, h0};
  // Decay, then the delta correction, then the read-out of the updated state.
  double S = 1.5 * std::exp(double(g[0]));
  S += k[0] * (beta[0] * (v[0] - k[0] * S));
  const double o1 = q[0] * S;
  S *= std::exp(double(g[1]));
  S += k[1] * (beta[1] * (v[1] - k[1] * S));
  const double o2 = q[1] * S;
  const ref::GatedDeltaRuleResult r = ref::gated_delta_rule(p, in);
  EXPECT_NEAR(r.o[0], o1, 1e-14);
  EXPECT_NEAR(r.o[1], o2, 1e-14);
  EXPECT_NEAR(r.final_state[0], S, 1e-14);
  for (std::size_t BT : {1, 2, 64}) {
    const ref::ChunkForwardResult f = ref::chunk_forward(p, in, BT, Rounding::none);
    EXPECT_NEAR(f.o[0], o1, 1e-14) << "BT=" << BT;
    EXPECT_NEAR(f.o[1], o2, 1e-14) << "BT=" << BT;
    EXPECT_NEAR(f.final_state[0], S, 1e-14) << "BT=" << BT;
  }
}

TEST(GdnReference, ChunkedEqualsRecurrence) {
  std::uint64_t seed = 1;
  for (std::size_t T : {1, 63, 64, 65, 130})
    for (std::size_t ratio : {1, 2, 4}) {
      const Options& o = kOptionSets[seed % std::size(kOptionSets)];
      const std::size_t BT = seed % 3 == 2 ? 16 : 64;
      compare_chunked_with_recurrence(make_case(make_problem(2, T, 2, 2 * ratio, o), o, seed), BT, o.name);
      ++seed;
    }
}

TEST(GdnReference, ChunkedEqualsRecurrenceEveryOption) {
  std::uint64_t seed = 100;
  for (const Options& o : kOptionSets)
    for (std::size_t BT : {32, 64})
      compare_chunked_with_recurrence(make_case(make_problem(1, 130, 1, 4, o), o, seed++), BT, o.name);
}

// Inputs as FLA's tests/ops/test_gdn.py test_chunk draws them: q, k, v
// uniform in [0, 1) (q, k L2-normalised), beta = sigmoid(U[0, 1)),
// g = logsigmoid(U[0, 1)); h0 normal.
TEST(GdnReference, FlaRoundingWithinFlaBarOnFlaTestInputs) {
  for (const Options& o : {kOptionSets[0], kOptionSets[1]}) {
    const Problem p = make_problem(2, 300, 1, 4, o, 64, 32);
    Case c = make_case(p, o, 21);
    Rng rng(22);
    for (std::vector<float>* x : {&c.q, &c.k})
      for (std::size_t r = 0; r < x->size() / p.K; ++r) {
        std::vector<double> row(p.K);
        double ss = 0;
        for (double& e : row) {
          e = rng.uniform(0, 1);
          ss += e * e;
        }
        for (std::size_t i = 0; i < p.K; ++i) (*x)[r * p.K + i] = bf16(o.l2 ? row[i] : row[i] / std::sqrt(ss));
      }
    for (float& e : c.v) e = bf16(rng.uniform(0, 1));
    for (float& e : c.beta) e = float(1.0 / (1.0 + std::exp(-rng.uniform(0, 1))));
    for (float& e : c.g) e = float(-std::log1p(std::exp(-rng.uniform(0, 1))));
    SCOPED_TRACE(describe(p, 64, o.name));
    const ref::GatedDeltaRuleResult r = ref::gated_delta_rule(c.p, c.in());
    const ref::ChunkForwardResult f = ref::chunk_forward(c.p, c.in(), 64, Rounding::fla);
    EXPECT_LE(rel(f.o, r.o), kBudget);
    EXPECT_LE(rel(f.final_state, r.final_state), kBudget);
  }
}

TEST(GdnReference, FlaRoundingPointsAreOnTheirGrids) {
  const Options& o = kOptionSets[7];  // all options: normalised q, k and sigmoid beta are rounded too
  const Case c = make_case(make_problem(1, 70, 1, 2, o), o, 7);
  const ref::ChunkForwardResult f = ref::chunk_forward(c.p, c.in(), 64, Rounding::fla);
  auto on_bf16 = [](const std::vector<double>& x) {
    return std::all_of(x.begin(), x.end(), [](double e) { return double(bf16(e)) == e; });
  };
  auto on_f32 = [](const std::vector<double>& x) {
    return std::all_of(x.begin(), x.end(), [](double e) { return double(float(e)) == e; });
  };
  EXPECT_TRUE(on_bf16(f.q) && on_bf16(f.k));
  EXPECT_TRUE(on_bf16(f.A) && on_bf16(f.w) && on_bf16(f.u) && on_bf16(f.h) && on_bf16(f.v_new));
  EXPECT_TRUE(on_f32(f.g) && on_f32(f.beta));
  const ref::ChunkForwardResult e = ref::chunk_forward(c.p, c.in(), 64, Rounding::none);
  EXPECT_FALSE(on_bf16(e.A) || on_bf16(e.h));  // the exact mode really is unrounded
}

TEST(GdnReference, VarlenEqualsSequencesRunAlone) {
  for (const Options& o : {kOptionSets[0], kOptionSets[7]}) {
    Problem p = make_problem(1, 200, 2, 4, o);
    p.cu_seqlens = {0, 1, 66, 66, 130, 200};  // lengths 1, 65, 0 (empty), 64, 70
    const Case c = make_case(p, o, 42);
    const std::size_t BT = 64, blk = p.H * p.K * p.V;
    const ref::GatedDeltaRuleResult r = ref::gated_delta_rule(p, c.in(), true);
    const ref::ChunkForwardResult fe = ref::chunk_forward(p, c.in(), BT, Rounding::none);
    const ref::ChunkForwardResult ff = ref::chunk_forward(p, c.in(), BT, Rounding::fla);
    std::size_t first_chunk = 0;
    for (std::size_t n = 0; n < p.N(); ++n) {
      SCOPED_TRACE(std::string(o.name) + " sequence " + std::to_string(n));
      const std::size_t b = p.bos(n), L = p.eos(n) - b, nt = (L + BT - 1) / BT;
      Problem alone = p;
      alone.cu_seqlens.clear();
      alone.T = L;
      const Case s = subset(c, alone, range(b, L), {c.h0.begin() + std::ptrdiff_t(n * blk),
                                                    c.h0.begin() + std::ptrdiff_t((n + 1) * blk)});
      const std::size_t ov = b * p.H * p.V, nv = L * p.H * p.V;
      const ref::GatedDeltaRuleResult ra = ref::gated_delta_rule(alone, s.in(), true);
      EXPECT_EQ(slice(r.o, ov, nv), ra.o);
      EXPECT_EQ(slice(r.final_state, n * blk, blk), ra.final_state);
      EXPECT_EQ(slice(r.token_states, b * blk, L * blk), ra.token_states);
      if (L > 0) {
        EXPECT_EQ(slice(r.token_states, (b + L - 1) * blk, blk), ra.final_state);
      } else {
        EXPECT_EQ(ra.final_state, std::vector<double>(s.h0.begin(), s.h0.end()));
      }
      for (const ref::ChunkForwardResult* f : {&fe, &ff}) {
        const Rounding mode = f == &fe ? Rounding::none : Rounding::fla;
        const ref::ChunkForwardResult fa = ref::chunk_forward(alone, s.in(), BT, mode);
        EXPECT_EQ(slice(f->o, ov, nv), fa.o);
        EXPECT_EQ(slice(f->v_new, ov, nv), fa.v_new);
        EXPECT_EQ(slice(f->A, b * p.H * BT, L * p.H * BT), fa.A);
        EXPECT_EQ(slice(f->h, first_chunk * blk, nt * blk), fa.h);
        EXPECT_EQ(slice(f->final_state, n * blk, blk), fa.final_state);
      }
      first_chunk += nt;
    }
  }
}

TEST(GdnReference, FixedLengthEqualsVarlenOfEqualLengths) {
  const Options& o = kOptionSets[7];
  const Case fixed = make_case(make_problem(3, 65, 1, 2, o), o, 5);
  Case packed = fixed;
  packed.p.B = 1, packed.p.T = 195, packed.p.cu_seqlens = {0, 65, 130, 195};
  for (Rounding mode : {Rounding::none, Rounding::fla}) {
    const ref::ChunkForwardResult a = ref::chunk_forward(fixed.p, fixed.in(), 64, mode);
    const ref::ChunkForwardResult b = ref::chunk_forward(packed.p, packed.in(), 64, mode);
    EXPECT_EQ(a.o, b.o);
    EXPECT_EQ(a.h, b.h);  // [B, NT, ...] is the global chunk order
    EXPECT_EQ(a.final_state, b.final_state);
  }
  EXPECT_EQ(ref::gated_delta_rule(fixed.p, fixed.in()).o, ref::gated_delta_rule(packed.p, packed.in()).o);
}

// Prefill T1 tokens chunked, hand the f32 final state to the recurrence for
// T2 more (a decode step), and compare with one recurrence over T1 + T2.
void check_prefill_then_decode(const Case& full, const std::vector<std::size_t>& prefill_len,
                               const std::vector<std::size_t>& decode_len, const char* options) {
  const Problem& pf = full.p;
  Problem p1 = pf, p2 = pf;
  std::vector<std::size_t> tok1, tok2, lens1 = prefill_len, lens2 = decode_len;
  p1.cu_seqlens = {0}, p2.cu_seqlens = {0};
  for (std::size_t n = 0; n < pf.N(); ++n) {
    const std::vector<std::size_t> a = range(pf.bos(n), lens1[n]), b = range(pf.bos(n) + lens1[n], lens2[n]);
    tok1.insert(tok1.end(), a.begin(), a.end());
    tok2.insert(tok2.end(), b.begin(), b.end());
    p1.cu_seqlens.push_back(std::int32_t(tok1.size()));
    p2.cu_seqlens.push_back(std::int32_t(tok2.size()));
  }
  if (pf.cu_seqlens.empty()) {  // keep fixed-length batches fixed-length
    p1.cu_seqlens.clear(), p2.cu_seqlens.clear();
    p1.T = lens1[0], p2.T = lens2[0];
  } else {
    p1.T = tok1.size(), p2.T = tok2.size();
  }
  const ref::GatedDeltaRuleResult whole = ref::gated_delta_rule(pf, full.in());
  std::vector<double> want_o;
  for (std::size_t t : tok2)
    want_o.insert(want_o.end(), whole.o.begin() + std::ptrdiff_t(t * pf.H * pf.V),
                  whole.o.begin() + std::ptrdiff_t((t + 1) * pf.H * pf.V));
  const Case prefill = subset(full, p1, tok1, full.h0);
  for (Rounding mode : {Rounding::none, Rounding::fla}) {
    SCOPED_TRACE(describe(p1, 64, options) + (mode == Rounding::fla ? " fla" : " exact"));
    const ref::ChunkForwardResult f = ref::chunk_forward(p1, prefill.in(), 64, mode);
    const Case decode = subset(full, p2, tok2, {f.final_state.begin(), f.final_state.end()});
    const ref::GatedDeltaRuleResult d = ref::gated_delta_rule(p2, decode.in());
    const double tol = mode == Rounding::none ? kF32Handoff : kHarshBudget;
    EXPECT_LE(rel(d.o, want_o), tol);
    EXPECT_LE(rel(d.final_state, whole.final_state), tol);
  }
}

TEST(GdnReference, ChunkedPrefillThenRecurrentDecode) {
  std::uint64_t seed = 200;
  for (const Options& o : {kOptionSets[0], kOptionSets[7]})
    for (std::size_t T1 : {63, 64, 65, 130})
      for (std::size_t T2 : {1, 8}) {
        const Case full = make_case(make_problem(2, T1 + T2, 2, 4, o), o, seed++);
        check_prefill_then_decode(full, {T1, T1}, {T2, T2}, o.name);
      }
  // Ragged: three sequences with 1, 3 and 8 new tokens each.
  for (const Options& o : {kOptionSets[0], kOptionSets[7]}) {
    Problem p = make_problem(1, 65 + 4 + 138, 1, 2, o);
    p.cu_seqlens = {0, 65, 69, 207};
    check_prefill_then_decode(make_case(p, o, seed++), {64, 1, 130}, {1, 3, 8}, o.name);
  }
}

// Each option against the same problem with that step precomputed here in f32.
TEST(GdnReference, OptionsEqualPrecomputedInputs) {
  const Options& all = kOptionSets[7];
  const Case c = make_case(make_problem(2, 65, 1, 2, all), all, 9);
  Case plain = c;
  plain.p.qk_l2norm = plain.p.gate_in_kernel = plain.p.beta_sigmoid = false;
  plain.A_log.clear(), plain.dt_bias.clear();
  for (std::size_t t = 0; t < c.p.tokens(); ++t) {
    for (std::size_t kh = 0; kh < c.p.Hg; ++kh)
      for (auto* x : {&plain.q, &plain.k}) {
        float* row = &(*x)[(t * c.p.Hg + kh) * c.p.K];
        double ss = 0;
        for (std::size_t i = 0; i < c.p.K; ++i) ss += double(row[i]) * row[i];
        for (std::size_t i = 0; i < c.p.K; ++i) row[i] = float(row[i] / std::sqrt(ss + 1e-6));
      }
    for (std::size_t h = 0; h < c.p.H; ++h) {
      const std::size_t i = t * c.p.H + h;
      plain.g[i] = float(-std::exp(double(c.A_log[h])) * std::log1p(std::exp(double(c.g[i]) + c.dt_bias[h])));
      plain.beta[i] = float(1.0 / (1.0 + std::exp(-double(c.beta[i]))));
    }
  }
  const ref::GatedDeltaRuleResult a = ref::gated_delta_rule(c.p, c.in());
  const ref::GatedDeltaRuleResult b = ref::gated_delta_rule(plain.p, plain.in());
  EXPECT_LE(rel(a.o, b.o), kF32Handoff);
  EXPECT_LE(rel(a.final_state, b.final_state), kF32Handoff);
  const ref::ChunkForwardResult ca = ref::chunk_forward(c.p, c.in(), 64, Rounding::none);
  EXPECT_LE(rel(ca.o, b.o), kF32Handoff);
  // allow_neg_eigval doubles the sigmoid.
  Case neg = c, twice = plain;
  neg.p.allow_neg_eigval = true;
  for (float& x : twice.beta) x *= 2.0f;
  EXPECT_LE(rel(ref::gated_delta_rule(neg.p, neg.in()).o, ref::gated_delta_rule(twice.p, twice.in()).o), kF32Handoff);
  // scale 0 means 1 / sqrt(K).
  Case scaled = plain;
  scaled.p.scale = 1.0 / std::sqrt(double(c.p.K));
  EXPECT_EQ(ref::gated_delta_rule(scaled.p, scaled.in()).o, b.o);
}

// The [V, K] layout stores the same states transposed; nothing else changes.
TEST(GdnReference, StateLayoutsAreTransposes) {
  const Options& o = kOptionSets[0];
  const Case kv = make_case(make_problem(2, 70, 1, 2, o), o, 11);
  Case vk = kv;
  vk.p.state_layout = StateLayout::vk;
  const std::size_t K = kv.p.K, V = kv.p.V, KV = K * V;
  auto transposed = [&](const std::vector<double>& x) {  // [.., K, V] -> [.., V, K]
    std::vector<double> y(x.size());
    for (std::size_t b = 0; b < x.size() / KV; ++b)
      for (std::size_t i = 0; i < K; ++i)
        for (std::size_t j = 0; j < V; ++j) y[b * KV + j * K + i] = x[b * KV + i * V + j];
    return y;
  };
  const std::vector<double> h0 = transposed({kv.h0.begin(), kv.h0.end()});
  vk.h0.assign(h0.begin(), h0.end());
  const ref::GatedDeltaRuleResult a = ref::gated_delta_rule(kv.p, kv.in(), true);
  const ref::GatedDeltaRuleResult b = ref::gated_delta_rule(vk.p, vk.in(), true);
  EXPECT_EQ(a.o, b.o);
  EXPECT_EQ(transposed(a.final_state), b.final_state);
  EXPECT_EQ(transposed(a.token_states), b.token_states);
  for (Rounding mode : {Rounding::none, Rounding::fla}) {
    const ref::ChunkForwardResult fa = ref::chunk_forward(kv.p, kv.in(), 64, mode);
    const ref::ChunkForwardResult fb = ref::chunk_forward(vk.p, vk.in(), 64, mode);
    EXPECT_EQ(fa.o, fb.o);
    EXPECT_EQ(transposed(fa.h), fb.h);
    EXPECT_EQ(transposed(fa.final_state), fb.final_state);
  }
}

TEST(GdnReference, RejectsMalformedProblems) {
  Problem p = make_problem(2, 4, 2, 3, kOptionSets[0]);
  EXPECT_THROW(p.check(), std::invalid_argument);  // H not a multiple of Hg
  p = make_problem(2, 4, 1, 2, kOptionSets[0]);
  p.cu_seqlens = {0, 4};
  EXPECT_THROW(p.check(), std::invalid_argument);  // B must be 1 with cu_seqlens
  p.B = 1, p.cu_seqlens = {0, 3};
  EXPECT_THROW(p.check(), std::invalid_argument);  // must end at T
  p = make_problem(1, 4, 1, 1, kOptionSets[0]);
  p.allow_neg_eigval = true;
  EXPECT_THROW(p.check(), std::invalid_argument);  // needs beta_sigmoid
  const Case c = make_case(make_problem(1, 4, 1, 1, kOptionSets[0]), kOptionSets[0], 3);
  ref::GatedDeltaRuleInputs in = c.in();
  in.v = in.v.first(in.v.size() - 1);
  EXPECT_THROW(ref::gated_delta_rule(c.p, in), std::invalid_argument);
}

}  // namespace
