// SPDX-License-Identifier: MIT
// tk-run: every tilekernels kernel from the command line (docs/DESIGN.md).
//   tk-run --list
//   tk-run OP [key=value ...] --in NAME=FILE.npy ... --out NAME=FILE.npy ...
// Exit codes: 0 success, 2 bad command line or input, 1 device/kernel error;
// every error is one line on stderr.
// On any error nothing is written: the outputs go to temporary files in
// their folders (created before the op runs, so that an unwritable output
// fails first) and are renamed into place only once the whole call
// succeeded; on failure the temporary files are removed.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>
#include <sstream>

#include "op.hpp"
#include "output_files.hpp"

namespace tkrun {

std::vector<Op>& registry() {
  static std::vector<Op> ops;
  return ops;
}

std::int64_t checked_elements(const Shape& shape, const std::string& what) {
  for (std::size_t i = 0; i < shape.size(); ++i)
    if (shape[i] <= 0)
      throw UsageError(what + ": dimension " + std::to_string(i) + " of shape " + tilekernels::shape_string(shape) +
                       " is " + std::to_string(shape[i]) + "; every dimension must be > 0");
  std::int64_t n = 1;
  for (const auto d : shape)
    if (__builtin_mul_overflow(n, d, &n))
      throw UsageError(what + ": shape " + tilekernels::shape_string(shape) + " has more elements than 64 bits can count");
  if (n > kMaxElements)
    throw UsageError(what + ": shape " + tilekernels::shape_string(shape) + " has " + std::to_string(n) +
                     " elements, more than the " + std::to_string(kMaxElements) +
                     " that the kernels' 32-bit indexing allows");
  return n;
}

std::string Invocation::param(const std::string& name) const {
  const auto it = params_.find(name);
  if (it == params_.end()) throw UsageError("parameter '" + name + "' has no value");
  return it->second;
}

std::int64_t Invocation::int_param(const std::string& name, std::int64_t lo, std::int64_t hi) const {
  const std::string v = param(name);
  std::int64_t x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && end == v.data() + v.size() && (x < lo || x > hi))) {
    const bool any = lo == std::numeric_limits<std::int64_t>::min() && hi == std::numeric_limits<std::int64_t>::max();
    throw UsageError("parameter '" + name + "' must be an integer " +
                     (any ? std::string("of at most 64 bits")
                          : "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]") +
                     ", got '" + printable(v, 60) + "'");
  }
  if (ec != std::errc() || end != v.data() + v.size() || v.empty())
    throw UsageError("parameter '" + name + "' must be an integer, got '" + printable(v, 60) + "'");
  return x;
}

std::uint64_t Invocation::seed_param(const std::string& name) const {
  const std::string v = param(name);
  std::uint64_t x = 0;
  // from_chars takes no sign for unsigned types: "-1" is refused, not wrapped.
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty())
    throw UsageError("parameter '" + name + "' must be an integer in [0, 2^64 - 1], got '" + printable(v, 60) + "'");
  return x;
}

double Invocation::float_param(const std::string& name) const {
  const std::string v = param(name);
  double x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty() || !std::isfinite(x))
    throw UsageError("parameter '" + name + "' must be a finite number, got '" + printable(v, 60) + "'");
  return x;
}

const NpyArray& Invocation::load(const std::string& name) {
  const auto it = inputs_.find(name);
  if (it == inputs_.end()) throw UsageError("missing input '" + name + "' (--in " + name + "=FILE.npy)");
  auto cached = loaded_.find(name);
  if (cached != loaded_.end()) return cached->second;
  const std::string what = "input '" + name + "'";
  // Judged on the header, before any data is read.
  const auto vet = [&](const NpyHeader& h) {
    if (h.shape.empty())
      throw UsageError(what + ": " + printable(it->second) + ": a 0-dimensional array (shape ()) is not accepted");
    try {
      checked_elements(h.shape, what);
    } catch (const UsageError& e) {
      // The same words, with the file after the name.
      const std::string m = e.what();
      throw UsageError(what + ": " + printable(it->second) + m.substr(what.size()));
    }
  };
  try {
    return loaded_.emplace(name, read_npy(it->second, vet)).first->second;
  } catch (const UsageError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw UsageError(what + ": " + e.what());
  }
}

Shape Invocation::input_shape(const std::string& name) { return load(name).shape; }

std::vector<float> Invocation::floats(const std::string& name, const Shape& shape) {
  const NpyArray& a = load(name);
  if (a.shape != shape)
    throw UsageError("input '" + name + "': expected shape " + tilekernels::shape_string(shape) + ", got " +
                     tilekernels::shape_string(a.shape));
  if (a.kind != 'f') throw UsageError("input '" + name + "': expected a float32 or float16 array, got an integer one");
  return a.floats;
}

std::vector<std::uint32_t> Invocation::words(const std::string& name, const Shape& shape) {
  const NpyArray& a = load(name);
  if (a.shape != shape)
    throw UsageError("input '" + name + "': expected shape " + tilekernels::shape_string(shape) + ", got " +
                     tilekernels::shape_string(a.shape));
  if (a.kind == 'f') throw UsageError("input '" + name + "': expected a uint32 or int32 array, got a float one");
  return a.words;
}

std::vector<std::int32_t> Invocation::ints(const std::string& name, const Shape& shape) {
  const std::vector<std::uint32_t> w = words(name, shape);
  const char kind = load(name).kind;
  std::vector<std::int32_t> out(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (kind == 'u' && w[i] > 0x7fffffffu)
      throw UsageError("input '" + name + "': value " + std::to_string(w[i]) + " at index " + std::to_string(i) +
                       " is above INT32_MAX (2147483647); the op reads int32 (store negative values as int32)");
    out[i] = static_cast<std::int32_t>(w[i]);
  }
  return out;
}

tilekernels::Tensor Invocation::tensor(tilekernels::Context& ctx, const std::string& name, tilekernels::DType dtype) {
  const Shape shape = input_shape(name);
  const std::string what = "input '" + name + "'";
  if (tilekernels::is_float(dtype)) return upload(ctx, dtype, shape, floats(name, shape), what);
  tilekernels::Tensor t = alloc(ctx, dtype, shape, what);
  if (dtype == tilekernels::DType::i32) {
    const auto v = ints(name, shape);
    t.upload(std::span<const std::int32_t>(v));
  } else {
    const auto w = words(name, shape);
    t.upload(std::span<const std::uint32_t>(w));
  }
  return t;
}

namespace {

// The largest device-local memory heap (any heap where none is device-local).
std::uint64_t largest_heap(const tilekernels::Context& ctx) {
  const auto props = ctx.physical_device().getMemoryProperties();
  std::uint64_t heap = 0;
  for (std::uint32_t i = 0; i < props.memoryHeapCount; ++i)
    if (props.memoryHeaps[i].flags & vk::MemoryHeapFlagBits::eDeviceLocal) heap = std::max(heap, props.memoryHeaps[i].size);
  if (heap == 0)
    for (std::uint32_t i = 0; i < props.memoryHeapCount; ++i) heap = std::max(heap, props.memoryHeaps[i].size);
  return heap;
}

}  // namespace

void Invocation::check_fits(const tilekernels::Context& ctx, std::uint64_t bytes, const std::string& what) const {
  const std::uint64_t heap = largest_heap(ctx);
  if (bytes > heap || device_bytes_ > heap - bytes)
    throw UsageError(what + ": " + std::to_string(bytes) + " bytes would bring this call's device memory to " +
                     std::to_string(device_bytes_ + bytes) + " bytes, more than the device's largest memory heap of " +
                     std::to_string(heap) + " bytes");
}

void Invocation::reserve(const tilekernels::Context& ctx, std::uint64_t bytes, const std::string& what) {
  const std::uint64_t range = ctx.info().max_storage_buffer_range;
  if (bytes > range)
    throw UsageError(what + ": " + std::to_string(bytes) + " bytes exceed the device's maxStorageBufferRange of " +
                     std::to_string(range) + " bytes");
  check_fits(ctx, bytes, what);
  device_bytes_ += bytes;
}

tilekernels::Tensor Invocation::alloc(tilekernels::Context& ctx, tilekernels::DType dtype, const Shape& shape,
                                      const std::string& what) {
  const std::int64_t n = checked_elements(shape, what);
  const std::uint64_t bytes = (static_cast<std::uint64_t>(n) * tilekernels::dtype_size(dtype) + 3) / 4 * 4;
  reserve(ctx, bytes, what);
  return tilekernels::Tensor(ctx, dtype, shape);
}

tilekernels::Tensor Invocation::upload(tilekernels::Context& ctx, tilekernels::DType dtype, const Shape& shape,
                                       const std::vector<float>& values, const std::string& what) {
  tilekernels::Tensor t = alloc(ctx, dtype, shape, what);
  t.upload_floats(values);
  return t;
}

void Invocation::put(const std::string& output, Shape shape, std::vector<float> values) {
  if (wants(output)) results_[output] = Result{std::move(shape), std::move(values), {}, true};
}

void Invocation::put_words(const std::string& output, Shape shape, std::vector<std::uint32_t> values) {
  if (wants(output)) results_[output] = Result{std::move(shape), {}, std::move(values), false};
}

void Invocation::check_outputs() const {
  for (const auto& [name, path] : outputs_)
    if (!results_.count(name)) throw UsageError("output '" + name + "' was not produced by this op");
}

std::map<std::string, std::string> Invocation::output_bytes() const {
  check_outputs();
  std::map<std::string, std::string> out;
  for (const auto& [name, r] : results_)
    out[name] = npy_bytes(r.shape, r.is_float ? &r.floats : nullptr, r.is_float ? nullptr : &r.words);
  return out;
}

tilekernels::DType float_dtype_param(const Invocation& inv, const std::string& name) {
  const std::string v = inv.param(name);
  if (v == "f32") return tilekernels::DType::f32;
  if (v == "f16") return tilekernels::DType::f16;
  if (v == "bf16") return tilekernels::DType::bf16;
  throw UsageError("parameter '" + name + "' must be f32, f16 or bf16, got '" + printable(v, 60) + "'");
}

}  // namespace tkrun

namespace {

using namespace tkrun;

void list_ops() {
  auto ops = registry();
  std::sort(ops.begin(), ops.end(), [](const Op& a, const Op& b) { return a.name < b.name; });
  for (const Op& op : ops) {
    std::ostringstream line;
    line << op.name << " |";
    for (const auto& p : op.params) line << " " << p.name << "=" << p.default_value;
    line << " | in:";
    for (const auto& t : op.inputs) line << " " << t.name << (t.optional ? "?" : "") << ":" << t.dtype << t.shape;
    line << " | out:";
    for (const auto& t : op.outputs) line << " " << t.name << (t.optional ? "?" : "") << ":" << t.dtype << t.shape;
    line << " | " << op.summary;
    std::puts(line.str().c_str());
  }
}

const char* const kUsage = "usage: tk-run --list | tk-run OP [key=value ...] --in NAME=FILE ... --out NAME=FILE ...";

std::pair<std::string, std::string> split_assignment(const std::string& s, const char* what) {
  const auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    throw UsageError(std::string("expected ") + what + " NAME=VALUE, got '" + printable(s, 100) + "'");
  return {s.substr(0, eq), s.substr(eq + 1)};
}

int run(int argc, char** argv) {
  if (argc < 2) throw UsageError(std::string("no op given; ") + kUsage);
  const std::string first = argv[1];
  if (first == "--list") {
    list_ops();
    return 0;
  }
  if (first == "--help" || first == "-h") {
    std::puts(kUsage);
    list_ops();
    return 0;
  }
  const auto& ops = registry();
  const auto op = std::find_if(ops.begin(), ops.end(), [&](const Op& o) { return o.name == first; });
  if (op == ops.end()) throw UsageError("unknown op '" + printable(first, 60) + "' (see tk-run --list)");

  std::map<std::string, std::string> params, inputs, outputs;
  std::map<std::string, bool> given;  // parameters set on the command line
  for (const auto& p : op->params) params[p.name] = p.default_value;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--in" || a == "--out") {
      if (i + 1 >= argc) throw UsageError(a + " needs NAME=FILE");
      const auto assignment = split_assignment(argv[++i], a.c_str());
      const std::string& name = assignment.first;  // a plain reference: clang 14 cannot capture bindings
      const std::string& file = assignment.second;
      const bool in = a == "--in";
      const auto& specs = in ? op->inputs : op->outputs;
      if (std::none_of(specs.begin(), specs.end(), [&](const TensorSpec& t) { return t.name == name; }))
        throw UsageError(op->name + " has no " + (in ? "input" : "output") + " named '" + printable(name, 60) + "'");
      auto& files = in ? inputs : outputs;
      if (files.count(name))
        throw UsageError(std::string(in ? "input" : "output") + " '" + name + "' is given twice");
      files[name] = file;
    } else {
      auto [key, value] = split_assignment(a, "parameter");
      if (!params.count(key)) throw UsageError(op->name + " has no parameter '" + printable(key, 60) + "'");
      if (given[key]) throw UsageError("parameter '" + key + "' is given twice");
      given[key] = true;
      params[key] = value;
    }
  }
  for (const auto& t : op->inputs)
    if (!t.optional && !inputs.count(t.name)) throw UsageError("missing input '" + t.name + "' (--in " + t.name + "=FILE.npy)");
  if (outputs.empty()) throw UsageError("no --out given: nothing would be written");

  // The outputs' temporary files first: an output that cannot be written
  // fails the call before any work, and none is renamed into place unless
  // every step below succeeds (the destructor removes them otherwise).
  OutputFiles files(outputs);
  Invocation inv(params, inputs, outputs);
  tilekernels::Context ctx;
  op->run(ctx, inv);
  for (const auto& [name, bytes] : inv.output_bytes()) files.write(name, bytes);
  files.commit();
  return 0;
}

// One line: the message with anything unprintable (a newline in a path)
// escaped.
void report(const std::string& prefix, const std::string& message) {
  std::fprintf(stderr, "%s%s\n", prefix.c_str(), printable(message, 2000).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  OutputFiles::install_signal_cleanup();
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    report("tk-run: ", e.what());
    return 2;
  } catch (const tilekernels::Error& e) {
    report("", e.what());
    return tilekernels::ErrorCode::invalid_argument == e.code() || tilekernels::ErrorCode::shape_mismatch == e.code() ||
                   tilekernels::ErrorCode::dtype_mismatch == e.code()
               ? 2
               : 1;
  } catch (const std::bad_alloc&) {
    report("tk-run: ", "out of host memory (std::bad_alloc): the inputs or outputs are too large for this machine");
    return 1;
  } catch (const vk::SystemError& e) {
    report("tk-run: Vulkan error: ", e.what());
    return 1;
  } catch (const std::exception& e) {
    report("tk-run: ", e.what());
    return 1;
  } catch (...) {
    report("tk-run: ", "unknown error");
    return 1;
  }
}
