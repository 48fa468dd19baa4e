// SPDX-License-Identifier: MIT
// tk-run end to end for gdn.chunk_forward: seeded .npy inputs (f32 files,
// rounded to bf16 by tk-run where the op takes bf16), the op, and o and the
// final state against the double reference at FLA's rounding points
// (5e-3); the options as key=value parameters; bad input refused with one
// line and no output file. Then gdn.recompute_wu and gdn.chunk_o on
// variable-length sequences against their references run sequence by
// sequence. TK_RUN is the path of the tk-run binary.
#include <gtest/gtest.h>

#include <tilekernels/core/dtype.hpp>
#include <tilekernels/reference/gdn/chunk_forward.hpp>
#include <tilekernels/reference/gdn/chunk_o.hpp>
#include <tilekernels/reference/gdn/recompute_wu.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_fixture.hpp"

namespace {

namespace fs = std::filesystem;
namespace ref = tilekernels::reference::gdn;

using tktest::cli::Result;

class TkRunGdn : public tktest::cli::TkRunFixture {
 protected:
  TkRunGdn() : TkRunFixture("tk_run_gdn_") {}

  float next() {  // uniform in [0, 1)
    seed_ = seed_ * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((seed_ >> 40) * (1.0 / (1ull << 24)));
  }
  std::vector<float> noise(std::size_t n, float lo, float hi, bool bf16) {
    std::vector<float> x(n);
    for (auto& e : x) {
      e = lo + (hi - lo) * next();
      if (bf16) e = tilekernels::round_to_bf16(e);
    }
    return x;
  }

  // A varlen problem with every tensor written to a file: 3 sequences
  // (one of length 1), GQA 2, K = V = 64, gates from ~1 to ~exp(-20) per token.
  void write_problem(bool gate_in_kernel) {
    p_ = {};
    p_.B = 1, p_.T = 90, p_.Hg = 1, p_.H = 2, p_.K = 64, p_.V = 64;
    p_.cu_seqlens = {0, 1, 40, 90};
    p_.gate_in_kernel = gate_in_kernel, p_.beta_sigmoid = gate_in_kernel, p_.qk_l2norm = gate_in_kernel;
    p_.state_layout = gate_in_kernel ? ref::StateLayout::vk : ref::StateLayout::kv;
    const std::size_t T = p_.T, H = p_.H, K = p_.K, V = p_.V, N = p_.N();
    q_ = noise(T * K, -0.25f, 0.25f, true);
    k_ = noise(T * K, -0.25f, 0.25f, true);
    v_ = noise(T * H * V, -1.0f, 1.0f, true);
    g_ = noise(T * H, -20.0f, -0.01f, false);
    beta_ = gate_in_kernel ? noise(T * H, -2.0f, 2.0f, false) : noise(T * H, 0.05f, 0.95f, false);
    h0_ = noise(N * H * K * V, -0.5f, 0.5f, false);
    if (gate_in_kernel) {
      g_ = noise(T * H, -2.0f, 2.0f, false);
      a_log_ = {-2.0f, 1.5f};
      dt_bias_ = {0.3f, -0.2f};
      write("A_log.npy", {2}, a_log_);
      write("dt_bias.npy", {2}, dt_bias_);
    } else {
      a_log_.clear(), dt_bias_.clear();
    }
    write("q.npy", {1, 90, 1, 64}, q_);
    write("k.npy", {1, 90, 1, 64}, k_);
    write("v.npy", {1, 90, 2, 64}, v_);
    write("g.npy", {1, 90, 2}, g_);
    write("beta.npy", {1, 90, 2}, beta_);
    write("h0.npy", {3, 2, 64, 64}, h0_);
    const std::vector<std::uint32_t> cu{0, 1, 40, 90};
    tkrun::write_npy(path("cu.npy"), {4}, nullptr, &cu);
  }
  std::string inputs() const {
    return " --in q=" + path("q.npy") + " --in k=" + path("k.npy") + " --in v=" + path("v.npy") + " --in g=" +
           path("g.npy") + " --in beta=" + path("beta.npy") + " --in initial_state=" + path("h0.npy") +
           " --in cu_seqlens=" + path("cu.npy");
  }
  ref::ChunkForwardResult reference() const {
    return ref::chunk_forward(p_, {q_, k_, v_, g_, beta_, a_log_, dt_bias_, h0_}, 64, ref::Rounding::fla);
  }

  void expect_refused(const std::string& args, const std::string& needle) {
    SCOPED_TRACE(args);
    const Result r = run(args);
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line expected: " << r.err;
    EXPECT_FALSE(fs::exists(path("o.npy"))) << "an output file was written";
  }

  static double relative_rms(const std::vector<float>& got, const std::vector<double>& want) {
    if (got.size() != want.size()) return INFINITY;
    double e = 0, n = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (!std::isfinite(got[i])) return INFINITY;
      e += (got[i] - want[i]) * (got[i] - want[i]);
      n += want[i] * want[i];
    }
    return std::sqrt(e / n);
  }

  std::uint64_t seed_ = 11;
  ref::GatedDeltaRuleProblem p_;
  std::vector<float> q_, k_, v_, g_, beta_, a_log_, dt_bias_, h0_;
};

TEST_F(TkRunGdn, ChunkForwardMatchesTheReference) {
  for (const bool options : {false, true}) {
    SCOPED_TRACE(options ? "qk_l2norm, gate_in_kernel, beta_sigmoid, state_layout=vk" : "plain");
    write_problem(options);
    std::string args = "gdn.chunk_forward" + inputs();
    if (options)
      args += " qk_l2norm=1 gate_in_kernel=1 beta_sigmoid=1 state_layout=vk --in A_log=" + path("A_log.npy") +
              " --in dt_bias=" + path("dt_bias.npy");
    const Result r = run(args + " --out o=" + path("o.npy") + " --out final_state=" + path("ht.npy"));
    ASSERT_EQ(r.code, 0) << r.err;
    const auto o = tkrun::read_npy(path("o.npy")), ht = tkrun::read_npy(path("ht.npy"));
    ASSERT_EQ(o.shape, (std::vector<std::int64_t>{1, 90, 2, 64}));
    ASSERT_EQ(ht.shape, (std::vector<std::int64_t>{3, 2, 64, 64}));
    const auto want = reference();
    EXPECT_LE(relative_rms(o.floats, want.o), 5e-3) << "o";
    EXPECT_LE(relative_rms(ht.floats, want.final_state), 5e-3) << "final state";
    fs::remove(path("o.npy"));
    fs::remove(path("ht.npy"));
  }
}

TEST_F(TkRunGdn, ChunkForwardRefusesBadInputWithOneLine) {
  write_problem(false);
  const std::string out = " --out o=" + path("o.npy");
  const std::string op = "gdn.chunk_forward";
  expect_refused(op + inputs() + " qk_l2norm=2" + out, "parameter 'qk_l2norm' must be 0 or 1, got '2'");
  expect_refused(op + inputs() + " state_layout=kk" + out, "parameter 'state_layout' must be kv or vk");
  expect_refused(op + inputs() + " bt=48" + out, "parameter 'bt' must be one of 16, 32, 64");
  expect_refused(op + inputs() + " gate_in_kernel=1" + out, "A_log");
  expect_refused(op + inputs() + " scale=-1" + out, "parameter 'scale' must be a positive number");
  // The state of 3 sequences, given in the other layout's shape: refused by name.
  write("h0_bad.npy", {3, 2, 64, 32}, std::vector<float>(3 * 2 * 64 * 32, 0.5f));
  expect_refused(op + " --in q=" + path("q.npy") + " --in k=" + path("k.npy") + " --in v=" + path("v.npy") +
                     " --in g=" + path("g.npy") + " --in beta=" + path("beta.npy") + " --in initial_state=" +
                     path("h0_bad.npy") + " --in cu_seqlens=" + path("cu.npy") + out,
                 "initial_state");
  const std::vector<std::uint32_t> decreasing{0, 50, 40, 90};
  tkrun::write_npy(path("cu.npy"), {4}, nullptr, &decreasing);
  expect_refused(op + inputs() + out, "cu_seqlens: must not decrease");
  write("cu.npy", {4}, {0.0f, 1.0f, 40.0f, 90.0f});
  expect_refused(op + inputs() + out, "expected a uint32 or int32 array");
}

// The stages on their own with cu_seqlens (FLA's token-major layout): three
// sequences of 1, 39 and 50 tokens in chunks of 16, against the references
// run on each sequence alone.
TEST_F(TkRunGdn, StagesTakeCuSeqlens) {
  const std::vector<std::int32_t> cu{0, 1, 40, 90};
  const std::size_t T = 90, H = 2, K = 64, V = 64, BT = 16;
  std::vector<std::size_t> row(T);  // position of each token in its chunk
  std::size_t chunks = 0;
  for (std::size_t n = 0; n + 1 < cu.size(); ++n) {
    for (std::size_t t = std::size_t(cu[n]); t < std::size_t(cu[n + 1]); ++t) row[t] = (t - std::size_t(cu[n])) % BT;
    chunks += (std::size_t(cu[n + 1] - cu[n]) + BT - 1) / BT;
  }
  const auto q = noise(T * K, -0.5f, 0.5f, true), k = noise(T * K, -0.5f, 0.5f, true);
  const auto v = noise(T * H * V, -1.0f, 1.0f, true), beta = noise(T * H, 0.05f, 0.95f, false);
  const auto h = noise(chunks * H * V * K, -0.5f, 0.5f, true), decay = noise(T * H, 0.0f, 1.0f, false);
  std::vector<float> g(T * H), A(T * H * BT);
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t i = 0; i < H; ++i) {
      g[t * H + i] = (row[t] == 0 ? 0.0f : g[(t - 1) * H + i]) - decay[t * H + i];  // chunk-local cumulative
      for (std::size_t j = 0; j < BT; ++j)
        A[(t * H + i) * BT + j] = j < row[t] ? 0.3f * (next() - 0.5f) : j == row[t] ? 1.0f : 0.0f;
    }
  write("q.npy", {1, 90, 1, 64}, q);
  write("k.npy", {1, 90, 1, 64}, k);
  write("v.npy", {1, 90, 2, 64}, v);
  write("beta.npy", {1, 90, 2}, beta);
  write("g.npy", {1, 90, 2}, g);
  write("A.npy", {1, 90, 2, 16}, A);
  write("h.npy", {1, std::int64_t(chunks), 2, 64, 64}, h);
  const std::vector<std::uint32_t> cu_words(cu.begin(), cu.end());
  tkrun::write_npy(path("cu.npy"), {4}, nullptr, &cu_words);

  std::vector<double> want_w(T * H * K), want_u(T * H * V), want_o(T * H * V);
  std::size_t first_chunk = 0;
  const auto rows = [&](const std::vector<float>& x, std::size_t n, std::size_t width) {
    return std::vector<float>(x.begin() + cu[n] * std::ptrdiff_t(width), x.begin() + cu[n + 1] * std::ptrdiff_t(width));
  };
  for (std::size_t n = 0; n + 1 < cu.size(); ++n) {
    const std::size_t len = std::size_t(cu[n + 1] - cu[n]), nt = (len + BT - 1) / BT;
    const auto wu = ref::recompute_wu(rows(k, n, K), rows(v, n, H * V), rows(beta, n, H), rows(g, n, H),
                                      rows(A, n, H * BT), 1, len, 1, H, K, V, BT);
    const std::vector<float> hn(h.begin() + std::ptrdiff_t(first_chunk * H * V * K),
                                h.begin() + std::ptrdiff_t((first_chunk + nt) * H * V * K));
    const auto o = ref::chunk_o(rows(q, n, K), rows(k, n, K), rows(v, n, H * V), hn, rows(g, n, H), 0.125,
                                {1, len, 1, H, K, V, BT});
    std::copy(wu.w.begin(), wu.w.end(), want_w.begin() + cu[n] * std::ptrdiff_t(H * K));
    std::copy(wu.u.begin(), wu.u.end(), want_u.begin() + cu[n] * std::ptrdiff_t(H * V));
    std::copy(o.begin(), o.end(), want_o.begin() + cu[n] * std::ptrdiff_t(H * V));
    first_chunk += nt;
  }

  const std::string cu_in = " --in cu_seqlens=" + path("cu.npy");
  Result r = run("gdn.recompute_wu bt=16 --in k=" + path("k.npy") + " --in v=" + path("v.npy") + " --in beta=" +
                 path("beta.npy") + " --in g=" + path("g.npy") + " --in A=" + path("A.npy") + cu_in + " --out w=" +
                 path("w.npy") + " --out u=" + path("u.npy"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_LE(relative_rms(tkrun::read_npy(path("w.npy")).floats, want_w), 5e-3) << "w";
  EXPECT_LE(relative_rms(tkrun::read_npy(path("u.npy")).floats, want_u), 5e-3) << "u";
  r = run("gdn.chunk_o bt=16 scale=0.125 --in q=" + path("q.npy") + " --in k=" + path("k.npy") + " --in v=" +
          path("v.npy") + " --in h=" + path("h.npy") + " --in g=" + path("g.npy") + cu_in + " --out o=" + path("o.npy"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_LE(relative_rms(tkrun::read_npy(path("o.npy")).floats, want_o), 5e-3) << "o";
  fs::remove(path("o.npy"));
  // h sized for one fixed-length row of 90 tokens (6 chunks, not 8): refused by name.
  write("h.npy", {1, 6, 2, 64, 64}, std::vector<float>(6 * 2 * 64 * 64, 0.5f));
  expect_refused("gdn.chunk_o bt=16 --in q=" + path("q.npy") + " --in k=" + path("k.npy") + " --in v=" +
                     path("v.npy") + " --in h=" + path("h.npy") + " --in g=" + path("g.npy") + cu_in + " --out o=" +
                     path("o.npy"),
                 "h: expected shape [1, 8, 2, 64, 64]");
  // Offsets that are no partition of the 90 tokens: named before h's shape,
  // which depends on them.
  const std::vector<std::uint32_t> bad_cu{0, 40, 20, 90};
  tkrun::write_npy(path("cu_bad.npy"), {4}, nullptr, &bad_cu);
  expect_refused("gdn.chunk_o bt=16 --in q=" + path("q.npy") + " --in k=" + path("k.npy") + " --in v=" +
                     path("v.npy") + " --in h=" + path("h.npy") + " --in g=" + path("g.npy") +
                     " --in cu_seqlens=" + path("cu_bad.npy") + " --out o=" + path("o.npy"),
                 "input 'cu_seqlens': must not decrease");
  expect_refused("gdn.chunk_o bt=16 scale=-1 --in q=" + path("q.npy") + " --in k=" + path("k.npy") + " --in v=" +
                     path("v.npy") + " --in h=" + path("h.npy") + " --in g=" + path("g.npy") + cu_in + " --out o=" +
                     path("o.npy"),
                 "parameter 'scale' must be a positive number");
}

}  // namespace
