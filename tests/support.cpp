// SPDX-License-Identifier: MIT
#include "support.hpp"

#include <bit>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <limits>

namespace tktest {

namespace {
// The validation layer on unless TILEKERNELS_VALIDATION=0.
ContextOptions validated_options() {
  ContextOptions options;
  const char* v = std::getenv("TILEKERNELS_VALIDATION");
  options.validation = !(v && std::string(v) == "0");
  return options;
}

std::unique_ptr<Context>& context_slot() {
  static std::unique_ptr<Context> ctx;
  return ctx;
}
std::unique_ptr<Context>& sync_slot() {
  static std::unique_ptr<Context> ctx;
  return ctx;
}
}  // namespace

Context& context() {
  std::unique_ptr<Context>& ctx = context_slot();
  if (!ctx) {
    ContextOptions options = validated_options();
    ctx = std::make_unique<Context>(options);
    const auto& info = ctx->info();
    std::printf("[tilekernels] device: %s (subgroup %u, multiprocessors %u, validation %s, path %s)\n",
                info.name.c_str(), info.subgroup_size, info.multiprocessors, ctx->validation_enabled() ? "on" : "off",
                ctx->path() == PathPreference::portable   ? "portable forced"
                : ctx->path() == PathPreference::subgroup ? "no matrix units"
                                                          : "automatic");
  }
  return *ctx;
}

Context& sync_context() {
  std::unique_ptr<Context>& ctx = sync_slot();
  if (!ctx) {
    ContextOptions options = validated_options();
    options.synchronization_validation = true;
    ctx = std::make_unique<Context>(options);
  }
  return *ctx;
}

// Before exit: a validation layer may tear its own state down before the
// destructors of function-local statics run (Debian unstable's does).
void release_contexts() {
  sync_slot().reset();
  context_slot().reset();
}

void expect_no_validation_messages() {
  for (Context* ctx : {context_slot().get(), sync_slot().get()}) {
    if (!ctx) continue;
    for (const auto& m : ctx->validation_messages()) ADD_FAILURE() << "validation layer: " << m;
    ctx->clear_validation_messages();
  }
}

GuardedTensor::GuardedTensor(Context& ctx, DType dtype, Shape shape)
    : buffer_(ctx, 2 * guard_bytes + (element_count(shape) * dtype_size(dtype) + 3) / 4 * 4) {
  ref_ = TensorRef{buffer_.handle(), guard_bytes, buffer_.size() - 2 * guard_bytes, dtype, std::move(shape)};
  payload_bytes_ = static_cast<std::size_t>(ref_.elements()) * dtype_size(dtype);
  poison();
}

FusedRows::FusedRows(Context& ctx, DType dtype, std::int64_t tokens, std::int64_t row, std::int64_t at)
    : buffer_(ctx, 2 * GuardedTensor::guard_bytes +
                       (static_cast<std::size_t>(tokens * row + at) * dtype_size(dtype) + 3) / 4 * 4),
      dtype_(dtype), row_(row), at_(at), esize_(dtype_size(dtype)),
      payload_(static_cast<std::size_t>(tokens * row + at)) {
  std::vector<std::uint32_t> words(buffer_.size() / 4, GuardedTensor::sentinel);
  std::memset(reinterpret_cast<char*>(words.data()) + GuardedTensor::guard_bytes, 0xff, payload_ * esize_);
  buffer_.upload(words.data(), buffer_.size());
}

TensorRef FusedRows::view(Shape shape, std::size_t token_dims, std::int64_t col) const {
  Shape strides(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (d + 1 == shape.size()) continue;
    strides[d] = d + 1 == token_dims ? row_ : strides[d + 1] * shape[d + 1];
  }
  const std::size_t offset = GuardedTensor::guard_bytes + static_cast<std::size_t>(at_ + col) * esize_;
  return TensorRef{buffer_.handle(), offset, buffer_.size() - GuardedTensor::guard_bytes - offset, dtype_,
                   std::move(shape), std::move(strides)};
}

std::vector<std::size_t> FusedRows::elements(const TensorRef& v) const {
  const std::size_t first = (v.offset - GuardedTensor::guard_bytes) / esize_;
  std::vector<std::size_t> out(static_cast<std::size_t>(v.elements()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::size_t rest = i, e = first;
    for (std::size_t d = v.shape.size(); d-- > 0;) {
      const auto n = static_cast<std::size_t>(v.shape[d]);
      e += rest % n * static_cast<std::size_t>(v.stride(d));
      rest /= n;
    }
    out[i] = e;
  }
  return out;
}

void FusedRows::upload(const TensorRef& view, const std::vector<float>& values) {
  const auto at = elements(view);
  if (values.size() != at.size()) throw std::invalid_argument("FusedRows: wrong value count");
  std::vector<std::uint8_t> bytes(buffer_.size());
  buffer_.download(bytes.data(), bytes.size());
  for (std::size_t i = 0; i < at.size(); ++i) {
    const std::uint32_t bits = dtype_ == DType::f32 ? std::bit_cast<std::uint32_t>(values[i]) : narrow(dtype_, values[i]);
    std::memcpy(bytes.data() + GuardedTensor::guard_bytes + at[i] * esize_, &bits, esize_);
  }
  buffer_.upload(bytes.data(), bytes.size());
}

std::vector<float> FusedRows::read(const TensorRef& view) const {
  std::vector<std::uint8_t> bytes(buffer_.size());
  buffer_.download(bytes.data(), bytes.size());
  const auto at = elements(view);
  std::vector<float> out(at.size());
  for (std::size_t i = 0; i < at.size(); ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, bytes.data() + GuardedTensor::guard_bytes + at[i] * esize_, esize_);
    out[i] = dtype_ == DType::f32 ? std::bit_cast<float>(bits) : widen(dtype_, bits);
  }
  return out;
}

void FusedRows::expect_untouched_outside(const std::vector<TensorRef>& views) const {
  std::vector<std::uint8_t> bytes(buffer_.size());
  buffer_.download(bytes.data(), bytes.size());
  std::vector<bool> inside(payload_, false);
  for (const auto& v : views)
    for (auto e : elements(v)) inside[e] = true;
  std::size_t touched = 0;
  for (std::size_t e = 0; e < payload_; ++e)
    for (std::size_t b = 0; !inside[e] && b < esize_; ++b) touched += bytes[GuardedTensor::guard_bytes + e * esize_ + b] != 0xff;
  EXPECT_EQ(touched, 0u) << "bytes outside the views changed";
  std::size_t guards = 0;
  const std::size_t end = GuardedTensor::guard_bytes + (payload_ * esize_ + 3) / 4 * 4;
  for (std::size_t w = 0; w < buffer_.size() / 4; ++w) {
    if (w * 4 >= GuardedTensor::guard_bytes && w * 4 < end) continue;
    std::uint32_t word = 0;
    std::memcpy(&word, bytes.data() + w * 4, 4);
    guards += word != GuardedTensor::sentinel;
  }
  EXPECT_EQ(guards, 0u) << "the guards around the fused rows changed";
}

void GuardedTensor::poison() {
  std::vector<std::uint32_t> words(buffer_.size() / 4, sentinel);
  std::memset(reinterpret_cast<char*>(words.data()) + guard_bytes, 0xff, payload_bytes_);
  buffer_.upload(words.data(), buffer_.size());
}

void GuardedTensor::zero() {
  const std::vector<char> zeros(payload_bytes_, 0);
  buffer_.upload(zeros.data(), payload_bytes_, guard_bytes);
}

void GuardedTensor::fill(std::uint32_t word) {
  const std::vector<std::uint32_t> words(payload_bytes_ / 4, word);
  buffer_.upload(words.data(), payload_bytes_, guard_bytes);
}

std::vector<std::uint32_t> GuardedTensor::read_all() const {
  std::vector<std::uint32_t> words(buffer_.size() / 4);
  buffer_.download(words.data(), buffer_.size());
  return words;
}

bool GuardedTensor::guards_intact() const {
  const auto words = read_all();
  const auto* bytes = reinterpret_cast<const unsigned char*>(words.data());
  const std::size_t total = buffer_.size();
  for (std::size_t i = 0; i < total; ++i) {
    if (i >= guard_bytes && i < guard_bytes + payload_bytes_) continue;
    const unsigned char expect = reinterpret_cast<const unsigned char*>(&sentinel)[i % 4];
    if (i >= guard_bytes + payload_bytes_ && i < (guard_bytes + payload_bytes_ + 3) / 4 * 4) {
      // The tail of the last partial word belongs to the payload's word.
      if (bytes[i] != 0xff && bytes[i] != expect) return false;
      continue;
    }
    if (bytes[i] != expect) return false;
  }
  return true;
}

std::vector<std::uint32_t> GuardedTensor::read_words() const {
  EXPECT_TRUE(guards_intact()) << "a kernel wrote outside its output tensor";
  const auto words = read_all();
  return std::vector<std::uint32_t>(words.begin() + guard_bytes / 4,
                                    words.begin() + guard_bytes / 4 + (payload_bytes_ + 3) / 4);
}

std::vector<float> GuardedTensor::read_floats() const {
  EXPECT_TRUE(guards_intact()) << "a kernel wrote outside its output tensor";
  const auto words = read_all();
  const auto* base = reinterpret_cast<const unsigned char*>(words.data()) + guard_bytes;
  std::vector<float> out(static_cast<std::size_t>(ref_.elements()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (dtype_size(ref_.dtype) == 2) {
      std::uint16_t bits;
      std::memcpy(&bits, base + 2 * i, 2);
      out[i] = widen(ref_.dtype, bits);
    } else {
      std::memcpy(&out[i], base + 4 * i, 4);
    }
  }
  return out;
}

void expect_inf_contained(const std::vector<float>& got, const std::vector<double>& ref, std::size_t T,
                          std::size_t H, std::size_t D, std::size_t bt, std::size_t t_inf, std::size_t h_inf,
                          std::size_t d_inf, double budget) {
  ASSERT_EQ(got.size(), T * H * D);
  ASSERT_EQ(ref.size(), T * H * D);
  std::vector<float> finite_got;
  std::vector<double> finite_ref;
  std::size_t bad = 0, uses = 0;
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t d = 0; d < D; ++d) {
        const std::size_t e = (t * H + h) * D + d;
        const bool column = h == h_inf && d == d_inf && t / bt == t_inf / bt;
        if (column && t >= t_inf && !std::isfinite(ref[e])) {
          ++uses;
          if (std::isfinite(got[e]) && bad++ < 5) ADD_FAILURE() << "row " << t << ": finite " << got[e];
        } else if (column && (!std::isfinite(got[e]) || !std::isfinite(ref[e]))) {
          // above the Inf's row (a zero coefficient): 0 * Inf may give NaN, or be skipped
        } else if (!std::isfinite(got[e])) {
          if (bad++ < 5) ADD_FAILURE() << "row " << t << " head " << h << " column " << d << ": " << got[e];
        } else {
          finite_got.push_back(got[e]);
          finite_ref.push_back(ref[e]);
        }
      }
  EXPECT_LE(relative_rms(finite_got, finite_ref), budget) << "relative RMS error away from the Inf";
  EXPECT_GT(uses, 0u) << "no output uses the Inf: the test checks nothing";
}

double relative_rms(const std::vector<float>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i])) return std::numeric_limits<double>::infinity();
    if (std::isinf(out[i]) || std::isinf(ref[i])) {
      if (double(out[i]) != ref[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  if (den == 0) return num == 0 ? 0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

std::vector<std::uint32_t> run_probe(Context& ctx, std::span<const std::uint32_t> spirv, std::size_t words,
                                     std::uint32_t groups, std::vector<std::uint32_t> spec) {
  struct Push {
    std::uint32_t group_offset;
  };
  GuardedTensor out(ctx, DType::u32, {static_cast<std::int64_t>(words)});
  const Pipeline& p = ctx.pipeline({spirv.data(), spirv.size(), std::move(spec), 1, sizeof(Push), 0});
  ctx.submit_and_wait([&](vk::CommandBuffer cmd) { detail::record_dispatch(ctx, cmd, p, {out.ref()}, Push{0}, groups); });
  EXPECT_TRUE(out.guards_intact());
  return out.read_words();
}

std::vector<float> rounded(DType dtype, std::vector<float> values) {
  for (auto& v : values) v = round_to(dtype, v);
  return values;
}

}  // namespace tktest
