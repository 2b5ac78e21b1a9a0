"""cuDNN's decode attention on the float16 cache of the shapes tests/native/test_kv_quant.cu times for
the 8-bit caches (Llama-3-8B GQA 32/8 and Llama-2-7B MHA 32/32, head_dim 128, B 1/8/32, S 4k-64k,
one query token): PyTorch SDPA with the cuDNN backend on contiguous [B, H, S, D], CUDA-graph replay,
each call reading another copy of K/V (the copies together at least 3x the L2: cold), best of 3.
Usage: python3 tests/gpu/bench_quant_cudnn.py [--batch B] [--min-iters N]  (prints one "CUDNN model B S us GBps"
line a row; --batch: the rows of that batch only; --min-iters: at least N calls a graph, default 8, as
test_kv_quant_cuda's --min-iters)."""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def graph_us(call, copies, iters):
    call(0)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(iters):
            call(i % copies)
    best = float("inf")
    for _ in range(3):
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) * 1e3 / iters)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--min-iters", type=int, default=8)
    args = ap.parse_args()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print("CUDNN model B S us GBps", flush=True)
    hq, d = 32, 128
    for hkv in (8, 32):
        for b in (1, 8, 32):
            if args.batch and b != args.batch:
                continue
            for s in (4096, 16384, 32768, 65536):
                kv_bytes = 2 * b * hkv * s * d * 2
                if kv_bytes > 48 * 2**30:
                    continue
                copies = min(8, max(1, -(-3 * l2 // (kv_bytes // 2))))
                iters = max(args.min_iters, min(100, int(2e9 / kv_bytes)))
                q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.float16)
                k = [torch.randn(b, hkv, s, d, device="cuda", dtype=torch.float16) for _ in range(copies)]
                v = [torch.randn_like(k[0]) for _ in range(copies)]

                def call(i):
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        return F.scaled_dot_product_attention(q, k[i], v[i], enable_gqa=hkv != hq)
                us = graph_us(call, copies, iters)
                name = "llama3-8b-gqa" if hkv == 8 else "llama2-7b-mha"
                print(f"CUDNN {name} {b} {s} {us:.1f} {kv_bytes / us / 1e3:.0f}", flush=True)
                del k, v
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
