// tk-run end to end: .npy in, kernel, .npy out, checked against the
// reference; and every kind of bad input refused with one line, a non-zero
// exit and no output file. TK_RUN is the path of the tk-run binary.
#include <gtest/gtest.h>

#include <tilekernels/core/dtype.hpp>
#include <tilekernels/reference/aura/flash_pass2.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

#include "../../examples/tk-run/npy.hpp"

namespace {

namespace fs = std::filesystem;

struct Result {
  int code;
  std::string out, err;
};

class TkRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tk_run_cli_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  Result run(const std::string& args) const {
    const std::string cmd = std::string(TK_RUN) + " " + args + " > " + path("stdout.txt") + " 2> " + path("stderr.txt");
    const int status = std::system(cmd.c_str());
    auto slurp = [](const std::string& p) {
      std::ifstream f(p);
      std::stringstream s;
      s << f.rdbuf();
      return s.str();
    };
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(path("stdout.txt")), slurp(path("stderr.txt"))};
  }

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

  fs::path dir_;
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
  expect_refused("aura.flash_pass2 dim=65 " + inputs() + out, "input 'o_partials': expected shape");
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

}  // namespace
