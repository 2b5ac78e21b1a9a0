"""``python -m paddle_vtensor bench``: baseline vs plugin in one process on one random llama;
per-step decode latency against context length, end-to-end generate() time and peak memory,
written to DIR/bench.json and DIR/bench.png."""
from __future__ import annotations

import json
import os
import sys

import numpy as np

from .. import api
from . import report
from .._ops import load_ops
from .paired_run import first_difference, load_integration, measure_both, warm_up
from .tiny_llama import ModelShape, build_model, random_prompt


def add_parser(commands, common) -> None:
    import argparse

    from .cli import DTYPES

    bench = commands.add_parser("bench", help="decode latency vs context length, time and memory; JSON + PNG",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    bench.add_argument("--hidden-size", type=int, default=256, help="model width")
    bench.add_argument("--layers", type=int, default=4, help="decoder layers")
    bench.add_argument("--heads", type=int, default=4, help="attention heads")
    bench.add_argument("--kv-heads", type=int, default=2,
                       help="key/value heads (fewer than --heads: grouped-query attention)")
    bench.add_argument("--vocab", type=int, default=1000, help="vocabulary size")
    bench.add_argument("--batch", type=int, default=1, help="sequences per generate() call")
    bench.add_argument("--input-len", type=int, default=3072, help="prompt tokens")
    bench.add_argument("--output-len", type=int, default=1024, help="generated tokens")
    bench.add_argument("--dtype", choices=DTYPES, default="float32", help="weights and cache (CPU: float32 only)")
    bench.add_argument("--out", metavar="DIR", default="bench_out", help="where bench.json and bench.png go")
    bench.add_argument("--repeats", type=int, default=1,
                       help="runs per path, alternating; per-step medians are reported")
    bench.add_argument("--chunk-kib", type=int, default=None,
                       help="VTensor mapping chunk in KiB; None: the library default (2048)")
    bench.add_argument("--baseline-only", action="store_true", help="skip the plugin run")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    common(bench)


def run(args) -> int:
    started = report.now()
    shape = ModelShape(args.hidden_size, args.layers, args.heads, args.kv_heads, args.vocab)
    shape.check()
    if args.input_len < 1 or args.output_len < 3:
        raise ValueError("--input-len must be >= 1 and --output-len >= 3 (a prefill, the first decode step, "
                         "and later ones)")
    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
    os.makedirs(args.out, exist_ok=True)
    load_ops(out=sys.stderr)
    if args.chunk_kib is not None:
        api.configure(chunk_bytes=args.chunk_kib * 1024)
    integration, missing = (None, "--baseline-only given") if args.baseline_only else load_integration()
    if missing:
        print(f"plugin not run: {missing}", file=sys.stderr)

    model = build_model(shape, args.dtype, args.input_len + args.output_len, args.seed)
    prompt = random_prompt(args.batch, args.input_len, shape.vocab, args.seed)
    warm_up(model, prompt, integration)
    with _progress(args) as on_step_for:
        baseline, plugin = measure_both(model, prompt, args.output_len, args.device, integration, on_step_for,
                                        args.repeats)

    identical = None if plugin is None else first_difference(baseline.tokens, plugin.tokens) is None
    result = {
        "command": "python -m paddle_vtensor " + " ".join(args.argv),
        "date": started,
        "machine": report.machine(),
        "config": {"shape": shape.__dict__, "batch": args.batch, "input_len": args.input_len,
                   "output_len": args.output_len, "dtype": args.dtype, "device": args.device, "seed": args.seed,
                   "vtensor_chunk_bytes": api.configure().chunk_bytes, "repeats": args.repeats},
        "tokens_identical": identical,
        "plugin_missing": missing,
        "concat_bytes_per_step_from_shape": report.concat_bytes_per_step(
            shape, args.batch, args.dtype, args.input_len, args.output_len),
        "in_place_bytes_per_step_from_shape": report.in_place_bytes_per_step(shape, args.batch, args.dtype),
        "baseline": report.run_summary(baseline),
        "plugin": report.run_summary(plugin) if plugin else None,
    }
    json_path, png_path = os.path.join(args.out, "bench.json"), os.path.join(args.out, "bench.png")
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
    plot(result, png_path)

    print(report.comparison_table(baseline, plugin))
    print(_latency_by_context(baseline, plugin))
    print(f"tokens identical: {'n/a' if identical is None else 'yes' if identical else 'NO'}")
    print(f"wrote {json_path} and {png_path}")
    return 1 if identical is False else 0


class _progress:
    """A tqdm bar per measured run (one tick per forward call), on stderr."""

    def __init__(self, args):
        self.args, self.bars = args, []

    def __enter__(self):
        from tqdm import tqdm

        def on_step_for(name):
            bar = tqdm(total=self.args.output_len, desc=name, unit="tok", file=sys.stderr,
                       disable=self.args.no_progress)
            self.bars.append(bar)

            def tick(step):
                bar.update(1)
                if bar.n >= bar.total:  # closed at once, so the next run's bar starts below it
                    bar.close()
            return tick

        return on_step_for

    def __exit__(self, *exc):
        for bar in self.bars:  # after an error, a bar may still be open
            bar.close()


def _latency_by_context(baseline, plugin) -> str:
    """Median decode ms/token over the first and the last tenth of the decode steps."""
    lines = []
    for name, run in (("baseline", baseline), ("plugin", plugin)):
        steps = run.decode_steps if run else []
        if not steps:
            continue
        tenth = max(1, len(steps) // 10)
        head, tail = steps[:tenth], steps[-tenth:]
        lines.append(f"{name}: median {np.median([s.ms for s in head]):.2f} ms/token at context "
                     f"{head[0].context_len}-{head[-1].context_len}, {np.median([s.ms for s in tail]):.2f} "
                     f"at {tail[0].context_len}-{tail[-1].context_len}")
    return "\n".join(lines)


def _rolling_median(values, window: int = 31) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    half = window // 2
    return np.array([np.median(values[max(0, i - half): i + half + 1]) for i in range(len(values))])


def plot(result: dict, path: str) -> None:
    """Per-step decode latency against context length, both paths, plus cache bytes per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (latency, written) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    for name, color in (("baseline", "tab:red"), ("plugin", "tab:blue")):
        run = result[name]
        if run is None:
            continue
        steps = run["steps"]
        context, ms, nbytes = steps["context_len"][1:], steps["ms"][1:], steps["cache_bytes_written"][1:]
        label = f"{name}: median {run['decode_ms_per_token_median']:.2f} ms/token"
        latency.plot(context, ms, color=color, linewidth=0.5, alpha=0.35)
        latency.plot(context, _rolling_median(ms), color=color, linewidth=1.6, label=label + " (line: rolling median)")
        if all(b is not None for b in nbytes):
            written.plot(context, nbytes, color=color, label=name)
    cfg = result["config"]
    shape = cfg["shape"]
    latency.set_title(f"llama h{shape['hidden_size']} L{shape['layers']} heads {shape['heads']}/{shape['kv_heads']}, "
                      f"batch {cfg['batch']}, {cfg['dtype']}, {cfg['device']}: greedy decode")
    latency.set_ylabel("decode step (ms)")
    latency.legend()
    written.set_yscale("log")  # the baseline writes MiB per step, the plugin KiB
    written.set_ylabel("bytes written to KV caches / step")
    written.set_xlabel("context length (tokens cached after the step)")
    written.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
