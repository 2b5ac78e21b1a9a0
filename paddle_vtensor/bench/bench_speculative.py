"""``python -m paddle_vtensor bench-speculative``: speculative decoding against the target's plain greedy
decoding, in one process on one random llama target and a draft made of its own first layers.

Paths, run alternately (best of --repeats each): PaddleNLP's own ``generate()`` (greedy), greedy
decoding on the same slot caches without speculation (``generate_inflight``, one token a step), and
``speculative_generate``. Reports tokens/s, the acceptance rate and the time of one speculative step
split into draft / verify / accept (the rollback: per-slot length updates) / the finished check.
Writes DIR/bench_speculative.json and DIR/bench_speculative.png. ``--adaptive``: speculative_generate
picks k each step (0..--k); with ``--table`` it adds one such row per p (0..max(--ks))."""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from . import report
from .._ops import load_ops
from .tiny_llama import ModelShape, build_model, random_prompt


def add_parser(commands, common) -> None:
    import argparse

    b = commands.add_parser("bench-speculative", help="speculative vs plain greedy decoding: tokens/s, acceptance; JSON + PNG",
                            formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    b.add_argument("--hidden-size", type=int, default=256, help="target (and draft) width")
    b.add_argument("--layers", type=int, default=8, help="target decoder layers")
    b.add_argument("--heads", type=int, default=4, help="attention heads")
    b.add_argument("--kv-heads", type=int, default=2, help="key/value heads")
    b.add_argument("--vocab", type=int, default=1000, help="vocabulary size")
    b.add_argument("--draft-layers", type=int, default=1,
                   help="the draft: the target's first N layers (1: a draft an eighth of the default target, as EAGLE's one layer)")
    b.add_argument("--draft-noise", type=float, default=0.0,
                   help="Gaussian noise added to the draft's weights, in units of each weight's std")
    b.add_argument("--deep-scale", type=float, default=0.2,
                   help="scale of the target's residual writes (o_proj, down_proj) in layers past the draft's; "
                        "1.0 leaves the random target as it is (see bench/draft_model.py)")
    b.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    b.add_argument("--batch", type=int, default=4, help="sequences")
    b.add_argument("--input-len", type=int, default=64, help="prompt tokens")
    b.add_argument("--output-len", type=int, default=64, help="generated tokens")
    b.add_argument("--repeats", type=int, default=3, help="runs per path, alternating; the best is reported")
    b.add_argument("--out", metavar="DIR", default="bench_out", help="where the JSON and PNG go")
    b.add_argument("--table", action="store_true",
                   help="the acceptance-controlled table instead: an oracle draft proposing the target's own greedy "
                        "token with probability p (seeded; the draft model still runs), for each --ps x --ks, "
                        "against slot greedy; writes DIR/bench_speculative_table.json")
    b.add_argument("--ps", default="0.5,0.7,0.9,1.0", help="--table: oracle probabilities")
    b.add_argument("--ks", default="2,4,6", help="--table: num_speculative_tokens values")
    b.add_argument("--adaptive", action="store_true",
                   help="speculative_generate(adaptive=True): each step drafts the k in 0..K with the most expected "
                        "tokens/s (K: --k, or with --table the largest of --ks, which then adds one adaptive row per p)")
    common(b)


def _timed(fn):
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def run(args) -> int:
    import paddle

    from ..generation.inflight import generate_inflight
    from ..generation.speculative import speculative_generate
    from .draft_model import draft_from_target, scale_deep_layers

    if args.repeats < 1 or args.output_len < 2 or args.k < 1:
        raise ValueError(f"--repeats and --k must be >= 1 and --output-len >= 2, got {args.repeats}, {args.k}, {args.output_len}")
    started, load_before = report.now(), os.getloadavg()[0]
    os.makedirs(args.out, exist_ok=True)
    load_ops(out=sys.stderr)
    shape = ModelShape(args.hidden_size, args.layers, args.heads, args.kv_heads, args.vocab)
    positions = args.input_len + args.output_len + args.k + 8
    target = build_model(shape, "float32", positions, args.seed)
    if args.deep_scale != 1.0:
        scale_deep_layers(target, args.draft_layers, args.deep_scale)
    draft = draft_from_target(target, layers=args.draft_layers, noise=args.draft_noise, seed=args.seed)
    ids = random_prompt(args.batch, args.input_len, args.vocab, args.seed)
    mask = paddle.ones_like(ids)
    tokens = args.batch * args.output_len
    if args.table:
        return _run_table(args, target, draft, ids, mask, started, load_before)

    paths = {
        "generate": lambda: target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.output_len,
                                            decode_strategy="greedy_search")[0].numpy(),
        "slot_greedy": lambda: np.asarray(generate_inflight(target, ids.numpy().tolist(), args.output_len,
                                                            max_batch=args.batch)),
        "speculative": lambda: speculative_generate(target, draft, ids, mask, args.output_len, args.k,
                                                    adaptive=args.adaptive, profile=True),
    }
    best = {name: None for name in paths}
    outputs, stats_best = {}, None
    for _ in range(args.repeats):
        for name, fn in paths.items():
            seconds, value = _timed(fn)
            if name == "speculative":
                value, stats = value
                value = value.numpy()
            if best[name] is None or seconds < best[name]:
                best[name] = seconds
                if name == "speculative":
                    stats_best = stats
            outputs[name] = value
    identical = all(np.array_equal(outputs["generate"], outputs[n]) for n in ("slot_greedy", "speculative"))
    steps = stats_best["steps"]
    per_step_ms = {phase: 1e3 * s / steps for phase, s in stats_best["time_s"].items()} if steps else {}
    result = {
        **_header(args, started, load_before, "CPU shared with other jobs while measuring (2 cores, several "
                  "processes): compare paths within this run, not across runs"),
        "draft": {"layers": args.draft_layers, "noise": args.draft_noise,
                  "built_from": "the target's own first layers, embeddings, final norm and lm_head"},
        "batch": args.batch, "input_len": args.input_len, "output_len": args.output_len, "k": args.k,
        "adaptive": args.adaptive,
        "repeats": args.repeats,
        "seconds_best": {n: round(s, 4) for n, s in best.items()},
        "tokens_per_s": {n: round(tokens / s, 2) for n, s in best.items()},
        "speedup_vs_generate": round(best["generate"] / best["speculative"], 3),
        "speedup_vs_slot_greedy": round(best["slot_greedy"] / best["speculative"], 3),
        "acceptance_rate": round(stats_best["acceptance_rate"], 4),
        "tokens_per_target_forward": round(tokens / (args.batch * (stats_best["target_forwards"] - 1) or 1), 3),
        "speculative_stats": {k: v for k, v in stats_best.items() if k not in ("time_s", "k_per_step")},
        "k_counts": _k_counts(stats_best["k_per_step"]),
        "speculative_step_ms": {p: round(v, 3) for p, v in per_step_ms.items()},
        "ids_identical_to_generate": identical,
    }
    json_path = os.path.join(args.out, "bench_speculative.json")
    png_path = os.path.join(args.out, "bench_speculative.png")
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
    _plot(result, png_path)
    for name in paths:
        print(f"{name:>12}: {result['tokens_per_s'][name]:9.1f} tokens/s  ({best[name]:.3f} s best of {args.repeats})")
    print(f"acceptance rate {result['acceptance_rate']:.3f}, k={args.k}, steps {steps}; "
          f"per step (ms): " + ", ".join(f"{p} {v:.2f}" for p, v in result["speculative_step_ms"].items()))
    print(f"ids identical to generate(): {'yes' if identical else 'NO'}")
    print(f"wrote {json_path} and {png_path}")
    return 0 if identical else 1


def _header(args, started, load_before, note: str) -> dict:
    """What every result file of this command starts with: command, time, machine, load, the target."""
    return {"command": "python -m paddle_vtensor " + " ".join(args.argv), "started": started,
            "machine": report.machine(),
            "load_average_1min": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
            "note": note,
            "target": {"hidden_size": args.hidden_size, "layers": args.layers, "heads": args.heads,
                       "kv_heads": args.kv_heads, "vocab": args.vocab, "deep_scale": args.deep_scale}}


def _oracle(truth, p: float, vocab: int, seed: int):
    """The target's greedy token at each output position with probability p, else another token."""
    rng = np.random.default_rng(seed)
    coin = rng.random(truth.shape) < p
    return np.where(coin, truth, (truth + rng.integers(1, vocab, truth.shape)) % vocab)


def _run_table(args, target, draft, ids, mask, started, load_before) -> int:
    """Speculative decoding with the oracle draft at each (k, p) against slot greedy decoding, in one process
    (each best of --repeats; a slot greedy run right before each speculative run, so that both see the same
    load on a shared machine)."""
    from ..generation.inflight import generate_inflight
    from ..generation.speculative import speculative_generate

    ps = [float(v) for v in args.ps.split(",")]
    ks = [int(v) for v in args.ks.split(",")]
    if not ps or not ks or min(ks) < 1 or not all(0.0 <= p <= 1.0 for p in ps):
        raise ValueError(f"--ps must be probabilities in [0, 1] and --ks ints >= 1, got {args.ps!r}, {args.ks!r}")
    n, new = args.batch, args.output_len
    truth = target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new + max(ks),
                            decode_strategy="greedy_search")[0].numpy()
    rows, identical = [], True
    # (k, adaptive): each k of --ks, then with --adaptive one row drafting 0..max(ks) as the policy picks.
    # Every row of one p meets the same coins (one table per p, cut to each k's width): the rows of a p
    # differ only in k, not in the luck of the draw (64 tokens x 4 sequences: +-0.05 in acceptance).
    settings = [(k, False) for k in ks] + ([(max(ks), True)] if args.adaptive else [])
    tables = {p: _oracle(truth[:, :new + max(ks)], p, args.vocab, args.seed + int(p * 100)) for p in ps}
    for k, adaptive in settings:
        for p in ps:
            table = tables[p][:, :new + k]
            best, stats, greedy_s = None, None, None
            for _ in range(args.repeats):  # slot greedy right before each speculative run: the same load
                g = _timed(lambda: generate_inflight(target, ids.numpy().tolist(), new, max_batch=n))[0]
                greedy_s = g if greedy_s is None else min(greedy_s, g)
                seconds, (got, st) = _timed(lambda: speculative_generate(target, draft, ids, mask, new, k,
                                                                         adaptive=adaptive, oracle_proposals=table,
                                                                         profile=True))
                identical &= bool(np.array_equal(got.numpy(), truth[:, :new]))
                if best is None or seconds < best:
                    best, stats = seconds, st
            rows.append({"k": "adaptive" if adaptive else k, "p": p, "tokens_per_s": round(n * new / best, 2),
                         "slot_greedy_tokens_per_s": round(n * new / greedy_s, 2),
                         "speedup_vs_slot_greedy": round(greedy_s / best, 3),
                         "acceptance_rate": round(stats["acceptance_rate"], 4),
                         # accepted drafts per sequence and step (fixed k; an adaptive row's steps differ in k)
                         "mean_accepted_per_step": None if adaptive else round(stats["accepted"] * k / stats["proposed"], 3),
                         "steps": stats["steps"],
                         # where a speculative step's time goes, against a slot greedy step (prefill included)
                         "step_ms": {ph: round(1e3 * t / stats["steps"], 2) for ph, t in stats["time_s"].items()},
                         "slot_greedy_step_ms": round(1e3 * greedy_s / new, 2),
                         **({"k_max": k, "k_counts": _k_counts(stats["k_per_step"])} if adaptive else {})})
            print(" ".join(f"{key} {value}" for key, value in rows[-1].items()), flush=True)
    result = {
        **_header(args, started, load_before, "oracle draft: the draft model runs (its cost stays) but its token at "
                  "output position o is replaced by the target's greedy token there with probability p, else by "
                  "another token"),
        "draft_layers": args.draft_layers, "batch": n, "input_len": args.input_len, "output_len": new,
        "repeats": args.repeats, "rows": rows, "ids_identical_to_generate": identical,
    }
    path = os.path.join(args.out, "bench_speculative_table.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"ids identical to generate(): {'yes' if identical else 'NO'}; wrote {path}")
    return 0 if identical else 1


def _k_counts(ks) -> dict:
    """{k: steps that drafted k} (k = 0: plain steps), for the JSON."""
    return {str(k): ks.count(k) for k in sorted(set(ks))}


def _plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    names = list(result["tokens_per_s"])
    a.bar(names, [result["tokens_per_s"][n] for n in names], color=["#888", "#4a7", "#37c"])
    a.set_ylabel("tokens/s (best of repeats)")
    a.set_title(f"batch {result['batch']}, {result['output_len']} new tokens, k={result['k']}, "
                f"acceptance {result['acceptance_rate']:.2f}", fontsize=9)
    bottom = 0.0
    for phase, ms in result["speculative_step_ms"].items():
        b.bar(["speculative step"], [ms], bottom=bottom, label=f"{phase} {ms:.2f} ms")
        bottom += ms
    b.set_ylabel("ms per step")
    b.legend(fontsize=8)
    fig.suptitle(f"target {result['target']['layers']} layers, draft {result['draft']['layers']} layers "
                 f"(CPU, shared machine)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
