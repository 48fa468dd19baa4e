// aura::HadamardEncode: the fused encode of encode.hpp with a randomised
// Hadamard rotation applied in O(Dim log Dim) (Dim a power of two). Included
// by encode.hpp; EncodeConfig and the shared helpers live there.
#pragma once

#include "tilekernels/aura/encode.hpp"
#include "tilekernels/spirv/aura/encode_hadamard.hpp"
#include "tilekernels/spirv/aura/encode_hadamard_sg.hpp"
#include "tilekernels/spirv/aura/encode_hadamard_sg_shuffle.hpp"

namespace tilekernels::aura {

// Tuning of HadamardEncode; 0 fields mean automatic.
struct HadamardEncodeOptions {
  std::uint32_t values_per_invocation = 0;  // 8, 16, 32 or 64 (<= Dim); 0: 32
  std::uint32_t invocations = 0;            // per workgroup, a multiple of Dim / values; 0: 256
  bool portable = false;                    // never use subgroup operations (also Context::force_portable())
  bool legacy = false;                      // the previous kernel (encode_hadamard.comp: shared-memory transpose)
  std::uint32_t row_blocks = 0;             // blocks of rows per workgroup, the next one's loads in flight;
                                            // 0: 4 (else 2) where that still leaves >= 1024 workgroups, else 1
  bool wide_cell_entries = false;           // quantiser table as one 16-byte entry per cell (else 3 32-bit reads)
};

// Randomised-Hadamard encode (Dim a power of two): the rotation is given by
// its signs (rotation.hpp's hadamard_signs); the codes equal Encode's with
// hadamard_matrix(signs) up to values within f32 rounding of a boundary.
// Default kernel: encode_hadamard_sg.comp (the transform in registers, Dim/32
// invocations per row exchanging through subgroup shuffles where the
// subgroup is wide enough, else shared memory; a cell-table quantiser for
// Bits <= 4). HadamardEncodeOptions::legacy selects the previous kernel.
template <class Config>
class HadamardEncode {
  static_assert(std::has_single_bit(Config::dim), "HadamardEncode: Dim must be a power of two (Sylvester Hadamard matrix)");

 public:
  static constexpr const char* name = "aura.encode_hadamard";

  struct Args {
    TensorRef input, signs, boundaries, codebook, packed, norms;
  };

  explicit HadamardEncode(Context& ctx, HadamardEncodeOptions options = {}) : ctx_(&ctx), options_(options) {}

  void check(const Args& a) const {
    impl::expect_encode_tensors<Config>(*ctx_, name, a.input, a.boundaries, a.codebook, a.packed, a.norms);
    tilekernels::detail::expect_tensor(*ctx_, name, "signs", a.signs, DType::f32, {Config::dim});
  }

  struct Geometry {
    std::uint32_t values = 0;       // per invocation
    std::uint32_t rows = 0;         // per workgroup
    std::uint32_t invocations = 0;  // per workgroup
    std::uint32_t blocks = 1;       // blocks of `rows` rows per workgroup
    bool shuffle = false;
  };

  // The register kernel's workgroup shape; throws for options out of range.
  Geometry geometry(std::int64_t rows = 0) const {
    Geometry g;
    g.values = options_.values_per_invocation ? options_.values_per_invocation : Config::hadamard_values;
    if (g.values < 8 || g.values > 64 || g.values > Config::dim || !std::has_single_bit(g.values))
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": values_per_invocation must be 8, 16, 32 or 64 and at most Dim, got " +
                                                   std::to_string(g.values));
    const std::uint32_t per_row = Config::dim / g.values;
    const std::uint32_t wg = options_.invocations ? options_.invocations : std::max<std::uint32_t>(256, per_row);
    if (wg % per_row != 0 || wg > 1024)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": invocations must be a multiple of Dim / values_per_invocation (" +
                                                   std::to_string(per_row) + ") and at most 1024, got " + std::to_string(wg));
    g.rows = wg / per_row;
    g.invocations = wg;
    // Measured on an H100 at 262144 rows (Dim 128 / 256): 4 blocks 44.0 / 87.1 us, 2 blocks 45.4 / 90.1
    // (1 block was 56 / 106 before the fields were stored directly); at 4096 rows 4 blocks were 2x
    // slower than 1 (too few workgroups). Row counts in between were not measured: the rule keeps at
    // least 1024 workgroups.
    const std::int64_t row_groups = (rows + g.rows - 1) / g.rows;
    g.blocks = options_.row_blocks ? options_.row_blocks : (row_groups >= 4096 ? 4 : row_groups >= 2048 ? 2 : 1);
    if (g.blocks > 64)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": row_blocks must be at most 64, got " + std::to_string(g.blocks));
    const auto& info = ctx_->info();
    // The shuffle variant numbers invocations by subgroup, a permutation of
    // the workgroup when it is whole subgroups (or less than one).
    g.shuffle = !options_.portable && !ctx_->force_portable() && info.subgroup_shuffle && info.subgroup_size > 0 &&
                (wg % info.subgroup_size == 0 || wg < info.subgroup_size);
    return g;
  }

  void record(vk::CommandBuffer cmd, const Args& a) const {
    check(a);
    const auto rows = a.input.shape[0];
    const float inv_sqrt = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Config::dim)));
    if (options_.legacy) {
      constexpr std::uint32_t wg = Config::hadamard_blocks * Config::hadamard_rows;
      impl::expect_workgroup(*ctx_, name, wg, Config::hadamard_shared_bytes);
      PipelineKey key{spirv::aura_encode_hadamard, std::size(spirv::aura_encode_hadamard),
                      {wg, Config::dim, Config::bits, static_cast<std::uint32_t>(Config::in_dtype), Config::hadamard_rows,
                       std::bit_cast<std::uint32_t>(inv_sqrt)},
                      6, sizeof(impl::EncodePush), 0};
      const Pipeline& pipeline = ctx_->pipeline(key);
      const impl::EncodePush push{0, static_cast<std::uint32_t>(rows), 0, 0};
      tilekernels::detail::record_dispatch(*ctx_, cmd, pipeline, {a.input, a.signs, a.boundaries, a.codebook, a.packed, a.norms},
                              push, static_cast<std::uint64_t>((rows + Config::hadamard_rows - 1) / Config::hadamard_rows));
      return;
    }
    const Geometry g = geometry(rows);
    impl::expect_workgroup(*ctx_, name, g.invocations, Config::hadamard_sg_shared_bytes(g.values, g.rows));
    PipelineKey key{g.shuffle ? spirv::aura_encode_hadamard_sg_shuffle : spirv::aura_encode_hadamard_sg,
                    g.shuffle ? std::size(spirv::aura_encode_hadamard_sg_shuffle) : std::size(spirv::aura_encode_hadamard_sg),
                    {g.invocations, Config::dim, Config::bits, static_cast<std::uint32_t>(Config::in_dtype), g.rows,
                     std::bit_cast<std::uint32_t>(inv_sqrt), g.values, g.blocks, options_.wide_cell_entries ? 1u : 0u},
                    6, sizeof(impl::EncodePush), 0};
    const Pipeline& pipeline = ctx_->pipeline(key);
    const impl::EncodePush push{0, static_cast<std::uint32_t>(rows), 0, 0};
    tilekernels::detail::record_dispatch(*ctx_, cmd, pipeline, {a.input, a.signs, a.boundaries, a.codebook, a.packed, a.norms},
                            push, static_cast<std::uint64_t>((rows + g.rows * g.blocks - 1) / (g.rows * g.blocks)));
  }

  void run(const Args& a) const {
    check(a);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, a); });
  }

 private:
  Context* ctx_;
  HadamardEncodeOptions options_;
};

}  // namespace tilekernels::aura
