// SPDX-License-Identifier: MIT
// tk-run ops: each examples/tk-run/ops_<name>.cpp registers its ops with a
// static Registrar. An op declares its parameters (with defaults) and its
// tensors (dtype and shape in terms of the parameters, for --list), and its
// run() reads inputs and produces outputs through an Invocation, which
// checks names and shapes and turns every problem into a one-line error.
#pragma once

#include <tilekernels/core.hpp>

#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "npy.hpp"

namespace tkrun {

using tilekernels::Shape;

// A problem with the command line or the input files (exit code 2).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The most elements tk-run gives one tensor: the kernels index elements
// with 32-bit integers (2^31 - 1, the largest a signed index reaches).
constexpr std::int64_t kMaxElements = (std::int64_t{1} << 31) - 1;

// The elements of `shape`, every dimension > 0 and the product checked for
// overflow and against kMaxElements; throws UsageError starting with `what`
// ("input 'k'", "parameter 'num_pages'", "output 'o'").
std::int64_t checked_elements(const Shape& shape, const std::string& what);

struct Param {
  std::string name, default_value, help;
};

struct TensorSpec {
  std::string name, dtype, shape;  // e.g. "bf16", "[q_heads, num_blocks, dim]"
  bool optional = false;
};

class Invocation {
 public:
  Invocation(std::map<std::string, std::string> params, std::map<std::string, std::string> inputs,
             std::map<std::string, std::string> outputs)
      : params_(std::move(params)), inputs_(std::move(inputs)), outputs_(std::move(outputs)) {}

  std::string param(const std::string& name) const;
  // Decimal integers ("-12", "7"; no '+', spaces or other bases) in [lo, hi].
  std::int64_t int_param(const std::string& name, std::int64_t lo = std::numeric_limits<std::int64_t>::min(),
                         std::int64_t hi = std::numeric_limits<std::int64_t>::max()) const;
  // A seed: a decimal integer in [0, 2^64 - 1].
  std::uint64_t seed_param(const std::string& name) const;
  // A finite decimal number (no nan, inf or hexadecimal).
  double float_param(const std::string& name) const;

  bool has_input(const std::string& name) const { return inputs_.count(name) != 0; }
  // The input's shape, read from its file (throws if it was not given).
  // Every input has at least one dimension, each > 0, and at most
  // kMaxElements elements (else a UsageError naming it).
  Shape input_shape(const std::string& name);
  // The input as floats; its shape must equal `shape`. Integer files are refused.
  std::vector<float> floats(const std::string& name, const Shape& shape);
  // The input as 32-bit words (u32 or i32 files); its shape must equal `shape`.
  std::vector<std::uint32_t> words(const std::string& name, const Shape& shape);
  // The input as int32 values (i32 files, or u32 files whose values are all
  // at most INT32_MAX: a larger u32 is an error naming the index, never
  // taken as a negative number); its shape must equal `shape`.
  std::vector<std::int32_t> ints(const std::string& name, const Shape& shape);
  // The input uploaded as a tensor of `dtype` with the file's own shape
  // (float files for float dtypes, rounded to nearest even; u32/i32 files
  // for u32, ints() for i32): the kernel's own checks then judge its shape.
  tilekernels::Tensor tensor(tilekernels::Context& ctx, const std::string& name, tilekernels::DType dtype);

  // A device tensor, allocated only after checking that `shape` is within
  // kMaxElements, its bytes within maxStorageBufferRange and the call's
  // device memory with it within the device's largest memory heap; a
  // failed check is a UsageError starting with `what` (which names the
  // input, output or parameter the size comes from).
  tilekernels::Tensor alloc(tilekernels::Context& ctx, tilekernels::DType dtype, const Shape& shape,
                            const std::string& what);
  tilekernels::Tensor upload(tilekernels::Context& ctx, tilekernels::DType dtype, const Shape& shape,
                             const std::vector<float>& values, const std::string& what);
  // The same checks for one buffer of `bytes` that a kernel allocates
  // itself (a workspace), counted in the call's device memory.
  void reserve(const tilekernels::Context& ctx, std::uint64_t bytes, const std::string& what);
  // Throws unless `bytes` more (in several buffers) would still fit the
  // device's largest memory heap; counts nothing.
  void check_fits(const tilekernels::Context& ctx, std::uint64_t bytes, const std::string& what) const;

  bool wants(const std::string& output) const { return outputs_.count(output) != 0; }
  void put(const std::string& output, Shape shape, std::vector<float> values);
  void put_words(const std::string& output, Shape shape, std::vector<std::uint32_t> values);

  // Throws unless every requested output was produced.
  void check_outputs() const;
  // The bytes of each requested output's .npy file, by output name.
  std::map<std::string, std::string> output_bytes() const;

 private:
  const NpyArray& load(const std::string& name);
  struct Result {
    Shape shape;
    std::vector<float> floats;
    std::vector<std::uint32_t> words;
    bool is_float;
  };
  std::map<std::string, std::string> params_, inputs_, outputs_;
  std::map<std::string, NpyArray> loaded_;
  std::map<std::string, Result> results_;
  std::uint64_t device_bytes_ = 0;  // what alloc(), upload() and reserve() let through so far
};

struct Op {
  std::string name, summary;
  std::vector<Param> params;
  std::vector<TensorSpec> inputs, outputs;
  std::function<void(tilekernels::Context&, Invocation&)> run;
};

std::vector<Op>& registry();

struct Registrar {
  explicit Registrar(Op op) { registry().push_back(std::move(op)); }
};

// Parses "f32" | "f16" | "bf16" (throws UsageError naming the parameter).
tilekernels::DType float_dtype_param(const Invocation& inv, const std::string& name);

}  // namespace tkrun

namespace tkrun {

// Calls f(std::integral_constant<std::uint32_t, V>) for the V in Values equal
// to `value`: how an op maps a runtime parameter onto a template parameter.
template <std::uint32_t... Values, class F>
void with_value(const std::string& param, std::int64_t value, F&& f) {
  const bool found = ((value == Values ? (f(std::integral_constant<std::uint32_t, Values>{}), true) : false) || ...);
  if (!found) {
    std::string allowed;
    ((allowed += (allowed.empty() ? "" : ", ") + std::to_string(Values)), ...);
    throw UsageError("parameter '" + param + "' must be one of " + allowed + ", got " + std::to_string(value));
  }
}

// The same for a float dtype: f(std::integral_constant<DType, T>).
template <class F>
void with_float_dtype(tilekernels::DType t, F&& f) {
  using tilekernels::DType;
  switch (t) {
    case DType::f32: return f(std::integral_constant<DType, DType::f32>{});
    case DType::f16: return f(std::integral_constant<DType, DType::f16>{});
    case DType::bf16: return f(std::integral_constant<DType, DType::bf16>{});
    default: throw UsageError("not a float dtype: " + std::string(tilekernels::dtype_name(t)));
  }
}

}  // namespace tkrun
