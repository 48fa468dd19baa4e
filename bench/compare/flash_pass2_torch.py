# SPDX-License-Identifier: MIT
"""Peer timing for aura.flash_pass2: the same split-K merge in PyTorch
(eager and torch.compile) on the same GPU, at the benchmark's shapes.

Times are medians of CUDA-event timings (triton.testing.do_bench), launch
included, with f32 partials and bf16 output as in bench_flash_pass2.cpp.
Usage (on the GPU machine): python3 bench/compare/flash_pass2_torch.py
"""
import torch
import triton.testing

SHAPES = [(32, 32, 128), (32, 256, 128), (64, 1024, 128), (32, 128, 256)]


def merge(o, m, l):
    valid = l != 0
    big_m = torch.where(valid, m, float("-inf")).amax(dim=1, keepdim=True)
    w = torch.where(valid, torch.exp(m - big_m), torch.zeros_like(m))
    big_l = (w * l).sum(dim=1, keepdim=True)
    out = (w.unsqueeze(-1) * o).sum(dim=1) / big_l
    return out.to(torch.bfloat16)


def main():
    torch.manual_seed(0)
    compiled = torch.compile(merge)
    print(f"device: {torch.cuda.get_device_name()}")
    print(f"{'q_heads':>8} {'blocks':>7} {'dim':>5} {'eager_us':>9} {'compile_us':>11}")
    for q, nb, dim in SHAPES:
        o = torch.randn(q, nb, dim, device="cuda")
        m = torch.rand(q, nb, device="cuda") * 16 - 8
        l = torch.rand(q, nb, device="cuda") + 0.5
        ref = merge(o, m, l)
        torch.testing.assert_close(compiled(o, m, l).float(), ref.float(), rtol=1e-2, atol=1e-2)
        eager = triton.testing.do_bench(lambda: merge(o, m, l), warmup=50, rep=300, return_mode="median")
        comp = triton.testing.do_bench(lambda: compiled(o, m, l), warmup=50, rep=300, return_mode="median")
        print(f"{q:>8} {nb:>7} {dim:>5} {eager * 1e3:>9.1f} {comp * 1e3:>11.1f}")


if __name__ == "__main__":
    main()
