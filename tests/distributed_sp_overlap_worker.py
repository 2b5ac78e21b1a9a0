"""One rank of the packed-exchange and overlap test (tests/test_distributed_sp.py launches 2 or 4 with
``python -m paddle.distributed.launch``). A small decoder (QKV, attention, output projection, MLP;
random weights, the same on every rank) decodes a batch of 4 sequences, its KV caches split across
the ranks, once unsplit (one micro-batch) and once as two micro-batches whose gathers overlap
(``SplitBatchSequenceParallel``); every step's hidden states are checked against the same model in
one process over whole caches. Every collective this process makes through ``paddle.distributed``
is counted by wrapping the functions themselves (not the class's own bookkeeping), per step.
Then bad input: one rank's wrong shapes inside a split step, and an append that fails on its owner.

Usage: ``distributed_sp_overlap_worker.py OUT_DIR [--profile STEPS]``; writes ``<out_dir>/rank<r>.json``.
``--profile`` instead times STEPS decode steps of a larger model (1 vs 2 micro-batches) and writes the
timeline (what ran when, the gathers from the communication thread included)."""
import json
import math
import os
import sys
import time

import numpy as np
import paddle
import paddle.distributed as dist

import paddle_vtensor as pvt
from paddle_vtensor.generation.distributed import SequenceParallelKVCache
from paddle_vtensor.generation.sp_overlap import SplitBatchSequenceParallel

COLLECTIVES = []  # (function, bytes sent) of every collective, in call order (any thread)


def count_collectives():
    """Wrap every collective of paddle.distributed and paddle.distributed.stream."""
    for label, mod in (("paddle.distributed", dist), ("paddle.distributed.stream", dist.stream)):
        for name in ("all_gather", "all_reduce", "broadcast", "reduce", "scatter", "gather", "alltoall",
                     "alltoall_single", "reduce_scatter", "send", "recv", "barrier", "all_gather_object"):
            fn = getattr(mod, name, None)
            if fn is None:
                continue

            def counted(*args, _fn=fn, _name=f"{label}.{name}", **kw):
                sent = args[1] if len(args) > 1 and isinstance(args[1], paddle.Tensor) else None
                COLLECTIVES.append((_name, 0 if sent is None else int(sent.numel()) * sent.element_size()))
                return _fn(*args, **kw)
            setattr(mod, name, counted)


class Decoder:
    """qkv and post of a small pre-norm-free decoder; weights scaled so activations stay O(1)."""

    def __init__(self, layers, hid, hq, hkv, d, seed=11):
        rng = np.random.default_rng(seed)
        w = lambda i, o: paddle.to_tensor((rng.standard_normal([i, o]) / math.sqrt(i)).astype(np.float32))
        self.layers, self.hq, self.hkv, self.d = layers, hq, hkv, d
        self.wqkv = [w(hid, (hq + 2 * hkv) * d) for _ in range(layers)]
        self.wo = [w(hq * d, hid) for _ in range(layers)]
        self.w1 = [w(hid, 2 * hid) for _ in range(layers)]
        self.w2 = [w(2 * hid, hid) for _ in range(layers)]

    def qkv(self, layer, h):
        b, t = h.shape[:2]
        x = paddle.matmul(h, self.wqkv[layer])
        q, k, v = paddle.split(x, [self.hq * self.d, self.hkv * self.d, self.hkv * self.d], axis=-1)
        return (q.reshape([b, t, self.hq, self.d]), k.reshape([b, t, self.hkv, self.d]),
                v.reshape([b, t, self.hkv, self.d]))

    def post(self, layer, h, attn):
        b, t = h.shape[:2]
        h = h + paddle.matmul(attn.reshape([b, t, -1]), self.wo[layer])
        return h + paddle.matmul(paddle.tanh(paddle.matmul(h, self.w1[layer])), self.w2[layer])


def reference_step(model, h, caches):
    """The same step in one process: every layer attends over its whole cache (plain tensors)."""
    for layer in range(model.layers):
        q, k, v = model.qkv(layer, h)
        ks, vs = caches[layer]
        caches[layer] = (k if ks is None else paddle.concat([ks, k], 1), v if vs is None else paddle.concat([vs, v], 1))
        h = model.post(layer, h, pvt.decode_attention(q, *caches[layer]))
    return h


def f32(x):
    return x.astype("float32").numpy()


def exact_and_counted(rank, world):
    """Prefill 5 tokens, then 12 decode steps; 1 and 2 micro-batches against one process."""
    layers, b, hid, hq, hkv, d = 3, 4, 32, 4, 2, 16
    model = Decoder(layers, hid, hq, hkv, d)
    rng = np.random.default_rng(5)
    steps = [5] + [1] * 12
    inputs = [paddle.to_tensor(rng.standard_normal([b, n, hid]).astype(np.float32)) for n in steps]
    record = {}
    for micro in (1, 2):
        split = SplitBatchSequenceParallel(layers, b, micro_batches=micro, world_size=world, max_seq_len=64,
                                           chunk_bytes=4096)
        caches = [(None, None)] * layers
        per_step, max_err, agree = [], 0.0, True
        for n, x in zip(steps, inputs):
            before = len(COLLECTIVES)
            h = split.step(x, n, model.qkv, model.post)
            per_step.append(COLLECTIVES[before:])
            ref = reference_step(model, x, caches)
            max_err = max(max_err, float(np.abs(f32(h) - f32(ref)).max()))
            hs = []
            dist.all_gather(hs, h)  # every rank must hold the same hidden states (outside the count)
            agree &= all(bool((f32(o) == f32(h)).all()) for o in hs)
        stats = [sp.stats() for sp in split.parts]
        record[f"micro_batches_{micro}"] = {
            "collectives_per_step": [len(c) for c in per_step],
            "functions": sorted({name for c in per_step for name, _ in c}),
            "bytes_per_decode_collective": sorted({nbytes for c in per_step[1:] for _, nbytes in c}),
            "max_err_vs_one_process": max_err, "ranks_agree": agree, "stats": stats,
            "rows_per_micro_batch": [hi - lo for lo, hi in split.bounds]}
    record["layers"], record["shape"] = layers, {"batch": b, "q_heads": hq, "kv_heads": hkv, "head_dim": d}
    return record


def snapshot(sp, layer):
    return [None if t is None else f32(t).copy() for t in (sp.k[layer], sp.v[layer])], sp.tokens.tolist()


def same(a, b):
    return all((x is None) == (y is None) and (x is None or np.array_equal(x, y)) for x, y in zip(a[0], b[0])) \
        and a[1] == b[1]


def bad_input(rank, world):
    """Inside a split step, rank 0 alone gives micro-batch 0 twice the query heads at layer 1: every
    rank raises; layer 1 of both micro-batches is unchanged (the token's owner, the last rank after a
    3-token prompt, drops the append it made; micro-batch 1's started call is drained, its append
    dropped). Then an append that fails on its
    owner only (its reservation is full): every rank raises, no cache changed."""
    layers, b, hid, hq, hkv, d = 2, 4, 32, 4, 2, 16
    model = Decoder(layers, hid, hq, hkv, d, seed=3)
    split = SplitBatchSequenceParallel(layers, b, micro_batches=2, world_size=world, max_seq_len=64, chunk_bytes=4096)
    rng = np.random.default_rng(9)
    split.step(paddle.to_tensor(rng.standard_normal([b, 3, hid]).astype(np.float32)), 3, model.qkv, model.post)
    before = [snapshot(sp, 1) for sp in split.parts]
    mapped = pvt.memory_stats("cpu")["mapped_bytes"]

    calls = []

    def qkv(layer, h):
        calls.append(layer)
        q, k, v = model.qkv(layer, h)
        if calls.count(1) == 1 and layer == 1 and rank == 0:
            q = paddle.concat([q, q], axis=2)  # this rank alone: 8 query heads for micro-batch 0
        return q, k, v
    result = {}
    try:
        split.step(paddle.to_tensor(rng.standard_normal([b, 1, hid]).astype(np.float32)), 1, qkv, model.post)
        result["split_step"] = "no error"
    except ValueError as e:
        result["split_step"] = str(e)
    result["split_layer1_unchanged"] = all(same(x, snapshot(sp, 1)) for x, sp in zip(before, split.parts))
    result["split_pending_drained"] = all(sp._pending is None for sp in split.parts)
    del split

    # A reservation of one 4 KiB chunk per rank (32 tokens of 2 x 16 float32), filled by the prompt:
    # the next token's owner (rank 0: every rank holds 32) cannot append.
    sp = SequenceParallelKVCache(1, world_size=world, max_seq_len=32, chunk_bytes=4096)
    sp.begin_step(32 * world)
    kv = paddle.ones([1, 32 * world, hkv, d])
    sp.attention(0, paddle.ones([1, 1, hq, d]), kv, kv)
    sp.end_step()
    before, mapped = snapshot(sp, 0), pvt.memory_stats("cpu")["mapped_bytes"]
    sp.begin_step(1)
    try:
        sp.attention(0, paddle.ones([1, 1, hq, d]), kv[:, :1], kv[:, :1])
        result["append_fails"] = "no error"
    except ValueError as e:
        result["append_fails"] = str(e)
    result["append_fails_unchanged"] = same(before, snapshot(sp, 0)) and mapped == pvt.memory_stats("cpu")["mapped_bytes"]
    return result


def profile(rank, world, steps):
    """Decode steps of a larger decoder (B=8, 8 query / 2 kv heads, D=64, hidden 512, 4 layers, a
    1024-token prompt), 1 vs 2 micro-batches: median step time and one step's timeline."""
    layers, b, hid, hq, hkv, d, prompt = 4, 8, 512, 8, 2, 64, 1024
    model = Decoder(layers, hid, hq, hkv, d)
    rng = np.random.default_rng(1)
    out = {"config": {"layers": layers, "batch": b, "hidden": hid, "q_heads": hq, "kv_heads": hkv, "head_dim": d,
                      "prompt": prompt, "world": world, "steps": steps}}
    trace_comm = []
    run_gather = dist.stream.all_gather

    def traced(*args, **kw):
        t0 = time.perf_counter()
        r = run_gather(*args, **kw)
        trace_comm.append((f"all_gather {int(args[1].numel())} B", t0, time.perf_counter()))
        return r
    dist.stream.all_gather = traced
    for micro in (1, 2):
        split = SplitBatchSequenceParallel(layers, b, micro_batches=micro, world_size=world,
                                           max_seq_len=prompt + steps + 8, chunk_bytes=1 << 16)
        # The prompt's K/V through the same protocol, attended by its last token only (no prefill cost).
        last_only = lambda layer, h: (lambda q, k, v: (q[:, -1:], k, v))(*model.qkv(layer, h))
        split.step(paddle.to_tensor(rng.standard_normal([b, prompt, hid]).astype(np.float32) * 0.1), prompt,
                   last_only, lambda layer, h, attn: h)
        times, trace = [], None
        for i in range(steps):
            trace = [] if i == steps - 1 else None
            trace_comm.clear()
            x = paddle.to_tensor(rng.standard_normal([b, 1, hid]).astype(np.float32) * 0.1)
            dist.barrier()
            t0 = time.perf_counter()
            split.step(x, 1, model.qkv, model.post, trace=trace)
            times.append(time.perf_counter() - t0)
        out[f"micro_batches_{micro}"] = {
            "median_ms": round(1e3 * sorted(times)[len(times) // 2], 3),
            "timeline": [(w, m, l, round(1e3 * (a - t0), 3), round(1e3 * (e - t0), 3)) for w, m, l, a, e in trace]
            + [(w, -1, -1, round(1e3 * (a - t0), 3), round(1e3 * (e - t0), 3)) for w, a, e in trace_comm]}
    dist.stream.all_gather = run_gather
    return out


def main():
    out_dir = sys.argv[1]
    pvt._ops.load()  # before the first collective: gloo gives a late peer only so long
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    if "--profile" in sys.argv:
        record = profile(rank, world, int(sys.argv[sys.argv.index("--profile") + 1]))
    else:
        count_collectives()
        record = {"exact": exact_and_counted(rank, world), "bad": bad_input(rank, world)}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main()
