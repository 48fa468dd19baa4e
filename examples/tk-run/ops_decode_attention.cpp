// SPDX-License-Identifier: MIT
// tk-run ops aura.cache_write, aura.key_centre, aura.decode_attention,
// aura.decode_attention_partials: the paged AURA KV cache, the centres of
// its keys and decode attention over it. The format is given
// at run time (aura::CacheWriteKernel, aura::DecodeAttentionKernel); inputs
// and outputs are f32 (raw bf16 cache values widened exactly), codes u32.
#include <tilekernels/aura/cache_write.hpp>
#include <tilekernels/aura/decode_attention.hpp>
#include <tilekernels/aura/key_centre.hpp>

#include <algorithm>
#include <cmath>
#include <optional>

#include "op.hpp"

namespace {

using namespace tkrun;
using tilekernels::DType;
using tilekernels::Tensor;
namespace aura = tilekernels::aura;

const std::vector<Param> kFormatParams{
    {"dim", "128", "head dimension: 64, 80, 96, 128 or 256 (80 and 96 need rotation=dense unless both sides are raw)"},
    {"k_bits", "4", "K format: 2, 3, 4, 6 or 8 bits (TurboQuant codes), or 16 for raw bf16"},
    {"v_bits", "4", "V format, as k_bits"},
    {"page_tokens", "16", "tokens per page: a multiple of 16 in [16, 256]"},
    {"rotation", "hadamard",
     "rotation of the coded sides: hadamard (what aura.rotation kind=hadamard prints) or dense"},
    {"k_seed", "0", "seed of K's rotation (aura.rotation seed=)"},
    {"v_seed", "1", "seed of V's rotation"},
    {"centred", "0", "1: K is stored minus its sequence's centre (input k_centre; a coded K only)"},
    {"k_hi_dims", "0",
     "split keys: K's first k_hi_dims rotated coordinates at k_bits + 1 bits (k_bits 2 or 3, a multiple of 32 below "
     "dim; k_bits=3 k_hi_dims=64 at dim 128: 3.5 bits)"}};

aura::CacheFormat format_of(const Invocation& inv) {
  aura::CacheFormat f;
  const auto in_range = [&](const char* name) { return static_cast<std::uint32_t>(inv.int_param(name, 0, 65536)); };
  f.dim = in_range("dim");
  f.k_bits = in_range("k_bits");
  f.v_bits = in_range("v_bits");
  for (const char* name : {"k_bits", "v_bits"}) {
    const std::uint32_t bits = name[0] == 'k' ? f.k_bits : f.v_bits;
    if (bits != 2 && bits != 3 && bits != 4 && bits != 6 && bits != 8 && bits != 16)
      throw UsageError(std::string("parameter '") + name + "' must be 2, 3, 4, 6, 8 or 16 (raw), got " +
                       std::to_string(bits));
  }
  f.page_tokens = in_range("page_tokens");
  const std::string rot = inv.param("rotation");
  if (rot == "hadamard") {
    f.rotation = aura::Rotation::hadamard;
  } else if (rot == "dense") {
    f.rotation = aura::Rotation::dense;
  } else {
    throw UsageError("parameter 'rotation' must be hadamard or dense, got '" + printable(rot, 60) + "'");
  }
  f.k_centred = inv.int_param("centred", 0, 1) == 1;
  f.k_hi_dims = static_cast<std::uint32_t>(inv.int_param("k_hi_dims", 0, 256));
  const std::string why = f.problem();
  if (!why.empty()) throw UsageError("bad cache format: " + why);
  // Both seeds parsed now, before anything is allocated.
  (void)inv.seed_param("k_seed");
  (void)inv.seed_param("v_seed");
  return f;
}

// One side of a cache on the device: codes (u32) or raw values (bf16), and norms.
struct Side {
  std::optional<Tensor> store, norms;
};

// Checks that a fresh cache of `pages` pages (both sides, norms included)
// fits tk-run's limits and the device, naming parameter 'num_pages', before
// any of it is allocated.
void check_fresh_cache(const tilekernels::Context& ctx, Invocation& inv, const aura::CacheFormat& f, std::int64_t pages,
                       std::int64_t heads) {
  const std::string what = "parameter 'num_pages' = " + std::to_string(pages);
  std::uint64_t total = 0;
  for (const bool k_side : {true, false}) {
    const char* side = k_side ? "k" : "v";
    const std::uint32_t bits = k_side ? f.k_bits : f.v_bits;
    const auto part = [&](tilekernels::DType dtype, const Shape& shape, const char* kind) {
      const std::string name = what + " (" + side + kind + ")";
      const std::int64_t n = checked_elements(shape, name);
      const std::uint64_t bytes = (static_cast<std::uint64_t>(n) * tilekernels::dtype_size(dtype) + 3) / 4 * 4;
      if (bytes > ctx.info().max_storage_buffer_range)
        throw UsageError(name + ": " + std::to_string(bytes) + " bytes exceed the device's maxStorageBufferRange of " +
                         std::to_string(ctx.info().max_storage_buffer_range) + " bytes");
      total += bytes;
    };
    part(f.store_dtype(bits), f.side_store_shape(k_side, pages, heads), "_codes");
    if (!aura::CacheFormat::raw(bits)) part(DType::f32, f.norm_shape(pages, heads), "_norms");
  }
  inv.check_fits(ctx, total, what + " (the whole cache)");
}

// The cache sides from the inputs k_codes, k_norms, v_codes, v_norms (all of
// a side's or none), or fresh zero-filled ones of `pages` pages.
Side load_side(tilekernels::Context& ctx, Invocation& inv, const aura::CacheFormat& f, const char* side,
               std::uint32_t bits, std::int64_t pages, std::int64_t heads, bool fresh) {
  const std::string codes = std::string(side) + "_codes", norms = std::string(side) + "_norms";
  const bool raw = aura::CacheFormat::raw(bits);
  Side s;
  const Shape store_shape = f.side_store_shape(side[0] == 'k', pages, heads), norm_shape = f.norm_shape(pages, heads);
  if (raw && inv.has_input(norms)) throw UsageError("input '" + norms + "' exists only for a coded side (bits < 16)");
  if (fresh) {
    const std::string what = "parameter 'num_pages' (" + codes + " of a fresh cache)";
    s.store.emplace(inv.alloc(ctx, f.store_dtype(bits), store_shape, what));
    s.store->buffer().fill(0);
    if (!raw) {
      s.norms.emplace(inv.alloc(ctx, DType::f32, norm_shape, "parameter 'num_pages' (" + norms + " of a fresh cache)"));
      s.norms->buffer().fill(0);
    }
    return s;
  }
  if (raw) {
    s.store.emplace(inv.upload(ctx, DType::bf16, store_shape, inv.floats(codes, store_shape), "input '" + codes + "'"));
  } else {
    if (!inv.has_input(norms)) throw UsageError("missing input '" + norms + "' (a coded side needs its norms)");
    const auto w = inv.words(codes, store_shape);
    s.store.emplace(inv.alloc(ctx, DType::u32, store_shape, "input '" + codes + "'"));
    s.store->upload(std::span<const std::uint32_t>(w));
    s.norms.emplace(inv.upload(ctx, DType::f32, norm_shape, inv.floats(norms, norm_shape), "input '" + norms + "'"));
  }
  return s;
}

void put_side(Invocation& inv, const char* side, std::uint32_t bits, const Side& s) {
  const std::string codes = std::string(side) + "_codes", norms = std::string(side) + "_norms";
  if (aura::CacheFormat::raw(bits)) {
    if (inv.wants(norms)) throw UsageError("output '" + norms + "' exists only for a coded side (bits < 16)");
    inv.put(codes, s.store->shape(), s.store->download_floats());
  } else {
    inv.put_words(codes, s.store->shape(), s.store->download<std::uint32_t>());
    inv.put(norms, s.norms->shape(), s.norms->download_floats());
  }
}

std::optional<tilekernels::TensorRef> norms_ref(const Side& s) {
  return s.norms ? std::optional<tilekernels::TensorRef>(s.norms->ref()) : std::nullopt;
}

// The centres of a centred format's keys and the index naming each row's
// (`index`: token_centres or seq_centres, `count` entries), loaded from the
// inputs; neither may be given for another format.
struct Centres {
  std::optional<Tensor> centre, index;
  std::vector<std::int32_t> host_index;
};

// The shape of input 'k_centre', checked: [centres, heads, Dim].
Shape centre_shape_of(Invocation& inv, const aura::CacheFormat& f, std::int64_t heads) {
  const Shape shape = inv.input_shape("k_centre");
  if (shape.size() != 3 || shape[1] != heads || shape[2] != f.dim)
    throw UsageError("input 'k_centre': expected shape [centres, " + std::to_string(heads) + ", " +
                     std::to_string(f.dim) + "], got " + tilekernels::shape_string(shape));
  return shape;
}

Centres load_centres(tilekernels::Context& ctx, Invocation& inv, const aura::CacheFormat& f, std::int64_t heads,
                     const char* index, std::int64_t count) {
  Centres c;
  if (!f.k_centred) {
    for (const char* name : {"k_centre", index})
      if (inv.has_input(name)) throw UsageError("input '" + std::string(name) + "' exists only with centred=1");
    return c;
  }
  for (const char* name : {"k_centre", index})
    if (!inv.has_input(name)) throw UsageError("missing input '" + std::string(name) + "' (centred=1)");
  const Shape shape = centre_shape_of(inv, f, heads);
  c.host_index = inv.ints(index, {count});
  c.centre.emplace(inv.upload(ctx, DType::f32, shape, inv.floats("k_centre", shape), "input 'k_centre'"));
  c.index.emplace(inv.alloc(ctx, DType::i32, {count}, "input '" + std::string(index) + "'"));
  c.index->upload(std::span<const std::int32_t>(c.host_index));
  return c;
}

std::optional<tilekernels::TensorRef> ref_of(const std::optional<Tensor>& t) {
  return t ? std::optional<tilekernels::TensorRef>(t->ref()) : std::nullopt;
}

void run_cache_write(tilekernels::Context& ctx, Invocation& inv) {
  // Every parameter and shape first, before anything is allocated.
  const aura::CacheFormat f = format_of(inv);
  for (const auto& [side, bits] : {std::pair{"k", f.k_bits}, std::pair{"v", f.v_bits}})
    if (aura::CacheFormat::raw(bits) && inv.wants(std::string(side) + "_norms"))
      throw UsageError("output '" + std::string(side) + "_norms' exists only for a coded side (bits < 16)");
  const Shape k_shape = inv.input_shape("k");
  if (k_shape.size() != 3 || k_shape[2] != f.dim)
    throw UsageError("input 'k': expected shape [num_tokens, kv_heads, " + std::to_string(f.dim) + "], got " +
                     tilekernels::shape_string(k_shape));
  const std::int64_t tokens = k_shape[0], heads = k_shape[1];
  const bool fresh = !inv.has_input("k_codes") && !inv.has_input("v_codes");
  std::int64_t pages = inv.int_param("num_pages", 0);
  if (fresh) {
    if (pages <= 0) throw UsageError("parameter 'num_pages' must be > 0 for a fresh cache (or give k_codes and v_codes)");
    check_fresh_cache(ctx, inv, f, pages, heads);
  } else {
    if (!inv.has_input("k_codes") || !inv.has_input("v_codes"))
      throw UsageError("give both inputs 'k_codes' and 'v_codes' (an existing cache), or neither (a fresh one)");
    const Shape existing = inv.input_shape("k_codes");
    if (existing.size() != 4 || existing[1] != heads)
      throw UsageError("input 'k_codes': expected shape [num_pages, " + std::to_string(heads) + ", " +
                       std::to_string(f.page_tokens) + ", ...], got " + tilekernels::shape_string(existing));
    if (pages != 0 && pages != existing[0])
      throw UsageError("parameter 'num_pages' = " + std::to_string(pages) + " disagrees with input 'k_codes', which has " +
                       std::to_string(existing[0]) + " pages (num_pages is for a fresh cache; leave it out)");
    pages = existing[0];
  }
  const std::vector<std::int32_t> slots = inv.ints("slot_mapping", {tokens});

  const auto k = inv.upload(ctx, DType::f32, k_shape, inv.floats("k", k_shape), "input 'k'");
  const auto v = inv.upload(ctx, DType::f32, k_shape, inv.floats("v", k_shape), "input 'v'");
  Tensor slot_tensor = inv.alloc(ctx, DType::i32, {tokens}, "input 'slot_mapping'");
  slot_tensor.upload(std::span<const std::int32_t>(slots));
  const Side ks = load_side(ctx, inv, f, "k", f.k_bits, pages, heads, fresh);
  const Side vs = load_side(ctx, inv, f, "v", f.v_bits, pages, heads, fresh);
  const Centres centres = load_centres(ctx, inv, f, heads, "token_centres", tokens);
  const Tensor tables = aura::CacheTables::make(ctx, f, inv.seed_param("k_seed"), inv.seed_param("v_seed"));
  aura::CacheWriteKernel writer(ctx, f, DType::f32);
  aura::CacheWriteArgs args{k, v, slot_tensor, tables, *ks.store, norms_ref(ks), *vs.store, norms_ref(vs), slots};
  args.k_centre = ref_of(centres.centre);
  args.token_centres = ref_of(centres.index);
  args.host_token_centres = centres.host_index;
  writer.run(args);
  put_side(inv, "k", f.k_bits, ks);
  put_side(inv, "v", f.v_bits, vs);
}

void run_key_centre(tilekernels::Context& ctx, Invocation& inv) {
  const aura::CacheFormat f = format_of(inv);
  if (!f.k_centred) throw UsageError("aura.key_centre needs centred=1");
  const Shape k_shape = inv.input_shape("k");
  if (k_shape.size() != 3 || k_shape[2] != f.dim)
    throw UsageError("input 'k': expected shape [num_tokens, kv_heads, " + std::to_string(f.dim) + "], got " +
                     tilekernels::shape_string(k_shape));
  const Shape rows_shape = inv.input_shape("rows");
  if (rows_shape.size() != 1)
    throw UsageError("input 'rows': expected shape [entries], got " + tilekernels::shape_string(rows_shape));
  const std::vector<std::int32_t> rows = inv.ints("rows", rows_shape), starts = inv.ints("starts", {rows_shape[0] + 1});
  const Shape centre_shape = centre_shape_of(inv, f, k_shape[1]);
  const auto k = inv.upload(ctx, DType::f32, k_shape, inv.floats("k", k_shape), "input 'k'");
  Tensor starts_t = inv.alloc(ctx, DType::i32, {rows_shape[0] + 1}, "input 'starts'");
  starts_t.upload(std::span<const std::int32_t>(starts));
  Tensor rows_t = inv.alloc(ctx, DType::i32, rows_shape, "input 'rows'");
  rows_t.upload(std::span<const std::int32_t>(rows));
  Tensor centre = inv.upload(ctx, DType::f32, centre_shape, inv.floats("k_centre", centre_shape), "input 'k_centre'");
  aura::KeyCentreKernel(ctx, f, DType::f32).run({k, starts_t, rows_t, centre, starts, rows});
  inv.put("k_centre", centre_shape, centre.download_floats());
}

// What decode attention reads, loaded from the inputs.
struct AttentionInputs {
  aura::CacheFormat format;
  std::int64_t num_seqs = 0, q_len = 0, q_heads = 0, kv_heads = 0, pages = 0, max_pages = 0;
  std::optional<Tensor> q, block_table, seq_lens, sinks, tables;
  Side k, v;
  std::vector<std::int32_t> host_lens, host_table;
  aura::DecodeAttentionOptions options;
  Centres centres;
};

AttentionInputs load_attention(tilekernels::Context& ctx, Invocation& inv) {
  // Every parameter and shape first, before anything is allocated.
  AttentionInputs a;
  a.format = format_of(inv);
  const aura::CacheFormat& f = a.format;
  const double scale = inv.float_param("scale"), softcap = inv.float_param("softcap");
  if (softcap < 0) throw UsageError("parameter 'softcap' must be >= 0 (0: none), got " + printable(inv.param("softcap"), 60));
  if (softcap != 0 && static_cast<float>(softcap) == 0)  // would silently mean none
    throw UsageError("parameter 'softcap' is outside float's range, got " + printable(inv.param("softcap"), 60));
  const std::int64_t window = inv.int_param("window", 0, std::int64_t{1} << 31);
  if (scale != 0) a.options.scale = static_cast<float>(scale);
  a.options.softcap = static_cast<float>(softcap);
  a.options.window = static_cast<std::uint32_t>(window);
  if ((scale != 0 && (*a.options.scale == 0 || !std::isfinite(*a.options.scale))) || !std::isfinite(a.options.softcap))
    throw UsageError("parameters 'scale' and 'softcap' must be within float's range");
  const Shape q_shape = inv.input_shape("q");
  if (q_shape.size() != 4 || q_shape[3] != f.dim)
    throw UsageError("input 'q': expected shape [num_seqs, q_len, q_heads, " + std::to_string(f.dim) + "], got " +
                     tilekernels::shape_string(q_shape));
  a.num_seqs = q_shape[0];
  a.q_len = q_shape[1];
  a.q_heads = q_shape[2];
  const Shape cache_shape = inv.input_shape("k_codes");
  if (cache_shape.size() != 4)
    throw UsageError("input 'k_codes': expected shape [num_pages, kv_heads, page_tokens, ...], got " +
                     tilekernels::shape_string(cache_shape));
  a.pages = cache_shape[0];
  a.kv_heads = cache_shape[1];
  const Shape table_shape = inv.input_shape("block_table");
  if (table_shape.size() != 2 || table_shape[0] != a.num_seqs)
    throw UsageError("input 'block_table': expected shape [" + std::to_string(a.num_seqs) + ", max_pages], got " +
                     tilekernels::shape_string(table_shape));
  a.max_pages = table_shape[1];
  a.host_table = inv.ints("block_table", table_shape);
  a.host_lens = inv.ints("seq_lens", {a.num_seqs});

  a.q.emplace(inv.upload(ctx, DType::f32, q_shape, inv.floats("q", q_shape), "input 'q'"));
  a.tables.emplace(aura::CacheTables::make(ctx, f, inv.seed_param("k_seed"), inv.seed_param("v_seed")));
  a.k = load_side(ctx, inv, f, "k", f.k_bits, a.pages, a.kv_heads, false);
  a.v = load_side(ctx, inv, f, "v", f.v_bits, a.pages, a.kv_heads, false);
  a.block_table.emplace(inv.alloc(ctx, DType::i32, table_shape, "input 'block_table'"));
  a.block_table->upload(std::span<const std::int32_t>(a.host_table));
  a.seq_lens.emplace(inv.alloc(ctx, DType::i32, Shape{a.num_seqs}, "input 'seq_lens'"));
  a.seq_lens->upload(std::span<const std::int32_t>(a.host_lens));
  if (inv.has_input("sinks"))
    a.sinks.emplace(inv.upload(ctx, DType::f32, {a.q_heads}, inv.floats("sinks", {a.q_heads}), "input 'sinks'"));
  a.centres = load_centres(ctx, inv, f, a.kv_heads, "seq_centres", a.num_seqs);
  return a;
}

// The call's arguments, with the checks that need no kernel object made
// first: building the kernel compiles pipelines, which a call about to be
// refused should not wait for.
aura::DecodeAttentionArgs args_of(const AttentionInputs& a, const Tensor& output, const Tensor& lse) {
  aura::DecodeAttentionArgs args{*a.q,           *a.k.store,  norms_ref(a.k), *a.v.store, norms_ref(a.v),
                                 *a.block_table, *a.seq_lens, *a.tables,      output,     lse.ref(),
                                 a.sinks ? std::optional<tilekernels::TensorRef>(a.sinks->ref()) : std::nullopt};
  args.options = a.options;
  args.host_seq_lens = a.host_lens;
  args.host_block_table = a.host_table;
  args.k_centre = ref_of(a.centres.centre);
  args.seq_centres = ref_of(a.centres.index);
  args.host_seq_centres = a.centres.host_index;
  if (a.q_len > aura::DecodeAttentionKernel::max_q_len)
    throw UsageError("input 'q': q_len must be at most " + std::to_string(aura::DecodeAttentionKernel::max_q_len) +
                     ", got " + std::to_string(a.q_len));
  if (a.q_heads % a.kv_heads != 0)
    throw UsageError("input 'q': q_heads (" + std::to_string(a.q_heads) + ") must be a multiple of kv_heads (" +
                     std::to_string(a.kv_heads) + ", from k_codes)");
  aura::check_decode_attention_host_copies(a.format, args);
  return args;
}

// The call's own shapes, so that tk-run builds the call's pipelines only
// (shapes no envelope takes are left open: the kernel's check names them).
aura::DecodeAttentionEnvelope envelope_of(const AttentionInputs& a) {
  aura::DecodeAttentionEnvelope e;
  e.max_num_seqs = std::max<std::int64_t>(a.num_seqs, 0);
  e.max_q_len = std::clamp<std::int64_t>(a.q_len, 1, aura::DecodeAttentionKernel::max_q_len);
  if (a.q_heads > 0 && a.kv_heads > 0 && a.q_heads % a.kv_heads == 0) e.q_heads = a.q_heads, e.kv_heads = a.kv_heads;
  return e;
}

void run_decode_attention(tilekernels::Context& ctx, Invocation& inv) {
  const AttentionInputs a = load_attention(ctx, inv);
  const Shape out_shape{a.num_seqs, a.q_len, a.q_heads, a.format.dim}, lse_shape{a.num_seqs, a.q_len, a.q_heads};
  Tensor output = inv.alloc(ctx, DType::f32, out_shape, "output 'output'");
  Tensor lse = inv.alloc(ctx, DType::f32, lse_shape, "output 'lse'");
  const auto args = args_of(a, output, lse);
  aura::DecodeAttentionKernel kernel(ctx, a.format, DType::f32, DType::f32, envelope_of(a));
  kernel.check(args);
  // The workspace the kernel allocates, through tk-run's budget first.
  inv.reserve(ctx, kernel.workspace_bytes(kernel.problem(args)), "the workspace for inputs 'q' and 'block_table'");
  kernel.run(args);
  inv.put("output", out_shape, output.download_floats());
  inv.put("lse", lse_shape, lse.download_floats());
}

// The split states pass 1 leaves before the merge, read from the workspace
// (layout of decode_attention.hpp) into per-row arrays.
void run_partials(tilekernels::Context& ctx, Invocation& inv) {
  const std::int64_t splits = inv.int_param("splits");
  if (splits < 2 || splits > aura::DecodeAttentionKernel::max_splits)
    throw UsageError("parameter 'splits' must be in [2, " + std::to_string(aura::DecodeAttentionKernel::max_splits) +
                     "], got " + std::to_string(splits));
  const AttentionInputs a = load_attention(ctx, inv);
  const std::int64_t dim = a.format.dim;
  const Shape o_shape{a.num_seqs, a.q_len, a.q_heads, splits, dim}, ml_shape{a.num_seqs, a.q_len, a.q_heads, splits};
  checked_elements(o_shape, "output 'o_partials'");
  Tensor output = inv.alloc(ctx, DType::f32, {a.num_seqs, a.q_len, a.q_heads, dim}, "the output for input 'q'");
  Tensor lse = inv.alloc(ctx, DType::f32, {a.num_seqs, a.q_len, a.q_heads}, "the lse for input 'q'");
  auto args = args_of(a, output, lse);
  aura::DecodeAttentionKernel kernel(ctx, a.format, DType::f32, DType::f32, envelope_of(a));
  kernel.check(args);
  const auto problem = kernel.problem(args);
  auto geometry = kernel.geometry(problem, true);
  geometry.splits = static_cast<std::uint32_t>(splits);
  const auto layout = kernel.workspace_layout(problem, geometry);
  Tensor work = inv.alloc(ctx, DType::u32, {static_cast<std::int64_t>(layout.bytes() / 4)},
                          "the workspace for inputs 'q' and 'block_table' with parameter 'splits'");
  args.workspace = tilekernels::Workspace{work.ref()};
  auto plan = kernel.plan(problem, layout.bytes());
  plan.geometry = geometry;
  kernel.prepare(plan);
  ctx.submit_and_wait([&](vk::CommandBuffer cmd) { kernel.record(cmd, args, plan); });
  const auto words = work.download<float>();
  const std::int64_t gqa = a.q_heads / a.kv_heads, rv = geometry.row_vecs, rows = 4 * rv;
  const std::int64_t chunks = (gqa * a.q_len + rows - 1) / rows;
  const std::size_t o_at = layout.o_at(work.ref().size) / 4, ml_at = layout.ml_at(work.ref().size) / 4;
  std::vector<float> o(static_cast<std::size_t>(a.num_seqs * a.q_len * a.q_heads * splits * dim));
  std::vector<float> m(static_cast<std::size_t>(a.num_seqs * a.q_len * a.q_heads * splits)), l(m.size());
  for (std::int64_t s = 0; s < a.num_seqs; ++s)
    for (std::int64_t h = 0; h < a.kv_heads; ++h)
      for (std::int64_t rg = 0; rg < gqa * a.q_len; ++rg) {
        const std::int64_t chunk = rg / rows, r = rg % rows, i = rg / gqa, qh = h * gqa + rg % gqa;
        const std::int64_t group = (s * a.kv_heads + h) * chunks + chunk;
        for (std::int64_t sp = 0; sp < splits; ++sp) {
          const std::int64_t state = group * splits + sp;
          const auto row = static_cast<std::size_t>(((s * a.q_len + i) * a.q_heads + qh) * splits + sp);
          // vec4 j holds rows 4j .. 4j+3: float index (vec4 * 4 + r % 4)
          m[row] = words[ml_at + static_cast<std::size_t>(((state * rv + r / 4) * 2) * 4 + r % 4)];
          l[row] = words[ml_at + static_cast<std::size_t>(((state * rv + r / 4) * 2 + 1) * 4 + r % 4)];
          for (std::int64_t d = 0; d < dim; ++d)
            o[row * static_cast<std::size_t>(dim) + static_cast<std::size_t>(d)] =
                words[o_at + static_cast<std::size_t>(((state * dim + d) * rv + r / 4) * 4 + r % 4)];
        }
      }
  inv.put("o_partials", o_shape, o);
  inv.put("m_partials", ml_shape, m);
  inv.put("l_partials", ml_shape, l);
}

std::vector<Param> with_format(std::vector<Param> extra) {
  std::vector<Param> p = kFormatParams;
  p.insert(p.end(), extra.begin(), extra.end());
  return p;
}

const std::vector<TensorSpec> kCacheInputs{
    {"k_codes", "u32", "[num_pages, kv_heads, page_tokens, dim*k_bits/32] (k_bits=16: f32 [num_pages, kv_heads, page_tokens, dim])"},
    {"k_norms", "f32", "[num_pages, kv_heads, page_tokens] (coded K only)", true},
    {"v_codes", "u32", "[num_pages, kv_heads, page_tokens, dim*v_bits/32] (v_bits=16: f32 [..., dim])"},
    {"v_norms", "f32", "[num_pages, kv_heads, page_tokens] (coded V only)", true}};

std::vector<TensorSpec> attention_inputs() {
  std::vector<TensorSpec> in{{"q", "f32", "[num_seqs, q_len, q_heads, dim]"}};
  in.insert(in.end(), kCacheInputs.begin(), kCacheInputs.end());
  in.push_back({"block_table", "i32", "[num_seqs, max_pages]"});
  in.push_back({"seq_lens", "i32", "[num_seqs]"});
  in.push_back({"sinks", "f32", "[q_heads]", true});
  in.push_back({"k_centre", "f32", "[centres, kv_heads, dim] (centred=1 only)", true});
  in.push_back({"seq_centres", "i32", "[num_seqs]: each sequence's row of k_centre (centred=1 only)", true});
  return in;
}

const std::vector<Param> kAttentionParams{
    {"scale", "0", "softmax scale (0: 1/sqrt(dim))"},
    {"window", "0", "sliding window: keys at positions > pos - window (0: none)"},
    {"softcap", "0", "logit softcap cap * tanh(z / cap) (0: none)"}};

const Registrar cache_write{Op{
    "aura.cache_write",
    "appends k, v rows to the paged cache at slot_mapping (page * page_tokens + offset; negative: skipped), encoding in "
    "place; outputs the whole cache after the write",
    with_format({{"num_pages", "0", "pages of a fresh (zero) cache when k_codes, v_codes are not given"}}),
    [] {
      std::vector<TensorSpec> in{{"k", "f32", "[num_tokens, kv_heads, dim]"},
                                 {"v", "f32", "[num_tokens, kv_heads, dim]"},
                                 {"slot_mapping", "i32", "[num_tokens]"}};
      for (auto t : kCacheInputs) {
        t.optional = true;
        in.push_back(t);
      }
      in.push_back({"k_centre", "f32", "[centres, kv_heads, dim] (centred=1 only)", true});
      in.push_back({"token_centres", "i32", "[num_tokens]: each token's row of k_centre (centred=1 only)", true});
      return in;
    }(),
    {{"k_codes", "u32", "[num_pages, kv_heads, page_tokens, dim*k_bits/32] (k_bits=16: f32 [..., dim])"},
     {"k_norms", "f32", "[num_pages, kv_heads, page_tokens] (coded K only)", true},
     {"v_codes", "u32", "[num_pages, kv_heads, page_tokens, dim*v_bits/32] (v_bits=16: f32 [..., dim])"},
     {"v_norms", "f32", "[num_pages, kv_heads, page_tokens] (coded V only)", true}},
    run_cache_write}};

const Registrar key_centre{Op{
    "aura.key_centre",
    "sets row rows[i] of k_centre to the mean of k's tokens [starts[i], starts[i+1]) (a negative row or an empty "
    "range: none); outputs the whole k_centre",
    with_format({}),
    {{"k", "f32", "[num_tokens, kv_heads, dim]"},
     {"starts", "i32", "[entries + 1]"},
     {"rows", "i32", "[entries]"},
     {"k_centre", "f32", "[centres, kv_heads, dim]: the rows as they are"}},
    {{"k_centre", "f32", "[centres, kv_heads, dim]"}},
    run_key_centre}};

const Registrar decode_attention{Op{
    "aura.decode_attention",
    "decode attention of q_len new tokens per sequence over the paged cache (causal among them, GQA, window, sinks, "
    "softcap); lse natural log, sinks included",
    with_format(kAttentionParams),
    attention_inputs(),
    {{"output", "f32", "[num_seqs, q_len, q_heads, dim]"}, {"lse", "f32", "[num_seqs, q_len, q_heads]", true}},
    run_decode_attention}};

const Registrar decode_attention_partials{Op{
    "aura.decode_attention_partials",
    "the split states before the merge: per row and split, o (V's rotated domain, unnormalised), m, l (l = 0: empty); "
    "aura.flash_pass2 over [rows, splits, dim] then R_v^T gives aura.decode_attention's output",
    with_format([] {
      auto p = kAttentionParams;
      p.push_back({"splits", "4", "workgroups per KV head along the keys: 2 .. 128"});
      return p;
    }()),
    attention_inputs(),
    {{"o_partials", "f32", "[num_seqs, q_len, q_heads, splits, dim]"},
     {"m_partials", "f32", "[num_seqs, q_len, q_heads, splits]"},
     {"l_partials", "f32", "[num_seqs, q_len, q_heads, splits]"}},
    run_partials}};

}  // namespace
