// SPDX-License-Identifier: MIT
// The one interface every kernel has (tilekernels::Kernel, checked by a
// static_assert in each kernel's header) and the pipelines a kernel builds
// ahead of time (PipelineSet).
//
// A kernel object is constructed for an Envelope: the largest shapes it will
// see (keys, new tokens, batch, sequences...; a default-constructed
// Envelope is everything the kernel's Config allows). Its constructor
// builds every pipeline that record() can choose for a problem inside the
// envelope; record() only looks them up, and a problem outside the envelope
// is an Error, never a pipeline compiled in the middle of an engine's
// decode loop.
//
// The members, the same for every kernel:
//   Problem                       the runtime shape of a call: a plain struct, no tensors
//   problem(args)                 the Problem of a call's arguments
//   can_implement(problem)        noexcept: whether this device and envelope run it, and if not why
//   can_implement(args)           noexcept: the same, and every check of the tensors
//   workspace_bytes(problem)      the workspace the fastest plan needs (0: none)
//   plan(problem, bytes)          what record() runs with a workspace of `bytes`
//   record(cmd, args[, plan])     appends the dispatches (and barriers between its own steps)
//   run(args)                     records, submits and waits (tests and tools)
//   pipelines()                   how many pipelines the constructor built
// record(cmd, args) takes plan(problem(args), args' workspace size); a
// workspace smaller than that plan needs is an Error naming both sizes, as
// is one smaller than workspace_bytes(problem) when no plan is given.
#pragma once

#include <chrono>
#include <concepts>
#include <cstring>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>

#include "tilekernels/core/context.hpp"
#include "tilekernels/core/error.hpp"
#include "tilekernels/core/pipeline.hpp"
#include "tilekernels/core/variant.hpp"

namespace tilekernels {

// The pipelines one kernel object may record, built when it is constructed
// (through the Context, so objects of one configuration share them).
class PipelineSet {
 public:
  // Builds (or finds) the pipeline of `key` and keeps it.
  void add(const Context& ctx, const PipelineKey& key) {
    if (pipelines_.count(key)) return;
    const auto start = std::chrono::steady_clock::now();
    pipelines_.emplace(key, &ctx.pipeline(key));
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // The pipeline of `key`; an Error naming `kernel` where it was not built,
  // which means the call lies outside the envelope the kernel was
  // constructed for.
  const Pipeline& get(std::string_view kernel, const PipelineKey& key) const {
    const auto it = pipelines_.find(key);
    if (it == pipelines_.end())
      throw Error(ErrorCode::invalid_argument,
                  std::string(kernel) +
                      ": this call needs a pipeline the kernel did not build: it lies outside the envelope the "
                      "kernel was constructed for (construct it with a larger Envelope)");
    return *it->second;
  }

  std::size_t size() const noexcept { return pipelines_.size(); }
  // Seconds spent building them (pipelines another object had built count
  // as found, not built).
  double seconds() const noexcept { return seconds_; }

 private:
  std::map<PipelineKey, const Pipeline*> pipelines_;
  double seconds_ = 0;
};

namespace detail {

// The key of variant `v`'s pipeline with specialization constants `spec`
// (a Spec struct of the kernel's ABI header: workgroup size first, then the
// constants in id order), `bindings` storage buffers and push constants
// `Push` (likewise from the ABI header).
template <class Push, class Problem, class Spec>
PipelineKey pipeline_key(const Context& ctx, const Variant<Problem>& v, const Spec& spec, std::uint32_t bindings) {
  static_assert(std::is_trivially_copyable_v<Spec> && sizeof(Spec) % 4 == 0, "Spec must be 32-bit words");
  static_assert(std::is_trivially_copyable_v<Push> && sizeof(Push) % 4 == 0 && sizeof(Push) <= 128,
                "push constants: whole words, at most 128 bytes");
  if (spec.workgroup == 0 || spec.workgroup > ctx.info().max_workgroup_invocations)
    throw Error(ErrorCode::unsupported, std::string(v.name) + ": workgroup of " + std::to_string(spec.workgroup) +
                                            " invocations; the device allows " +
                                            std::to_string(ctx.info().max_workgroup_invocations));
  PipelineKey key;
  key.spirv = v.spirv.data();
  key.spirv_words = v.spirv.size();
  key.spec.resize(sizeof(Spec) / 4);
  std::memcpy(key.spec.data(), &spec, sizeof(Spec));
  key.bindings = bindings;
  key.push_constant_bytes = sizeof(Push);
  key.required_subgroup_size = required_subgroup_size(ctx, v);
  return key;
}

// Throws unless a workspace of `given` bytes holds the `needed` bytes of a
// plan (given 0: none was passed).
inline void expect_workspace_bytes(std::string_view kernel, std::uint64_t given, std::uint64_t needed) {
  if (given >= needed) return;
  throw Error(ErrorCode::buffer_too_small,
              std::string(kernel) + ": workspace: this call needs " + std::to_string(needed) + " bytes (workspace_bytes), " +
                  (given ? "the workspace holds " + std::to_string(given) : std::string("none was given")));
}

}  // namespace detail

// What every kernel shares: its Context, its envelope, the pipelines its
// constructor built, and can_implement() as the non-throwing form of its
// check(problem) and check(args) (Derived's public members).
template <class Derived, class EnvelopeT>
class KernelBase {
 public:
  using Envelope = EnvelopeT;

  const Envelope& envelope() const noexcept { return envelope_; }
  std::size_t pipelines() const noexcept { return pipelines_.size(); }
  const PipelineSet& pipeline_set() const noexcept { return pipelines_; }

  template <class D = Derived>
  Status can_implement(const typename D::Problem& p) const noexcept {
    return detail::status_of([&] { static_cast<const D&>(*this).check(p); });
  }
  template <class D = Derived>
  Status can_implement(const typename D::Args& a) const noexcept {
    return detail::status_of([&] { static_cast<const D&>(*this).check(a); });
  }

  // The plan record(cmd, a) takes: plan(problem(a), the size of a's
  // workspace, 0 without one).
  template <class D = Derived>
  typename D::Plan plan(const typename D::Args& a) const {
    const D& kernel = static_cast<const D&>(*this);
    kernel.check(a);
    std::uint64_t workspace = 0;
    if constexpr (requires { a.workspace->memory.size; })
      if (a.workspace) workspace = a.workspace->memory.size;
    return kernel.plan(kernel.problem(a), workspace);
  }

 protected:
  KernelBase(Context& ctx, Envelope envelope) : ctx_(&ctx), envelope_(envelope) {}

  Context* ctx_;
  Envelope envelope_;
  PipelineSet pipelines_;
};

// The interface every kernel satisfies (see the top of this file).
template <class K>
concept Kernel = requires(const K& k, const typename K::Problem& p, const typename K::Args& a,
                          const typename K::Plan& plan, vk::CommandBuffer cmd, std::uint64_t bytes) {
  typename K::Envelope;
  requires std::is_trivially_copyable_v<typename K::Problem>;
  { K::name } -> std::convertible_to<std::string_view>;
  { k.problem(a) } -> std::same_as<typename K::Problem>;
  { k.can_implement(p) } noexcept -> std::same_as<Status>;
  { k.can_implement(a) } noexcept -> std::same_as<Status>;
  { k.workspace_bytes(p) } -> std::same_as<std::uint64_t>;
  { k.plan(p, bytes) } -> std::same_as<typename K::Plan>;
  { k.record(cmd, a) } -> std::same_as<void>;
  { k.record(cmd, a, plan) } -> std::same_as<void>;
  { k.run(a) } -> std::same_as<void>;
  { k.envelope() } -> std::same_as<const typename K::Envelope&>;
  { k.pipelines() } -> std::same_as<std::size_t>;
};

}  // namespace tilekernels
