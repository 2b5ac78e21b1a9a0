"""``python -m paddle_vtensor bench-prefix``: what sharing cache memory between slots saves (issue 31,
point 5). Writes DIR/bench_prefix.json and DIR/bench_prefix.png, one JSON section and one plot
panel per part:

* ``shared-prompt`` (part a): N requests sharing one system prompt plus their own tokens, through
  generate_inflight with and without its prefix cache: mapped bytes, prefill time, prefill tokens
  computed, and the mapped bytes against the formula (unique tokens' bytes + one chunk per slot).
* ``--beam`` (part b, beam_bench.py): beam search's bytes copied per step and ms/token against
  PaddleNLP's own beam search with and without apply(); its own JSON and PNG (bench_beam.*).

A part is a function ``(args, ctx) -> dict`` (its JSON section) plus a plot function
``(ax, section)``, registered in PARTS; ``--part`` picks which run (default: all). Its options are
added to the parser by its own ``add_options(parser)``.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

import numpy as np

from . import beam_bench, report
from .._ops import load_ops
from .tiny_llama import ModelShape, add_model_options, build_model


@dataclasses.dataclass
class Context:
    """What every part gets: the model (built once), its shape, the chunk size, a progress bar maker."""

    model: object
    shape: ModelShape
    chunk_bytes: int
    bar: object  # bar(total, desc) -> a tqdm bar (disabled with --no-progress)


def add_shared_prompt_options(p) -> None:
    g = p.add_argument_group("shared-prompt (part a)")
    g.add_argument("--requests", type=int, default=32, help="requests, all arriving at once (>= 1)")
    g.add_argument("--system-len", type=int, default=1024, help="tokens of the system prompt every request starts with")
    g.add_argument("--own-min", type=int, default=16, help="each request's own tokens after it: uniform in [min, max]")
    g.add_argument("--own-max", type=int, default=256)
    g.add_argument("--new-tokens", type=int, default=1,
                   help="tokens generated per request (1: the run is all prefill)")
    g.add_argument("--max-batch", type=int, default=32, help="sequences in flight")


def shared_prompt_workload(args) -> list[list[int]]:
    rng = np.random.default_rng(args.seed)
    system = rng.integers(2, args.vocab, size=args.system_len).tolist()
    own = rng.integers(args.own_min, args.own_max + 1, size=args.requests)
    return [system + rng.integers(2, args.vocab, size=int(n)).tolist() for n in own]


def run_shared_prompt(args, ctx: Context) -> dict:
    import paddle_vtensor as pvt

    if min(args.requests, args.max_batch, args.new_tokens, args.system_len) < 1 or not 0 <= args.own_min <= args.own_max:
        raise ValueError("--requests, --max-batch, --new-tokens, --system-len must be >= 1 and 0 <= --own-min <= --own-max")
    prompts = shared_prompt_workload(args)
    kw = {"max_batch": args.max_batch, "chunk_bytes": ctx.chunk_bytes}
    pvt.generate_inflight(ctx.model, [p[:40] for p in prompts[:2]], 2, **kw)  # warm-up
    runs = {"shared": [], "unshared": []}
    stats, ids = {}, {}
    for r in range(args.repeats):
        for name in ("unshared", "shared"):
            bar = ctx.bar(len(prompts), f"{name} #{r + 1}")
            prefill_s, last = [0.0], [time.perf_counter()]

            def on_step(info, bar=bar, prefill_s=prefill_s, last=last):
                now = time.perf_counter()
                if info["prefill_tokens"]:
                    prefill_s[0] += now - last[0]  # a step that computed prompt tokens
                last[0] = now
                bar.update(info["finished"])

            t0 = last[0] = time.perf_counter()
            out = pvt.generate_inflight(ctx.model, prompts, args.new_tokens, prefix_cache=name == "shared",
                                        on_step=on_step, **kw)
            runs[name].append({"run_s": time.perf_counter() - t0, "prefill_s": prefill_s[0]})
            bar.close()
            stats[name], ids[name] = out.stats, out
    info = pvt.slot_info(pvt.SlotModelRunner(ctx.model, 1, len(max(prompts, key=len)) + args.new_tokens,
                                             chunk_bytes=ctx.chunk_bytes).cache)
    row = info["row_bytes"]
    unique_tokens = args.system_len + sum(len(p) - args.system_len + args.new_tokens - 1 for p in prompts)
    slots = min(args.requests, args.max_batch)
    formula = unique_tokens * row + slots * ctx.chunk_bytes
    best = {k: min(v, key=lambda x: x["run_s"]) for k, v in runs.items()}
    shared, unshared = stats["shared"], stats["unshared"]
    return {
        "config": {"requests": args.requests, "system_len": args.system_len, "own_range": [args.own_min, args.own_max],
                   "new_tokens": args.new_tokens, "max_batch": args.max_batch},
        "prompt_tokens": shared["prompt_tokens"], "row_bytes": row, "block_tokens": shared["block_tokens"],
        "seconds": runs,
        "best": best,
        "prefill_speedup": best["unshared"]["prefill_s"] / max(best["shared"]["prefill_s"], 1e-9),
        "stats": stats,
        "mapped_bytes_peak": {"unshared": unshared["mapped_bytes_peak"], "shared": shared["mapped_bytes_peak"]},
        "formula": {"unique_tokens": unique_tokens, "unique_bytes": unique_tokens * row, "slots": slots,
                    "unique_plus_one_chunk_per_slot": formula},
        "shared_over_formula": shared["mapped_bytes_peak"] / formula,
        "memory_saved": unshared["mapped_bytes_peak"] / shared["mapped_bytes_peak"],
        "ids_equal_with_and_without": list(ids["shared"]) == list(ids["unshared"]),
    }


def plot_shared_prompt(ax, s: dict) -> None:
    mib = 2.0 ** 20
    names = ["unshared", "shared", "unique + 1 chunk/slot"]
    vals = [s["mapped_bytes_peak"]["unshared"] / mib, s["mapped_bytes_peak"]["shared"] / mib,
            s["formula"]["unique_plus_one_chunk_per_slot"] / mib]
    ax.bar(names, vals, color=["tab:red", "tab:blue", "tab:gray"])
    ax.set_ylabel("peak mapped MiB")
    b = s["best"]
    ax.set_title(f"{s['config']['requests']} requests, {s['config']['system_len']}-token system prompt\n"
                 f"prefill {b['unshared']['prefill_s']:.2f} s -> {b['shared']['prefill_s']:.2f} s; "
                 f"memory {s['shared_over_formula']:.2f}x formula", fontsize=9)


def print_shared_prompt(s: dict) -> None:
    h = report.human_bytes
    b, m = s["best"], s["mapped_bytes_peak"]
    print(f"shared-prompt: {s['config']['requests']} requests, system {s['config']['system_len']} + own "
          f"{s['config']['own_range'][0]}-{s['config']['own_range'][1]} tokens ({s['prompt_tokens']} prompt tokens)")
    for name in ("unshared", "shared"):
        st = s["stats"][name]
        print(f"  {name:>8}: mapped {h(m[name])}, prefill {b[name]['prefill_s']:.3f} s, prefill tokens computed "
              f"{st['prefill_tokens']}, prefix hit tokens {st['prefix_hit_tokens']}")
    print(f"  formula (unique tokens' bytes + one chunk per slot): {h(s['formula']['unique_plus_one_chunk_per_slot'])}; "
          f"shared / formula = {s['shared_over_formula']:.3f}x; memory saved {s['memory_saved']:.1f}x; "
          f"prefill {s['prefill_speedup']:.1f}x faster; ids equal: {s['ids_equal_with_and_without']}")


# name -> (add_options, run, plot, print). Part (b), beam search, registers here the same way.
PARTS = {"shared-prompt": (add_shared_prompt_options, run_shared_prompt, plot_shared_prompt, print_shared_prompt)}


def add_parser(commands, common) -> None:
    import argparse

    p = commands.add_parser("bench-prefix", help="memory and prefill time saved by sharing cache chunks; JSON + PNG",
                            formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--part", choices=sorted(PARTS), action="append",
                   help="run only this part (repeatable; default: every part)")
    add_model_options(p)
    p.add_argument("--out", metavar="DIR", default="bench_prefix_out")
    p.add_argument("--no-progress", action="store_true")
    for add_options, *_ in PARTS.values():
        add_options(p)
    beam_bench.add_arguments(p)
    p.add_argument("--tiny", action="store_true", help="with --beam: a model and run small enough for seconds (tests)")
    common(p)


def run(args) -> int:
    from tqdm import tqdm

    if args.beam:
        return beam_bench.run(args)

    if args.repeats < 1 or args.chunk_kib < 1:
        raise ValueError("--repeats and --chunk-kib must be >= 1")
    started = report.now()
    os.makedirs(args.out, exist_ok=True)
    load_ops(out=sys.stderr)
    shape = ModelShape(args.hidden_size, args.layers, args.heads, args.kv_heads, args.vocab)
    positions = max(args.system_len + args.own_max + args.new_tokens + 1, 2048)
    ctx = Context(build_model(shape, "float32", positions, args.seed), shape, args.chunk_kib * 1024,
                  lambda total, desc: tqdm(total=total, desc=desc, unit="req", file=sys.stderr,
                                           disable=args.no_progress))
    parts = args.part or list(PARTS)
    result = {"command": "python -m paddle_vtensor " + " ".join(args.argv), "date": started,
              "machine": report.machine(),
              "note": "shared machine (other jobs running); paths interleaved in one process, best of repeats",
              "config": {"shape": shape.__dict__, "chunk_bytes": ctx.chunk_bytes, "repeats": args.repeats,
                         "seed": args.seed, "device": args.device, "parts": parts}}
    for name in parts:
        result[name] = PARTS[name][1](args, ctx)
        PARTS[name][3](result[name])
    json_path, png_path = os.path.join(args.out, "bench_prefix.json"), os.path.join(args.out, "bench_prefix.png")
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
    plot(result, parts, png_path)
    print(f"wrote {json_path} and {png_path}")
    return 0


def plot(result: dict, parts: list, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(parts), figsize=(6 * len(parts), 4.5), squeeze=False)
    for ax, name in zip(axes[0], parts):
        PARTS[name][2](ax, result[name])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
