"""Where the host time of llama_loop.py's eager step goes, per layer (issue 32, point 5): each piece of
`ours_attend` timed on its own, host microseconds per call (perf_counter around N calls, no sync inside)
and GPU microseconds per call (events around the same N calls), for GQA (8 kv heads) and MQA (1 kv head),
32 query heads of 128, B=8, ctx 4096, fp16, caches and views made as llama_loop.py makes them.
  plan        ext.plan (check + plan, no launch)
  attention   ext.attention at a fixed length (plan + launches)
  append      begin_append + append + remove_view at advancing positions (the token's write)
  step        append of K and V, then attention: what one layer of the eager loop adds
Usage: python3 tests/gpu/host_cost.py OUT.json [--calls N] [--row-tiles 1|2|4|8 (DecodeOptions::mma_row_tiles)]
"""
import json
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import build  # noqa: E402
from bench_attention import knob_set  # noqa: E402

H, D, B, CTX = 32, 128, 8, 4096


def timed(fn, n):
    """(host us, GPU us) per call of fn over n calls."""
    fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
    e0.record()
    t0 = time.perf_counter()
    for i in range(n):
        fn(i)
    host = (time.perf_counter() - t0) / n * 1e6
    e1.record()
    torch.cuda.synchronize()
    return round(host, 2), round(e0.elapsed_time(e1) / n * 1e3, 2)


def shape_row(ext, kvh, n):
    cap = CTX + 2 * n + 64
    pair = [ext.Cache(B, kvh, D, "float16", cap) for _ in range(2)]
    for c in pair:
        c.begin_append(0, CTX)
        c.tensor()[:CTX].normal_()
    views = [c.tensor() for c in pair]
    qkv = torch.randn(B, (H + 2 * kvh) * D, device="cuda", dtype=torch.float16)  # as layer_qkv's views
    q = qkv[:, :H * D].view(B, 1, H, D)
    k = qkv[:, H * D:(H + kvh) * D].view(B, 1, kvh, D)
    v = qkv[:, (H + kvh) * D:].view(B, 1, kvh, D)
    ws = torch.empty(max(1, *(ext.workspace_bytes(q, views[0], views[1], q, n) for n in (CTX, cap))),
                     dtype=torch.uint8, device="cuda")
    pos = [CTX]

    def append(i=0):
        p = pos[0]
        for c, src in zip(pair, (k, v)):
            c.begin_append(p, 1)
            ext.append(c, src, p)
            c.remove_view(p)
        pos[0] += 1

    def attention(i=0):
        o = torch.empty(q.shape, device="cuda", dtype=torch.float16)
        ext.attention(q, views[0], views[1], o, CTX, ws)

    def step(i=0):
        append()
        o = torch.empty(q.shape, device="cuda", dtype=torch.float16)
        ext.attention(q, views[0], views[1], o, pos[0], ws)

    pl = ext.plan(q, views[0], views[1], q, CTX)
    r = {"kv_heads": kvh, "plan": f"{pl['kernel']} t{pl['mma_tiles']}x{pl['row_groups']} w{pl['mma_warps']} "
         f"s{pl['splits']}" + (" cl" if pl["cluster"] else "")}
    r["plan_us"] = timed(lambda i=0: ext.plan(q, views[0], views[1], q, CTX), n)[0]
    r["attention_host_us"], r["attention_gpu_us"] = timed(attention, n)
    r["append_host_us"], r["append_gpu_us"] = timed(append, n)
    r["step_host_us"], r["step_gpu_us"] = timed(step, n)
    return r


def main():
    n = int(sys.argv[sys.argv.index("--calls") + 1]) if "--calls" in sys.argv else 200
    ext = build.load()
    knobs = {"mma_row_tiles": int(sys.argv[sys.argv.index("--row-tiles") + 1])} if "--row-tiles" in sys.argv else {}
    with knob_set(ext, **knobs):
        rows = [shape_row(ext, kvh, n) for kvh in (8, 1)]
    for r in rows:
        print(json.dumps(r), flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "B": B, "ctx": CTX, "q_heads": H, "head_dim": D,
                   "calls": n, "knobs": knobs, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
