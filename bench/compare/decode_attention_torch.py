# SPDX-License-Identifier: MIT
"""Peer timing for AURA decode attention: PyTorch's scaled_dot_product_attention
(SDPA) in bf16 over an uncompressed KV cache, on the same GPU.

Shapes: 32 query heads, 8 KV heads (GQA 4:1), Dim 128, bf16:
  batch 1, q_len 1 at 1K, 4K, 32K and 128K keys; batch 32, q_len 1 at 4K keys
  each; batch 1, q_len 4 at 32K keys (causal among the 4 new tokens); batches
  4 and 8, q_len 1 at 1K and 4K keys each.
Layout: q [B, 32, q_len, 128], K/V [B, 8, S, 128], contiguous (SDPA's own
layout: the gather of a paged cache is not timed, nor is any reshaping below).

Every backend this PyTorch has (cuDNN, flash, efficient, math) is forced in
turn with torch.nn.attention.sdpa_kernel, in each GQA form:
  gqa     enable_gqa=True on the 8 KV heads (PyTorch >= 2.5; the flash and
          math backends take it, others may refuse it, depending on version);
  expand  K/V repeat_interleave'd to 32 heads beforehand: 4x the bytes read,
          what a backend without GQA support costs;
  fold    the 4 query heads that share a KV head become 4 query rows of one
          head (q viewed as [B, 8, 4 * q_len, 128]): exact, because query rows
          never interact, and K/V is read once; with q_len > 1 each row needs
          its own causal limit, so only with an explicit mask.
Causality for q_len 4: SDPA's is_causal aligns the triangle top-left (query i
sees keys 0..i), which is wrong when q_len < kv_len. The new tokens are the
last q_len positions, so query i sees keys 0 .. S - q_len + i (bottom-right
alignment). Two correct forms are timed:
  lower_right  torch.nn.attention.bias.causal_lower_right(q_len, S): the flash
               and efficient backends apply it in the kernel; elsewhere it is
               materialised into a mask;
  mask         an explicit boolean mask [rows, S] (the flash backend takes no
               mask and is skipped).
Each variant's output is first checked against an fp32 reference (relative
RMS error <= 2e-2); a variant that raises (no eligible kernel, unsupported
option, capture failure) or disagrees is listed with the reason and never
counted as best.

Times are GPU time per call from CUDA events around many back-to-back calls
after a warm-up, the median of --rounds rounds: "eager" launches from Python,
"graph" replays the same calls captured in one CUDA graph (launch overhead
removed). Inputs rotate over enough copies (>= 256 MiB in all) that the L2
does not hold them when one call's bytes would fit. GB/s = bytes of q, K, V
and output of the variant / best time.
Usage (on the GPU machine): python3 bench/compare/decode_attention_torch.py [--rounds 5] [--case b1_s32k ...] [--dim 64] [--heads 16 2]
"""
import argparse
import math
import statistics
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

Q_HEADS, KV_HEADS, DIM = 32, 8, 128
GROUP = Q_HEADS // KV_HEADS
# name, batch, q_len, keys per sequence
CASES = [
    ("b1_s1k", 1, 1, 1024),
    ("b1_s4k", 1, 1, 4096),
    ("b1_s32k", 1, 1, 32768),
    ("b1_s128k", 1, 1, 131072),
    ("b32_s4k", 32, 1, 4096),
    ("b1_q4_s32k", 1, 4, 32768),
    ("b4_s1k", 4, 1, 1024),
    ("b4_s4k", 4, 1, 4096),
    ("b8_s1k", 8, 1, 1024),
    ("b8_s4k", 8, 1, 4096),
]
ROTATE_BYTES = 256 << 20  # > 5x the L2 of an H100 (50 MB) or H200
MAX_COPIES = 64
TARGET_MS = 50.0  # GPU time per timed round
TOLERANCE = 2e-2  # relative RMS error of a bf16 output against fp32


def available_backends():
    names = [("cudnn", "CUDNN_ATTENTION"), ("flash", "FLASH_ATTENTION"), ("efficient", "EFFICIENT_ATTENTION"),
             ("math", "MATH")]
    return [(short, getattr(SDPBackend, name)) for short, name in names if hasattr(SDPBackend, name)]


def causal_rows_mask(rows, q_len, keys, device):
    """Row r is query r % q_len (the fold layout; rows == q_len otherwise): it
    sees keys t <= keys - q_len + (r % q_len)."""
    limit = keys - q_len + torch.arange(rows, device=device) % q_len
    return torch.arange(keys, device=device)[None, :] <= limit[:, None]


def reference(q, k, v, q_len, keys):
    """fp32 attention, the query heads of a KV head folded into rows."""
    b = q.shape[0]
    qf = q.float().reshape(b, KV_HEADS, GROUP * q_len, DIM)
    s = (qf @ k.float().transpose(-1, -2)) / math.sqrt(DIM)
    if q_len > 1:
        s = s.masked_fill(~causal_rows_mask(GROUP * q_len, q_len, keys, q.device), float("-inf"))
    return (torch.softmax(s, dim=-1) @ v.float()).reshape(b, Q_HEADS, q_len, DIM)


def variants(q_len):
    if q_len == 1:
        return [("gqa", "none"), ("expand", "none"), ("fold", "none")]
    return [("gqa", "lower_right"), ("expand", "lower_right"), ("gqa", "mask"), ("expand", "mask"),
            ("fold", "mask")]


def shape_inputs(form, q, k, v, q_len):
    if form == "expand":
        k, v = k.repeat_interleave(GROUP, dim=1), v.repeat_interleave(GROUP, dim=1)
    elif form == "fold":
        q = q.view(q.shape[0], KV_HEADS, GROUP * q_len, DIM)  # q is contiguous: a view, rows j * q_len + i
    return q, k, v


def make_call(form, mask, q_len, keys, device):
    kwargs = {}
    if form == "gqa":
        kwargs["enable_gqa"] = True
    if mask == "lower_right":
        from torch.nn.attention.bias import causal_lower_right
        kwargs["attn_mask"] = causal_lower_right(q_len, keys)
    elif mask == "mask":
        rows = GROUP * q_len if form == "fold" else q_len
        kwargs["attn_mask"] = causal_rows_mask(rows, q_len, keys, device)

    def call(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    return call


def relative_rms(got, want):
    return ((got - want).norm() / want.norm()).item()


def events():
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def time_eager(call, inputs, rounds):
    n = len(inputs)
    for i in range(max(3, n)):
        call(*inputs[i % n])
    start, end = events()
    start.record()
    for i in range(10):
        call(*inputs[i % n])
    end.record()
    end.synchronize()
    iters = int(min(5000, max(20, TARGET_MS * 10 / max(start.elapsed_time(end), 1e-3))))
    times = []
    for _ in range(rounds):
        start.record()
        for i in range(iters):
            call(*inputs[i % n])
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / iters)
    return statistics.median(times)


def time_graph(call, inputs, rounds, eager_us):
    n = len(inputs)
    calls = n * max(1, math.ceil(64 / n))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream, as capture requires
        for i in range(3):
            call(*inputs[i % n])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            call(*inputs[i % n])
    graph.replay()
    torch.cuda.synchronize()
    reps = int(min(200, max(2, TARGET_MS * 1e3 / (calls * eager_us))))
    start, end = events()
    times = []
    for _ in range(rounds):
        start.record()
        for _ in range(reps):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / (reps * calls))
    del graph
    return statistics.median(times)


def reason(error):
    text = str(error).strip().splitlines()
    return (type(error).__name__ + ": " + (text[0] if text else ""))[:90]


def run_case(name, batch, q_len, keys, rounds, use_graphs):
    device = "cuda"
    kv_bytes = 2 * batch * KV_HEADS * keys * DIM * 2
    copies = min(MAX_COPIES, max(1, math.ceil(ROTATE_BYTES / kv_bytes)))
    base = [(torch.randn(batch, Q_HEADS, q_len, DIM, device=device, dtype=torch.bfloat16),
             torch.randn(batch, KV_HEADS, keys, DIM, device=device, dtype=torch.bfloat16),
             torch.randn(batch, KV_HEADS, keys, DIM, device=device, dtype=torch.bfloat16)) for _ in range(copies)]
    want = reference(*base[0], q_len, keys)
    print(f"\n{name}: batch {batch}, q_len {q_len}, {keys} keys, {Q_HEADS}/{KV_HEADS} heads, dim {DIM}, "
          f"K+V {kv_bytes / 2**20:.1f} MiB, {copies} rotating copies")
    print(f"{'backend':>9} {'gqa':>7} {'mask':>12} {'eager_us':>9} {'graph_us':>9} {'GB/s':>7} {'err':>8}  note")
    rows = []
    for backend_name, backend in available_backends():
        for form, mask in variants(q_len):
            if backend_name == "flash" and mask == "mask":
                continue  # the flash backend takes no attn_mask
            label = f"{backend_name:>9} {form:>7} {mask:>12}"
            inputs = None
            try:
                with warnings.catch_warnings(), sdpa_kernel([backend]):
                    warnings.simplefilter("ignore")
                    call = make_call(form, mask, q_len, keys, device)
                    variant_bytes = None
                    n = copies if form != "expand" else max(1, math.ceil(copies / GROUP))
                    inputs = [shape_inputs(form, *base[i], q_len) for i in range(n)]
                    out = call(*inputs[0])
                    torch.cuda.synchronize()
                    err = relative_rms(out.float().reshape(want.shape), want)
                    variant_bytes = sum(t.numel() * t.element_size() for t in inputs[0]) + out.numel() * 2
                    if not err <= TOLERANCE:
                        print(f"{label} {'':>9} {'':>9} {'':>7} {err:>8.1e}  WRONG (not timed)")
                        continue
                    eager = time_eager(call, inputs, rounds)
                    graph, note = None, ""
                    if use_graphs:
                        try:
                            graph = time_graph(call, inputs, rounds, eager)
                        except Exception as e:  # noqa: BLE001 -- any capture failure is reported
                            torch.cuda.synchronize()
                            note = "graph: " + reason(e)
            except Exception as e:  # noqa: BLE001 -- no kernel, unsupported option, out of memory
                print(f"{label} {'n/a':>9} {'':>9} {'':>7} {'':>8}  {reason(e)}")
                continue
            finally:
                del inputs
            best = min(t for t in (eager, graph) if t is not None)
            gbps = variant_bytes / (best * 1e-6) / 1e9
            graph_text = f"{graph:>9.2f}" if graph is not None else f"{'-':>9}"
            print(f"{label} {eager:>9.2f} {graph_text} {gbps:>7.0f} {err:>8.1e}  {note}")
            rows.append((backend_name, form, mask, eager, graph))
    if rows:
        e = min(rows, key=lambda r: r[3])
        print(f"best eager: {e[0]} / {e[1]} / {e[2]}: {e[3]:.2f} us")
        graphed = [r for r in rows if r[4] is not None]
        if graphed:
            g = min(graphed, key=lambda r: r[4])
            print(f"best graph: {g[0]} / {g[1]} / {g[2]}: {g[4]:.2f} us")
    del base, want
    torch.cuda.empty_cache()
    return name, rows


def main():
    global DIM, Q_HEADS, KV_HEADS, GROUP
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--case", nargs="*", default=None, help="case names (default: all)")
    parser.add_argument("--no-graphs", action="store_true")
    parser.add_argument("--dim", type=int, default=DIM, help="head size (default 128, the issue's)")
    parser.add_argument("--heads", type=int, nargs=2, default=[Q_HEADS, KV_HEADS], metavar=("Q", "KV"),
                        help="query and KV heads (default 32 8, the issue's)")
    args = parser.parse_args()
    DIM = args.dim
    Q_HEADS, KV_HEADS = args.heads
    GROUP = Q_HEADS // KV_HEADS
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}, backends: {', '.join(n for n, _ in available_backends())}")
    summary = []
    for name, batch, q_len, keys in CASES:
        if args.case and name not in args.case:
            continue
        summary.append(run_case(name, batch, q_len, keys, args.rounds, not args.no_graphs))
    print(f"\n{'case':>12} {'best eager (backend/gqa/mask)':>44} {'best graph (backend/gqa/mask)':>44}")
    for name, rows in summary:
        if not rows:
            print(f"{name:>12} {'none ran':>44}")
            continue
        e = min(rows, key=lambda r: r[3])
        graphed = [r for r in rows if r[4] is not None]
        g = min(graphed, key=lambda r: r[4]) if graphed else None
        e_text = f"{e[3]:.2f} us ({e[0]}/{e[1]}/{e[2]})"
        g_text = f"{g[4]:.2f} us ({g[0]}/{g[1]}/{g[2]})" if g else "-"
        print(f"{name:>12} {e_text:>44} {g_text:>44}")


if __name__ == "__main__":
    main()
