"""``python -m paddle_vtensor bench-attention``: the CPU decode-attention kernel against numpy's einsum
attention and against a plain read of the same bytes (the floor any decode attention must pay),
for any shapes. All three run interleaved in one process, best of N, so a shared machine's load
hits them alike. Prints a table (stderr) and JSON (stdout, and --out)."""
from __future__ import annotations

import json
import math
import sys
import time

import numpy as np

from . import report

DEFAULT_SHAPES = ("2,3072,8,8,32", "4,4096,32,8,128", "1,16384,32,32,128")


def add_parser(commands, common) -> None:
    import argparse

    sub = commands.add_parser("bench-attention", help="CPU decode attention vs numpy einsum vs the read floor; JSON",
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub.add_argument("--shape", action="append", metavar="B,S,HQ,HKV,D",
                     help=f"batch, cached tokens, query heads, kv heads, head dim; repeatable "
                          f"(default: {' '.join(DEFAULT_SHAPES)})")
    sub.add_argument("--tq", type=int, default=1, help="query tokens per sequence (causal)")
    # Not --dtype: the CLI refuses a 16-bit --dtype on the CPU (paddle cannot matmul it); this kernel can.
    sub.add_argument("--cache-dtype", choices=("float32", "float16", "bfloat16"), default="float32",
                     help="dtype of q, K, V (numpy's einsum runs on float32 copies: it has no fast 16-bit path)")
    sub.add_argument("--repeats", type=int, default=20, help="timed calls of each, interleaved; best is reported")
    sub.add_argument("--out", metavar="FILE", default=None, help="also write the JSON here")
    common(sub)


def parse_shape(text: str) -> tuple[int, int, int, int, int]:
    parts = text.split(",")
    if len(parts) != 5 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"--shape wants five positive integers B,S,HQ,HKV,D, got {text!r}")
    b, s, hq, hkv, d = (int(p) for p in parts)
    if hq % hkv:
        raise ValueError(f"--shape {text!r}: HQ ({hq}) must be a multiple of HKV ({hkv})")
    return b, s, hq, hkv, d


def numpy_attention(q: np.ndarray, ks: np.ndarray, vs: np.ndarray, scale: float) -> np.ndarray:
    """The einsum baseline on the seq-major cache ([S, B, Hkv, D], float32) without repeating K/V for
    grouped heads: q [B, Tq, Hq, D] -> [B, Tq, Hq, D]; causal over the last Tq keys."""
    b, tq, hq, d = q.shape
    s_len, hkv = ks.shape[0], ks.shape[2]
    g = hq // hkv
    qg = q.reshape(b, tq, hkv, g, d)
    scores = np.einsum("btkgd,sbkd->bkgts", qg, ks, optimize=True) * scale
    if tq > 1:
        t_idx = np.arange(tq)[:, None]
        s_idx = np.arange(s_len)[None, :]
        scores = np.where(s_idx < s_len - tq + t_idx + 1, scores, -np.inf)
    scores -= scores.max(-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(-1, keepdims=True)
    out = np.einsum("bkgts,sbkd->btkgd", p, vs, optimize=True)
    return out.reshape(b, tq, hq, d)


def read_floor(ks: np.ndarray, vs: np.ndarray) -> float:
    """Reads every byte of K and V once (numpy's vectorised sum; 16-bit caches seen as float32 words
    so that the read, not a conversion, is timed)."""
    return float(ks.view(np.float32).sum()) + float(vs.view(np.float32).sum())


# Read before every timed call so that every call starts from the same cache state: none finds the
# bytes the previous call read in the last-level cache (32 MiB on the machine of docs/PERFORMANCE.md).
FLUSH_BYTES = 128 << 20


def best_of(fns: dict, repeats: int) -> dict:
    """Runs each callable once to warm up, then `repeats` rounds of all of them in turn, each call
    after a read of FLUSH_BYTES of other memory."""
    flush = np.ones(FLUSH_BYTES // 8)
    times = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(repeats):
        for name, fn in fns.items():
            flush.sum()
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: {"best_s": min(ts), "median_s": float(np.median(ts))} for name, ts in times.items()}


def measure(shape, tq: int, dtype: str, repeats: int, seed: int) -> dict:
    import paddle

    import paddle_vtensor as pvt
    from paddle_vtensor.api import storage_view

    b, s_len, hq, hkv, d = shape
    if tq > s_len:
        raise ValueError(f"--tq ({tq}) must not exceed S ({s_len})")
    rng = np.random.default_rng(seed)
    scale = 1.0 / math.sqrt(d)
    q = paddle.to_tensor(rng.uniform(-2, 2, (b, tq, hq, d)).astype(np.float32)).astype(dtype)
    caches = []
    for _ in range(2):  # K, V: made dense, migrated into a VTensor, the dense copy dropped
        dense = paddle.to_tensor(rng.uniform(-1, 1, (b, s_len, hkv, d)).astype(np.float32)).astype(dtype)
        caches.append(pvt.from_dense(dense))
        del dense
    k, v = caches
    assert pvt.is_vtensor(k) and pvt.is_vtensor(v)
    # numpy's copies in the same seq-major order [S, B, Hkv, D]: the bytes the kernel reads.
    ks_raw, vs_raw = (storage_view(x).numpy() for x in (k, v))
    if dtype == "float32":
        ks32, vs32 = ks_raw, vs_raw
    else:
        ks32, vs32 = (storage_view(x).astype("float32").numpy() for x in (k, v))
    q32 = q.astype("float32").numpy()

    def ours():
        return pvt.decode_attention(q, k, v)

    timing = best_of({"ours": ours, "numpy_einsum": lambda: numpy_attention(q32, ks32, vs32, scale),
                      "read_floor": lambda: read_floor(ks_raw, vs_raw)}, repeats)
    err = float(np.abs(ours().astype("float32").numpy() - numpy_attention(q32, ks32, vs32, scale)).max())
    cache_bytes = ks_raw.nbytes + vs_raw.nbytes
    result = {"batch": b, "kv_len": s_len, "q_heads": hq, "kv_heads": hkv, "head_dim": d, "q_len": tq,
              "dtype": dtype, "cache_bytes": cache_bytes, "max_abs_diff_vs_numpy": err}
    for name, t in timing.items():
        result[name] = {**t, "gb_per_s": cache_bytes / t["best_s"] / 1e9}
    result["ours_over_floor"] = timing["ours"]["best_s"] / timing["read_floor"]["best_s"]
    result["numpy_over_ours"] = timing["numpy_einsum"]["best_s"] / timing["ours"]["best_s"]
    del k, v, caches
    return result


def kernel_info() -> dict:
    from .._ops import c

    return {"isa": c.cpu_attention_isa(), "threads": c.cpu_attention_threads()}


def table(results: list[dict]) -> str:
    lines = ["| B | S | Hq/Hkv | D | dtype | cache | ours | numpy einsum | read floor | ours/floor |",
             "|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in results:
        def cell(name):
            return f"{r[name]['best_s'] * 1e3:.2f} ms ({r[name]['gb_per_s']:.1f} GB/s)"
        lines.append(f"| {r['batch']} | {r['kv_len']} | {r['q_heads']}/{r['kv_heads']} | {r['head_dim']} | "
                     f"{r['dtype']} | {report.human_bytes(r['cache_bytes'])} | {cell('ours')} | "
                     f"{r['numpy_einsum']['best_s'] * 1e3:.2f} ms | {cell('read_floor')} | "
                     f"{r['ours_over_floor']:.2f} |")
    return "\n".join(lines)


def run(args) -> int:
    if args.device != "cpu":
        raise ValueError("bench-attention measures the CPU kernel: pass --device cpu")
    if args.repeats < 1 or args.tq < 1:
        raise ValueError("--repeats and --tq must be >= 1")
    from .._ops import load_ops

    load_ops(out=sys.stderr)
    shapes = [parse_shape(s) for s in (args.shape or DEFAULT_SHAPES)]
    started = report.now()
    results = []
    for shape in shapes:
        results.append(measure(shape, args.tq, args.cache_dtype, args.repeats, args.seed))
        print(table(results[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    out = {"command": "python -m paddle_vtensor " + " ".join(args.argv), "started": started,
           "finished": report.now(), "machine": report.machine(), "kernel": kernel_info(),
           "repeats": args.repeats, "results": results}
    print(table(results), file=sys.stderr)
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0
