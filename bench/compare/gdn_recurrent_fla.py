#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Peer timing for the Gated DeltaNet decode step: flash-linear-attention's
fused_recurrent_gated_delta_rule at the shapes of bench/bench_gdn_recurrent.cpp
(BM_GdnRecurrentStep/batch:1 and /batch:32): H = 32 value heads, Hg = 16 key
heads, K = V = 128, one new token per sequence, bf16 q/k/v, f32 state
[N, H, K, V], q/k L2 norm in the kernel, output_final_state=True.

FLA is not installed on the GPU machine: carry a checkout (never committed)
as .peers/fla (or .peers/flash-linear-attention), or point FLA_PATH / --fla at
the folder that holds its `fla/` package:
    python3 bench/compare/gdn_recurrent_fla.py [--fla .peers/fla] [--reps 1000]

GPU microseconds per call, both from CUDA events around many calls after a
warm-up that also runs Triton's autotuner:
  events  plain calls back to back (launch overhead and FLA's host-side work
          included wherever they exceed the kernel time)
  graph   the same calls captured in one CUDA graph, replayed
Inputs rotate among copies (at least 64 MiB of state in all) so that the
state is not served from L2 between calls, as in our benchmark. FLA writes
a new final state each call (its API has no in-place update); the
allocation is part of the call. The memory floor quoted is the f32 state
read and written once at --bandwidth GB/s (the H100's measured copy rate by
default).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gdn_forward_fla import find_fla, fla_version, import_fla  # noqa: E402

SHAPES = [(1, 16, 32, 128, 128), (32, 16, 32, 128, 128)]  # N, Hg, H, K, V


def inputs(torch, F, N, Hg, H, K, V, gen):
    dev = "cuda"
    q = torch.randn(N, 1, Hg, K, device=dev, generator=gen).to(torch.bfloat16)
    k = torch.randn(N, 1, Hg, K, device=dev, generator=gen).to(torch.bfloat16)
    v = torch.randn(N, 1, H, V, device=dev, generator=gen).to(torch.bfloat16)
    g = F.logsigmoid(torch.rand(N, 1, H, device=dev, generator=gen)).float()
    beta = torch.rand(N, 1, H, device=dev, generator=gen).sigmoid().float()
    h0 = torch.randn(N, H, K, V, device=dev, generator=gen) * 0.1
    return q, k, v, g, beta, h0


def time_events(torch, calls, reps):
    for fn in calls:  # warm-up (autotuning included)
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(reps):
        calls[i % len(calls)]()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) * 1e3 / reps


def time_graph(torch, calls, reps):
    """Microseconds per call replaying one graph of all the rotated calls, or the reason it failed."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for fn in calls:
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for fn in calls:
                fn()
        for _ in range(3):
            graph.replay()
        replays = max(1, reps // len(calls))
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(replays):
            graph.replay()
        stop.record()
        torch.cuda.synchronize()
        return start.elapsed_time(stop) * 1e3 / (replays * len(calls)), None
    except Exception as exc:  # report, do not hide
        torch.cuda.synchronize()
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fla", default=None, help="folder holding FLA's fla/ package")
    ap.add_argument("--reps", type=int, default=1000, help="calls per timing")
    ap.add_argument("--bandwidth", type=float, default=2988.0, help="copy bandwidth in GB/s for the floor")
    ap.add_argument("--dispatch", action="store_true", help="let FLA pick its optional backends")
    args = ap.parse_args()
    root = find_fla(args.fla)
    if root is None:
        print("[fla gdn recurrent] FLA not found: carry .peers/fla or set FLA_PATH")
        return 1
    if not args.dispatch:
        os.environ["FLA_DISABLE_BACKEND_DISPATCH"] = "1"  # read when fla.ops.backends is imported
    import torch
    import torch.nn.functional as F
    import triton
    try:
        _, recurrent_gdr = import_fla(root)
    except Exception as exc:  # report, do not hide
        print(f"[fla gdn recurrent] import failed: {type(exc).__name__}: {exc}")
        return 1
    print(f"device: {torch.cuda.get_device_name()} | torch {torch.__version__} | triton {triton.__version__} | "
          f"fla {fla_version(root)} from {root}")
    print(f"{'shape':<40} {'sets':>4} {'events us':>10} {'graph us':>10} {'floor us':>9} {'floor/graph':>11}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    with torch.no_grad():
        for N, Hg, H, K, V in SHAPES:
            state_bytes = N * H * K * V * 4
            sets = max(1, min(64, -(-64 * 2**20 // state_bytes)))
            calls = []
            for _ in range(sets):
                q, k, v, g, beta, h0 = inputs(torch, F, N, Hg, H, K, V, gen)
                calls.append(lambda q=q, k=k, v=v, g=g, beta=beta, h0=h0: recurrent_gdr(
                    q, k, v, g, beta, scale=K ** -0.5, initial_state=h0, output_final_state=True,
                    use_qk_l2norm_in_kernel=True))
            ev = time_events(torch, calls, args.reps)
            gr, why = time_graph(torch, calls, args.reps)
            floor = 2 * state_bytes / (args.bandwidth * 1e3)
            shape = f"batch={N} T=1 Hg={Hg} H={H} K={K} V={V}"
            gtext = f"{gr:10.1f}" if gr is not None else f"{'failed':>10}"
            ratio = f"{floor / gr:11.2f}" if gr is not None else f"{'-':>11}"
            print(f"{shape:<40} {sets:>4} {ev:10.1f} {gtext} {floor:9.1f} {ratio}")
            if why:
                print(f"  graph: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
