// SPDX-License-Identifier: MIT
// tk-run against hostile calls (what a fuzzer found): malformed .npy
// headers, sizes that overflow, zero dimensions, u32 values that are not
// int32, outputs that cannot be written, and GDN and cache parameters
// outside what the kernels take. Each call must exit non-zero soon, with
// one line on stderr naming the tensor or parameter, and leave no file
// behind: no output, not even the outputs before a failing one, and no
// temporary file. TK_RUN is the path of the tk-run binary.
#include <gtest/gtest.h>

#include <tilekernels/core.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "cli_fixture.hpp"

namespace {

namespace fs = std::filesystem;

using tktest::cli::Result;

class TkRunHostile : public tktest::cli::TkRunFixture {
 protected:
  TkRunHostile() : TkRunFixture("tk_run_hostile_") {}

  // Seeded values in [-1, 1).
  static std::vector<float> values(std::size_t n, std::uint64_t seed) {
    std::vector<float> v(n);
    for (auto& x : v) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      x = static_cast<float>((seed >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
    }
    return v;
  }

  // A .npy file with `dict` as its header (padded as numpy pads it) and
  // `data_bytes` bytes of data.
  void write_raw(const std::string& name, const std::string& dict, std::size_t data_bytes, int version = 1) const {
    std::string header = dict;
    const std::size_t prefix = version == 1 ? 10 : 12;
    while ((prefix + header.size() + 1) % 64) header += ' ';
    header += '\n';
    std::ofstream f(path(name), std::ios::binary);
    f.write("\x93NUMPY", 6);
    f.put(static_cast<char>(version));
    f.put(0);
    const auto n = static_cast<std::uint32_t>(header.size());
    for (std::size_t i = 0; i < (version == 1 ? 2u : 4u); ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
    f << header;
    const std::vector<float> data = values((data_bytes + 3) / 4, 3);
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data_bytes));
  }

  // The files in the test's folder, less the captured stdout and stderr.
  std::set<std::string> files() const {
    std::set<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      const std::string name = fs::relative(e.path(), dir_).string();
      if (name != "stdout.txt" && name != "stderr.txt") out.insert(name);
    }
    return out;
  }

  // Runs `args`, which must fail: non-zero exit within `seconds`, one line
  // on stderr holding every needle, and the folder as it was (no output
  // file, no temporary file).
  void refused(const std::string& args, const std::vector<std::string>& needles, double seconds = 5.0) {
    SCOPED_TRACE(args);
    const std::set<std::string> before = files();
    const auto start = std::chrono::steady_clock::now();
    const Result r = run(args);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(r.code, 0) << r.err;
    EXPECT_LT(took, seconds) << "a refused call should fail fast";
    for (const auto& needle : needles) EXPECT_NE(r.err.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line expected: " << r.err;
    EXPECT_EQ(r.err.find("std::"), std::string::npos) << "a raw C++ exception leaked: " << r.err;
    EXPECT_EQ(files(), before) << "files were written or left behind";
  }

  // A valid aura.cache_write input set: 3 tokens of 1 KV head, dim 64, into
  // a fresh 2-page cache.
  void write_cache_inputs() {
    write("k.npy", {3, 1, 64}, values(192, 1));
    write("v.npy", {3, 1, 64}, values(192, 2));
    write_ints("slots.npy", {3}, {0, 17, -1});
  }
  std::string cache_call(const std::string& k_file, const std::string& params = " num_pages=2") const {
    return "aura.cache_write dim=64" + params + " --in k=" + path(k_file) + " --in v=" + path("v.npy") +
           " --in slot_mapping=" + path("slots.npy");
  }
  std::string cache_out() const {
    return " --out k_codes=" + path("kc.npy") + " --out k_norms=" + path("kn.npy") + " --out v_codes=" +
           path("vc.npy") + " --out v_norms=" + path("vn.npy");
  }

  // A gdn.recurrent_step problem: B = T = 1, one q head, two v heads,
  // K = `K`, V = 64.
  void write_gdn_inputs(std::int64_t K) {
    const auto n = static_cast<std::size_t>(K);
    write("q.npy", {1, 1, 1, K}, values(n, 4));
    write("k.npy", {1, 1, 1, K}, values(n, 5));
    write("v.npy", {1, 1, 2, 64}, values(128, 6));
    write("g.npy", {1, 1, 2}, {-0.5f, -0.25f});
    write("beta.npy", {1, 1, 2}, {0.5f, 0.75f});
    write("h0.npy", {1, 2, K, 64}, values(2 * n * 64, 7));
    write("a_log.npy", {2}, {0.1f, -0.2f});
  }
  std::string gdn_inputs() const {
    return " --in q=" + path("q.npy") + " --in k=" + path("k.npy") + " --in v=" + path("v.npy") + " --in g=" +
           path("g.npy") + " --in beta=" + path("beta.npy") + " --in initial_state=" + path("h0.npy");
  }
};

// Every way a header can be malformed, given as input 'k': refused by the
// file's and the tensor's name before any data is read; the well-formed
// spellings numpy (or Python) writes are still accepted.
TEST_F(TkRunHostile, MalformedHeadersAreRefusedByName) {
  write_cache_inputs();
  const std::size_t bytes = 3 * 64 * 4;
  const auto dict = [](const std::string& descr, const std::string& fortran, const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
  };
  struct Case {
    std::string what, header;
    std::size_t data;
    std::string needle;
  };
  const std::vector<Case> cases{
      {"sign", dict("<f4", "False", "(-3, 1, 64)"), bytes, "non-negative integer written in digits"},
      {"plus sign", dict("<f4", "False", "(+3, 1, 64)"), bytes, "non-negative integer written in digits"},
      {"letters", dict("<f4", "False", "(x3, 1, 64)"), bytes, "non-negative integer written in digits"},
      {"letters after digits", dict("<f4", "False", "(3x, 1, 64)"), bytes, "non-negative integer written in digits"},
      {"float dimension", dict("<f4", "False", "(3.0, 1, 64)"), bytes, "non-negative integer written in digits"},
      {"leading zero", dict("<f4", "False", "(03, 1, 64)"), bytes, "leading zero"},
      {"missing comma in the shape", dict("<f4", "False", "(3 1, 64)"), bytes, "expected ',' or ')'"},
      {"missing comma between entries", "{'descr': '<f4' 'fortran_order': False, 'shape': (3, 1, 64), }", bytes,
       "expected ',' or '}'"},
      {"a trailing comma numpy never writes", dict("<f4", "False", "(3, 1, 64,)"), bytes, "trailing comma"},
      {"a one-tuple without its comma", dict("<f4", "False", "(192)"), bytes, "needs a comma"},
      // (2^62 + 1) * 64 wraps to 64 in 64 bits: what the data holds.
      {"2^62 + 1 rows", dict("<f4", "False", "(4611686018427387905, 1, 64)"), 256, "more elements than 64 bits"},
      {"a product of 2^64", dict("<f4", "False", "(4294967296, 4294967296, 1)"), 0, "more elements than 64 bits"},
      {"a dimension past 2^63", dict("<f4", "False", "(9223372036854775808, 1, 64)"), bytes, "larger than 2^63 - 1"},
      {"bytes of the shape past 64 bits", dict("<f4", "False", "(4611686018427387904, 1, 1)"), 0,
       "more bytes than 64 bits"},
      {"fewer bytes than the shape", dict("<f4", "False", "(3, 1, 64)"), bytes - 4, "needs 768 bytes of data, the file holds 764"},
      {"more bytes than the shape", dict("<f4", "False", "(3, 1, 64)"), bytes + 4, "needs 768 bytes of data, the file holds 772"},
      {"float64", dict("<f8", "False", "(3, 1, 64)"), 2 * bytes, "dtype '<f8' is not supported"},
      {"big-endian", dict(">f4", "False", "(3, 1, 64)"), bytes, "dtype '>f4' is not supported"},
      {"fortran order", dict("<f4", "True", "(3, 1, 64)"), bytes, "Fortran-ordered arrays are not supported"},
      {"fortran order misspelt", dict("<f4", "Flase", "(3, 1, 64)"), bytes, "must be True or False"},
      {"an extra key", "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 1, 64), 'x': 1, }", bytes,
       "unexpected key 'x'"},
      {"a repeated key", "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 1, 64), 'shape': (3, 1, 64), }", bytes,
       "key 'shape' appears twice"},
      {"no shape", "{'descr': '<f4', 'fortran_order': False, }", bytes, "has no 'shape'"},
      {"not a dict", "['descr', '<f4']", bytes, "dict literal"},
      {"text after the dict", dict("<f4", "False", "(3, 1, 64)") + " 1", bytes, "after the closing '}'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    write_raw("bad.npy", c.header, c.data);
    refused(cache_call("bad.npy") + cache_out(), {"input 'k'", path("bad.npy"), c.needle});
  }
  // No newline at the end of the header, a folder, a truncated header.
  {
    std::ofstream f(path("bad.npy"), std::ios::binary | std::ios::trunc);
    const std::string h = dict("<f4", "False", "(3, 1, 64)");
    f.write("\x93NUMPY\x01\x00", 8);
    f.put(static_cast<char>(h.size())), f.put(0);
    f << h;
  }
  refused(cache_call("bad.npy") + cache_out(), {"input 'k'", "does not end with a newline"});
  fs::create_directory(path("folder.npy"));
  refused(cache_call("folder.npy") + cache_out(), {"input 'k'", "is a directory"});
  fs::remove(path("folder.npy"));

  // What numpy writes (format 1.0 and 2.0) and what Python also spells a
  // dict: accepted.
  for (const auto& [header, version] :
       std::vector<std::pair<std::string, int>>{{dict("<f4", "False", "(3, 1, 64)"), 1},
                                                {dict("<f4", "False", "(3, 1, 64)"), 2},
                                                {"{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (3,1,64)}", 1}}) {
    SCOPED_TRACE(header);
    write_raw("good.npy", header, bytes, version);
    const Result r = run(cache_call("good.npy") + " --out k_codes=" + path("kc.npy"));
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(fs::exists(path("kc.npy")));
    fs::remove(path("kc.npy"));
  }
}

// A dimension of 0 (a valid numpy array, but no kernel takes one) and a
// 0-dimensional array: refused naming the tensor and the dimension.
TEST_F(TkRunHostile, ZeroSizeDimensionsAreRefusedByName) {
  write_cache_inputs();
  write("empty.npy", {0, 1, 64}, {});
  refused(cache_call("empty.npy") + cache_out(),
          {"input 'k'", "dimension 0 of shape [0, 1, 64] is 0; every dimension must be > 0"});
  write("empty.npy", {3, 0, 64}, {});
  refused(cache_call("empty.npy") + cache_out(),
          {"input 'k'", "dimension 1 of shape [3, 0, 64] is 0; every dimension must be > 0"});
  write("scalar.npy", {}, {1.0f});
  refused(cache_call("scalar.npy") + cache_out(), {"input 'k'", "0-dimensional"});
  write_ints("slots0.npy", {0}, {});
  refused("aura.cache_write dim=64 num_pages=2 --in k=" + path("k.npy") + " --in v=" + path("v.npy") +
              " --in slot_mapping=" + path("slots0.npy") + cache_out(),
          {"input 'slot_mapping'", "dimension 0 of shape [0] is 0"});
}

// A u32 slot_mapping holding 0xFFFFFFFF is not -1: refused by tensor and
// index (an int32 -1, the documented padding, still skips its token).
TEST_F(TkRunHostile, U32ValuesAboveInt32MaxAreRefused) {
  write_cache_inputs();
  const std::vector<std::uint32_t> slots{0, 0xFFFFFFFFu, 1};
  tkrun::write_npy(path("u32slots.npy"), {3}, nullptr, &slots);
  refused("aura.cache_write dim=64 num_pages=2 --in k=" + path("k.npy") + " --in v=" + path("v.npy") +
              " --in slot_mapping=" + path("u32slots.npy") + cache_out(),
          {"input 'slot_mapping'", "value 4294967295 at index 1 is above INT32_MAX"});
  const Result r = run(cache_call("k.npy") + cache_out());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(path("kc.npy")));
}

// Outputs that cannot be written: the call fails before any work, naming
// the output, and none of the outputs is written, not even those before it
// (tk-run writes temporary files and renames them only at the end).
TEST_F(TkRunHostile, UnwritableOutputsLeaveNothingBehind) {
  write_cache_inputs();
  const std::string earlier = " --out k_codes=" + path("kc.npy") + " --out k_norms=" + path("kn.npy") +
                              " --out v_codes=" + path("vc.npy");
  refused(cache_call("k.npy") + earlier + " --out v_norms=" + path("missing/vn.npy"), {"output 'v_norms'", "missing"});
  fs::create_directory(path("vn_dir"));
  refused(cache_call("k.npy") + earlier + " --out v_norms=" + path("vn_dir"), {"output 'v_norms'", "is a directory"});
  refused(cache_call("k.npy") + earlier + " --out v_norms=" + path("vn_dir") + "/", {"output 'v_norms'", "names a folder"});
  refused(cache_call("k.npy") + earlier + " --out v_norms=" + path("kc.npy"), {"output 'v_norms'", "output 'k_codes'"});
  fs::remove(path("vn_dir"));
  // A failure after the temporary files exist (a slot past the cache): removed.
  write_ints("slots.npy", {3}, {0, 17, 40});
  refused(cache_call("k.npy") + cache_out(), {"slot_mapping", "slot 40 of token 2 is past the cache"});
  // And an output that exists is left as it was by a failing call.
  write("kc.npy", {1}, {42.0f});
  refused(cache_call("k.npy") + cache_out(), {"slot 40"});
  EXPECT_EQ(tkrun::read_npy(path("kc.npy")).floats, std::vector<float>{42.0f});
}

// gdn.recurrent_step with K = 96: the one message that says what K may be.
TEST_F(TkRunHostile, RecurrentStepNamesTheHeadSizesItTakes) {
  write_gdn_inputs(96);
  refused("gdn.recurrent_step" + gdn_inputs() + " --out o=" + path("o.npy"), {"input 'q'", "K must be 64, 128 or 256"});
  refused("gdn.chunk_forward" + gdn_inputs() + " --out o=" + path("o.npy"), {"input 'q'", "K must be 64, 128 or 256"});
}

// gdn.recurrent_step refuses A_log and dt_bias without gate_in_kernel=1, as
// gdn.chunk_forward does, in the same words.
TEST_F(TkRunHostile, RecurrentStepRefusesGateInputsWithoutGateInKernel) {
  write_gdn_inputs(64);
  const std::string out = " --out o=" + path("o.npy");
  for (const char* op : {"gdn.recurrent_step", "gdn.chunk_forward"}) {
    SCOPED_TRACE(op);
    for (const char* input : {"A_log", "dt_bias"})
      refused(op + gdn_inputs() + " --in " + input + "=" + path("a_log.npy") + out,
              {"inputs 'A_log' and 'dt_bias' are used only with gate_in_kernel=1"});
    refused(op + gdn_inputs() + " gate_in_kernel=1" + out, {"gate_in_kernel", "A_log"});
  }
  const Result r = run("gdn.recurrent_step dtype=f32" + gdn_inputs() + out);
  EXPECT_EQ(r.code, 0) << r.err;
}

// A scale that is not a positive finite float: refused by both GDN ops.
TEST_F(TkRunHostile, GdnOpsRefuseNonPositiveOrNonFiniteScale) {
  write_gdn_inputs(64);
  const std::string out = " --out o=" + path("o.npy");
  for (const char* op : {"gdn.recurrent_step", "gdn.chunk_forward"}) {
    SCOPED_TRACE(op);
    for (const char* scale : {"-1", "0", "-0"})
      refused(op + gdn_inputs() + " scale=" + scale + out, {"parameter 'scale' must be a positive number"});
    for (const char* scale : {"nan", "inf", "1e999", "0x10", " 1", "1e-3x"})
      refused(op + std::string(" \"scale=") + scale + "\"" + gdn_inputs() + out,
              {"parameter 'scale' must be a finite number"});
    refused(op + gdn_inputs() + " scale=1e-60" + out, {"parameter 'scale' is outside float's range"});
  }
}

// num_pages (and the format parameters) sized past what the kernels index
// or the device holds: refused naming the parameter before allocating.
TEST_F(TkRunHostile, HugeNumPagesIsRefusedByName) {
  write_cache_inputs();
  for (const char* pages : {"1099511627776", "134217728"})
    refused(cache_call("k.npy", std::string(" num_pages=") + pages) + cache_out(),
            {"parameter 'num_pages' = " + std::string(pages), "32-bit indexing"});
  refused(cache_call("k.npy", " num_pages=9223372036854775807") + cache_out(),
          {"parameter 'num_pages' = 9223372036854775807", "more elements than 64 bits can count"});
  refused(cache_call("k.npy", " num_pages=99999999999999999999") + cache_out(),
          {"parameter 'num_pages' must be an integer in"});
  refused(cache_call("k.npy", " num_pages=-3") + cache_out(), {"parameter 'num_pages' must be an integer in"});
  refused(cache_call("k.npy", " num_pages=+3") + cache_out(), {"parameter 'num_pages' must be an integer"});
  refused(cache_call("k.npy", " num_pages=2 k_seed=-1") + cache_out(), {"parameter 'k_seed' must be an integer in [0, 2^64 - 1]"});
  refused(cache_call("k.npy", " num_pages=2 num_pages=3") + cache_out(), {"parameter 'num_pages' is given twice"});

  // Past the device's buffer range but within 32-bit indexing: 8-bit K and
  // V codes of 256 dimensions over 64 heads take 256 KiB per page and side;
  // enough pages to pass maxStorageBufferRange.
  const tilekernels::Context ctx;
  const std::uint64_t range = ctx.info().max_storage_buffer_range, per_page = 64 * 16 * 64 * 4;
  const std::uint64_t pages = range / per_page + 1;
  if (pages * 64 * 16 * 64 > std::uint64_t{0x7fffffff}) GTEST_SKIP() << "maxStorageBufferRange beyond 32-bit indexing";
  write("k64.npy", {1, 64, 256}, values(64 * 256, 8));
  write_ints("slot1.npy", {1}, {0});
  refused("aura.cache_write dim=256 k_bits=8 v_bits=8 num_pages=" + std::to_string(pages) + " --in k=" +
              path("k64.npy") + " --in v=" + path("k64.npy") + " --in slot_mapping=" + path("slot1.npy") +
              " --out k_codes=" + path("kc.npy") + " --out v_codes=" + path("vc.npy"),
          {"parameter 'num_pages' = " + std::to_string(pages), "maxStorageBufferRange"});
}

// aura.rotation: a dense rotation costs O(dim^3) on one core, so it stops at
// 512 (the largest dimension a dense-rotation kernel takes) and is refused
// at once past it; a Hadamard one goes on to 4096.
TEST_F(TkRunHostile, DenseRotationsStopWhereTheKernelsDo) {
  refused("aura.rotation dim=4096 kind=dense --out rotation=" + path("r.npy"),
          {"parameter 'dim' must be in [1, 512] for kind=dense"});
  refused("aura.rotation dim=513 kind=dense --out rotation=" + path("r.npy"), {"[1, 512]"});
  refused("aura.rotation dim=64 kind=qr --out rotation=" + path("r.npy"), {"parameter 'kind' must be dense or hadamard"});
  const auto start = std::chrono::steady_clock::now();
  const Result r = run("aura.rotation dim=512 kind=dense --out rotation=" + path("r512.npy"));
  EXPECT_EQ(r.code, 0) << r.err;
  std::printf("[rotation] dense, dim 512: %.2f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// Parameters judged alike across ops: seeds are integers in [0, 2^64 - 1]
// everywhere; a softcap that narrows to 0 in float (which would mean none)
// is refused like such a scale; a decode attention refused for its shapes
// or lengths is refused before any pipeline is built.
TEST_F(TkRunHostile, ParametersAreJudgedAlike) {
  refused("aura.rotation dim=64 seed=-1 --out rotation=" + path("r.npy"),
          {"parameter 'seed' must be an integer in [0, 2^64 - 1]"});
  const Result r = run("aura.rotation dim=64 kind=hadamard seed=18446744073709551615 --out rotation=" + path("r.npy"));
  EXPECT_EQ(r.code, 0) << r.err;
  // A cache of 2 KV heads, 2 pages of 16 slots.
  write("k2.npy", {3, 2, 64}, values(384, 12));
  write("v2.npy", {3, 2, 64}, values(384, 13));
  write_ints("slots.npy", {3}, {0, 17, -1});
  const Result w = run("aura.cache_write dim=64 num_pages=2 --in k=" + path("k2.npy") + " --in v=" + path("v2.npy") +
                       " --in slot_mapping=" + path("slots.npy") + cache_out());
  ASSERT_EQ(w.code, 0) << w.err;
  write("q.npy", {1, 1, 3, 64}, values(192, 9));
  write_ints("table.npy", {1, 2}, {0, 1});
  write_ints("lens.npy", {1}, {18});
  const auto attention = [&](const std::string& q, const std::string& params) {
    return "aura.decode_attention dim=64" + params + " --in q=" + path(q) + " --in k_codes=" + path("kc.npy") +
           " --in k_norms=" + path("kn.npy") + " --in v_codes=" + path("vc.npy") + " --in v_norms=" + path("vn.npy") +
           " --in block_table=" + path("table.npy") + " --in seq_lens=" + path("lens.npy") + " --out output=" +
           path("o.npy");
  };
  refused(attention("q.npy", " softcap=1e-300"), {"parameter 'softcap' is outside float's range"});
  refused(attention("q.npy", ""), {"input 'q': q_heads (3) must be a multiple of kv_heads (2"}, 1.0);
  write("q17.npy", {1, 17, 2, 64}, values(17 * 128, 10));
  refused(attention("q17.npy", ""), {"input 'q': q_len must be at most 16"}, 1.0);
  write("q4.npy", {1, 4, 2, 64}, values(4 * 128, 11));
  write_ints("lens.npy", {1}, {3});
  refused(attention("q4.npy", ""), {"seq_len 3 of sequence 0 is below q_len 4"}, 1.0);
}

// The command line itself: repeated names and unknown ones, one line each.
TEST_F(TkRunHostile, RefusesRepeatedInputsAndOutputs) {
  write_cache_inputs();
  refused(cache_call("k.npy") + " --in k=" + path("k.npy") + cache_out(), {"input 'k' is given twice"});
  refused(cache_call("k.npy") + cache_out() + " --out k_codes=" + path("x.npy"), {"output 'k_codes' is given twice"});
  refused("", {"no op given"});
}

}  // namespace
