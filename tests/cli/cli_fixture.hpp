// SPDX-License-Identifier: MIT
// What every tk-run end-to-end test needs: a temporary folder per test, the
// tk-run binary (TK_RUN) run with its stdout and stderr captured, and .npy
// writers for its inputs.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "../../examples/tk-run/npy.hpp"

namespace tktest::cli {

namespace fs = std::filesystem;

struct Result {
  int code;
  std::string out, err;
};

class TkRunFixture : public ::testing::Test {
 protected:
  explicit TkRunFixture(std::string prefix) : prefix_(std::move(prefix)) {}

  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           (prefix_ + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  Result run(const std::string& args) const {
    const std::string cmd = std::string(TK_RUN) + " " + args + " > " + path("stdout.txt") + " 2> " + path("stderr.txt");
    const int status = std::system(cmd.c_str());
    const auto slurp = [](const std::string& p) {
      std::ifstream f(p);
      std::stringstream s;
      s << f.rdbuf();
      return s.str();
    };
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(path("stdout.txt")), slurp(path("stderr.txt"))};
  }

  void write(const std::string& name, const std::vector<std::int64_t>& shape, const std::vector<float>& x) const {
    tkrun::write_npy(path(name), shape, &x, nullptr);
  }
  // An int32 file ('<i4'), as np.save writes np.int32 arrays (negative
  // values stay negative; a u32 file above INT32_MAX is refused by tk-run).
  void write_ints(const std::string& name, const std::vector<std::int64_t>& shape,
                  const std::vector<std::int32_t>& x) const {
    const std::vector<std::uint32_t> w(x.begin(), x.end());
    tkrun::write_npy(path(name), shape, nullptr, &w, "<i4");
  }

  fs::path dir_;

 private:
  std::string prefix_;
};

}  // namespace tktest::cli
