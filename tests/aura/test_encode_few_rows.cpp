// The dense encode's few-rows kernel (encode_small.comp) against the
// double-precision reference: every coordinate block (32, 16, 8) with both
// ways of combining the norm parts (64-bit atomics, the arrival counter),
// the tiled kernel at few rows, and the options the kernel refuses.
#include "test_encode_support.hpp"

namespace {

using namespace tktest;
using namespace tktest::aura_support;

class AuraEncodeFewRows : public DeviceTest {};

// The dense encode through the few-rows kernel and through the tiled one,
// whatever the row count.
template <std::uint32_t Dim, std::uint32_t Bits, DType In>
void check_dense(std::size_t rows, std::uint64_t seed, aura::EncodeOptions options) {
  using Config = aura::EncodeConfig<Dim, Bits, In>;
  SCOPED_TRACE("Dim=" + std::to_string(Dim) + " Bits=" + std::to_string(Bits) + " In=" + std::string(dtype_name(In)) +
               " rows=" + std::to_string(rows) + " small_rows=" + std::to_string(options.small_rows) +
               " small_block=" + std::to_string(options.small_block) + " atomic64=" + std::to_string(options.small_atomic64));
  Context& ctx = context();
  RandomRows<Config> t(ctx, rows, seed);
  auto rotation = Tensor::from_floats(ctx, DType::f32, {Dim, Dim}, dense_rotation(Dim));
  aura::Encode<Config> kernel(ctx, options);
  const auto got = run_twice<Config>(ctx, kernel, typename aura::Encode<Config>::Args{t.input, rotation, t.bounds, t.codes, t.packed, t.norms},
                                     t.packed, t.norms);
  t.check(got, dense_rotation(Dim), "dense");
}

TEST_F(AuraEncodeFewRows, DenseFewRowsAndTiledKernels) {
  const aura::EncodeOptions small{1000}, tiled{0, false};
  check_dense<128, 4, DType::bf16>(37, 800, small);
  check_dense<128, 4, DType::bf16>(7, 801, tiled);
  check_dense<96, 3, DType::f16>(37, 802, small);
  check_dense<96, 3, DType::f16>(1, 803, tiled);
  check_dense<256, 6, DType::f32>(19, 804, small);
  check_dense<512, 2, DType::bf16>(9, 805, small);
  check_dense<32, 8, DType::f32>(17, 806, small);
  check_dense<480, 4, DType::bf16>(9, 807, small);
}

// The few-rows kernel's coordinate blocks (32, 16 at even Bits, 8 at Bits 4
// and 8) with both ways of combining the norm parts (64-bit atomics where
// the device has them; the arrival counter), partial row blocks included.
TEST_F(AuraEncodeFewRows, DenseFewRowsBlocks) {
  for (const bool a64 : {true, false}) {
    aura::EncodeOptions o;
    o.small_atomic64 = a64;
    for (const std::uint32_t block : {32u, 16u, 8u}) {
      o.small_block = block;
      check_dense<128, 4, DType::bf16>(8, 820 + block, o);
      check_dense<256, 4, DType::f16>(13, 821 + block, o);
      check_dense<384, 8, DType::f32>(21, 822 + block, o);
      if (block != 8) check_dense<512, 2, DType::bf16>(5, 823 + block, o);
      if (block != 8) check_dense<192, 6, DType::bf16>(11, 824 + block, o);
    }
    o.small_block = 32;
    check_dense<160, 3, DType::bf16>(9, 825, o);  // odd Bits: 32-coordinate blocks only
    o.small_block = 0;  // automatic
    check_dense<128, 4, DType::bf16>(64, 826, o);
    check_dense<256, 4, DType::bf16>(64, 827, o);
    check_dense<256, 3, DType::bf16>(3, 828, o);
    check_dense<96, 4, DType::bf16>(7, 829, o);  // Dim too short for 8 or 16
  }
}

template <class Config>
void expect_block_refused(std::uint32_t block) {
  aura::EncodeOptions o;
  o.small_block = block;
  try {
    aura::Encode<Config> kernel(context(), o);
    ADD_FAILURE() << "small_block " << block << " accepted at Bits " << Config::bits;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find("small_block"), std::string::npos) << e.what();
  }
}

TEST_F(AuraEncodeFewRows, DenseFewRowsBlockMustFillWords) {
  expect_block_refused<aura::EncodeConfig<128, 3, DType::bf16>>(16);
  expect_block_refused<aura::EncodeConfig<128, 6, DType::bf16>>(8);
  expect_block_refused<aura::EncodeConfig<128, 4, DType::bf16>>(64);
  expect_block_refused<aura::EncodeConfig<96, 4, DType::bf16>>(16);  // 6 columns per invocation
  expect_block_refused<aura::EncodeConfig<64, 8, DType::bf16>>(8);
}

}  // namespace
