# SPDX-License-Identifier: MIT
"""Peer timing for gdn.recompute_wu: flash-linear-attention's Triton
recompute_w_u_fwd (fla/ops/gated_delta_rule/wy_fast.py) on the same GPU, at
the shapes of bench/bench_recompute_wu.cpp.

FLA is not installed on the GPU machine: carry a checkout's `fla/` package
(never committed) and point FLA_PATH at the folder that holds it, e.g.
  FLA_PATH=.peers/rwu python3 bench/compare/gdn_recompute_wu_fla.py
Times are medians of CUDA-event timings (triton.testing.do_bench), after
FLA's autotuning. A is timed in bf16, as FLA's chunked pipeline passes it
in practice, and in f32 as our kernel takes it by default (recent FLA
refuses f32 A: its dot wants A in v's dtype). Recent FLA also reads g in
log2 units (exp2); the timing does not depend on it. The floor column uses the
same byte count as our benchmark (each tensor once, A as timed) and the
copy bandwidth measured here by a device-to-device copy.
"""
import importlib
import os
import sys
import types

import torch
import triton.testing

SHAPES = [(1, 8192, 16, 32, 128, 128), (8, 2048, 16, 32, 128, 128)]  # B, T, Hg, H, K, V
BT = 64


def import_fla():
    root = os.environ.get("FLA_PATH") or next((p for p in (".peers/rwu", ".peers/fla") if os.path.isdir(p)), ".")
    sys.path.insert(0, root)
    try:
        return importlib.import_module("fla.ops.gated_delta_rule.wy_fast")
    except Exception as exc:  # optional model dependencies missing: skip the package __init__ files
        print(f"# plain import failed ({exc!r}); importing the kernel module alone")
        for name in ("fla", "fla.ops", "fla.ops.gated_delta_rule"):
            sys.modules.pop(name, None)
            mod = types.ModuleType(name)
            mod.__path__ = [os.path.join(root, *name.split("."))]
            sys.modules[name] = mod
        return importlib.import_module("fla.ops.gated_delta_rule.wy_fast")


def copy_bandwidth():
    x = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms = triton.testing.do_bench(lambda: y.copy_(x), warmup=20, rep=200, return_mode="median")
    return 2 * x.numel() / (ms * 1e-3)


def main():
    wy = import_fla()
    torch.manual_seed(0)
    bw = copy_bandwidth()
    print(f"device: {torch.cuda.get_device_name()}  copy bandwidth {bw * 1e-9:.0f} GB/s (read + write)")
    print(f"{'B':>2} {'T':>5} {'Hg':>3} {'H':>3} {'A':>5} {'fla_us':>8} {'floor_us':>9} {'floor/time':>10}")
    for B, T, Hg, H, K, V in SHAPES:
        k = torch.randn(B, T, Hg, K, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(B, T, H, V, device="cuda", dtype=torch.bfloat16)
        beta = torch.rand(B, T, H, device="cuda", dtype=torch.float32)
        g = -torch.rand(B, T, H, device="cuda", dtype=torch.float32).cumsum(1) * 0.3
        A = torch.randn(B, T, H, BT, device="cuda", dtype=torch.float32).tril() * 0.1
        for a_dtype in (torch.bfloat16, torch.float32):
            a = A.to(a_dtype)
            fn = lambda: wy.recompute_w_u_fwd(k=k, v=v, beta=beta, A=a, g=g)  # noqa: E731
            name = "bf16" if a_dtype == torch.bfloat16 else "f32"
            try:
                fn()
            except Exception as exc:  # this FLA version may require A in the dtype of v
                print(f"{B:>2} {T:>5} {Hg:>3} {H:>3} {name:>5} not supported by this FLA: {str(exc).splitlines()[-1]}")
                continue
            torch.cuda.synchronize()
            ms = triton.testing.do_bench(fn, warmup=50, rep=500, return_mode="median")
            a_bytes = 2 if a_dtype == torch.bfloat16 else 4
            nbytes = B * T * (Hg * K * 2 + H * (V * 2 + 4 + 4 + BT * a_bytes + K * 2 + V * 2))
            floor = nbytes / bw
            print(f"{B:>2} {T:>5} {Hg:>3} {H:>3} {name:>5} {ms * 1e3:>8.1f} {floor * 1e6:>9.1f} {floor / (ms * 1e-3):>10.2f}")


if __name__ == "__main__":
    main()
