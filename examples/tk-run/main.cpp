// tk-run: every tilekernels kernel from the command line (docs/DESIGN.md).
//   tk-run --list
//   tk-run OP [key=value ...] --in NAME=FILE.npy ... --out NAME=FILE.npy ...
// Exit codes: 0 success, 2 bad command line or input, 1 device/kernel error.
// On any error nothing is written.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "op.hpp"

namespace tkrun {

std::vector<Op>& registry() {
  static std::vector<Op> ops;
  return ops;
}

std::string Invocation::param(const std::string& name) const {
  const auto it = params_.find(name);
  if (it == params_.end()) throw UsageError("parameter '" + name + "' has no value");
  return it->second;
}

std::int64_t Invocation::int_param(const std::string& name) const {
  const std::string v = param(name);
  std::size_t used = 0;
  std::int64_t x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty()) throw UsageError("parameter '" + name + "' must be an integer, got '" + v + "'");
  return x;
}

double Invocation::float_param(const std::string& name) const {
  const std::string v = param(name);
  std::size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty()) throw UsageError("parameter '" + name + "' must be a number, got '" + v + "'");
  return x;
}

const NpyArray& Invocation::load(const std::string& name) {
  const auto it = inputs_.find(name);
  if (it == inputs_.end()) throw UsageError("missing input '" + name + "' (--in " + name + "=FILE.npy)");
  auto cached = loaded_.find(name);
  if (cached != loaded_.end()) return cached->second;
  try {
    return loaded_.emplace(name, read_npy(it->second)).first->second;
  } catch (const std::runtime_error& e) {
    throw UsageError("input '" + name + "': " + e.what());
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

tilekernels::Tensor Invocation::tensor(tilekernels::Context& ctx, const std::string& name, tilekernels::DType dtype) {
  const Shape shape = input_shape(name);
  if (tilekernels::is_float(dtype)) return tilekernels::Tensor::from_floats(ctx, dtype, shape, floats(name, shape));
  tilekernels::Tensor t(ctx, dtype, shape);
  const auto w = words(name, shape);
  t.upload(std::span<const std::uint32_t>(w));
  return t;
}

void Invocation::put(const std::string& output, Shape shape, std::vector<float> values) {
  if (wants(output)) results_[output] = Result{std::move(shape), std::move(values), {}, true};
}

void Invocation::put_words(const std::string& output, Shape shape, std::vector<std::uint32_t> values) {
  if (wants(output)) results_[output] = Result{std::move(shape), {}, std::move(values), false};
}

void Invocation::write_outputs() const {
  for (const auto& [name, path] : outputs_)
    if (!results_.count(name)) throw UsageError("output '" + name + "' was not produced by this op");
  for (const auto& [name, r] : results_)
    write_npy(outputs_.at(name), r.shape, r.is_float ? &r.floats : nullptr, r.is_float ? nullptr : &r.words);
}

tilekernels::DType float_dtype_param(const Invocation& inv, const std::string& name) {
  const std::string v = inv.param(name);
  if (v == "f32") return tilekernels::DType::f32;
  if (v == "f16") return tilekernels::DType::f16;
  if (v == "bf16") return tilekernels::DType::bf16;
  throw UsageError("parameter '" + name + "' must be f32, f16 or bf16, got '" + v + "'");
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

int usage(const char* why) {
  std::fprintf(stderr, "tk-run: %s\nusage: tk-run --list | tk-run OP [key=value ...] --in NAME=FILE ... --out NAME=FILE ...\n", why);
  return 2;
}

std::pair<std::string, std::string> split_assignment(const std::string& s, const char* what) {
  const auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    throw UsageError(std::string("expected ") + what + " NAME=VALUE, got '" + s + "'");
  return {s.substr(0, eq), s.substr(eq + 1)};
}

int run(int argc, char** argv) {
  if (argc < 2) return usage("no op given");
  const std::string first = argv[1];
  if (first == "--list") {
    list_ops();
    return 0;
  }
  if (first == "--help" || first == "-h") {
    usage("help");
    list_ops();
    return 0;
  }
  const auto& ops = registry();
  const auto op = std::find_if(ops.begin(), ops.end(), [&](const Op& o) { return o.name == first; });
  if (op == ops.end()) throw UsageError("unknown op '" + first + "' (see tk-run --list)");

  std::map<std::string, std::string> params, inputs, outputs;
  for (const auto& p : op->params) params[p.name] = p.default_value;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--in" || a == "--out") {
      if (i + 1 >= argc) throw UsageError(a + " needs NAME=FILE");
      const auto assignment = split_assignment(argv[++i], a.c_str());
      const std::string& name = assignment.first;  // a plain reference: clang 14 cannot capture bindings
      const std::string& file = assignment.second;
      const auto& specs = a == "--in" ? op->inputs : op->outputs;
      if (std::none_of(specs.begin(), specs.end(), [&](const TensorSpec& t) { return t.name == name; }))
        throw UsageError(op->name + " has no " + (a == "--in" ? "input" : "output") + " named '" + name + "'");
      (a == "--in" ? inputs : outputs)[name] = file;
    } else {
      auto [key, value] = split_assignment(a, "parameter");
      if (!params.count(key)) throw UsageError(op->name + " has no parameter '" + key + "'");
      params[key] = value;
    }
  }
  for (const auto& t : op->inputs)
    if (!t.optional && !inputs.count(t.name)) throw UsageError("missing input '" + t.name + "' (--in " + t.name + "=FILE.npy)");
  if (outputs.empty()) throw UsageError("no --out given: nothing would be written");

  Invocation inv(params, inputs, outputs);
  tilekernels::Context ctx;
  op->run(ctx, inv);
  inv.write_outputs();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "tk-run: %s\n", e.what());
    return 2;
  } catch (const tilekernels::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return tilekernels::ErrorCode::invalid_argument == e.code() || tilekernels::ErrorCode::shape_mismatch == e.code() ||
                   tilekernels::ErrorCode::dtype_mismatch == e.code()
               ? 2
               : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tk-run: %s\n", e.what());
    return 1;
  }
}
