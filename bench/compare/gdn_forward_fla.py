#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Peer timing for the complete Gated DeltaNet forward: flash-linear-attention's
chunk_gated_delta_rule (prefill: forward only, bf16, initial state given,
output_final_state=True) and fused_recurrent_gated_delta_rule (decode: one
new token per sequence, f32 state) on this GPU.

FLA is not installed on the GPU machine: carry a checkout (never committed)
as .peers/fla or .peers/flash-linear-attention (found there and put first on
sys.path), or point FLA_PATH / --fla at the folder that holds its `fla/`
package:
    python3 bench/compare/gdn_forward_fla.py [--fla .peers/fla]
The shapes are those of bench/bench_gdn_forward.cpp (BM_GdnChunkForward/*).

Three GPU times per call, after a warm-up that also runs Triton's autotuner:
  kernels  sum of the CUDA kernel times per call from torch.profiler (no
           launch gaps, no Python); the per-kernel breakdown is printed
  graph    one call captured in a CUDA graph, replayed back to back between
           CUDA events (launch gaps between FLA's kernels included, Python not)
  wall     plain calls timed on the host, synchronised at the end (Python,
           launches and FLA's host-side preparation included)
FLA's optional backends (FlashQLA on Hopper when its package is importable)
are switched off so that FLA's Triton kernels are timed, the numerics our
kernels follow; --dispatch leaves FLA's backend choice on. --qwen turns on
the options Qwen3-Next uses (q/k L2 norm, gate and beta sigmoid in the
kernel). FLA's GDN decode writes a new final state (no in-place update in
its API); its allocation is part of each call.
"""
import argparse
import importlib
import os
import re
import sys
import time
import types

CHUNK_SHAPES = [(1, 8192, 16, 32, 128, 128), (8, 2048, 16, 32, 128, 128)]  # B, T, Hg, H, K, V
VARLEN_LENS = [4096, 1000, 3000, 517, 2048, 63, 3500, 2160]  # 8 sequences, 16384 tokens, B = 1
# --many: the benchmark's Sweep_GdnChunkForward/varlen_N128_* (128 short sequences, 16384 tokens)
MANY_LENS = {"N128 aligned": [128] * 128, "N128 unaligned": [127, 129] * 64}
DECODE = [(1, 16, 32, 128, 128), (32, 16, 32, 128, 128)]  # N, Hg, H, K, V; one new token each
BT = 64


def find_fla(arg):
    candidates = [arg, os.environ.get("FLA_PATH"), ".peers/fla", ".peers/flash-linear-attention", ".peers/rwu"]
    for root in candidates + [".peers"]:
        if root and os.path.isdir(os.path.join(root, "fla")):
            return os.path.abspath(root)
    return None


def import_fla(root):
    """FLA's GDN entry points; when the package's __init__ files need model
    dependencies that are missing (transformers, einops), they are skipped."""
    sys.path.insert(0, root)
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
        return chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    except Exception as exc:
        print(f"# plain import failed ({exc!r}); importing the kernel modules alone")
    for name in list(sys.modules):
        if name == "fla" or name.startswith("fla."):
            del sys.modules[name]
    for name in ("fla", "fla.ops", "fla.modules", "fla.layers", "fla.models", "fla.ops.gated_delta_rule"):
        mod = types.ModuleType(name)
        mod.__path__ = [os.path.join(root, *name.split("."))]
        sys.modules[name] = mod
    chunk = importlib.import_module("fla.ops.gated_delta_rule.chunk")
    recurrent = importlib.import_module("fla.ops.gated_delta_rule.fused_recurrent")
    return chunk.chunk_gated_delta_rule, recurrent.fused_recurrent_gated_delta_rule


def fla_version(root):
    try:
        text = open(os.path.join(root, "fla", "__init__.py")).read()
        return re.search(r'__version__\s*=\s*"([^"]+)"', text).group(1)
    except Exception:
        return "?"


def kernel_times(torch, fn, reps):
    """Per-call device time of each CUDA kernel (and memset/memcpy) from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0)
        if us and us > 0:
            rows.append((e.key, e.count / reps, us / reps))
    rows.sort(key=lambda r: -r[2])
    return rows


def graph_time(torch, fn, reps):
    """Microseconds per replay of one call captured in a CUDA graph, or the reason it failed."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        for _ in range(5):
            graph.replay()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            graph.replay()
        stop.record()
        torch.cuda.synchronize()
        return start.elapsed_time(stop) * 1e3 / reps, None
    except Exception as exc:  # report, do not hide
        torch.cuda.synchronize()
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''}"


def wall_time(torch, fn, reps):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6 / reps


def gdn_inputs(torch, F, B, T, Hg, H, K, V, N, qwen, gen):
    dev = "cuda"
    q = F.normalize(torch.randn(B, T, Hg, K, device=dev, generator=gen), p=2, dim=-1).to(torch.bfloat16)
    k = F.normalize(torch.randn(B, T, Hg, K, device=dev, generator=gen), p=2, dim=-1).to(torch.bfloat16)
    v = torch.randn(B, T, H, V, device=dev, generator=gen).to(torch.bfloat16)
    kw = dict(scale=K ** -0.5, output_final_state=True,
              initial_state=torch.randn(N, H, K, V, device=dev, generator=gen) * 0.1)
    if qwen:  # raw gate and beta logits; the kernels apply the activations
        g = torch.randn(B, T, H, device=dev, generator=gen)
        beta = torch.randn(B, T, H, device=dev, generator=gen)
        kw.update(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                  A_log=torch.rand(H, device=dev, generator=gen).log(),
                  dt_bias=torch.randn(H, device=dev, generator=gen) * 0.1)
    else:
        g = F.logsigmoid(torch.rand(B, T, H, device=dev, generator=gen))
        beta = torch.rand(B, T, H, device=dev, generator=gen).sigmoid()
    return q, k, v, g.float(), beta.float(), kw


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fla", default=None, help="folder holding FLA's fla/ package")
    ap.add_argument("--reps", type=int, default=20, help="calls per timing")
    ap.add_argument("--dispatch", action="store_true", help="let FLA pick its optional backends")
    ap.add_argument("--qwen", action="store_true", help="q/k L2 norm, gate and beta sigmoid in the kernel")
    ap.add_argument("--many", action="store_true", help="also 128 short sequences, aligned and not")
    args = ap.parse_args()
    root = find_fla(args.fla)
    if root is None:
        print("[fla gdn forward] FLA not found: carry .peers/fla or set FLA_PATH")
        return 1
    if not args.dispatch:
        os.environ["FLA_DISABLE_BACKEND_DISPATCH"] = "1"  # read when fla.ops.backends is imported
    import torch
    import torch.nn.functional as F
    import triton
    try:
        chunk_gdr, recurrent_gdr = import_fla(root)
    except Exception as exc:  # report, do not hide: the table then lacks FLA
        print(f"[fla gdn forward] import failed: {type(exc).__name__}: {exc}")
        return 1
    print(f"device: {torch.cuda.get_device_name()} | torch {torch.__version__} | triton {triton.__version__} | "
          f"fla {fla_version(root)} from {root} | dispatch {'on' if args.dispatch else 'off'}"
          f"{' | qwen options' if args.qwen else ''}")

    cases = []  # (label, shape text, fn)
    gen = torch.Generator(device="cuda").manual_seed(0)
    with torch.no_grad():
        for B, T, Hg, H, K, V in CHUNK_SHAPES:
            q, k, v, g, beta, kw = gdn_inputs(torch, F, B, T, Hg, H, K, V, B, args.qwen, gen)
            cases.append(("chunk", f"B={B} T={T} Hg={Hg} H={H} K={K} V={V}",
                          lambda q=q, k=k, v=v, g=g, beta=beta, kw=kw: chunk_gdr(q, k, v, g, beta, **kw)))
        Hg, H, K, V = 16, 32, 128, 128
        varlen = [("chunk varlen", VARLEN_LENS)]
        if args.many:
            varlen += [(f"chunk {name}", lens) for name, lens in MANY_LENS.items()]
        for label, lens in varlen:
            total, N = sum(lens), len(lens)
            q, k, v, g, beta, kw = gdn_inputs(torch, F, 1, total, Hg, H, K, V, N, args.qwen, gen)
            offsets = [0]
            for n in lens:
                offsets.append(offsets[-1] + n)
            # cu_seqlens_cpu spares FLA a device-to-host read when it builds its chunk indices.
            kw.update(cu_seqlens=torch.tensor(offsets, dtype=torch.int32, device="cuda"),
                      cu_seqlens_cpu=torch.tensor(offsets, dtype=torch.int32))
            cases.append((label, f"N={N} T={total} Hg={Hg} H={H} K={K} V={V}",
                          lambda q=q, k=k, v=v, g=g, beta=beta, kw=kw: chunk_gdr(q, k, v, g, beta, **kw)))
        for N, Hg, H, K, V in DECODE:
            q, k, v, g, beta, kw = gdn_inputs(torch, F, N, 1, Hg, H, K, V, N, args.qwen, gen)
            cases.append(("decode", f"N={N} T=1 Hg={Hg} H={H} K={K} V={V}",
                          lambda q=q, k=k, v=v, g=g, beta=beta, kw=kw: recurrent_gdr(q, k, v, g, beta, **kw)))

        results = []
        for label, shape, fn in cases:
            try:
                for _ in range(3):  # autotune, compile, fill FLA's caches
                    fn()
                torch.cuda.synchronize()
                rows = kernel_times(torch, fn, args.reps)
                graph_us, graph_err = graph_time(torch, fn, max(args.reps, 50))
                wall_us = wall_time(torch, fn, args.reps)
            except Exception as exc:  # one case failing must not hide the others
                print(f"[{label} {shape}] failed: {type(exc).__name__}: {exc}")
                continue
            print(f"\n[{label} {shape}] kernels per call:")
            for name, calls, us in rows:
                print(f"  {us:9.2f} us  x{calls:4.1f}  {name[:110]}")
            if graph_err:
                print(f"  CUDA graph capture failed: {graph_err}")
            results.append((label, shape, sum(r[1] for r in rows), sum(r[2] for r in rows), graph_us, wall_us))

    print(f"\n{'case':<13} {'shape':<34} {'kernels':>7} {'kernel sum us':>13} {'graph us':>9} {'wall us':>9}")
    for label, shape, nk, ksum, graph_us, wall_us in results:
        g_text = f"{graph_us:9.1f}" if graph_us is not None else f"{'n/a':>9}"
        print(f"{label:<13} {shape:<34} {nk:7.1f} {ksum:13.1f} {g_text} {wall_us:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
