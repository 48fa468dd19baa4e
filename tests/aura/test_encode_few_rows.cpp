// SPDX-License-Identifier: MIT
// The dense encode's few-rows variants (encode_few_rows.comp) against the
// double-precision reference: every coordinate block (8, 16, 32) with both
// ways of combining the norm parts (64-bit atomics, the arrival counter),
// through a caller's workspace; the tiled kernel at few rows (no workspace).
#include "test_encode_support.hpp"

namespace {

using namespace tktest;
using namespace tktest::aura_support;

class AuraEncodeFewRows : public DeviceTest {};

// `rows` rows through every few_rows variant this device has that can take
// them, and through the variant chosen without a workspace.
template <std::uint32_t Dim, std::uint32_t Bits, DType In>
void check_dense(std::size_t rows, std::uint64_t seed) {
  using Config = aura::EncodeConfig<Dim, Bits, In>;
  using Kernel = aura::Encode<Config>;
  SCOPED_TRACE("Dim=" + std::to_string(Dim) + " Bits=" + std::to_string(Bits) + " In=" + std::string(dtype_name(In)) +
               " rows=" + std::to_string(rows));
  Context& ctx = context();
  RandomRows<Config> t(ctx, rows, seed);
  auto rotation = Tensor::from_floats(ctx, DType::f32, {Dim, Dim}, dense_rotation(Dim));
  Kernel kernel(ctx);
  const typename Kernel::Args args{t.input, rotation, t.bounds, t.codes, t.packed, t.norms};
  std::size_t few = 0;
  for (const auto* v : eligible_variants<Kernel>(ctx, {static_cast<std::int64_t>(rows), true})) {
    if (v->name.substr(0, 8) != "few_rows") continue;
    ++few;
    SCOPED_TRACE("variant " + std::string(v->name));
    t.check(run_twice(ctx, kernel, args, t.packed, t.norms, v), dense_rotation(Dim), "dense " + std::string(v->name));
  }
  EXPECT_GE(few, 1u) << "no few_rows variant took " << rows << " rows";
  // Without a workspace: tiled (or tensor cores) whatever the row count.
  typename Kernel::Args bare = args;
  const auto plan = kernel.plan(bare);
  EXPECT_NE(plan.variant->name.substr(0, 8), "few_rows");
  t.packed.poison();
  t.norms.poison();
  ctx.submit_and_wait([&](vk::CommandBuffer cmd) { kernel.record(cmd, bare, plan); });
  t.check({t.packed.read_words(), t.norms.read_floats()}, dense_rotation(Dim), "dense " + std::string(plan.variant->name));
}

// Coordinate blocks of 8 (Bits 4 and 8, Dim a multiple of 128), 16 (even
// Bits, Dim a multiple of 64) and 32; partial row blocks; up to 64 rows.
TEST_F(AuraEncodeFewRows, EveryBlockAndCombination) {
  check_dense<128, 4, DType::bf16>(8, 820);
  check_dense<128, 4, DType::bf16>(37, 821);
  check_dense<256, 4, DType::f16>(13, 822);
  check_dense<384, 8, DType::f32>(21, 823);
  check_dense<512, 2, DType::bf16>(5, 824);
  check_dense<192, 6, DType::bf16>(11, 825);
  check_dense<160, 3, DType::bf16>(9, 826);  // odd Bits: 32-coordinate blocks only
  check_dense<128, 4, DType::bf16>(64, 827);
  check_dense<256, 3, DType::bf16>(3, 828);
  check_dense<96, 4, DType::bf16>(7, 829);  // Dim too short for 8 or 16
  check_dense<96, 3, DType::f16>(37, 830);
  check_dense<32, 8, DType::f32>(17, 831);
  check_dense<480, 4, DType::bf16>(9, 832);
}

// The table's rules: blocks that do not fill whole words or whole 16-byte
// pieces are never eligible; more than 64 rows never take few_rows.
TEST_F(AuraEncodeFewRows, BlocksMustFillWords) {
  const auto eligible = [](auto kernel_tag, std::int64_t rows) {
    using Kernel = typename decltype(kernel_tag)::type;
    std::vector<std::string> names;
    for (const auto* v : eligible_variants<Kernel>(context(), {rows, true})) names.emplace_back(v->name);
    return names;
  };
  const auto has = [](const std::vector<std::string>& names, const std::string& prefix) {
    for (const auto& n : names)
      if (n.rfind(prefix, 0) == 0) return true;
    return false;
  };
  using K3 = aura::Encode<aura::EncodeConfig<128, 3, DType::bf16>>;
  using K6 = aura::Encode<aura::EncodeConfig<128, 6, DType::bf16>>;
  using K96 = aura::Encode<aura::EncodeConfig<96, 4, DType::bf16>>;
  EXPECT_FALSE(has(eligible(std::type_identity<K3>{}, 8), "few_rows_c16"));
  EXPECT_FALSE(has(eligible(std::type_identity<K6>{}, 8), "few_rows_c8"));
  EXPECT_TRUE(has(eligible(std::type_identity<K6>{}, 8), "few_rows_c16"));
  EXPECT_FALSE(has(eligible(std::type_identity<K96>{}, 8), "few_rows_c16"));
  EXPECT_TRUE(has(eligible(std::type_identity<K96>{}, 8), "few_rows_c32"));
  EXPECT_FALSE(has(eligible(std::type_identity<K6>{}, 65), "few_rows"));
}

// One workspace sized for the most rows few_rows takes and zeroed once
// serves calls of fewer and more rows in any order, each with zeroed =
// true, on every few_rows variant the device has.
TEST_F(AuraEncodeFewRows, OneWorkspaceAcrossRowCounts) {
  using Config = aura::EncodeConfig<128, 4, DType::bf16>;
  using Kernel = aura::Encode<Config>;
  Context& ctx = context();
  Kernel kernel(ctx);
  const auto rotation = Tensor::from_floats(ctx, DType::f32, {128, 128}, dense_rotation(128));
  GuardedTensor ws(ctx, DType::u32, {static_cast<std::int64_t>(Kernel::workspace_bytes({Config::few_rows_max}) / 4)});
  std::uint64_t seed = 840;
  std::size_t few = 0;
  for (const auto* v : eligible_variants<Kernel>(ctx, {Config::few_rows_max, true})) {
    if (v->name.substr(0, 8) != "few_rows") continue;
    ++few;
    ws.zero();  // zeroed once, as an engine does
    for (const std::size_t rows : {std::size_t{64}, std::size_t{1}, std::size_t{37}, std::size_t{64}, std::size_t{3}}) {
      const std::string label = std::string(v->name) + ", " + std::to_string(rows) + " rows";
      SCOPED_TRACE(label);
      RandomRows<Config> t(ctx, rows, seed++);
      typename Kernel::Args args{t.input, rotation, t.bounds, t.codes, t.packed, t.norms};
      args.workspace = Workspace{ws.ref(), true};
      auto plan = kernel.plan(args);
      plan.variant = v;
      kernel.prepare(plan);
      ctx.submit_and_wait([&](vk::CommandBuffer cmd) { kernel.record(cmd, args, plan); });
      t.check({t.packed.read_words(), t.norms.read_floats()}, dense_rotation(128), label);
      EXPECT_TRUE(ws.guards_intact()) << "the kernel wrote outside its workspace";
    }
  }
  EXPECT_GE(few, 1u) << "no few_rows variant on this device";
}

}  // namespace
