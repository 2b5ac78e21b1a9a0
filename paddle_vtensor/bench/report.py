"""Turning measured runs into text and JSON: shared by the demo and the benchmark."""
from __future__ import annotations

import datetime
import os
import platform

import numpy as np
import paddle

from .paired_run import Run
from .peak_memory import PeakBytes
from .tiny_llama import ModelShape


def human_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def token_bytes(shape: ModelShape, batch: int, dtype: str) -> int:
    """Bytes of one token's K (or V) in one layer: batch * kv_heads * head_dim * element size."""
    return batch * shape.kv_heads * shape.head_dim * paddle.to_tensor(0, dtype=dtype).element_size()


def concat_bytes_per_step(shape: ModelShape, batch: int, dtype: str, input_len: int, new_tokens: int) -> float:
    """What concat writes per decode step, averaged over the run: 2 (K, V) * layers * token bytes *
    (tokens after the step). Decode step k (1..new_tokens-1) ends with input_len + k tokens."""
    steps = np.arange(1, new_tokens)
    mean_tokens = float(np.mean(input_len + steps)) if len(steps) else 0.0
    return 2 * shape.layers * token_bytes(shape, batch, dtype) * mean_tokens


def in_place_bytes_per_step(shape: ModelShape, batch: int, dtype: str) -> int:
    """One new token per layer per K and V."""
    return 2 * shape.layers * token_bytes(shape, batch, dtype)


def run_summary(run: Run) -> dict:
    return {
        "generate_s": run.generate_s,
        "prefill_ms": run.steps[0].ms if run.steps else None,
        "decode_ms_per_token_median": run.decode_ms_per_token(),
        "decode_ms_per_token_mean": run.decode_ms_per_token(np.mean),
        "decode_cache_bytes_per_step": run.decode_cache_bytes_per_step(),
        "first_decode_step_cache_bytes": run.first_decode_cache_bytes(),
        "later_decode_steps_cache_bytes_per_step": run.decode_cache_bytes_per_step(first=2),
        "plugin_counters": run.plugin_counters,
        "decode_usage": run.decode_usage,
        "cache_in_vtensors": run.cache_in_vtensors(),
        "peak_bytes_first_decode_step": _peaks(run.first_decode_memory),
        "peak_bytes_later_decode_steps": _peaks(run.decode_memory),
        "peak_bytes_whole_generate": _peaks(run.whole_memory),
        "steps": {
            "context_len": [s.context_len for s in run.steps],
            "new_tokens": [s.new_tokens for s in run.steps],
            "ms": [round(s.ms, 4) for s in run.steps],
            "cache_bytes_written": [s.cache_bytes_written for s in run.steps],
            "cache_bytes_counted_by_ops": [s.cache_bytes_counted for s in run.steps],
        },
    }


def _peaks(peak: PeakBytes) -> dict:
    return {"paddle_allocated": peak.paddle_allocated, "vtensor_mapped": peak.vtensor_mapped,
            "paddle_plus_vtensor": peak.total, "process_rss": peak.process_rss}


def machine() -> dict:
    import paddlenlp

    info = {"cpu": platform.processor() or "unknown", "cores": os.cpu_count(), "ram_gib": None,
            "paddle": paddle.__version__, "paddlenlp": paddlenlp.__version__, "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        info["cpu"] = names[0] if names else info["cpu"]
        with open("/proc/meminfo") as f:
            total_kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal"))
        info["ram_gib"] = round(total_kib / 2**20, 1)
    except (OSError, StopIteration):
        pass
    if paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        info["gpu"] = paddle.device.cuda.get_device_name()
    return info


def now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


COLUMNS = ("", "baseline (concat)", "plugin (VTensor)")


def comparison_table(baseline: Run, plugin: Run | None) -> str:
    """The side-by-side table; the plugin column says n/a when there is no plugin run."""
    def cell(run, value):
        return "n/a" if run is None else value(run)

    rows = [
        ("decode ms/token, median", lambda r: f"{r.decode_ms_per_token():.2f}"),
        ("decode ms/token, mean", lambda r: f"{r.decode_ms_per_token(np.mean):.2f}"),
        ("generate() s", lambda r: f"{r.generate_s:.2f}"),
        ("cache written, 1st decode step", lambda r: human_bytes(r.first_decode_cache_bytes())),
        ("cache written/step, later steps", lambda r: human_bytes(r.decode_cache_bytes_per_step(first=2))),
        ("page faults/decode step", lambda r: f"{r.decode_usage['minor_faults'] / max(1, len(r.decode_steps)):.0f}"),
        ("later steps peak: paddle stats", lambda r: human_bytes(r.decode_memory.paddle_allocated)),
        ("later steps peak: VTensor mapped", lambda r: human_bytes(r.decode_memory.vtensor_mapped)),
        ("later steps peak: tensors+caches", lambda r: human_bytes(r.decode_memory.total)),
        ("later steps peak: process RSS", lambda r: human_bytes(r.decode_memory.process_rss)),
        ("1st decode step peak: tensors+caches", lambda r: human_bytes(r.first_decode_memory.total)),
        ("generate() peak: tensors+caches", lambda r: human_bytes(r.whole_memory.total)),
    ]
    table = [COLUMNS] + [(name, cell(baseline, fn), cell(plugin, fn)) for name, fn in rows]
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    lines = ["  ".join(text.ljust(w) if i == 0 else text.rjust(w) for i, (text, w) in enumerate(zip(row, widths)))
             for row in table]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def legend(counts_vtensor: bool) -> str:
    """What each row of comparison_table is, with the rule that tells how paddle's stats and the
    VTensor mappings combine in this build."""
    combined = ("paddle's stats, which already include the VTensor mappings (the ops report them)"
                if counts_vtensor else
                "paddle's stats plus the VTensor mappings (an upper bound: they need not peak together)")
    return f"""\
What the numbers are:
  decode ms/token      wall time of one decode forward call (one new token per sequence), timed by
                       hooks on the model with the device synchronised; median and mean over the
                       decode steps; the prefill is excluded.
  generate() s         the whole generate() call, prefill included.
  cache written        bytes written into the K and V caches of all layers in a decode step. Plugin:
                       counted by its ops (every append, migration and copy-on-write adds what its
                       kernel writes; memory_stats()["bytes_written"]); its first decode step moves
                       the prefill's cache into a VTensor once. Baseline: concat returns a new tensor
                       holding every past token, so each step writes the whole cache.
  page faults          minor page faults of the process per decode step (getrusage): each is a page of
                       memory the step touched for the first time, e.g. a fresh allocation.
  peaks                each is the high-water mark minus what was held just before generate() (the
                       weights), over: the decode steps after the first ("later steps", the steady
                       state); the first decode step (where the plugin holds the prefill's dense cache
                       and its VTensor copy at once); the whole generate(), which the prefill's
                       attention activations (the same on both paths) usually dominate.
    paddle stats       paddle's "Allocated" memory stat: activations, logits, the baseline's cache
                       (old and new copy both live during concat){", the VTensor chunks" if counts_vtensor else ""}.
    VTensor mapped     memory the plugin mapped for caches, in whole chunks (default 2 MiB) per layer
                       per K/V, so small models round up a lot. On a CPU the OS backs a mapped chunk
                       with pages only once they are written: process RSS shows what was touched.
    tensors+caches     {combined}.
    process RSS        the process's resident-set high-water mark (Linux VmHWM, reset per phase):
                       host memory only, including memory paddle's allocator keeps cached."""
