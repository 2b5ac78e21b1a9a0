"""Mixed per-slot lengths on the H200 (issue 32, point 3): per-slot caches whose slots hold skewed lengths
(most short, a few long), the serving case. Ours reads each slot's own keys (cache_seqlens on the
device); what it should approach is the copy rate over the bytes it actually reads.

Rows: GQA 28/4 (Qwen2-7B) and 32/8 (Llama-3-8B), head_dim 128, fp16; B in {16, 32, 64}; each batch's
lengths seeded: a quarter of the slots long (8k-16k keys), the rest short (256-2k). The per-slot cache
holds 16k + 64 keys a slot (its capacity: the plan's bound). Cold L2 as in bench_families.py (copies read
in turn where the read bytes are under 3 x L2), CUDA-graph replay, best of --reps.
  ours_slot    decode_attention_cuda over the per-slot cache with cache_seqlens (default options: balanced off)
  ours_off     the same, options set explicitly to the default (DecodeOptions::balance = 0): the plain plan
  ours_rule    the same with balanced splits by the rule (DecodeOptions::balance = -1, kBalanceRule: on its
               shapes balanced splits, and where the plain grid is larger than the SMs a grid that holds the
               plain plan too, its blocks choosing by the lengths)
  chose_<v>    which grid a balanced grid's blocks took (the split size they left in the workspace; plain: 0)
  ours_sk<K>   the same with fixed splits of K keys from key 0 (--split-keys K,...; DecodeOptions::split_keys):
               an entry's own length then sets how many of its blocks do work, on the device
  ours_bal<N>  the same with balanced splits forced, a budget of N blocks an SM (--balance N,...;
               DecodeOptions::balance): each entry's keys cut by its own length on the device
  ours_bal<N>w8  the same with blocks of 8 warps (--balance-w8 N,...; DecodeOptions::mma_warps = 8: one
               block an SM resident, so a budget of N an SM runs in N waves)
  ours_rule<N> the default (the rule, the device choosing) with a budget of N blocks an SM (--rule-blocks N,...;
               DecodeOptions::balance_blocks_per_sm) instead of the rule's own by shape
  ours_rule_mw, ours_rule_mn  the rule with the wide merge kernel forced on / off (--merge-wide;
               DecodeOptions::merge_wide = 1 / -1; a plan's text ends in " mw" where it merges wide)
  sdpa_<be>    SDPA (cudnn, flash) over K/V padded to the batch's longest slot, no mask: a timing
               yardstick only (it reads and computes the padding, as a padded batch does)
read GB/s: bytes of K+V in the slots' own lengths / time; % of copy: against a 1 GiB device-to-device copy
(read + write) in the same process. The goal of point 3: >= 80% of copy.
--uniform N1,...: rows whose slots all hold N keys (same bound), what the variants cost where lengths do not vary,
at the batches of --uniform-batches (default 16,32,64). --capi: the kernels from build/spec_capi/libpvt_spec.so
(spec_capi_build.sh, built without a GPU and carried: nothing compiled here) instead of the extension.
Usage: python3 tests/gpu/bench_mixed.py OUT.json [--reps N] [--split-keys K1,...] [--balance N1,...]
       [--balance-w8 N1,...] [--rule-blocks N1,...] [--merge-wide] [--uniform N1,...] [--uniform-batches B1,...]
       [--capi]
"""
import json
import random
import sys
import time

import torch
from torch.nn.attention import SDPBackend

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_attention import Rotation, best_replay, capture_rotating, copy_rate, knob_call, rotating_sdpa  # noqa: E402

SHAPES = (("qwen2_7b", 28, 4, 128), ("llama3_8b", 32, 8, 128))
BACKENDS = (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION))
SMAX = 16384 + 64


def lengths(B, seed):
    """A quarter of the slots long (8k-16k keys), the rest short (256-2k), in a seeded order."""
    rng = random.Random(seed)
    n_long = max(1, B // 4)
    lens = [rng.randint(8192, 16384) for _ in range(n_long)] + [rng.randint(256, 2048) for _ in range(B - n_long)]
    rng.shuffle(lens)
    return lens


def row(ext, fam, hq, hkv, D, B, l2, copy_gbs, reps, variants, uniform=None):
    dt = torch.float16
    lens = [uniform] * B if uniform else lengths(B, seed=B * 100 + hkv)
    read_bytes = 2 * sum(lens) * hkv * D * 2
    n = min(8, -(-3 * l2 // read_bytes)) if read_bytes < 3 * l2 else 1
    est_us = read_bytes / 3.5e6 + 8
    iters = n * max(1, -(-int(max(3, min(100, 2000 / est_us))) // n))
    r = {"family": fam + (f"_uniform{uniform}" if uniform else ""), "q_heads": hq, "kv_heads": hkv, "head_dim": D, "B": B, "lens_mean": round(sum(lens) / B),
         "lens_max": max(lens), "read_mib": round(read_bytes / 2**20, 1), "copies": n, "iters": iters}
    q = torch.randn(B, hq, 1, D, device="cuda", dtype=dt)
    qo = q.transpose(1, 2)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    kl, vl = [], []
    for _ in range(n):  # [B, SMAX, Hkv, D] slots seen as the logical [SMAX, B, Hkv, D]
        kl.append(torch.randn(B, SMAX, hkv, D, device="cuda", dtype=dt).transpose(0, 1))
        vl.append(torch.randn(B, SMAX, hkv, D, device="cuda", dtype=dt).transpose(0, 1))
    out = {"ours_slot": torch.empty(B, 1, hq, D, device="cuda", dtype=dt)}
    rot = Rotation(n)
    fns, chosen = {}, {}
    for name, opts in [("ours_slot", {})] + variants:  # each planned (and captured) under its options
        out.setdefault(name, torch.empty(B, 1, hq, D, device="cuda", dtype=dt))
        ext.set_decode_options(**opts)
        pl = ext.plan(qo, kl[0], vl[0], out[name], SMAX, seqlens)
        r["plan_" + name] = (f"{pl['kernel']} t{pl['mma_tiles']} w{pl['mma_warps']} s{pl['splits']}"
                             + (" cl" if pl["cluster"] else "")
                             + (f" bal{pl['balance_grid']}" if pl.get("balance_grid") else "")
                             + (f" plain{pl['balance_plain_splits']}" if pl.get("balance_plain_splits") else "")
                             + (" mw" if pl.get("merge_wide") else ""))
        ws = torch.empty(max(1, ext.workspace_bytes(qo, kl[0], vl[0], out[name], SMAX, seqlens)), dtype=torch.uint8,
                         device="cuda")
        if pl.get("balance_grid") and pl["splits"] > 1:  # the split size the blocks leave after the partials
            chosen[name] = (ws, pl["splits"] * B * hq * (D + 2) * 4)
        ext.set_decode_options()
        fns[name] = knob_call(ext, opts, lambda o=out[name], w=ws: ext.attention(
            qo, kl[rot.next()], vl[rot.turn], o, SMAX, w, seqlens))
    # Padded SDPA: [B, Hkv, max_len, D] views of the same slots (the padding holds other keys: timing only).
    kp = [x[:max(lens)].permute(1, 2, 0, 3) for x in kl]
    vp = [x[:max(lens)].permute(1, 2, 0, 3) for x in vl]
    for name, be in BACKENDS:
        fns["sdpa_" + name] = rotating_sdpa(rot, q, kp, vp, be, hq != hkv)
    graphs = capture_rotating(fns, rot, iters, out, None, r)
    best = best_replay(graphs, reps, iters)
    for name in graphs:
        r[name + "_us"] = round(best[name], 2)
    for name, (ws, at) in chosen.items():  # which grid the blocks took: 0 the plain plan, else the split size
        c = int(ws[at:at + 4].view(torch.int32).item())
        r["chose_" + name] = "plain" if c == 0 else f"balanced {c * 128} keys"
    for name in out:  # every variant's last call read the same copy: its output against the plan before balancing
        if name != "ours_off" and "ours_off" in out:
            r["maxdiff_" + name] = float((out[name].float() - out["ours_off"].float()).abs().max())
    if "ours_slot" in best:
        r["read_gbs"] = round(read_bytes / best["ours_slot"] / 1e3)
        r["pct_copy"] = round(100 * r["read_gbs"] / copy_gbs, 1)
    for name, _ in variants:
        if name in best:
            r["pct_copy_" + name[5:]] = round(100 * read_bytes / best[name] / 1e3 / copy_gbs, 1)
    sdpa = [(best[x], x) for x in graphs if x.startswith("sdpa_")]
    if sdpa and "ours_slot" in best:
        r["sdpa_padded_best"], r["sdpa_padded_us"] = min(sdpa)[1], round(min(sdpa)[0], 2)
        r["ours_vs_padded"] = round(best["ours_slot"] / min(sdpa)[0], 3)
    del graphs, fns, kl, vl, kp, vp
    torch.cuda.empty_cache()
    return r


def ints(flag):
    return [int(x) for x in sys.argv[sys.argv.index(flag) + 1].split(",")] if flag in sys.argv else []


def main():
    out_path = sys.argv[1]
    reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 3
    variants = ([("ours_off", {"balance": 0}), ("ours_rule", {"balance": -1})]
                + [(f"ours_sk{k}", {"split_keys": k}) for k in ints("--split-keys")]
                + [(f"ours_bal{n}", {"balance": n}) for n in ints("--balance")]
                + [(f"ours_bal{n}w8", {"balance": n, "mma_warps": 8}) for n in ints("--balance-w8")]
                + [(f"ours_rule{n}", {"balance": -1, "balance_blocks_per_sm": n}) for n in ints("--rule-blocks")]
                + ([("ours_rule_mw", {"balance": -1, "merge_wide": 1}), ("ours_rule_mn", {"balance": -1, "merge_wide": -1})]
                   if "--merge-wide" in sys.argv else []))
    uniform, uniform_batches = ints("--uniform"), ints("--uniform-batches") or [16, 32, 64]
    if "--capi" in sys.argv:
        from pvt_capi import CApi
        ext = CApi()
    else:
        import build
        ext = build.load()
    torch.manual_seed(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    copy_gbs = copy_rate()
    head = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "d2d_copy_gbs": round(copy_gbs),
            "reps": reps, "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    rows = []
    for fam, hq, hkv, D in SHAPES:
        for B, u in [(B, None) for B in (16, 32, 64)] + [(B, u) for u in uniform for B in uniform_batches]:
            r = row(ext, fam, hq, hkv, D, B, l2, copy_gbs, reps, variants, u)
            rows.append(r)
            print(json.dumps(r), flush=True)
    head["rows"] = rows
    with open(out_path, "w") as f:
        json.dump(head, f, indent=1)


if __name__ == "__main__":
    main()
