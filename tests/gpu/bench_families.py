"""Decode attention per model family on the H200 (issue 32, point 2): ours against PyTorch's best SDPA
backend in one process, each call reading K/V that are not in L2, GPU time from CUDA-graph replay.

Families (q heads / kv heads, head_dim): Llama-2-7B 32/32 128, Llama-3-8B 32/8 128, Llama-3-70B 64/8
128, Qwen2-7B 28/4 128, Gemma 8/1 256, Falcon-7B 71/1 64, StarCoder 48/1 128, Phi-3 32/32 96, a 16/16
head_dim-64 model, an MQA 32/1 128 model. B in {1, 4, 16, 64}, S in {512, 2k, 8k, 32k} where K+V fit
--max-gib (per copy; the contenders hold three layouts of it), fp16 and bf16; then speculative verify, Tq
2-8 new tokens a sequence, for Llama-3-8B and Qwen2-7B.
  sdpa_<backend>  F.scaled_dot_product_attention on contiguous [B, H, S, D] (cudnn, flash, efficient;
                  enable_gqa where Hq != Hkv). Speculative rows: no mask (every query sees every key: the
                  same bytes, at most 8 of >= 2k keys more work); a backend that refuses a shape is noted.
  ours_seq        decode_attention_cuda over a seq-major cache [S, B, Hkv, D], kv_len = S
  ours_slot       the same over a per-slot cache [B, S + 64, Hkv, D] with cache_seqlens on the device
Cold L2: rows whose K+V are under 3 x L2 have ceil(3 x L2 / K+V) copies, read in turn (as a decode
step reads each layer's cache once); larger rows have one copy (they do not fit L2). Each contender:
`iters` calls captured in a CUDA graph, replayed; the best of --reps repetitions, contenders in a seeded
order each repetition. Each row records the plan of ours (plan_seq, plan_slot: kernel family, M-tiles,
warps, splits, cluster) and the header what the device says about each tensor-core instance (mma_probe).
GB/s: K+V bytes read once / time; % of copy: against a 1 GiB device-to-device
copy (read + write) in the same process. Outputs are checked against an fp32 reference (math SDPA;
bottom-right causal for speculative rows) on the first copy, where K/V repeated per query head stay
under 1 GiB.
Usage: python3 tests/gpu/bench_families.py OUT.json [--quick] [--reps N] [--max-gib G] [--dtypes fp16,bf16]
       [--only NAME,...] [--budget-s SECONDS] [--variants [NAME,...]] [--min-rows R (only rows of at least R
       query rows a kv head, q heads / kv heads x Tq: those a rule for large groups can touch)] [--max-rows R
       (only rows of at most R: the rest of a table that --min-rows R + 1 times with variants)]
       [--bs B:S,... (only these batch and length pairs, one-token rows)] [--capi (the kernels from
       build/spec_capi/libpvt_spec.so, pvt_capi.py: nothing compiled here; no mma_probe)]
"""
import json
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import build  # noqa: E402
from bench_attention import (Rotation, best_replay, capture_rotating, copy_rate, knob_call, knob_set,  # noqa: E402
                             per_slot, rotating_sdpa, seq_major)

FAMILIES = (("llama2_7b", 32, 32, 128), ("llama3_8b", 32, 8, 128), ("llama3_70b", 64, 8, 128),
            ("qwen2_7b", 28, 4, 128), ("gemma", 8, 1, 256), ("falcon_7b", 71, 1, 64), ("starcoder", 48, 1, 128),
            ("phi3", 32, 32, 96), ("mha16_d64", 16, 16, 64), ("mqa32", 32, 1, 128))
BACKENDS = (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION))
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def shapes():
    """(family, Hq, Hkv, D, B, S, Tq): the families the tensor-core kernel's new paths serve first (MQA,
    head_dim 256, a group of 7), then the speculative rows, then the rest (a time budget cuts the end)."""
    order = ("falcon_7b", "starcoder", "mqa32", "gemma", "qwen2_7b", "llama3_8b", "llama3_70b", "llama2_7b", "phi3",
             "mha16_d64")
    fams = sorted(FAMILIES, key=lambda f: order.index(f[0]))
    for i, (name, hq, hkv, d) in enumerate(fams):
        for B in (1, 4, 16, 64):
            for S in (512, 2048, 8192, 32768):
                yield name, hq, hkv, d, B, S, 1
        if i == 5:  # after Llama-3-8B: speculative verify for it and Qwen2-7B
            for sname, shq, shkv, sd in (f for f in FAMILIES if f[0] in ("llama3_8b", "qwen2_7b")):
                for B, S in ((4, 2048), (16, 8192)):
                    for tq in (2, 4, 8):
                        yield sname, shq, shkv, sd, B, S, tq


# Per-slot variants timed next to the default plan where their plan differs, with --variants (what a
# change of the planner is argued from): the merge kernel instead of a cluster, the row-per-warp kernel
# instead of tensor cores, and the tensor-core kernel's rows of a kv head in blocks of at most 1, 2 or 8
# M-tiles (_rt8: all in one block, the plan before row groups), 4, 8 or 16 splits forced (short calls),
# splits that fill two tensor-core blocks an SM (_b2), the key-slice tensor-core kernel where the plan takes the
# row-owning one (_ks: the plan before it), the row-owning kernel with 2, 4, 5 (head_dim 64) or 8 warps forced (_rw2/4/5/8;
# with 4 or 8 splits: _rw4s4, _rw5s4, _rw8s4, _rw8s8; a variant a shape has no kernel for is recorded as refused), and
# the wide merge kernel forced on (_mw) or off (_mn; a plan's text ends in " mw" where it merges wide), and
# 16 splits merged wide or 32 / 64 splits (wide past 16) where the plan takes a cluster or fewer (_s16mw,
# _s32, _s64; _rt2s32: the same with one block for 32 query rows), the tensor-core kernel for one row a kv head
# (MHA: _mha, with 4 or 8 warps _mhaw4, _mhaw8), the key-slice kernel with 32 keys a warp (4 warps: _k32 with the
# plan's M-tiles, _k32rt2 with two; _b2 of each: splits for two blocks an SM; _k16: 16 keys a warp, the plan without
# choose_warp_keys's rule; _w4k16: the same with 4 warps), the key-slice kernel with 4 or 8 warps forced (_w4, _w8),
# 1 split (_s1, with one M-tile a block _rt1s1), 2 splits (a cluster of two where the grid fits one block an SM: _s2,
# with one or two M-tiles _rt1s2 / _rt2s2, the
# row-owning kernel of 2, 4, 5 or 8 warps _rw2s2 ... _rw8s2), the row-owning kernel of 2 warps with 4 or 8 splits
# (_rw2s4, _rw2s8) and of 4 warps with 8 (_rw4s8).
# --variants NAME,... times only those.
VARIANTS = (("_nocl", {"no_cluster": True}), ("_nomma", {"no_mma": True}), ("_rt1", {"mma_row_tiles": 1}),
            ("_rt2", {"mma_row_tiles": 2}), ("_rt8", {"mma_row_tiles": 8}), ("_s4", {"splits": 4}),
            ("_s8", {"splits": 8}), ("_s16", {"splits": 16}), ("_b2", {"mma_blocks_per_sm": 2}),
            ("_ks", {"mma_row_warps": -1}), ("_rw2", {"mma_row_warps": 2}), ("_rw4", {"mma_row_warps": 4}),
            ("_rw5", {"mma_row_warps": 5}),
            ("_rw8", {"mma_row_warps": 8}), ("_rw4s4", {"mma_row_warps": 4, "splits": 4}),
            ("_rw5s4", {"mma_row_warps": 5, "splits": 4}), ("_rw8s4", {"mma_row_warps": 8, "splits": 4}),
            ("_rw8s8", {"mma_row_warps": 8, "splits": 8}), ("_mw", {"merge_wide": 1}), ("_mn", {"merge_wide": -1}),
            ("_s16mw", {"splits": 16, "merge_wide": 1}), ("_s32", {"splits": 32}), ("_s64", {"splits": 64}),
            ("_rt2s32", {"mma_row_tiles": 2, "splits": 32}), ("_w4", {"mma_warps": 4}), ("_w8", {"mma_warps": 8}),
            ("_w4s16", {"mma_warps": 4, "splits": 16}), ("_w4s32", {"mma_warps": 4, "splits": 32}),
            ("_w4rt2s16", {"mma_warps": 4, "mma_row_tiles": 2, "splits": 16}),
            ("_w4rt2s32", {"mma_warps": 4, "mma_row_tiles": 2, "splits": 32}),
            ("_w4rt2s64", {"mma_warps": 4, "mma_row_tiles": 2, "splits": 64}), ("_mha", {"mma_mha": True}),
            ("_mhaw4", {"mma_mha": True, "mma_warps": 4}), ("_mhaw8", {"mma_mha": True, "mma_warps": 8}),
            ("_k32", {"mma_row_warps": -1, "mma_warp_keys": 32}),
            ("_k32b2", {"mma_row_warps": -1, "mma_warp_keys": 32, "mma_blocks_per_sm": 2}),
            ("_k32rt2", {"mma_row_warps": -1, "mma_warp_keys": 32, "mma_row_tiles": 2}),
            ("_k32rt2b2", {"mma_row_warps": -1, "mma_warp_keys": 32, "mma_row_tiles": 2, "mma_blocks_per_sm": 2}),
            ("_k16", {"mma_warp_keys": 16}), ("_w4k16", {"mma_warps": 4, "mma_warp_keys": 16}),
            ("_s1", {"splits": 1}), ("_rt1s1", {"mma_row_tiles": 1, "splits": 1}),
            ("_s2", {"splits": 2}), ("_rt1s2", {"mma_row_tiles": 1, "splits": 2}),
            ("_rt2s2", {"mma_row_tiles": 2, "splits": 2}), ("_rw2s2", {"mma_row_warps": 2, "splits": 2}),
            ("_rw4s2", {"mma_row_warps": 4, "splits": 2}), ("_rw8s2", {"mma_row_warps": 8, "splits": 2}),
            ("_rw5s2", {"mma_row_warps": 5, "splits": 2}), ("_rw2s4", {"mma_row_warps": 2, "splits": 4}),
            ("_rw4s8", {"mma_row_warps": 4, "splits": 8}), ("_rw2s8", {"mma_row_warps": 2, "splits": 8}))
LAYS = ("seq", "slot") + tuple("slot" + name for name, _ in VARIANTS)



def reference(q, k, v, tq):
    """fp32 math SDPA, bottom-right causal over the last tq keys; q [B, Hq, Tq, D], k/v [B, Hkv, S, D]."""
    S = k.shape[2]
    mask = None
    if tq > 1:
        mask = torch.ones(tq, S, dtype=torch.bool, device=q.device).tril(S - tq)
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask,
                                              enable_gqa=k.shape[1] != q.shape[1])


def plan_text(pl):
    """A plan (ext.plan) in a few words: kernel, M-tiles (x row groups), warps, splits, cluster, wide merge."""
    groups = f"x{pl['row_groups']}" if pl["row_groups"] > 1 else ""
    return (f"{pl['kernel']} t{pl['mma_tiles']}{groups} w{pl['mma_warps']} s{pl['splits']}"
            + (" cl" if pl["cluster"] else "") + (" mw" if pl.get("merge_wide") else "")
            + (" k32" if pl.get("warp_keys") == 32 else ""))


def row(ext, dt, fam, hq, hkv, D, B, S, tq, l2, copy_gbs, reps, variants=()):
    kv_bytes = 2 * B * S * hkv * D * 2
    n = min(512, -(-3 * l2 // kv_bytes)) if kv_bytes < 3 * l2 else 1  # 512 copies: 128 KiB rows, 64 MiB
    est_us = kv_bytes / 3.5e6 + 8
    iters = n * max(1, -(-int(max(3, min(100, 2000 / est_us))) // n))
    r = {"family": fam, "dtype": [k for k, v in DTYPES.items() if v == dt][0], "q_heads": hq, "kv_heads": hkv,
         "head_dim": D, "B": B, "S": S, "Tq": tq, "kv_mib": round(kv_bytes / 2**20, 1), "copies": n, "iters": iters}
    q = torch.randn(B, hq, tq, D, device="cuda", dtype=dt)
    qo = q.transpose(1, 2)  # [B, Tq, Hq, D] view
    k = [torch.randn(B, hkv, S, D, device="cuda", dtype=dt) for _ in range(n)]
    v = [torch.randn_like(k[0]) for _ in range(n)]
    ks, vs = [seq_major(x) for x in k], [seq_major(x) for x in v]
    smax = S + 64
    kl, vl = [per_slot(x, smax) for x in k], [per_slot(x, smax) for x in v]
    lens = torch.full((B,), S - tq, dtype=torch.int32, device="cuda")
    out = {x: torch.empty(B, tq, hq, D, device="cuda", dtype=dt) for x in ("ours_seq", "ours_slot")}
    # The plans the calls below launch: a time is only the new kernel's where its plan says so. Per-slot
    # variants (VARIANTS) are timed too where their plan differs from the default one.
    plans, ws_bytes = {}, 1
    args = {"seq": (qo, ks[0], vs[0], out["ours_seq"], S), "slot": (qo, kl[0], vl[0], out["ours_slot"], smax, lens)}
    for name, opts in (("", {}),) + variants:
        with knob_set(ext, **opts):
            for lay in ("slot",) if name else ("seq", "slot"):
                try:
                    plans[lay + name] = plan_text(ext.plan(*args[lay]))
                except RuntimeError as e:  # a variant the shape has no kernel for (5 warps at head_dim 128)
                    if not name:
                        raise
                    plans[lay + name] = "refused: " + str(e)
                    continue
                ws_bytes = max(ws_bytes, ext.workspace_bytes(*args[lay]))
    for key, text in plans.items():
        r["plan_" + key] = text
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device="cuda")
    rot = Rotation(n)
    fns = {"sdpa_" + name: rotating_sdpa(rot, q, k, v, be, hkv != hq) for name, be in BACKENDS}
    fns["ours_seq"] = lambda: ext.attention(qo, ks[rot.next()], vs[rot.turn], out["ours_seq"], S, ws)
    fns["ours_slot"] = lambda: ext.attention(qo, kl[rot.next()], vl[rot.turn], out["ours_slot"], smax, ws, lens)
    for name, opts in variants:
        if plans["slot" + name] != plans["slot"] and not plans["slot" + name].startswith("refused"):
            o = out["ours_slot" + name] = torch.empty_like(out["ours_slot"])
            fns["ours_slot" + name] = knob_call(
                ext, opts, lambda o=o: ext.attention(qo, kl[rot.next()], vl[rot.turn], o, smax, ws, lens))
    # The math reference repeats K/V per query head in fp32: only where that stays small.
    ref = reference(q, k[0], v[0], tq).transpose(1, 2) if kv_bytes * (hq // hkv) <= 2**30 else None
    graphs = capture_rotating(fns, rot, iters, out, ref, r, lambda name: name.startswith("ours") or tq == 1)
    best = best_replay(graphs, reps, iters)
    for name in graphs:
        r[name + "_us"] = round(best[name], 2)
    sdpa = [(best[x], x) for x in graphs if x.startswith("sdpa_")]
    for lay in LAYS:
        if "ours_" + lay in best:
            r[lay + "_gbs"] = round(kv_bytes / best["ours_" + lay] / 1e3)
            r[lay + "_pct_copy"] = round(100 * r[lay + "_gbs"] / copy_gbs, 1)
    if sdpa:
        sd_best = min(sdpa)
        r["sdpa_best"], r["sdpa_best_us"] = sd_best[1], round(sd_best[0], 2)
        r["sdpa_gbs"] = round(kv_bytes / sd_best[0] / 1e3)
        for lay in LAYS:
            if "ours_" + lay in best:
                r[lay + "_vs_best"] = round(best["ours_" + lay] / sd_best[0], 3)
    del graphs, q, k, v, ks, vs, kl, vl, fns, ws
    torch.cuda.empty_cache()
    return r


def main():
    out_path = sys.argv[1]
    arg = lambda flag, default: sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else default  # noqa: E731
    reps = int(arg("--reps", 3))
    max_gib = float(arg("--max-gib", 16))
    budget_s = float(arg("--budget-s", 1e9))
    dts = [DTYPES[x] for x in arg("--dtypes", "fp16,bf16").split(",")]
    only = set(arg("--only", "").split(",")) - {""}
    min_rows, max_rows = int(arg("--min-rows", 0)), int(arg("--max-rows", 1 << 30))
    # --variants alone: all of them; --variants NAME,... (no leading dash): those
    after = sys.argv[sys.argv.index("--variants") + 1:] if "--variants" in sys.argv else []
    picked = set(after[0].split(",")) if after and not after[0].startswith("-") else set()
    bs = {tuple(int(x) for x in p.split(":")) for p in arg("--bs", "").split(",") if p}
    if "--capi" in sys.argv:
        from pvt_capi import CApi
        ext = CApi()
    else:
        ext = build.load()
    torch.manual_seed(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    copy_gbs = copy_rate()
    head = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "d2d_copy_gbs": round(copy_gbs),
            "l2_mib": round(l2 / 2**20, 1), "reps": reps, "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    if hasattr(ext, "mma_probe"):
        head["mma_probe"] = ext.mma_probe()  # each tensor-core instance: built, sm_80 code, blocks an SM, errors
    print(json.dumps(head), flush=True)
    rows, skipped, t0 = [], [], time.time()
    for fam, hq, hkv, D, B, S, tq in shapes():
        for dt in dts:
            if only and fam not in only or not min_rows <= hq // hkv * tq <= max_rows or bs and ((B, S) not in bs or tq > 1):
                continue
            if "--quick" in sys.argv and (B not in (1, 16) or S not in (512, 8192)) and tq == 1:
                continue
            kv_bytes = 2 * B * S * hkv * D * 2
            if kv_bytes > max_gib * 2**30 or time.time() - t0 > budget_s:
                skipped.append([fam, str(dt), B, S, tq])
                continue
            variants = tuple(x for x in VARIANTS if not picked or x[0][1:] in picked) \
                if "--variants" in sys.argv else ()
            r = row(ext, dt, fam, hq, hkv, D, B, S, tq, l2, copy_gbs, reps, variants)
            rows.append(r)
            print(json.dumps(r), flush=True)
    head["rows"], head["skipped"] = rows, skipped
    head["elapsed_s"] = round(time.time() - t0, 1)
    with open(out_path, "w") as f:
        json.dump(head, f, indent=1)


if __name__ == "__main__":
    main()
