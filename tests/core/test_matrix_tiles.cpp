// SPDX-License-Identifier: MIT
// The cooperative-matrix tile the fp16 matrix variants are built with
// (shaders/common/mma.glsl): chosen from what VK_KHR_cooperative_matrix
// lists, among M, N and K of 8 or 16.
#include <cstdio>
#include <vector>

#include "../support.hpp"

namespace {

using namespace tktest;
using tilekernels::MatrixTile;
using tilekernels::detail::CoopMatPropertiesKHR;

constexpr std::int32_t f16 = 0, f32 = 1, s8 = 3, bf16 = 1000141000;
constexpr std::int32_t subgroup = 3, workgroup = 2;

CoopMatPropertiesKHR tile(std::uint32_t m, std::uint32_t n, std::uint32_t k, std::int32_t ab = f16,
                          std::int32_t c = f32, std::int32_t scope = subgroup) {
  CoopMatPropertiesKHR p;
  p.MSize = m, p.NSize = n, p.KSize = k;
  p.AType = p.BType = ab;
  p.CType = p.ResultType = c;
  p.scope = scope;
  return p;
}

MatrixTile choose(const std::vector<CoopMatPropertiesKHR>& listed) {
  return tilekernels::detail::fp16_matrix_tile(tilekernels::detail::fp16_matrix_tiles(listed));
}

TEST(MatrixTiles, TheLargestUsableFp16TileIsChosen) {
  // NVIDIA's list (fp16 -> f32: 16x16x16, 16x8x16, 16x8x8; fp16 -> fp16,
  // bf16, int8 beside them).
  EXPECT_EQ(choose({tile(16, 8, 16), tile(16, 8, 8), tile(16, 16, 16), tile(16, 16, 16, f16, f16),
                    tile(16, 16, 16, bf16), tile(16, 16, 32, s8, s8)}),
            (MatrixTile{16, 16, 16}));
  // lavapipe (Mesa 26): 8x8x8, fp16 -> fp16 and -> f32, and int8.
  EXPECT_EQ(choose({tile(8, 8, 8, f16, f16), tile(8, 8, 8), tile(8, 8, 8, s8, s8)}), (MatrixTile{8, 8, 8}));
  // Intel: 8x8x16 (Alchemist), 8x16x16 (Xe2).
  EXPECT_EQ(choose({tile(8, 8, 16)}), (MatrixTile{8, 8, 16}));
  EXPECT_EQ(choose({tile(8, 8, 16), tile(8, 16, 16)}), (MatrixTile{8, 16, 16}));
  // Equal volumes: the taller one.
  EXPECT_EQ(choose({tile(8, 16, 16), tile(16, 8, 16)}), (MatrixTile{16, 8, 16}));
  // Nothing usable: dimensions other than 8 and 16, an f16 accumulator,
  // workgroup scope, bf16 operands.
  EXPECT_EQ(choose({tile(32, 8, 16), tile(16, 16, 32), tile(16, 16, 16, f16, f16), tile(16, 16, 16, f16, f32, workgroup),
                    tile(16, 16, 16, bf16)}),
            MatrixTile{});
  EXPECT_EQ(choose({}), MatrixTile{});
}

TEST(MatrixTiles, TheListedFp16TilesAreTheSubgroupOnesWithF32Accumulators) {
  const auto listed = tilekernels::detail::fp16_matrix_tiles(
      {tile(16, 16, 16), tile(32, 8, 16), tile(16, 16, 16, f16, f16), tile(16, 16, 16, bf16),
       tile(16, 16, 16, f16, f32, workgroup)});
  EXPECT_EQ(listed, (std::vector<MatrixTile>{{16, 16, 16}, {32, 8, 16}}));
}

// What the Context found on this device: a chosen tile is one the driver
// listed, and the fp16 matrix variants are enabled exactly when there is one.
TEST(MatrixTiles, TheDeviceTileIsOneItLists) {
  const auto& info = context().info();
  std::printf("[matrix tiles] %s: %zu fp16 tiles listed, chosen %ux%ux%u, subgroups of %u\n", info.name.c_str(),
              info.fp16_tiles_listed.size(), info.fp16_tile.m, info.fp16_tile.n, info.fp16_tile.k, info.subgroup_size);
  EXPECT_EQ(info.cooperative_matrix_fp16, info.fp16_tile.m != 0);
  if (!info.cooperative_matrix_fp16) return;
  bool listed = false;
  for (const auto& t : info.fp16_tiles_listed) listed = listed || t == info.fp16_tile;
  EXPECT_TRUE(listed);
  for (const std::uint32_t d : {info.fp16_tile.m, info.fp16_tile.n, info.fp16_tile.k}) EXPECT_TRUE(d == 8 || d == 16);
}

}  // namespace
