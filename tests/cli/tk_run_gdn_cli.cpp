// tk-run end to end for gdn.chunk_forward: seeded .npy inputs (f32 files,
// rounded to bf16 by tk-run where the op takes bf16), the op, and o and the
// final state against the double reference at FLA's rounding points
// (5e-3); the options as key=value parameters; bad input refused with one
// line and no output file. TK_RUN is the path of the tk-run binary.
#include <gtest/gtest.h>

#include <tilekernels/core/dtype.hpp>
#include <tilekernels/reference/gdn/chunk_forward.hpp>

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

}  // namespace
