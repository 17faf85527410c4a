#!/usr/bin/env python3
"""PyTorch's causal prompt attention as a same-run baseline for `lamina kbench attn`.

Times torch.nn.functional.scaled_dot_product_attention (f16, causal, GQA) with each fused
backend PyTorch offers on this GPU (FlashAttention-2, cuDNN), on the head shape kbench attn
uses by default (32 query heads, 8 KV heads, head_dim 128), and prints the same table columns:
median µs over CUDA events, TFLOP/s = 4 x head_dim x n_head x T (T + 1) / 2 / time.
Developer tool: needs PyTorch with CUDA (the GPU machine has it); not part of the build.
"""
import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_us(fn, reps):
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="1024,4096,8192,16384")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; heads {a.heads} / {a.kv_heads}, "
          f"head_dim {a.head_dim}, causal")
    print("| tokens | backend | µs | TFLOP/s |\n|---|---|---|---|")
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    for t in (int(x) for x in a.lengths.split(",")):
        q = torch.randn(1, a.heads, t, a.head_dim, device="cuda", dtype=torch.float16)
        k = torch.randn(1, a.kv_heads, t, a.head_dim, device="cuda", dtype=torch.float16)
        v = torch.randn(1, a.kv_heads, t, a.head_dim, device="cuda", dtype=torch.float16)
        # GQA as the kernels see it: the KV heads repeated (enable_gqa is not taken by every backend)
        kr = k.repeat_interleave(a.heads // a.kv_heads, dim=1)
        vr = v.repeat_interleave(a.heads // a.kv_heads, dim=1)
        flops = 4.0 * a.head_dim * a.heads * t * (t + 1) / 2.0
        for name, backend in backends:
            try:
                with sdpa_kernel([backend]):
                    us = time_us(lambda: F.scaled_dot_product_attention(q, kr, vr, is_causal=True), a.reps)
            except RuntimeError as e:
                print(f"| {t} | {name} | - | not available ({str(e).splitlines()[0][:60]}) |")
                continue
            print(f"| {t} | {name} | {us:.1f} | {flops / (us * 1e6):.1f} |")


if __name__ == "__main__":
    main()
