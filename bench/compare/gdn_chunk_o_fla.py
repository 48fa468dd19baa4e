#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""FLA's Triton chunk_fwd_o on this GPU, at the shapes of bench/bench_chunk_o.cpp.

Run on the GPU machine (python3 with torch and triton), with FLA's `fla/`
package on the path, e.g. carried to the device in an ignored folder:
    python3 bench/compare/gdn_chunk_o_fla.py --fla .peers
Prints one line per shape: FLA time per call (CUDA events around N
back-to-back calls after a warm-up that also runs Triton's autotuner) and
the bytes moved counting each tensor once, as our benchmark counts them.
h is passed as [B, NT, H, V, K] (state_v_first) where FLA supports it, the
layout tilekernels uses; g is a chunk-local cumulative gate.
"""
import argparse
import inspect
import os
import sys

SHAPES = [(1, 8192, 16, 32, 128, 128), (8, 2048, 16, 32, 128, 128)]  # B, T, Hg, H, K, V
BT = 64


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fla", default=".peers", help="folder holding the fla/ package")
    ap.add_argument("--reps", type=int, default=100)
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.fla))
    import torch
    try:
        from fla.ops.common.chunk_o import chunk_fwd_o
    except Exception as e:  # report, do not hide: the table then lacks FLA
        print(f"[fla chunk_fwd_o] import failed: {type(e).__name__}: {e}")
        return 1
    dev = torch.device("cuda")
    print(f"[fla chunk_fwd_o] device: {torch.cuda.get_device_name(dev)} | torch {torch.__version__}")
    v_first = "state_v_first" in inspect.signature(chunk_fwd_o).parameters
    for (B, T, Hg, H, K, V) in SHAPES:
        NT = (T + BT - 1) // BT
        gen = torch.Generator(device=dev).manual_seed(0)
        q = (torch.randn(B, T, Hg, K, device=dev, generator=gen) * 0.1).to(torch.bfloat16)
        k = (torch.randn(B, T, Hg, K, device=dev, generator=gen) * 0.1).to(torch.bfloat16)
        v = torch.randn(B, T, H, V, device=dev, generator=gen).to(torch.bfloat16)
        hshape = (B, NT, H, V, K) if v_first else (B, NT, H, K, V)
        h = (torch.randn(*hshape, device=dev, generator=gen) * 0.1).to(torch.bfloat16)
        steps = -torch.rand(B, T, H, device=dev, generator=gen) * 0.3
        g = steps.view(B, NT, BT, H).cumsum(2).view(B, T, H) if T % BT == 0 else steps.cumsum(1)
        g = g.float().contiguous()
        kwargs = dict(g=g, scale=K ** -0.5, chunk_size=BT)
        if v_first:
            kwargs["state_v_first"] = True
        for _ in range(10):
            o = chunk_fwd_o(q, k, v, h, **kwargs)
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.reps):
            o = chunk_fwd_o(q, k, v, h, **kwargs)
        stop.record()
        torch.cuda.synchronize()
        us = start.elapsed_time(stop) * 1e3 / args.reps
        nbytes = 2 * q.numel() * 2 + v.numel() * 2 + h.numel() * 2 + g.numel() * 4 + o.numel() * 2
        print(f"[fla chunk_fwd_o] B={B} T={T} Hg={Hg} H={H} K={K} V={V} h={'VK' if v_first else 'KV'}: "
              f"{us:8.1f} us  {nbytes / us * 1e-3:7.0f} GB/s  ({nbytes / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
