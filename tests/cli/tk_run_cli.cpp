// SPDX-License-Identifier: MIT
// tk-run end to end: .npy in, kernel, .npy out, checked against the
// reference; and every kind of bad input refused with one line, a non-zero
// exit and no output file. TK_RUN is the path of the tk-run binary.
#include <gtest/gtest.h>

#include <tilekernels/core/dtype.hpp>
#include <tilekernels/reference/aura/flash_pass2.hpp>
#include <tilekernels/reference/gdn/gated_delta_rule.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

#include "cli_fixture.hpp"

namespace {

namespace fs = std::filesystem;

using tktest::cli::Result;

class TkRun : public tktest::cli::TkRunFixture {
 protected:
  TkRun() : TkRunFixture("tk_run_cli_") {}

  // Writes seeded partials for q heads x nb blocks x dim.
  void write_partials(std::int64_t q, std::int64_t nb, std::int64_t dim) {
    std::uint64_t s = 7;
    auto next = [&] {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<float>((s >> 40) * (1.0 / (1ull << 24)));
    };
    o_.resize(static_cast<std::size_t>(q * nb * dim));
    m_.resize(static_cast<std::size_t>(q * nb));
    l_.resize(m_.size());
    for (auto& x : o_) x = next() * 4 - 2;
    for (auto& x : m_) x = next() * 20 - 10;
    for (auto& x : l_) x = 0.5f + next();
    tkrun::write_npy(path("o.npy"), {q, nb, dim}, &o_, nullptr);
    tkrun::write_npy(path("m.npy"), {q, nb}, &m_, nullptr);
    tkrun::write_npy(path("l.npy"), {q, nb}, &l_, nullptr);
  }

  std::string inputs() const {
    return "--in o_partials=" + path("o.npy") + " --in m_partials=" + path("m.npy") + " --in l_partials=" + path("l.npy");
  }

  void expect_refused(const std::string& args, const std::string& needle) {
    SCOPED_TRACE(args);
    const Result r = run(args);
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line expected: " << r.err;
    EXPECT_FALSE(fs::exists(path("out.npy"))) << "an output file was written";
  }

  std::vector<float> o_, m_, l_;
};

TEST_F(TkRun, ListsTheOps) {
  const Result r = run("--list");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("aura.flash_pass2"), std::string::npos) << r.out;
}

TEST_F(TkRun, FlashPass2MatchesTheReference) {
  write_partials(5, 9, 96);
  const auto ref = tilekernels::reference::aura::flash_pass2(o_, m_, l_, 5, 9, 96);
  for (const char* out_dtype : {"f32", "bf16"}) {
    SCOPED_TRACE(out_dtype);
    const Result r = run("aura.flash_pass2 dim=96 out_dtype=" + std::string(out_dtype) + " " + inputs() +
                         " --out output=" + path("out.npy") + " --out lse=" + path("lse.npy"));
    ASSERT_EQ(r.code, 0) << r.err;
    const auto out = tkrun::read_npy(path("out.npy"));
    const auto lse = tkrun::read_npy(path("lse.npy"));
    ASSERT_EQ(out.shape, (std::vector<std::int64_t>{5, 96}));
    ASSERT_EQ(lse.shape, (std::vector<std::int64_t>{5}));
    double e2 = 0, r2 = 0, le = 0;
    for (std::size_t i = 0; i < ref.output.size(); ++i) {
      e2 += (out.floats[i] - ref.output[i]) * (out.floats[i] - ref.output[i]);
      r2 += ref.output[i] * ref.output[i];
    }
    for (std::size_t i = 0; i < ref.lse.size(); ++i) le = std::max(le, std::abs(lse.floats[i] - ref.lse[i]));
    EXPECT_LE(std::sqrt(e2 / r2), std::string(out_dtype) == "f32" ? 1e-5 : 5e-3);
    EXPECT_LE(le, 1e-4);
    fs::remove(path("out.npy"));
  }
}

TEST_F(TkRun, RefusesBadInputWithOneLine) {
  write_partials(3, 4, 64);
  const std::string out = " --out output=" + path("out.npy");
  expect_refused("aura.nope" + out, "unknown op 'aura.nope'");
  expect_refused("aura.flash_pass2 dim=64 --in o_partials=" + path("o.npy") + out, "missing input 'm_partials'");
  expect_refused("aura.flash_pass2 dim=128 " + inputs() + out, "input 'o_partials': expected shape [q_heads, num_blocks, 128]");
  expect_refused("aura.flash_pass2 dim=64 color=red " + inputs() + out, "has no parameter 'color'");
  expect_refused("aura.flash_pass2 dim=65 " + inputs() + out, "parameter 'dim' must be 64, 80, 96, 128, 256 or 512");
  expect_refused("aura.flash_pass2 dim=64 out_dtype=f64 " + inputs() + out, "must be f32, f16 or bf16, got 'f64'");
  expect_refused("aura.flash_pass2 dim=64 " + inputs(), "no --out given");
  expect_refused("aura.flash_pass2 dim=64 " + inputs() + out + " --out bogus=" + path("b.npy"), "has no output named 'bogus'");
  {
    std::ofstream broken(path("broken.npy"));
    broken << "not numpy";
  }
  expect_refused("aura.flash_pass2 dim=64 --in o_partials=" + path("broken.npy") + " --in m_partials=" + path("m.npy") +
                     " --in l_partials=" + path("l.npy") + out,
                 "not a .npy file");
  std::vector<std::uint32_t> ints(12, 1);
  tkrun::write_npy(path("ints.npy"), {3, 4}, nullptr, &ints);
  expect_refused("aura.flash_pass2 dim=64 --in o_partials=" + path("o.npy") + " --in m_partials=" + path("ints.npy") +
                     " --in l_partials=" + path("l.npy") + out,
                 "expected a float32 or float16 array");
  std::vector<float> short_l(3, 1.0f);
  tkrun::write_npy(path("short.npy"), {3}, &short_l, nullptr);
  expect_refused("aura.flash_pass2 dim=64 --in o_partials=" + path("o.npy") + " --in m_partials=" + path("m.npy") +
                     " --in l_partials=" + path("short.npy") + out,
                 "input 'l_partials': expected shape [3, 4], got [3]");
}

// gdn.recurrent_step in f32 (no rounding on either side): two ragged
// sequences, [V, K] states, every option, against the double recurrence.
TEST_F(TkRun, GdnRecurrentStepMatchesTheReference) {
  namespace ref = tilekernels::reference::gdn;
  ref::GatedDeltaRuleProblem p;
  p.B = 1, p.T = 3, p.Hg = 1, p.H = 2, p.K = 64, p.V = 64, p.cu_seqlens = {0, 1, 3};
  p.qk_l2norm = p.gate_in_kernel = p.beta_sigmoid = true;
  p.state_layout = ref::StateLayout::vk;
  std::uint64_t s = 11;
  auto fill = [&](std::size_t n, float lo, float hi) {
    std::vector<float> x(n);
    for (auto& e : x) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      e = lo + (hi - lo) * static_cast<float>((s >> 40) * (1.0 / (1ull << 24)));
    }
    return x;
  };
  const auto q = fill(3 * 64, -1, 1), k = fill(3 * 64, -1, 1), v = fill(3 * 2 * 64, -1, 1);
  const auto g = fill(6, -3, 3), beta = fill(6, -2, 2), a_log = fill(2, -1, 1), dt_bias = fill(2, -0.5f, 0.5f);
  const auto h0 = fill(2 * 2 * 64 * 64, -0.5f, 0.5f);
  std::vector<std::uint32_t> cu{0, 1, 3};
  tkrun::write_npy(path("q.npy"), {1, 3, 1, 64}, &q, nullptr);
  tkrun::write_npy(path("k.npy"), {1, 3, 1, 64}, &k, nullptr);
  tkrun::write_npy(path("v.npy"), {1, 3, 2, 64}, &v, nullptr);
  tkrun::write_npy(path("g.npy"), {1, 3, 2}, &g, nullptr);
  tkrun::write_npy(path("beta.npy"), {1, 3, 2}, &beta, nullptr);
  tkrun::write_npy(path("a_log.npy"), {2}, &a_log, nullptr);
  tkrun::write_npy(path("dt_bias.npy"), {2}, &dt_bias, nullptr);
  tkrun::write_npy(path("h0.npy"), {2, 2, 64, 64}, &h0, nullptr);
  tkrun::write_npy(path("cu.npy"), {3}, nullptr, &cu);
  const std::vector<float> cu_f{0, 1, 3};
  tkrun::write_npy(path("cu_f.npy"), {3}, &cu_f, nullptr);
  // The inputs, with `name` read from `file` instead where given.
  const auto inputs_with = [&](const std::string& name, const std::string& file) {
    std::string a;
    for (const char* n : {"q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state", "cu_seqlens"}) {
      static const std::map<std::string, std::string> files{
          {"q", "q"}, {"k", "k"}, {"v", "v"}, {"g", "g"}, {"beta", "beta"}, {"A_log", "a_log"},
          {"dt_bias", "dt_bias"}, {"initial_state", "h0"}, {"cu_seqlens", "cu"}};
      a += std::string(" --in ") + n + "=" + (n == name ? file : path(files.at(n) + ".npy"));
    }
    return a;
  };
  const std::string ins = inputs_with("", "");
  const std::string opts = " dtype=f32 qk_l2norm=1 gate_in_kernel=1 beta_sigmoid=1 state_layout=vk";
  const Result r = run("gdn.recurrent_step" + opts + ins + " --out o=" + path("o.npy") + " --out final_state=" +
                       path("ht.npy"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto ref_r = ref::gated_delta_rule(p, {q, k, v, g, beta, a_log, dt_bias, h0});
  const auto rel = [](const std::vector<float>& got, const std::vector<double>& want) {
    double e2 = 0, r2 = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      e2 += (got[i] - want[i]) * (got[i] - want[i]);
      r2 += want[i] * want[i];
    }
    return std::sqrt(e2 / r2);
  };
  const auto o = tkrun::read_npy(path("o.npy")), ht = tkrun::read_npy(path("ht.npy"));
  ASSERT_EQ(o.shape, (std::vector<std::int64_t>{1, 3, 2, 64}));
  ASSERT_EQ(ht.shape, (std::vector<std::int64_t>{2, 2, 64, 64}));
  EXPECT_LE(rel(o.floats, ref_r.o), 1e-5);
  EXPECT_LE(rel(ht.floats, ref_r.final_state), 1e-5);

  const std::string out = " --out o=" + path("out.npy");
  expect_refused("gdn.recurrent_step state_layout=kx" + ins + out, "parameter 'state_layout' must be kv or vk");
  // (with gate_in_kernel=1: without it, A_log and dt_bias are refused first)
  expect_refused("gdn.recurrent_step state_layout=vk gate_in_kernel=1" + inputs_with("initial_state", path("q.npy")) + out,
                 "input 'initial_state': expected shape [2, 2, 64, 64], got [1, 3, 1, 64]");
  expect_refused("gdn.recurrent_step state_layout=vk gate_in_kernel=2" + ins + out, "must be 0 or 1");
  expect_refused("gdn.recurrent_step state_layout=vk --in q=" + path("q.npy") + out, "missing input 'k'");
  expect_refused("gdn.recurrent_step state_layout=vk gate_in_kernel=1" + inputs_with("cu_seqlens", path("cu_f.npy")) + out,
                 "expected a uint32 or int32 array");
}

}  // namespace
