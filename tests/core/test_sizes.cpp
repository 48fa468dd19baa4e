// SPDX-License-Identifier: MIT
// Sizes and arguments a hostile or careless caller gives the library
// directly: shapes whose element counts or spans would wrap, tensors larger
// than the device can allocate, a zero dimension, gate tensors passed
// without the option that reads them. Each is an Error naming what was
// wrong, before anything is allocated or recorded.
#include <tilekernels/gdn.hpp>

#include <string>

#include "../support.hpp"

namespace {

using namespace tktest;
namespace gdn = tilekernels::gdn;

// Runs `f`, which must throw tilekernels::Error with `code` and a message
// containing every one of `words`.
template <class F>
void expect_error(F&& f, ErrorCode code, std::initializer_list<const char*> words) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const char* w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
  }
}

class Sizes : public DeviceTest {};

TEST_F(Sizes, ElementCountsThatWouldWrapAreRefused) {
  // 2^62 + 1 rows of 2 x 64 wrap to 128 elements in 64 bits; 2^32 x 2^32 to 0.
  const std::int64_t huge = (std::int64_t(1) << 62) + 1, big = std::int64_t(1) << 32;
  EXPECT_LT(checked_elements({huge, 2, 64}), 0);
  EXPECT_LT(checked_elements({big, big}), 0);
  EXPECT_LT(checked_elements({4, -2}), 0);
  EXPECT_EQ(checked_elements({big, 1024}), std::int64_t(1) << 42);
  expect_error([&] { (void)element_count({huge, 2, 64}); }, ErrorCode::invalid_argument, {"2^62"});
  Context& ctx = context();
  expect_error([&] { Tensor t(ctx, DType::f32, {huge, 2, 64}, "k"); }, ErrorCode::invalid_argument, {"'k'", "2^6"});
  expect_error([&] { Tensor t(ctx, DType::f32, {big, big}, "v"); }, ErrorCode::invalid_argument, {"'v'"});
}

TEST_F(Sizes, ViewsWhoseSpanWouldWrapAreRefused) {
  TensorRef t;
  t.dtype = DType::bf16;
  t.shape = {std::int64_t(1) << 30, 64};
  t.strides = {std::int64_t(1) << 40, 1};  // 2^70 elements from the first to the last
  expect_error([&] { (void)t.span(); }, ErrorCode::invalid_argument, {"2^62"});
  expect_error([&] { (void)t.bytes(); }, ErrorCode::invalid_argument, {"2^62"});
  t.strides = {-64, 1};
  expect_error([&] { (void)t.span(); }, ErrorCode::invalid_argument, {"negative"});
  t.shape = {3, 64};
  t.strides = {100, 1};
  EXPECT_EQ(t.span(), 2 * 100 + 64);
}

TEST_F(Sizes, TensorsBeyondTheDeviceAreRefusedByName) {
  Context& ctx = context();
  const auto& info = ctx.info();
  ASSERT_GT(info.largest_heap, 0u);
  // More bytes than the largest heap (and the largest allocation): refused
  // with both sizes before the driver is asked.
  const std::int64_t floats = static_cast<std::int64_t>(info.largest_heap / 4) + 1024;
  expect_error([&] { Tensor t(ctx, DType::f32, {floats}, "k_codes"); }, ErrorCode::unsupported,
               {"'k_codes'", std::to_string(floats * 4).c_str()});
  expect_error([&] { Buffer b(ctx, static_cast<std::size_t>(floats) * 4); }, ErrorCode::unsupported, {"bytes"});
  if (info.max_memory_allocation_size && info.max_memory_allocation_size < info.largest_heap) {
    const auto bytes = info.max_memory_allocation_size + 4;
    expect_error([&] { Buffer b(ctx, bytes); }, ErrorCode::unsupported, {"maxMemoryAllocationSize"});
  }
}

TEST_F(Sizes, ZeroDimensionsNameTheTensor) {
  Context& ctx = context();
  expect_error([&] { Tensor t(ctx, DType::f32, {0, 2, 64}, "q"); }, ErrorCode::invalid_argument,
               {"'q'", "[0, 2, 64]", "> 0"});
  expect_error([&] { Tensor t(ctx, DType::f32, {3, -1}); }, ErrorCode::invalid_argument, {"[3, -1]"});
}

// A_log or dt_bias without gate_in_kernel would be silently unused: both
// GDN kernels that take them refuse it, naming the tensor.
TEST_F(Sizes, GateTensorsWithoutTheGateOptionAreRefused) {
  Context& ctx = context();
  constexpr std::int64_t T = 3, Hg = 1, H = 2, K = 64, V = 64;
  Tensor q(ctx, DType::bf16, {1, T, Hg, K}), v(ctx, DType::bf16, {1, T, H, V}), o(ctx, DType::bf16, {1, T, H, V}),
      g(ctx, DType::f32, {1, T, H}), heads(ctx, DType::f32, {H}), state(ctx, DType::f32, {1, H, K, V});

  using Step = gdn::RecurrentStep<gdn::RecurrentStepConfig<K, V>>;
  const Step step(ctx, {.qk_dtype = DType::bf16, .v_dtype = DType::bf16});
  Step::Args s;
  s.q = q, s.k = q, s.v = v, s.g = g, s.beta = g, s.state = state, s.o = o;
  EXPECT_TRUE(step.can_implement(s)) << step.can_implement(s).message;
  auto a_log = s;
  a_log.A_log = heads.ref();
  expect_error([&] { step.check(a_log); }, ErrorCode::invalid_argument, {"A_log", "gate_in_kernel"});
  auto dt_bias = s;
  dt_bias.dt_bias = heads.ref();
  expect_error([&] { step.check(dt_bias); }, ErrorCode::invalid_argument, {"dt_bias", "gate_in_kernel"});

  using Forward = gdn::ChunkForward<gdn::ChunkForwardConfig<16, K, V>>;
  const Forward forward(ctx, gdn::GdnEnvelope{.options = gdn::GdnOptions{}});
  Forward::Args f;
  f.q = q, f.k = q, f.v = v, f.g = g, f.beta = g, f.o = o;
  Tensor ws(ctx, DType::u32, {static_cast<std::int64_t>(Forward::workspace_bytes(forward.problem(f)) / 4 + 1)});
  f.workspace = Workspace{ws.ref()};
  EXPECT_TRUE(forward.can_implement(f)) << forward.can_implement(f).message;
  f.A_log = heads.ref();
  expect_error([&] { forward.check(f); }, ErrorCode::invalid_argument, {"A_log", "gate_in_kernel"});
}

}  // namespace
