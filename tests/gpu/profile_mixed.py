"""One skewed per-slot batch of bench_mixed.py (the same seeded lengths), called twice under each of a few
DecodeOptions::balance values, for a profiler to attach to (ncu --kernel-name regex:'decode_attention|merge'):
what the main kernel and the merge kernel take each, apart. The order of the calls is printed first, so that
the profiler's rows can be matched to their options.
Usage: python3 tests/gpu/profile_mixed.py HQ HKV B [--balance N1,N2,...] [--uniform N] [--capi]
  (--balance: default -1,0,4: the rule, off, 4 blocks an SM forced; --uniform N: every slot N keys instead)
"""
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_mixed import SMAX, lengths  # noqa: E402


def main():
    hq, hkv, B = (int(x) for x in sys.argv[1:4])
    balances = ([int(x) for x in sys.argv[sys.argv.index("--balance") + 1].split(",")]
                if "--balance" in sys.argv else [-1, 0, 4])
    if "--capi" in sys.argv:
        from pvt_capi import CApi
        ext = CApi()
    else:
        import build
        ext = build.load()
    D, dt = 128, torch.float16
    uniform = int(sys.argv[sys.argv.index("--uniform") + 1]) if "--uniform" in sys.argv else 0
    lens = [uniform] * B if uniform else lengths(B, seed=B * 100 + hkv)
    q = torch.randn(B, 1, hq, D, device="cuda", dtype=dt)
    k, v = (torch.randn(B, SMAX, hkv, D, device="cuda", dtype=dt).transpose(0, 1) for _ in range(2))
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out = torch.empty_like(q)
    for n in balances:
        ext.set_decode_options(balance=n, balance_span=int("--span" in sys.argv and n > 0))
        pl = ext.plan(q, k, v, out, SMAX, seqlens)
        ws = torch.empty(max(1, ext.workspace_bytes(q, k, v, out, SMAX, seqlens)), dtype=torch.uint8, device="cuda")
        print(f"balance {n}: plan {pl}, 2 calls", flush=True)
        for _ in range(2):
            ext.attention(q, k, v, out, SMAX, ws, seqlens)
        torch.cuda.synchronize()
    ext.set_decode_options()


if __name__ == "__main__":
    main()
