// SPDX-License-Identifier: MIT
// gdn::StateRecurrence against the reference stage (state_recurrence in
// reference/gdn/chunk_forward.hpp, Rounding::fla), fed the reference's own
// w, u, g and k; padding slots of w and u hold NaN, which must not leak.
// Portable path and the matrix paths (tiles spread over the subgroups, in
// bf16 or in fp16 on the device's tile, and the rows kernel) where the
// device has them.
#include <tilekernels/gdn/state_recurrence.hpp>

#include <algorithm>
#include <cstring>
#include <limits>

#include "gdn_cases.hpp"

namespace {

using namespace gdntest;

constexpr double kBudgetBf16 = 5e-3;  // h and v_new (bf16) against the reference's bf16 values
constexpr double kBudgetState = 1e-3;  // the f32 final state (its bf16 operands may round the other way)

template <std::uint32_t BT, std::uint32_t K, std::uint32_t V>
struct StateCase {
  using Config = gdn::StateRecurrenceConfig<BT, K, V>;
  using Kernel = gdn::StateRecurrence<Config>;
  using Plan = typename Kernel::Plan;

  static void run(const Case& c, const Variant<typename Kernel::Problem>* variant, std::uint32_t bv, bool alias,
                  Context& ctx = context()) {
    const ref::GatedDeltaRuleProblem& p = c.p;
    const gdn::Chunking ch = chunking_of(c, BT);
    const std::int64_t S = ch.slots(), H = std::int64_t(p.H);
    const auto f = ref::chunk_forward(p, c.in(), BT, ref::Rounding::fla);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    auto with_nan_padding = [&](std::vector<float> slots, std::size_t width) {
      std::vector<bool> used(slots.size(), false);
      ch.for_each_sequence([&](std::int64_t, std::int64_t, std::int64_t len, std::int64_t first) {
        for (std::size_t e = std::size_t(first * BT) * width; e < std::size_t(first * BT + len) * width; ++e) used[e] = true;
      });
      for (std::size_t e = 0; e < slots.size(); ++e)
        if (!used[e]) slots[e] = nan;
      return slots;
    };
    auto k = Tensor::from_floats(ctx, DType::bf16, dims({p.B, p.T, p.Hg, K}), floats(f.k));
    auto w = Tensor::from_floats(ctx, DType::bf16, {S, H, K}, with_nan_padding(slots_from_tokens(ch, f.w, H * K), H * K));
    auto u = Tensor::from_floats(ctx, DType::bf16, {S, H, V}, with_nan_padding(slots_from_tokens(ch, f.u, H * V), H * V));
    auto g = Tensor::from_floats(ctx, DType::f32, {S, H}, slots_from_tokens(ch, f.g, H));
    const Shape state = c.o.vk ? dims({p.N(), p.H, V, K}) : dims({p.N(), p.H, K, V});
    std::optional<Tensor> h0;
    if (!c.h0.empty()) h0.emplace(Tensor::from_floats(ctx, DType::f32, state, c.h0));
    GuardedTensor h(ctx, DType::bf16, {ch.chunks(), H, V, K});
    GuardedTensor v_new(ctx, DType::bf16, {S, H, V});
    GuardedTensor ht(ctx, DType::f32, state);
    const DeviceVarlen varlen = device_varlen(ctx, ch, p.cu_seqlens);

    Kernel kernel(ctx);
    typename Kernel::Args args;
    args.k = k;
    args.w = w;
    args.u = u;
    args.g = g;
    if (h0) args.initial_state = h0->ref();
    args.h = h;
    args.v_new = alias ? u.ref() : v_new.ref();
    args.final_state = ht.ref();
    args.state_layout = c.o.vk ? gdn::StateLayout::vk : gdn::StateLayout::kv;
    args.cu_seqlens_host = p.cu_seqlens;
    varlen.set(args);
    Plan plan = kernel.plan(args);
    if (variant) plan.variant = variant;
    plan.bv = bv ? bv : kernel.default_bv(*plan.variant);
    kernel.prepare(plan);
    SCOPED_TRACE(std::string("variant ") + std::string(plan.variant->name) + " bv " + std::to_string(plan.bv) +
                 (alias ? " (v_new over u)" : ""));
    ctx.submit_and_wait([&](vk::CommandBuffer cmd) { kernel.record(cmd, args, plan); });
    // With cu_seqlens h holds chunks() rows, an upper bound: the chunks past
    // the sequences' own (padding, never written) are not compared.
    auto got_h = h.read_floats();
    const auto got_ht = ht.read_floats();
    got_h.resize(std::min(got_h.size(), f.h.size()));
    const auto got_vn = alias ? u.download_floats() : v_new.read_floats();

    // The reference's h in [V, K] per chunk and head.
    std::vector<double> ref_h(f.h.size());
    for (std::size_t blk = 0; blk < f.h.size() / (K * V); ++blk)
      for (std::size_t kk = 0; kk < K; ++kk)
        for (std::size_t vv = 0; vv < V; ++vv) ref_h[blk * K * V + vv * K + kk] = f.h[blk * K * V + p.state_offset(kk, vv)];
    EXPECT_LE(relative_rms(got_h, ref_h), kBudgetBf16) << "h";
    EXPECT_LE(relative_rms(tokens_from_slots(ch, got_vn, H * V), f.v_new), kBudgetBf16) << "v_new";
    EXPECT_LE(relative_rms(got_ht, f.final_state), kBudgetState) << "final state";

    if (!alias) {  // a second run must reproduce the first bit for bit
      h.poison();
      ht.poison();
      ctx.submit_and_wait([&](vk::CommandBuffer cmd) { kernel.record(cmd, args, plan); });
      EXPECT_EQ(0, std::memcmp(got_h.data(), h.read_floats().data(), got_h.size() * 4)) << "h moved";
      EXPECT_EQ(0, std::memcmp(got_ht.data(), ht.read_floats().data(), got_ht.size() * 4)) << "final state moved";
    }
  }

  static void run_all(const Case& c, bool alias = false) {
    for (const auto& v : Kernel::variants)
      if (eligibility(context(), v, typename Kernel::Problem{})) run(c, &v, 0, alias);
  }

  // The fp16 kernel forced (the automatic choice takes it on CPU devices
  // at BT = 16 only); skipped where the device has no fp16 tiles.
  static void run_fp16(const Case& c, bool alias = false) {
    std::string why;
    const auto* forced = forced_fp16<Kernel>(why);
    if (!forced) GTEST_SKIP() << why;
    run(c, forced, 0, alias);
  }
};

class StateRecurrenceTest : public DeviceTest {};

TEST_F(StateRecurrenceTest, FixedLength) {
  std::uint64_t seed = 500;
  for (std::size_t T : {1, 63, 64, 65, 200}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    StateCase<64, 64, 64>::run_all(make_case(1, T, 1, 2, 64, 64, {}, kPlain, seed++));
  }
  StateCase<64, 128, 64>::run_all(make_case(2, 100, 1, 2, 128, 64, {}, kPlain, seed++));
  StateCase<32, 64, 128>::run_all(make_case(1, 70, 2, 4, 64, 128, {}, kPlain, seed++));
  StateCase<16, 256, 64>::run_all(make_case(1, 40, 1, 1, 256, 64, {}, kPlain, seed++));
}

TEST_F(StateRecurrenceTest, VariableLengthAndOptions) {
  std::uint64_t seed = 600;
  // Empty and length-1 sequences, a sequence of exactly one chunk.
  StateCase<64, 64, 64>::run_all(make_case(1, 300, 2, 4, 64, 64, {0, 15, 16, 16, 80, 300}, kPlain, seed++));
  StateCase<64, 64, 64>::run_all(make_case(1, 130, 1, 2, 64, 64, {0, 1, 65, 130}, kOptionSets[5], seed++));  // [V, K]
  StateCase<64, 64, 64>::run_all(make_case(1, 100, 1, 1, 64, 64, {0, 30, 100}, kOptionSets[7], seed++));  // no h0
  // v_new written over u, as the forward does.
  StateCase<64, 64, 64>::run_all(make_case(1, 150, 1, 2, 64, 64, {0, 70, 150}, kPlain, seed++), true);
}

TEST_F(StateRecurrenceTest, WiderSlices) {
  using C = StateCase<64, 64, 128>;
  const Case c = make_case(1, 130, 1, 1, 64, 128, {}, kPlain, 650);
  C::run(c, &C::Kernel::variants.back(), 32, false);
}

// BT = 64 spreads the state over four row tiles (two state tiles per
// subgroup at K = 128), BT = 32 over two, BT = 16 one; varlen with an empty
// and a one-token sequence, the [V, K] state layout, v_new over u.
TEST_F(StateRecurrenceTest, Fp16TilesAtEveryChunkLength) {
  const Case varlen = make_case(1, 150, 1, 2, 64, 64, {0, 0, 1, 70, 150}, kPlain, 700);
  StateCase<64, 64, 64>::run_fp16(varlen);
  StateCase<64, 64, 64>::run_fp16(varlen, true);
  StateCase<32, 128, 64>::run_fp16(make_case(1, 70, 1, 1, 128, 64, {}, kOptionSets[5], 701));
  StateCase<16, 64, 64>::run_fp16(make_case(1, 40, 1, 2, 64, 64, {}, kPlain, 702));
}

// The operands far outside fp16's normal range, both ways: v (hence u,
// v_new and the update's operand) and the initial state (hence h) scaled
// by 1e5 and 1e6, or by 1e-7 (where fp16 holds at most a bit or two). The
// fp16 kernel must scale them into range; every variant runs the cases.
TEST_F(StateRecurrenceTest, ValuesOutsideFp16) {
  for (const double f : {1e5, 1e-7}) {
    SCOPED_TRACE(f > 1 ? "v scaled by 1e5, h0 by 1e6" : "v and h0 scaled by 1e-7");
    Case c = make_case(1, 150, 1, 2, 64, 64, {}, kPlain, f > 1 ? 710 : 711);
    for (float& x : c.v) x = tilekernels::round_to_bf16(float(x * f));
    for (float& x : c.h0) x = float(x * (f > 1 ? 1e6 : f));
    StateCase<64, 64, 64>::run_all(c);
    StateCase<64, 64, 64>::run_fp16(c);  // last: it skips where the device has no fp16 tiles
  }
}

}  // namespace
