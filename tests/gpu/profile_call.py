"""One decode-attention shape called a few times, for a profiler to attach to (ncu --kernel-name ...):
per-slot cache [B, S + 64, Hkv, D] with cache_seqlens (as bench_families.py's ours_slot), fp16, the plan
printed first. --sdpa cudnn|flash: then the same shape through that SDPA backend ([B, Hkv, S, D] K/V, GQA
broadcast), so that one profile holds both.
Usage: python3 tests/gpu/profile_call.py HQ HKV D B S [--calls N] [--row-tiles 1|2|4|8] [--row-warps -1|2|4|8]
       [--sdpa cudnn|flash] [--knob NAME=INT ...] (any DecodeOptions field, e.g. mma_warps=4 splits=16)
       [--capi (the kernels from build/spec_capi/libpvt_spec.so, pvt_capi.py, instead of the torch extension)]
"""
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import build  # noqa: E402
from bench_attention import knob_set, per_slot  # noqa: E402


def main():
    hq, hkv, D, B, S = (int(x) for x in sys.argv[1:6])
    calls = int(sys.argv[sys.argv.index("--calls") + 1]) if "--calls" in sys.argv else 3
    knobs = {"mma_row_tiles": int(sys.argv[sys.argv.index("--row-tiles") + 1])} if "--row-tiles" in sys.argv else {}
    if "--row-warps" in sys.argv:  # DecodeOptions::mma_row_warps (-1: the key-slice tensor-core kernel)
        knobs["mma_row_warps"] = int(sys.argv[sys.argv.index("--row-warps") + 1])
    for i, a in enumerate(sys.argv):
        if a == "--knob":
            name, value = sys.argv[i + 1].split("=")
            knobs[name] = int(value)
    if "--capi" in sys.argv:
        from pvt_capi import CApi
        ext = CApi()
    else:
        ext = build.load()
    dt = torch.float16
    q = torch.randn(B, 1, hq, D, device="cuda", dtype=dt)
    k, v = (per_slot(torch.randn(B, hkv, S, D, device="cuda", dtype=dt), S + 64) for _ in range(2))
    lens = torch.full((B,), S - 1, dtype=torch.int32, device="cuda")
    out = torch.empty_like(q)
    with knob_set(ext, **knobs):
        print("plan", ext.plan(q, k, v, out, S + 64, lens), flush=True)
        ws = torch.empty(max(1, ext.workspace_bytes(q, k, v, out, S + 64, lens)), dtype=torch.uint8, device="cuda")
        for _ in range(calls):
            ext.attention(q, k, v, out, S + 64, ws, lens)
    if "--sdpa" in sys.argv:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[
            sys.argv[sys.argv.index("--sdpa") + 1]]
        qs = q.transpose(1, 2)
        ks, vs = (torch.randn(B, hkv, S, D, device="cuda", dtype=dt) for _ in range(2))
        with sdpa_kernel(be):
            for _ in range(calls):
                torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, enable_gqa=hkv != hq)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
