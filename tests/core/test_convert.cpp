// SPDX-License-Identifier: MIT
// The GLSL 16-bit conversions agree bit for bit with the host's.
#include <tilekernels/core.hpp>
#include <tilekernels/spirv/test/convert.hpp>

#include <bit>
#include <cmath>

#include "../support.hpp"

namespace {

using namespace tktest;

struct Push {
  std::uint32_t group_offset, count;
};

std::vector<std::uint32_t> run_convert(const std::vector<std::uint32_t>& words) {
  Context& ctx = context();
  Tensor in(ctx, DType::u32, {static_cast<std::int64_t>(words.size())});
  in.upload(std::span<const std::uint32_t>(words));
  GuardedTensor out(ctx, DType::u32, {static_cast<std::int64_t>(words.size() * 6)});
  const Pipeline& p = ctx.pipeline({spirv::test_convert.data(), spirv::test_convert.size(), {}, 2, sizeof(Push), 0});
  ctx.submit_and_wait([&](vk::CommandBuffer cmd) {
    detail::record_dispatch(ctx, cmd, p, {in.ref(), out.ref()}, Push{0, static_cast<std::uint32_t>(words.size())},
                            (words.size() + 63) / 64);
  });
  return out.read_words();
}

void expect_agree(const std::vector<std::uint32_t>& words) {
  const auto gpu = run_convert(words);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < words.size() && bad < 10; ++i) {
    const std::uint32_t w = words[i];
    const float f = std::bit_cast<float>(w);
    // the fifth: the high half of tk_bf16_high, the bf16 kernels' packing
    const std::uint32_t want[5] = {f32_to_bf16(f), f32_to_f16(f), std::bit_cast<std::uint32_t>(bf16_to_f32(w & 0xffff)),
                                   std::bit_cast<std::uint32_t>(f16_to_f32(w & 0xffff)), f32_to_bf16(f)};
    for (int k = 0; k < 5; ++k)
      if (gpu[6 * i + k] != want[k]) {
        ++bad;
        ADD_FAILURE() << std::hex << "input 0x" << w << " conversion " << k << ": gpu 0x" << gpu[6 * i + k]
                      << " host 0x" << want[k];
      }
    // tk_round_bf16_split: exact below 2^111, NaN for NaN, +-Inf and from
    // 2^112 on (between the two: exact or NaN); a denormal stays within a
    // bf16 unit of the input (too few bits to split; or flushed to zero).
    const float split = std::bit_cast<float>(gpu[6 * i + 5]);
    const std::uint32_t exact = std::uint32_t(f32_to_bf16(f)) << 16;
    const float mag = std::fabs(f);
    bool ok;
    if (std::isnan(f) || mag >= 0x1p112f)
      ok = std::isnan(split);
    else if (mag >= 0x1p111f)
      ok = std::isnan(split) || gpu[6 * i + 5] == exact;
    else if ((w & 0x7f800000u) == 0)
      ok = split == 0.0f || std::fabs(double(split) - double(f)) <= 0x1p-133;
    else
      ok = gpu[6 * i + 5] == exact;
    if (!ok) {
      ++bad;
      ADD_FAILURE() << std::hex << "input 0x" << w << " tk_round_bf16_split: gpu 0x" << gpu[6 * i + 5]
                    << " host 0x" << exact;
    }
  }
}

class Convert : public DeviceTest {};

TEST_F(Convert, EverySixteenBitPatternWidens) {
  std::vector<std::uint32_t> words(65536);
  for (std::uint32_t i = 0; i < words.size(); ++i) words[i] = i;
  expect_agree(words);
}

TEST_F(Convert, NarrowingAgreesOnEdgesAndRandomFloats) {
  std::vector<std::uint32_t> words;
  // Around every f16/bf16 rounding edge: overflow, normal/subnormal border,
  // the smallest subnormal, ties, Inf and NaN; for the split 2^111, 2^112 and
  // values just below a power of two (where a fused c - x would go wrong).
  for (std::uint32_t edge : {0x477fe000u, 0x477ff000u, 0x47800000u, 0x38800000u, 0x38000000u, 0x33000000u,
                             0x33800000u, 0x7f800000u, 0x7f800001u, 0x7fc00000u, 0x7fffffffu, 0x3f808000u,
                             0x3f818000u, 0x3f800fffu, 0x3f801000u, 0x3f803000u, 0x00000001u, 0x007fffffu, 0u,
                             0x77000000u, 0x777fff00u, 0x77800000u, 0x3fffff00u, 0x3fffff80u, 0x3f7fff80u})
    for (std::int32_t d = -3; d <= 3; ++d)
      for (std::uint32_t sign : {0u, 0x80000000u}) words.push_back((edge + static_cast<std::uint32_t>(d)) | sign);
  Rng rng(12345);
  while (words.size() < (1u << 18)) words.push_back(static_cast<std::uint32_t>(rng.next()));
  expect_agree(words);
}

TEST(ConvertHost, KnownValues) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie to even
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie to even, upwards
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7bff);
  EXPECT_EQ(f32_to_f16(5.9604644775390625e-8f), 0x0001);   // smallest subnormal
  EXPECT_EQ(f32_to_f16(2.98023223876953125e-8f), 0x0000);  // half of it: tie to even (0)
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7f800001u)))));  // signalling stays NaN
  for (std::uint32_t h = 0; h < 0x7c00; ++h) EXPECT_EQ(f32_to_f16(f16_to_f32(static_cast<std::uint16_t>(h))), h);
}

}  // namespace
