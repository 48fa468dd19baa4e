# SPDX-License-Identifier: MIT
"""Peer timing for aura.encode: the same fused encode (norm, dense rotation,
Lloyd-Max codes by counting boundaries, bit packing at offset d*bits, norm
correction) in PyTorch eager and torch.compile on the same GPU, at the
benchmark's shapes (rows {8, 4096, 262144} x dim {128, 256}, 4 bits, bf16
input, f32 math).

Times are medians of CUDA-event timings (triton.testing.do_bench), launch
included. The rotation and the codebook need not be Lloyd-Max here (timing
only): a random orthogonal matrix from torch.linalg.qr and sorted normals
scaled by 1/sqrt(dim).
Usage (on the GPU machine): python3 bench/compare/encode_torch.py
"""
import torch
import triton.testing

SHAPES = [(8, 128), (4096, 128), (262144, 128), (8, 256), (4096, 256), (262144, 256)]
BITS = 4


def encode(x, rotation, boundaries, codebook):
    xf = x.float()
    norm = xf.norm(dim=1, keepdim=True)
    unit = xf / torch.where(norm > 0, norm, torch.ones_like(norm))
    rotated = unit @ rotation.T
    idx = (rotated.unsqueeze(-1) > boundaries).sum(-1).to(torch.int64)  # boundaries strictly exceeded
    recon = codebook[idx].norm(dim=1, keepdim=True)
    norms = torch.where(recon > 1e-30, norm / recon, norm).squeeze(1)
    # 4-bit codes: 8 per u32 word, coordinate d at bit 4*(d % 8) of word d // 8.
    rows, dim = idx.shape
    shifts = (torch.arange(8, device=x.device, dtype=torch.int64) * BITS)
    words = (idx.view(rows, dim // 8, 8) << shifts).sum(-1)
    return words.to(torch.int64).bitwise_and(0xFFFFFFFF).to(torch.int32), norms


def main():
    torch.manual_seed(0)
    compiled = torch.compile(encode)
    print(f"device: {torch.cuda.get_device_name()}")
    print(f"{'rows':>8} {'dim':>5} {'eager_us':>9} {'compile_us':>11}")
    for rows, dim in SHAPES:
        x = torch.randn(rows, dim, device="cuda").to(torch.bfloat16)
        q, _ = torch.linalg.qr(torch.randn(dim, dim, device="cuda", dtype=torch.float64))
        rotation = q.float().contiguous()
        codebook = torch.sort(torch.randn(2**BITS, device="cuda"))[0] / dim**0.5
        boundaries = (codebook[1:] + codebook[:-1]) / 2
        ref = encode(x, rotation, boundaries, codebook)
        got = compiled(x, rotation, boundaries, codebook)
        # Eager and compiled rotations round differently: a value on a boundary
        # may change its code (and that row's norm factor); allow a few.
        close = torch.isclose(got[1], ref[1], rtol=1e-4, atol=1e-4).float().mean().item()
        assert close > 0.999, f"compiled and eager norms disagree on {1 - close:.2%} of rows"
        eager = triton.testing.do_bench(lambda: encode(x, rotation, boundaries, codebook), warmup=50, rep=300,
                                        return_mode="median")
        comp = triton.testing.do_bench(lambda: compiled(x, rotation, boundaries, codebook), warmup=50, rep=300,
                                       return_mode="median")
        print(f"{rows:>8} {dim:>5} {eager * 1e3:>9.1f} {comp * 1e3:>11.1f}")


if __name__ == "__main__":
    main()
