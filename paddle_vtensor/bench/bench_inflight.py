"""``python -m paddle_vtensor bench-inflight``: continuous batching (generate_inflight) against
PaddleNLP's generate() in padded batches, on one seeded serving-like workload; and, with
``--layout``, the mapping waste of per-layer vs token-row slot caches for a Llama-3-8B shape.
Writes DIR/bench_inflight.json and DIR/bench_inflight.png (or DIR/layout.json)."""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from . import report
from .._ops import load_ops
from .tiny_llama import ModelShape, add_model_options, build_model


def add_parser(commands, common) -> None:
    import argparse

    p = commands.add_parser("bench-inflight", help="inflight batching vs padded generate() batches; JSON + PNG",
                            formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--requests", type=int, default=32, help="requests in the workload (>= 1)")
    p.add_argument("--prompt-min", type=int, default=16)
    p.add_argument("--prompt-max", type=int, default=512)
    p.add_argument("--output-min", type=int, default=8)
    p.add_argument("--output-max", type=int, default=256)
    p.add_argument("--max-batch", type=int, default=8, help="sequences in flight / padded batch size")
    add_model_options(p)
    p.add_argument("--no-applied", action="store_true",
                   help="skip the third path: padded generate() batches with paddle_vtensor.apply (copy-free caches)")
    p.add_argument("--verify", action="store_true",
                   help="also run generate() on every prompt alone and check generate_inflight's ids equal it")
    p.add_argument("--layout", action="store_true",
                   help="instead: measure the mapping waste of the two slot layouts for a Llama-3-8B shape")
    p.add_argument("--layout-slots", type=int, default=64)
    p.add_argument("--out", metavar="DIR", default="bench_inflight_out")
    p.add_argument("--no-progress", action="store_true")
    common(p)


def workload(n: int, seed: int, prompt_range, output_range, vocab: int = 1000) -> tuple[list[list[int]], list[int]]:
    """Seeded requests: prompt and output lengths skewed short (u**2 and u**3 of a uniform u), so
    most requests are short and a few are long, as in serving traffic."""
    rng = np.random.default_rng(seed)
    (p_lo, p_hi), (o_lo, o_hi) = prompt_range, output_range
    plens = p_lo + np.floor((p_hi - p_lo + 1) * rng.random(n) ** 2).astype(int)
    olens = o_lo + np.floor((o_hi - o_lo + 1) * rng.random(n) ** 3).astype(int)
    prompts = [rng.integers(2, vocab, size=int(k)).tolist() for k in plens]
    return prompts, [int(x) for x in olens]


def padded_generate(model, prompts, budgets, batch: int, tick=None) -> tuple[list[list[int]], int]:
    """PaddleNLP generate() on consecutive batches of `batch` requests, left-padded to the batch's
    longest prompt, each batch decoding until its longest request's budget. Returns the ids (each
    request's own budget) and the KV bytes the batches' dense caches peak at (from the shapes)."""
    import paddle

    outputs = []
    for i in range(0, len(prompts), batch):
        ps, bs = prompts[i:i + batch], budgets[i:i + batch]
        width = max(len(p) for p in ps)
        ids = np.zeros([len(ps), width], dtype=np.int64)
        for r, p in enumerate(ps):
            ids[r, width - len(p):] = p
        ids_t = paddle.to_tensor(ids)
        with paddle.no_grad():
            out, _ = model.generate(input_ids=ids_t, attention_mask=paddle.to_tensor((ids != 0).astype(np.int64)),
                                    max_new_tokens=max(bs), decode_strategy="greedy_search", use_cache=True)
        out = out.numpy()
        outputs += [out[r, :b].tolist() for r, b in enumerate(bs)]
        if tick:
            tick(sum(bs))
    return outputs


def dense_kv_peak(shape: ModelShape, prompts, budgets, batch: int, elem_bytes: int = 4) -> int:
    """Largest KV cache one padded batch holds: [B, longest prompt + longest budget] per layer, K and V."""
    peak = 0
    for i in range(0, len(prompts), batch):
        ps, bs = prompts[i:i + batch], budgets[i:i + batch]
        tokens = len(ps) * (max(len(p) for p in ps) + max(bs))
        peak = max(peak, tokens * 2 * shape.layers * shape.kv_heads * shape.head_dim * elem_bytes)
    return peak


def run(args) -> int:
    if args.layout:
        return run_layout(args)
    import paddle

    import paddle_vtensor as pvt

    if args.requests < 1 or args.max_batch < 1 or args.repeats < 1:
        raise ValueError("--requests, --max-batch and --repeats must be >= 1")
    started = report.now()
    os.makedirs(args.out, exist_ok=True)
    load_ops(out=sys.stderr)
    shape = ModelShape(args.hidden_size, args.layers, args.heads, args.kv_heads, args.vocab)
    prompts, budgets = workload(args.requests, args.seed, (args.prompt_min, args.prompt_max),
                                (args.output_min, args.output_max), args.vocab)
    model = build_model(shape, "float32", args.prompt_max + args.output_max + 1, args.seed)
    chunk = args.chunk_kib * 1024
    pvt.configure(chunk_bytes=chunk)  # the applied path's seq-major caches map in the same chunks
    useful = sum(budgets)
    # Warm-up of both paths on two short requests (kernels, caches, the op library).
    padded_generate(model, [p[:16] for p in prompts[:2]], [4, 4], 2)
    pvt.generate_inflight(model, [p[:16] for p in prompts[:2]], 4, 2, chunk_bytes=chunk)

    from tqdm import tqdm

    runs = {"padded_generate": [], "inflight": []}
    if not args.no_applied:
        runs["padded_generate_applied"] = []
    ids = {}
    peak_mapped = applied_peak = None
    for r in range(args.repeats):
        bar = tqdm(total=useful, desc=f"padded generate() #{r + 1}", unit="tok", file=sys.stderr,
                   disable=args.no_progress)
        t0 = time.perf_counter()
        ids["padded_generate"] = padded_generate(model, prompts, budgets, args.max_batch, tick=bar.update)
        runs["padded_generate"].append(time.perf_counter() - t0)
        bar.close()
        if not args.no_applied:
            bar = tqdm(total=useful, desc=f"padded generate() + pvt.apply #{r + 1}", unit="tok", file=sys.stderr,
                       disable=args.no_progress)
            pvt.reset_peak_mapped("cpu")
            applied_base = pvt.memory_stats("cpu")["mapped_bytes"]
            t0 = time.perf_counter()
            with pvt.applied(model):
                ids["padded_generate_applied"] = padded_generate(model, prompts, budgets, args.max_batch, tick=bar.update)
            runs["padded_generate_applied"].append(time.perf_counter() - t0)
            applied_peak = pvt.memory_stats("cpu")["peak_mapped_bytes"] - applied_base
            bar.close()
        bar = tqdm(total=useful, desc=f"generate_inflight #{r + 1}", unit="tok", file=sys.stderr,
                   disable=args.no_progress)
        steps = []

        def on_step(info, steps=steps, bar=bar):
            steps.append(info)
            bar.update(info["live"])

        pvt.reset_peak_mapped("cpu")
        base = pvt.memory_stats("cpu")["mapped_bytes"]
        t0 = time.perf_counter()
        ids["inflight"] = pvt.generate_inflight(model, prompts, budgets, args.max_batch, chunk_bytes=chunk,
                                                on_step=on_step)
        runs["inflight"].append(time.perf_counter() - t0)
        peak_mapped = pvt.memory_stats("cpu")["peak_mapped_bytes"] - base
        bar.close()

    best = {k: min(v) for k, v in runs.items()}
    same = [a == b for a, b in zip(ids["padded_generate"], ids["inflight"])]
    solo_equal = None
    if args.verify:
        solo = [padded_generate(model, [p], [b], 1) [0] for p, b in zip(prompts, budgets)]
        solo_equal = int(sum(a == b for a, b in zip(solo, ids["inflight"])))
    result = {
        "command": "python -m paddle_vtensor " + " ".join(args.argv),
        "date": started,
        "machine": report.machine(),
        "note": "shared 2-core machine (other jobs running); both paths interleaved in one process, best of repeats",
        "config": {"shape": shape.__dict__, "requests": args.requests, "max_batch": args.max_batch,
                   "prompt_range": [args.prompt_min, args.prompt_max], "output_range": [args.output_min, args.output_max],
                   "seed": args.seed, "chunk_bytes": chunk, "repeats": args.repeats, "device": args.device},
        "workload": {"prompt_lens": [len(p) for p in prompts], "output_lens": budgets,
                     "prompt_tokens": sum(len(p) for p in prompts), "generated_tokens": useful},
        "seconds": runs,
        "tokens_per_s": {k: useful / v for k, v in best.items()},
        "speedup": best["padded_generate"] / best["inflight"],
        "speedup_vs_applied": (best["padded_generate_applied"] / best["inflight"]) if "padded_generate_applied" in best else None,
        "inflight_steps": len(steps),
        "padded_decode_steps": sum(max(budgets[i:i + args.max_batch]) for i in range(0, len(budgets), args.max_batch)),
        "kv_peak_bytes": {"padded_generate_dense_from_shapes": dense_kv_peak(shape, prompts, budgets, args.max_batch),
                          "padded_generate_applied_mapped_measured": applied_peak,
                          "inflight_mapped_measured": peak_mapped},
        "requests_with_identical_ids": int(sum(same)),
        "inflight_ids_equal_solo_generate": solo_equal,
    }
    json_path, png_path = os.path.join(args.out, "bench_inflight.json"), os.path.join(args.out, "bench_inflight.png")
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
    plot(result, steps, png_path)
    kv = result["kv_peak_bytes"]
    print(f"generated tokens: {useful} ({args.requests} requests, prompts {result['workload']['prompt_tokens']} tokens)")
    for k in best:
        print(f"{k:>16}: {result['tokens_per_s'][k]:8.1f} tokens/s  (best of {args.repeats}: {best[k]:.2f} s)")
    print(f"speedup: {result['speedup']:.2f}x;  KV peak: padded {report.human_bytes(kv['padded_generate_dense_from_shapes'])}, "
          f"inflight mapped {report.human_bytes(kv['inflight_mapped_measured'])}")
    print(f"requests whose ids equal the padded baseline's: {sum(same)}/{len(same)}")
    if solo_equal is not None:
        print(f"requests whose inflight ids equal generate() on the prompt alone: {solo_equal}/{len(same)}")
    print(f"wrote {json_path} and {png_path}")
    return 0


def plot(result: dict, steps: list, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (tps, mem, live) = plt.subplots(1, 3, figsize=(13, 4))
    names = [n for n in ("padded_generate", "padded_generate_applied", "inflight") if n in result["tokens_per_s"]]
    colors = {"padded_generate": "tab:red", "padded_generate_applied": "tab:orange", "inflight": "tab:blue"}
    tps.bar([n.replace("padded_generate", "padded").replace("_applied", "+apply") for n in names],
            [result["tokens_per_s"][n] for n in names], color=[colors[n] for n in names])
    tps.set_ylabel("generated tokens / s")
    tps.set_title(f"{result['config']['requests']} requests, max_batch {result['config']['max_batch']}: "
                  f"{result['speedup']:.2f}x")
    kv = result["kv_peak_bytes"]
    mem.bar(["padded (dense)", "inflight (mapped)"],
            [kv["padded_generate_dense_from_shapes"] / 2**20, (kv["inflight_mapped_measured"] or 0) / 2**20],
            color=[colors["padded_generate"], colors["inflight"]])
    mem.set_ylabel("peak KV cache MiB")
    live.plot([s["step"] for s in steps], [s["live"] for s in steps], label="live sequences")
    live.plot([s["step"] for s in steps], [s["tokens"] for s in steps], alpha=0.5, label="tokens in the step")
    live.set_yscale("log")
    live.set_xlabel("inflight step")
    live.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- --layout: per-layer vs token-row slot caches, measured through the core ----

LLAMA3_8B = {"layers": 32, "kv_heads": 8, "head_dim": 128, "elem_bytes": 2, "max_seq_len": 8192}


def run_layout(args) -> int:
    """Reserve the same per-slot lengths in (a) 2L one-layer slot caches [slots, S, Hkv, D] and (b) one
    token-row cache [slots, S, L, 2, Hkv, D], both with 2 MiB chunks, and compare mapped bytes with
    the bytes the tokens need. On the CPU mapping commits no page until it is touched, so this
    measures the core's chunk bookkeeping for a 64-slot Llama-3-8B cache without 10s of GiB of RAM."""
    import paddle_vtensor as pvt

    started = report.now()
    os.makedirs(args.out, exist_ok=True)
    load_ops(out=sys.stderr)
    m, n = LLAMA3_8B, args.layout_slots
    chunk = 2 << 20
    rng = np.random.default_rng(args.seed)
    token_bytes = m["layers"] * 2 * m["kv_heads"] * m["head_dim"] * m["elem_bytes"]
    cases = {
        "serving (prompt 16-512 + output 8-256, skewed)": [len(p) + o for p, o in zip(*workload(n, args.seed, (16, 512), (8, 256)))],
        "long context (uniform 1-8192)": rng.integers(1, m["max_seq_len"] + 1, size=n).tolist(),
        "short (uniform 1-64)": rng.integers(1, 65, size=n).tolist(),
    }
    out = {"command": "python -m paddle_vtensor " + " ".join(args.argv), "date": started, "machine": report.machine(),
           "shape": m, "slots": n, "chunk_bytes": chunk, "cases": {}}
    for name, lens in cases.items():
        need = sum(lens) * token_bytes
        per_layer = [pvt.slot_cache(n, m["max_seq_len"], m["kv_heads"], m["head_dim"], "float16", "cpu", chunk)
                     for _ in range(2 * m["layers"])]
        for c in per_layer:
            for s, ln in enumerate(lens):
                pvt.reserve_slot(c, s, ln)
        a = sum(pvt.slot_info(c)["mapped_bytes"] for c in per_layer)
        del per_layer
        rows = pvt.slot_kv_cache(m["layers"], n, m["max_seq_len"], m["kv_heads"], m["head_dim"], "float16", "cpu", chunk)
        for s, ln in enumerate(lens):
            pvt.reserve_slot(rows, s, ln)
        b = pvt.slot_info(rows)["mapped_bytes"]
        del rows
        out["cases"][name] = {"tokens": int(sum(lens)), "needed_bytes": need,
                              "per_layer_mapped": a, "per_layer_waste": a - need, "per_layer_waste_chunks_per_slot": (a - need) / chunk / n,
                              "token_rows_mapped": b, "token_rows_waste": b - need, "token_rows_waste_chunks_per_slot": (b - need) / chunk / n}
        c = out["cases"][name]
        print(f"{name}: tokens need {report.human_bytes(need)}; per-layer caches map {report.human_bytes(a)} "
              f"(waste {report.human_bytes(a - need)}, {c['per_layer_waste_chunks_per_slot']:.1f} chunks/slot); "
              f"token rows map {report.human_bytes(b)} (waste {report.human_bytes(b - need)}, "
              f"{c['token_rows_waste_chunks_per_slot']:.2f} chunks/slot)")
    path = os.path.join(args.out, "layout.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {path}")
    return 0
