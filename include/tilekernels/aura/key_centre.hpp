// SPDX-License-Identifier: MIT
// AURA key centre: sets the centre rows of a cache with centred keys
// (paged_cache.hpp) from prompts' keys, before CacheWrite appends them.
//
//   k         [num_tokens, kv_heads, Dim]  In (f32, f16 or bf16), a view as CacheWrite's k
//   starts    [entries + 1]                i32: entry i's keys are tokens [starts[i], starts[i + 1])
//   rows      [entries]                    i32: the row of k_centre entry i sets (negative: none)
//   k_centre  [centres, kv_heads, Dim]     f32, the centres (rows not named keep theirs)
//
//   k_centre[rows[i], h, d] = (1 / n) sum over the n tokens t of entry i of k[t, h, d]
//
// in f32 with a fixed order of additions (key_centre.comp). An entry with
// no tokens or a negative row writes nothing, so a batch that mixes
// prompts with decoding sequences names only its prompts (a sequence's
// centre is set once, from the first tokens written, and stays fixed while
// the cache holds its tokens). starts and rows live on the GPU: the kernel
// clamps each range to the tokens there are and skips a row past k_centre,
// never writing outside it; where the host has copies (Args::host_starts,
// host_rows) they are checked first, and a bad entry is an Error naming it.
//
// One dispatch, one workgroup per (entry, KV head). A prompt step records
// KeyCentre, a compute barrier, then CacheWrite of the same keys.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "tilekernels/aura/cache_write.hpp"
#include "tilekernels/aura/key_centre_abi.h"
#include "tilekernels/aura/paged_cache.hpp"
#include "tilekernels/core.hpp"
#include "tilekernels/spirv/aura/key_centre.hpp"

namespace tilekernels::aura {

struct KeyCentreArgs {
  TensorRef k, starts, rows, k_centre;
  // Optional host copies of starts and rows: checked when given.
  std::span<const std::int32_t> host_starts = {}, host_rows = {};
};

// The kernel for a cache format given at run time (KeyCentre<Config> is
// the same with the format and input dtype fixed at compile time).
struct KeyCentreEnvelope {};

class KeyCentreKernel : public KernelBase<KeyCentreKernel, KeyCentreEnvelope> {
  using Base = KernelBase<KeyCentreKernel, KeyCentreEnvelope>;

 public:
  using Base::plan;
  static constexpr const char* name = "aura.key_centre";
  TK_DECLARE_SPEC(TK_KEY_CENTRE_SPEC)
  TK_DECLARE_PUSH(TK_KEY_CENTRE_PUSH)
  using Args = KeyCentreArgs;

  struct Problem {
    std::int64_t num_tokens = 0, kv_heads = 0, entries = 0, centres = 0;
  };
  struct Plan {
    const Variant<Problem>* variant = nullptr;
  };

  static constexpr std::uint32_t invocations = TK_KEY_CENTRE_WG;
  static constexpr std::array<Variant<Problem>, 1> variants{{
      {"portable", Path::portable, spirv::aura_key_centre, {}, invocations, 0},
  }};

  KeyCentreKernel(Context& ctx, const CacheFormat& format, DType in_dtype, Envelope envelope = {})
      : Base(ctx, envelope), format_(validated(format, in_dtype)), in_dtype_(in_dtype) {
    pipelines_.add(ctx, key(select_variant(*ctx_, name, variants, Problem{1, 1, 1, 1})));
  }

  const CacheFormat& format() const noexcept { return format_; }

  Problem problem(const Args& a) const {
    return {a.k.shape.at(0), a.k.shape.at(1), a.rows.shape.at(0), a.k_centre.shape.at(0)};
  }

  // Throws tilekernels::Error unless this object runs `p` on its device.
  void check(const Problem& p) const {
    if (p.num_tokens <= 0 || p.kv_heads <= 0 || p.entries <= 0 || p.centres <= 0)
      throw Error(ErrorCode::invalid_argument,
                  std::string(name) + ": num_tokens, kv_heads, entries and centres must be > 0");
    if (p.num_tokens >= (1ll << 31) || p.entries * p.kv_heads >= (1ll << 31) ||
        p.centres * p.kv_heads * format_.dim >= (1ll << 31))
      throw Error(ErrorCode::unsupported, std::string(name) + ": more rows than 32-bit indexing allows");
    select_variant(*ctx_, name, variants, p);
  }

  // Throws tilekernels::Error naming the first argument that is wrong.
  void check(const Args& a) const {
    using tilekernels::detail::expect_rank;
    using tilekernels::detail::expect_tensor;
    using tilekernels::detail::where;
    expect_rank(name, "k", a.k, 3);
    const auto t = a.k.shape[0], h = a.k.shape[1];
    input_view(a.k, t, h);
    expect_rank(name, "rows", a.rows, 1);
    const auto n = a.rows.shape[0];
    expect_tensor(*ctx_, name, "rows", a.rows, DType::i32, {n});
    expect_tensor(*ctx_, name, "starts", a.starts, DType::i32, {n + 1});
    expect_rank(name, "k_centre", a.k_centre, 3);
    const auto centres = a.k_centre.shape[0];
    expect_tensor(*ctx_, name, "k_centre", a.k_centre, DType::f32, format_.centre_shape(centres, h));
    check(problem(a));
    if (!a.host_starts.empty()) {
      if (a.host_starts.size() != static_cast<std::size_t>(n + 1))
        throw Error(ErrorCode::shape_mismatch, where(name, "starts") + "the host copy holds " +
                                                   std::to_string(a.host_starts.size()) + " values, expected " +
                                                   std::to_string(n + 1));
      for (std::size_t i = 0; i + 1 < a.host_starts.size(); ++i)
        if (a.host_starts[i] < 0 || a.host_starts[i] > a.host_starts[i + 1] || a.host_starts[i + 1] > t)
          throw Error(ErrorCode::invalid_argument, where(name, "starts") + "entry " + std::to_string(i) + "'s tokens [" +
                                                       std::to_string(a.host_starts[i]) + ", " +
                                                       std::to_string(a.host_starts[i + 1]) + ") are not within [0, " +
                                                       std::to_string(t) + ")");
    }
    tilekernels::detail::expect_centre_rows(name, "rows", a.host_rows, n, centres, true);
  }

  static constexpr std::uint64_t workspace_bytes(const Problem&) { return 0; }
  Plan plan(const Problem& p, std::uint64_t) const {
    check(p);
    return {&select_variant(*ctx_, name, variants, p)};
  }

  void record(vk::CommandBuffer cmd, const Args& a) const { record(cmd, a, plan(problem(a), 0)); }
  void record(vk::CommandBuffer cmd, const Args& a, const Plan& plan) const {
    check(a);
    const Problem p = problem(a);
    const auto view = input_view(a.k, p.num_tokens, p.kv_heads);
    Push push;
    push.entries = static_cast<std::uint32_t>(p.entries);
    push.kv_heads = static_cast<std::uint32_t>(p.kv_heads);
    push.tokens = static_cast<std::uint32_t>(p.num_tokens);
    push.centres = static_cast<std::uint32_t>(p.centres);
    push.in_at = view.at, push.in_token = view.token, push.in_head = view.head;
    tilekernels::detail::record_dispatch(*ctx_, cmd, pipelines_.get(name, key(*plan.variant)),
                                         {a.k, a.starts, a.rows, a.k_centre}, push,
                                         static_cast<std::uint64_t>(p.entries * p.kv_heads));
  }

  // Convenience for tests and tools: records, submits and waits.
  void run(const Args& a) const {
    check(a);
    ctx_->submit_and_wait([&](vk::CommandBuffer cmd) { record(cmd, a); });
  }

 private:
  static CacheFormat validated(const CacheFormat& f, DType in) {
    f.validate(name);
    if (!f.k_centred)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": the cache format's keys are not centred");
    if (in != DType::f32 && in != DType::f16 && in != DType::bf16)
      throw Error(ErrorCode::invalid_argument, std::string(name) + ": the input dtype must be f32, f16 or bf16");
    return f;
  }

  tilekernels::detail::ViewLayout input_view(const TensorRef& t, std::int64_t tokens, std::int64_t heads) const {
    return tilekernels::detail::expect_view(*ctx_, name, "k", t, in_dtype_, {tokens, heads, format_.dim}, 1);
  }

  PipelineKey key(const Variant<Problem>& v) const {
    Spec spec;
    spec.workgroup = invocations;
    spec.DIM = format_.dim;
    spec.IN_DTYPE = static_cast<std::uint32_t>(in_dtype_);
    return tilekernels::detail::pipeline_key<Push>(*ctx_, v, spec, 4);
  }

  CacheFormat format_;
  DType in_dtype_;
};

// The keys' format and dtype as CacheWrite<Config> takes them.
template <class Config>
class KeyCentre : public KeyCentreKernel {
 public:
  using Cache = typename Config::cache;
  static_assert(Cache::k_centred, "KeyCentre: the cache format's keys must be centred (PagedCacheConfig<...>::centred)");
  explicit KeyCentre(Context& ctx, Envelope envelope = {})
      : KeyCentreKernel(ctx, Cache::format, Config::in_dtype, envelope) {}
};

static_assert(Kernel<KeyCentreKernel>, "aura.key_centre must have the kernel interface (core/kernel.hpp)");

}  // namespace tilekernels::aura
