"""One rank of the sequence-parallel decode test (tests/test_distributed_sp.py launches two with
``python -m paddle.distributed.launch --nproc_per_node 2``). Every rank draws the same tokens,
decodes them through SequenceParallelKVCache, and checks every step's output against attention over
the whole cache in one process (the op on plain tensors, and numpy in float64); then the bad calls.
Usage: ``distributed_sp_worker.py OUT_DIR DTYPE...``; writes ``<out_dir>/rank<r>.json``."""
import json
import math
import os
import sys

import numpy as np
import paddle
import paddle.distributed as dist

import paddle_vtensor as pvt
from paddle_vtensor.generation.distributed import SequenceParallelKVCache

LAYERS, B, HQ, HKV, D = 2, 2, 4, 2, 16
# (n_new, q_len) per step: a prefill chunk, decode steps, a 3-token verify chunk, more decode.
STEPS = [(5, 5)] + [(1, 1)] * 14 + [(3, 3)] + [(1, 1)] * 10 + [(4, 1)] + [(1, 1)] * 6
ATOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def np_attention(q, k, v):
    """Causal attention in float64: the step's Tq queries are the sequence's last Tq tokens."""
    tq, s_len = q.shape[1], k.shape[1]
    k = np.repeat(k, HQ // HKV, axis=2)
    v = np.repeat(v, HQ // HKV, axis=2)
    s = np.einsum("bthd,bshd->bths", q, k) / math.sqrt(D)
    visible = np.arange(s_len)[None, :] < s_len - tq + np.arange(tq)[:, None] + 1
    s = np.where(visible[None, :, None, :], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bths,bshd->bthd", p / p.sum(-1, keepdims=True), v)


def f32(x):
    return x.astype("float32").numpy()


def decode(sp, dtype, rng, full_k, full_v, record):
    for n_new, tq in STEPS:
        sp.begin_step(n_new)
        for layer in range(LAYERS):
            q = paddle.to_tensor(rng.standard_normal([B, tq, HQ, D]).astype(np.float32)).astype(dtype)
            k = paddle.to_tensor(rng.standard_normal([B, n_new, HKV, D]).astype(np.float32)).astype(dtype)
            v = paddle.to_tensor(rng.standard_normal([B, n_new, HKV, D]).astype(np.float32)).astype(dtype)
            full_k[layer] = k if full_k[layer] is None else paddle.concat([full_k[layer], k], axis=1)
            full_v[layer] = v if full_v[layer] is None else paddle.concat([full_v[layer], v], axis=1)
            out = sp.attention(layer, q, k, v)
            whole = pvt.decode_attention(q, full_k[layer], full_v[layer])  # one process, whole cache
            ref = np_attention(*(f32(x).astype(np.float64) for x in (q, full_k[layer], full_v[layer])))
            record["max_err_vs_op"] = max(record["max_err_vs_op"], float(np.abs(f32(out) - f32(whole)).max()))
            record["max_err_vs_numpy"] = max(record["max_err_vs_numpy"], float(np.abs(f32(out) - ref).max()))
            record["checked"] += 1
            outs = []
            dist.all_gather(outs, out)  # every rank must return the same merged output
            record["ranks_agree"] &= all(bool((f32(o) == f32(out)).all()) for o in outs)
        sp.end_step()


def snapshot(sp):
    return ([None if t is None else f32(t).copy() for t in sp.k + sp.v], sp.tokens.copy(), sp.length,
            pvt.memory_stats("cpu")["mapped_bytes"])


def same(a, b):
    ta, tb = a[0], b[0]
    return (all((x is None and y is None) or (x is not None and y is not None and np.array_equal(x, y))
                for x, y in zip(ta, tb)) and np.array_equal(a[1], b[1]) and a[2:] == b[2:])


def bad_calls(sp, dtype, rank):
    """Each bad call must raise ValueError on EVERY rank (nobody hangs) and change no cache."""
    results = {}
    try:
        SequenceParallelKVCache(LAYERS, world_size=3)
        results["world_size"] = "no error"
    except ValueError as e:
        results["world_size"] = str(e)

    def attempt(name, heads_q, heads_kv, dim, layer=0):
        before = snapshot(sp)
        sp.begin_step(1)
        q = paddle.zeros([B, 1, heads_q, dim], dtype)
        kv = paddle.zeros([B, 1, heads_kv, dim], dtype)
        try:
            sp.attention(layer, q, kv, kv)
            results[name] = "no error"
        except ValueError as e:
            results[name] = str(e)
        sp._plan = None  # abandon the step (nothing was appended)
        results[name + "_unchanged"] = same(before, snapshot(sp))

    # Rank 1 alone has other head counts: both ranks refuse.
    attempt("heads_mismatch", HQ if rank == 0 else 2 * HQ, HKV if rank == 0 else 2 * HKV, D)
    # Rank 1 alone has twice the query heads (still valid for its own cache): the ranks disagree.
    attempt("q_heads_mismatch", HQ if rank == 0 else 2 * HQ, HKV, D)
    # Rank 1 alone has another head_dim.
    attempt("dim_mismatch", HQ, HKV, D if rank == 0 else D // 2)
    # Rank 1 alone passes a layer out of range (a local refusal the other rank must hear of).
    attempt("bad_layer_one_rank", HQ, HKV, D, layer=0 if rank == 0 else LAYERS)
    # Every rank agrees but the cache holds other heads: refused locally everywhere.
    attempt("heads_vs_cache", 2 * HQ, 2 * HKV, D)
    return results


def run(dtype, rank):
    rng = np.random.default_rng(7)  # the same stream on every rank: the same tokens and queries
    sp = SequenceParallelKVCache(LAYERS, world_size=2, max_seq_len=256, chunk_bytes=4096)
    record = {"max_err_vs_op": 0.0, "max_err_vs_numpy": 0.0, "checked": 0, "ranks_agree": True}
    full_k, full_v = [None] * LAYERS, [None] * LAYERS
    decode(sp, dtype, rng, full_k, full_v, record)
    record["errors"] = bad_calls(sp, dtype, rank)
    # The caches still work after the refusals: decode on and check again.
    decode(sp, dtype, rng, full_k, full_v, record)
    record["stats"] = sp.stats()
    record["atol"] = ATOL[dtype]
    return record


def main():
    out_dir, dtypes = sys.argv[1], sys.argv[2:]
    pvt._ops.load()  # before the first collective: gloo gives a late peer only so long
    dist.init_parallel_env()
    rank = dist.get_rank()
    records = {dtype: run(dtype, rank) for dtype in dtypes}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(records, f)


if __name__ == "__main__":
    main()
