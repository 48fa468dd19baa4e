// SPDX-License-Identifier: MIT
// Shared test machinery: the device, seeded inputs, NaN-filled outputs with
// sentinels, and error measures. See docs/DESIGN.md "Tests".
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tilekernels/core.hpp"
#include "tilekernels/core/splitmix.hpp"

namespace tktest {

using namespace tilekernels;

// The one Context of the test binary (validation layer on where installed,
// unless TILEKERNELS_VALIDATION=0).
Context& context();

// A second Context on the same device with the validation layer's
// synchronization validation on, for tests that record several dependent
// dispatches (a whole decode step, a whole GDN forward): a missing barrier
// shows there, on lavapipe only by chance. Its messages fail the test too.
Context& sync_context();

// Destroys the contexts above (main() calls it after the tests).
void release_contexts();

// Fails the current test if the validation layer said anything since the
// last call (on either Context that exists), and clears the logs.
void expect_no_validation_messages();

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    context().clear_validation_messages();
    sync_context().clear_validation_messages();
  }
  void TearDown() override { expect_no_validation_messages(); }
};

// Deterministic on every platform (no std:: distributions, whose output is
// implementation-defined): splitmix64 with float helpers.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() { return tilekernels::splitmix64(state_); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  float uniform(float lo, float hi) { return static_cast<float>(lo + (hi - lo) * uniform()); }
  float normal() {  // Box-Muller
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  std::vector<float> normals(std::size_t n, float scale = 1.0f) {
    std::vector<float> v(n);
    for (auto& x : v) x = normal() * scale;
    return v;
  }

 private:
  std::uint64_t state_;
};

// An output tensor inside a larger buffer: the payload is pre-filled with
// all-ones words (NaN in every float dtype), the guard regions before and
// after with a sentinel pattern that the kernel must leave untouched.
class GuardedTensor {
 public:
  static constexpr std::size_t guard_bytes = 256;  // >= any minStorageBufferOffsetAlignment
  static constexpr std::uint32_t sentinel = 0xA5C3A5C3u;

  GuardedTensor(Context& ctx, DType dtype, Shape shape);
  TensorRef ref() const { return ref_; }
  operator TensorRef() const { return ref_; }  // NOLINT
  // Refills payload with NaN and guards with the sentinel.
  void poison();
  // Zeroes the payload (a workspace zeroed once, as an engine keeps it).
  void zero();
  // Sets every 32-bit word of the payload to `word` (a whole number of words).
  void fill(std::uint32_t word);
  // Checks the guards (gtest failure if touched) and returns the payload
  // widened to float (or the raw words as float bits for u32/i32).
  std::vector<float> read_floats() const;
  std::vector<std::uint32_t> read_words() const;  // payload as 32-bit words (u32 tensors)
  bool guards_intact() const;

 private:
  std::vector<std::uint32_t> read_all() const;
  Buffer buffer_;
  TensorRef ref_;
  std::size_t payload_bytes_;
};

// Rows of a fused projection (e.g. [tokens, (q_heads + 2 kv_heads) * dim])
// and views into them: each token row holds `row` elements, the first row
// starts `at` elements into the buffer (an odd `at` is an offset no device
// aligns bindings to), every element no upload wrote holds NaN (so a read
// outside a view shows in its result) and the buffer sits between sentinel
// guards.
class FusedRows {
 public:
  FusedRows(Context& ctx, DType dtype, std::int64_t tokens, std::int64_t row, std::int64_t at);
  // The view of `shape` whose first `token_dims` dimensions flatten into
  // the token axis and whose remaining ones form a dense run starting `col`
  // elements into each row.
  TensorRef view(Shape shape, std::size_t token_dims, std::int64_t col) const;
  // Writes `values` (dense, in the view's order, rounded to the dtype).
  void upload(const TensorRef& view, const std::vector<float>& values);
  // The view's elements, dense.
  std::vector<float> read(const TensorRef& view) const;
  // Fails the test unless every element outside `views` still holds NaN
  // and the guards their sentinel.
  void expect_untouched_outside(const std::vector<TensorRef>& views) const;

 private:
  std::vector<std::size_t> elements(const TensorRef& view) const;  // buffer elements, dense order
  Buffer buffer_;
  DType dtype_;
  std::int64_t row_, at_;
  std::size_t esize_, payload_;
};

// A command pool and buffer of the test's own, submitted on the Context's
// queue by the test itself (never through the Context).
class OwnCommandBuffer {
 public:
  explicit OwnCommandBuffer(Context& ctx) : ctx_(&ctx) {
    const auto& d = ctx.dispatcher();
    pool_ = Owned<vk::CommandPool>(ctx.device(),
                                   ctx.device().createCommandPool(vk::CommandPoolCreateInfo({}, ctx.queue_family()),
                                                                  nullptr, d),
                                   d.vkDestroyCommandPool, nullptr);
    cmd_ = ctx.device().allocateCommandBuffers({*pool_, vk::CommandBufferLevel::ePrimary, 1}, d).front();
    cmd_.begin(vk::CommandBufferBeginInfo(vk::CommandBufferUsageFlagBits::eOneTimeSubmit), d);
  }
  vk::CommandBuffer get() const { return cmd_; }
  void end() { cmd_.end(ctx_->dispatcher()); }

  // Submits `buffers` (ended) in one vkQueueSubmit and waits.
  static void submit(Context& ctx, const std::vector<OwnCommandBuffer*>& buffers) {
    std::vector<vk::CommandBuffer> handles;
    for (auto* b : buffers) handles.push_back(b->get());
    const auto& d = ctx.dispatcher();
    const Owned<vk::Fence> fence(ctx.device(), ctx.device().createFence(vk::FenceCreateInfo(), nullptr, d),
                                 d.vkDestroyFence, nullptr);
    ctx.queue().submit(vk::SubmitInfo({}, {}, handles), *fence, d);
    ctx.wait(*fence);
  }

 private:
  Context* ctx_;
  Owned<vk::CommandPool> pool_;  // frees the command buffer with it
  vk::CommandBuffer cmd_;
};

// Runs a test-only probe shader (binding 0: a u32 output; push constant:
// the group offset; specialization constants `spec`) on `groups`
// workgroups and returns the `words` it wrote, the output's guards checked.
std::vector<std::uint32_t> run_probe(Context& ctx, std::span<const std::uint32_t> spirv, std::size_t words,
                                     std::uint32_t groups = 1, std::vector<std::uint32_t> spec = {});

// ||out - ref|| / ||ref||; +inf if any output is NaN or if an Inf disagrees
// with the reference in place or sign.
double relative_rms(const std::vector<float>& out, const std::vector<double>& ref);

// A [T, H, D] output of a chunked kernel (chunks of bt rows) whose input
// had one Inf at (t_inf, h_inf, d_inf): the outputs that use it (its head
// and column, its chunk, rows from t_inf on, where the reference is not
// finite) must not be finite; the rows above it in that column may be
// anything not finite (0 * Inf); every other output must be finite and
// within `budget` relative RMS of the reference. Fails the test as well if
// no output uses the Inf (the check would check nothing).
void expect_inf_contained(const std::vector<float>& got, const std::vector<double>& ref, std::size_t T,
                          std::size_t H, std::size_t D, std::size_t bt, std::size_t t_inf, std::size_t h_inf,
                          std::size_t d_inf, double budget);

// Expects kernel.check(args) to throw tilekernels::Error with `code` and a
// message containing `needle` (which names the bad tensor and the rule).
template <class Kernel, class Args>
void expect_check_error(const Kernel& kernel, const Args& args, ErrorCode code, const std::string& needle) {
  try {
    kernel.check(args);
    ADD_FAILURE() << "no error for " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// The variants of `Kernel`'s table that can run `problem` on `ctx`, in
// table order: tests run every one (on lavapipe the portable and subgroup
// variants, on the NVIDIA machine the tensor-core ones too).
template <class Kernel>
std::vector<const Variant<typename Kernel::Problem>*> eligible_variants(const Context& ctx,
                                                                          const typename Kernel::Problem& problem) {
  std::vector<const Variant<typename Kernel::Problem>*> out;
  for (const auto& v : Kernel::variants)
    if (eligibility(ctx, v, problem)) out.push_back(&v);
  return out;
}

// The automatic choice of `Kernel` for `problem` is `want`: the variant the
// caller worked out from the device's properties and from what the build
// compiled (tilekernels/spirv/features.hpp), not from the variant table.
// Also: every variant of the table before the chosen one says why it does
// not apply (printed), and a Context that forces the portable path gets a
// portable variant. Skipped where the test context's path is capped.
template <class Kernel>
void expect_automatic_choice(const typename Kernel::Problem& problem, std::string_view want) {
  Context& ctx = context();
  if (ctx.path() != PathPreference::automatic) GTEST_SKIP() << "the path is capped (TILEKERNELS_PATH)";
  const auto& chosen = select_variant(ctx, Kernel::name, Kernel::variants, problem);
  EXPECT_EQ(chosen.name, want) << "on " << ctx.info().name;
  for (const auto& v : Kernel::variants) {
    if (&v == &chosen) break;
    const Status why = eligibility(ctx, v, problem);
    EXPECT_FALSE(why.ok) << v.name << " comes before " << chosen.name << " and applies";
    EXPECT_FALSE(why.message.empty()) << v.name << " was passed over without a reason";
    std::printf("[%s] %s: not %s (%s)\n", Kernel::name, ctx.info().name.c_str(), std::string(v.name).c_str(),
                why.message.c_str());
  }
  std::printf("[%s] %s: automatic variant %s\n", Kernel::name, ctx.info().name.c_str(),
              std::string(chosen.name).c_str());
  ContextOptions options;
  options.validation = false;
  options.path = PathPreference::portable;
  Context portable(options);
  EXPECT_EQ(select_variant(portable, Kernel::name, Kernel::variants, problem).path, Path::portable);
}

// Widens values as if stored in `dtype` and read back.
std::vector<float> rounded(DType dtype, std::vector<float> values);

}  // namespace tktest
