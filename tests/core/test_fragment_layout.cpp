// SPDX-License-Identifier: MIT
// The fragment layouts a Context reads back from the device
// (core/fragment_layout.hpp) and the variants that rest on them: decode
// attention's lanes variant (fp16 A, B and accumulator) and the state
// recurrence's rows kernel (bf16 A and accumulator).
#include <tilekernels/aura.hpp>
#include <tilekernels/gdn.hpp>
#include <tilekernels/spirv/core/fragment_layout_bf16.hpp>
#include <tilekernels/spirv/core/fragment_layout_fp16.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "../support.hpp"

namespace {

using namespace tktest;

// The probe's words for a device whose lane 4 g + j holds, of A and the
// accumulator, the elements at rows g and g + 8, columns 2 j, 2 j + 1,
// 2 j + 8 and 2 j + 9 (in the order (g, 2j), (g, 2j+1), (g, 2j+8),
// (g, 2j+9), then the same at row g + 8), and of B the transpose: the
// layout of NVIDIA's mma.sync m16n8k16, written out from its tables.
std::vector<std::uint32_t> m16n8k16_words() {
  std::vector<std::uint32_t> w(3 * 32 * 17, 0);
  for (std::uint32_t m = 0; m < 3; ++m)
    for (std::uint32_t l = 0; l < 32; ++l) {
      std::uint32_t* e = &w[(m * 32 + l) * 17];
      e[0] = 8;
      const std::uint32_t g = l / 4, j = l % 4;
      const std::uint32_t rows[8] = {g, g, g, g, g + 8, g + 8, g + 8, g + 8};
      const std::uint32_t cols[8] = {2 * j, 2 * j + 1, 2 * j + 8, 2 * j + 9, 2 * j, 2 * j + 1, 2 * j + 8, 2 * j + 9};
      for (std::uint32_t i = 0; i < 8; ++i) e[1 + i] = m == 1 ? cols[i] * 16 + rows[i] : rows[i] * 16 + cols[i];
    }
  return w;
}

TEST(FragmentLayout, ReadsTheM16n8k16LayoutAndNothingElse) {
  auto w = m16n8k16_words();
  EXPECT_EQ(detail::read_mma_layout(w), (MmaLayout{true, true, true}));

  auto swapped = w;  // B: two elements of lane 5 exchanged
  std::swap(swapped[(32 + 5) * 17 + 1], swapped[(32 + 5) * 17 + 2]);
  EXPECT_EQ(detail::read_mma_layout(swapped), (MmaLayout{true, false, true}));

  auto longer = w;  // the accumulator: 16 elements per lane (a layout of 16 lanes)
  longer[(64 + 31) * 17] = 16;
  EXPECT_EQ(detail::read_mma_layout(longer), (MmaLayout{true, true, false}));

  auto transposed = w;  // A laid out as B
  for (std::uint32_t l = 0; l < 32; ++l)
    for (std::uint32_t i = 0; i < 8; ++i) transposed[l * 17 + 1 + i] = w[(32 + l) * 17 + 1 + i];
  EXPECT_EQ(detail::read_mma_layout(transposed), (MmaLayout{false, true, true}));

  EXPECT_EQ(detail::read_mma_layout(std::span(w).first(w.size() - 1)), MmaLayout{});
  EXPECT_EQ(detail::read_mma_layout(std::vector<std::uint32_t>(w.size(), 0xffffffffu)), MmaLayout{});
}

// Where the probe applies (16 x 16 tiles of the type, subgroups of 32 that
// are what the device reports), the Context's reading is the layout of the
// probe's words run here again; elsewhere it is all false. On NVIDIA's
// drivers, whose tensor cores are m16n8k16, it must be all true: the lanes
// and rows variants are the fast paths there.
void expect_layout(const char* type, std::span<const std::uint32_t> module, bool applies, const MmaLayout& seen) {
  Context& ctx = context();
  SCOPED_TRACE(type);
  if (!applies || module.empty()) {
    EXPECT_EQ(seen, MmaLayout{});
    std::printf("[layout] %s: not read on %s (%s)\n", type, ctx.info().name.c_str(),
                module.empty() ? "probe not built" : "no 16x16 tiles at subgroups of 32");
    return;
  }
  const auto w = run_probe(ctx, module, detail::fragment_probe_words);
  const auto expected = m16n8k16_words();
  // A lane matches where its length and its 8 elements are the layout's.
  MmaLayout again;
  bool* kinds[3] = {&again.a, &again.b, &again.accumulator};
  for (std::uint32_t m = 0; m < 3; ++m) {
    *kinds[m] = true;
    for (std::uint32_t l = 0; l < 32; ++l) {
      const std::size_t at = (m * 32 + l) * 17;
      if (!std::equal(w.begin() + at, w.begin() + at + 9, expected.begin() + at)) *kinds[m] = false;
    }
  }
  EXPECT_EQ(seen, again);
  std::printf("[layout] %s on %s: A %d, B %d, accumulator %d; lane 1 of A:", type, ctx.info().name.c_str(), seen.a,
              seen.b, seen.accumulator);
  for (std::uint32_t i = 0; i < std::min<std::uint32_t>(w[17], 16); ++i) std::printf(" %u", w[17 + 1 + i]);
  std::printf("\n");
  if (ctx.info().vendor_id == 0x10de) {
    EXPECT_EQ(seen, (MmaLayout{true, true, true}));
  }
}

TEST(FragmentLayout, ContextReadsTheDevice) {
  const auto& info = context().info();
  const bool lanes32 = info.subgroup_size == 32 && info.subgroups_as_reported && !context().force_portable();
  const auto& listed = info.fp16_tiles_listed;
  const bool fp16 = info.cooperative_matrix_fp16 &&
                    std::find(listed.begin(), listed.end(), MatrixTile{16, 16, 16}) != listed.end();
  expect_layout("fp16", spirv::core_fragment_layout_fp16, lanes32 && fp16, info.fp16_layout);
  expect_layout("bf16", spirv::core_fragment_layout_bf16, lanes32 && info.cooperative_matrix_bf16, info.bf16_layout);
}

TEST(FragmentLayout, UnreadWhenTurnedOff) {
  ContextOptions options;
  options.probe_fragment_layouts = false;
  Context ctx(options);
  EXPECT_EQ(ctx.info().fp16_layout, MmaLayout{});
  EXPECT_EQ(ctx.info().bf16_layout, MmaLayout{});
  EXPECT_FALSE(aura::decode_attention_lanes_layout(ctx.info()));
  EXPECT_FALSE(gdn::state_rows_layout(ctx.info()));
}

// The two rules take their variants only where every fragment they build
// or read by position has the layout: one missing kind turns them off.
TEST(FragmentLayout, VariantsNeedEveryKindTheyBuild) {
  DeviceInfo info;
  info.subgroup_size = 32;
  info.cooperative_matrix_fp16 = true;
  info.fp16_tile = {16, 16, 16};
  info.cooperative_matrix_bf16 = true;
  info.fp16_layout = info.bf16_layout = {true, true, true};
  EXPECT_TRUE(aura::decode_attention_lanes_layout(info));
  EXPECT_TRUE(gdn::state_rows_layout(info));
  for (bool MmaLayout::*kind : {&MmaLayout::a, &MmaLayout::b, &MmaLayout::accumulator}) {
    DeviceInfo less = info;
    less.fp16_layout.*kind = false;
    EXPECT_FALSE(aura::decode_attention_lanes_layout(less));
  }
  for (bool MmaLayout::*kind : {&MmaLayout::a, &MmaLayout::accumulator}) {
    DeviceInfo less = info;
    less.bf16_layout.*kind = false;
    EXPECT_FALSE(gdn::state_rows_layout(less));
  }
  DeviceInfo wide = info;
  wide.subgroup_size = 64;
  EXPECT_FALSE(aura::decode_attention_lanes_layout(wide));
  EXPECT_FALSE(gdn::state_rows_layout(wide));
}

}  // namespace
