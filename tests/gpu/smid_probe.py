"""Diagnostic (branch smid, not for main): where the tensor-core decode kernel's blocks run and for how long,
from a build of libpvt_spec.so with -DPVT_DEBUG_SMID (each working block printf's its SM id, its work and its
%globaltimer start and end). Question (docs/H200_DECODE_PARITY.md, point 3 section): do the plain plan's
blocks, run inside the balanced rule's grid of two blocks an SM, share SMs (and so run slower) where the plain
plan's own launch gives each its own SM?
Usage: EXTRA_NVCC_FLAGS=-DPVT_DEBUG_SMID bash tests/gpu/spec_capi_build.sh (off the GPU machine), then
python3 tests/gpu/smid_probe.py > smid.txt; python3 tests/gpu/smid_probe.py --parse smid.txt"""
import collections
import ctypes
import random
import sys

SMAX = 16384 + 64
CASES = [  # name, q heads, kv heads, B, lengths ("u4096" or "skewed"), DecodeOptions
    ("qwen2_b16_u4096_plain", 28, 4, 16, "u4096", {"balance": 0}),
    ("qwen2_b16_u4096_rule", 28, 4, 16, "u4096", {"balance": -1}),
    ("llama3_b16_u4096_plain", 32, 8, 16, "u4096", {"balance": 0}),
    ("llama3_b16_u4096_rule", 32, 8, 16, "u4096", {"balance": -1}),
    ("qwen2_b16_skewed_rule", 28, 4, 16, "skewed", {"balance": -1}),
    ("qwen2_b64_u4096_rule", 28, 4, 64, "u4096", {"balance": -1}),
]

# Round 2: is the balanced grid's equal-length cost its shape (twice the blocks, two an SM) or its logic?
CASES2 = [(f"{fam}_b16_u4096_{tag}", hq, hkv, 16, "u4096", opts)
          for fam, hq, hkv in (("qwen2", 28, 4), ("llama3", 32, 8))
          for tag, opts in (("plain", {"balance": 0}), ("splitkeys1024", {"split_keys": 1024}),
                            ("bps2", {"mma_blocks_per_sm": 2}), ("bal1", {"balance": 1}), ("rule", {"balance": -1}))]


def lengths(B, kind, hkv):
    if kind.startswith("u"):
        return [int(kind[1:])] * B
    rng = random.Random(B * 100 + hkv)  # bench_mixed.py's skewed lengths
    n_long = max(1, B // 4)
    lens = [rng.randint(8192, 16384) for _ in range(n_long)] + [rng.randint(256, 2048) for _ in range(B - n_long)]
    rng.shuffle(lens)
    return lens


def run():
    import torch
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from pvt_capi import CApi
    ext = CApi()
    libc = ctypes.CDLL(None)
    D, dt = 128, torch.float16
    for name, hq, hkv, B, kind, opts in (CASES2 if "--round2" in sys.argv else CASES):
        lens = lengths(B, kind, hkv)
        q = torch.randn(B, hq, 1, D, device="cuda", dtype=dt).transpose(1, 2)
        k = torch.randn(B, SMAX, hkv, D, device="cuda", dtype=dt).transpose(0, 1)
        v = torch.randn(B, SMAX, hkv, D, device="cuda", dtype=dt).transpose(0, 1)
        out = torch.empty(B, 1, hq, D, device="cuda", dtype=dt)
        seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
        ext.set_decode_options(**opts)
        pl = ext.plan(q, k, v, out, SMAX, seqlens)
        ws = torch.empty(max(1, ext.workspace_bytes(q, k, v, out, SMAX, seqlens)), dtype=torch.uint8, device="cuda")
        for rep in range(3):  # the last of three calls is the one read
            sys.stdout.flush()
            print(f"CASE {name} rep {rep} plan {pl}", flush=True)
            ext.attention(q, k, v, out, SMAX, ws, seqlens)
            torch.cuda.synchronize()
            libc.fflush(None)
        ext.set_decode_options()
        del q, k, v, out, ws
        torch.cuda.empty_cache()


def parse(path):
    cases, cur = collections.OrderedDict(), None
    for line in open(path):
        if line.startswith("CASE "):
            parts = line.split()
            cur = parts[1]
            cases[cur] = {"plan": line.split(" plan ", 1)[1].strip(), "blocks": []}
        elif line.startswith("SMID ") and cur is not None:
            f = line.split()
            cases[cur]["blocks"].append({"x": int(f[2]), "y": int(f[3]), "sm": int(f[5]), "bal": int(f[7]),
                                         "plain": int(f[9]), "keys": int(f[15]), "t0": int(f[17]), "t1": int(f[19])})
    for name, c in cases.items():
        bl = [b for b in c["blocks"] if b["keys"] > 0]
        if not bl:
            print(name, "no working blocks")
            continue
        start = min(b["t0"] for b in bl)
        span = (max(b["t1"] for b in bl) - start) / 1e3
        per_sm = collections.defaultdict(list)
        for b in bl:
            per_sm[b["sm"]].append(b)
        overlapped = []  # blocks that shared their SM with another working block at some time
        for blocks in per_sm.values():
            for b in blocks:
                if any(o is not b and o["t0"] < b["t1"] and b["t0"] < o["t1"] for o in blocks):
                    overlapped.append(b)
        dur = lambda bs: sorted((b["t1"] - b["t0"]) / 1e3 for b in bs)
        solo = [b for b in bl if b not in overlapped]
        med = lambda xs: xs[len(xs) // 2] if xs else float("nan")
        print(f"{name}: {c['plan']}")
        print(f"  working blocks {len(bl)} on {len(per_sm)} SMs; SMs with 2+ working blocks "
              f"{sum(len(v) > 1 for v in per_sm.values())}; blocks that overlapped another on their SM {len(overlapped)}")
        print(f"  kernel span {span:.1f} us; block us median solo {med(dur(solo)):.1f} (n={len(solo)}), "
              f"overlapped {med(dur(overlapped)):.1f} (n={len(overlapped)}); plain-mode blocks "
              f"{sum(b['plain'] for b in bl)}; keys per block min/median/max "
              f"{min(b['keys'] for b in bl)}/{med(sorted(b['keys'] for b in bl))}/{max(b['keys'] for b in bl)}")
        first = sorted(bl, key=lambda b: (b["y"], b["x"]))[:12]
        print("  first blocks (x.y->sm): " + " ".join(f"{b['x']}.{b['y']}->{b['sm']}" for b in first))


if __name__ == "__main__":
    if "--parse" in sys.argv:
        parse(sys.argv[sys.argv.index("--parse") + 1])
    else:
        run()
