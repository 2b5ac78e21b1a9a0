# one-off (run 35): one-row plans the steps-per-block rule changed beyond the measured 32-head rows: MHA with 8
# and 16 heads at B=1, cold L2 (each call reads another of n copies, 3 x L2 in all), fp16; the plan's count
# (auto) against the old rule's count and others, forced with PVT_DECODE_SPLITS (read at capture).
import json, os, random, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
sys.path.insert(0, "tests/gpu")
import build
from bench_attention import graphed, timed
ext = build.load()
D, dt = 128, torch.float16
l2 = torch.cuda.get_device_properties(0).L2_cache_size
rows = []
for H, S, counts in ((8, 2048, (16, 32, 64)), (8, 4096, (32, 64)), (16, 2048, (16, 32)), (32, 1024, (8, 16))):
    B, kvh = 1, H
    kv_bytes = 2 * B * S * kvh * D * 2
    n = -(-3 * l2 // kv_bytes)
    iters = n * max(1, -(-100 // n))
    q = torch.randn(B, H, 1, D, device="cuda", dtype=dt); qo = q.transpose(1, 2)
    k = [torch.randn(B, kvh, S, D, device="cuda", dtype=dt) for _ in range(n)]
    v = [torch.randn_like(k[0]) for _ in range(n)]
    ks = [x.permute(2, 0, 1, 3).contiguous() for x in k]; vs = [x.permute(2, 0, 1, 3).contiguous() for x in v]
    ref = F.scaled_dot_product_attention(q.float(), k[0].float(), v[0].float()).transpose(1, 2)
    turn = [0]
    def nxt():
        turn[0] = (turn[0] + 1) % n
        return turn[0]
    def cud():
        i = nxt()
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k[i], v[i])
    graphs, errs, keep = {}, {}, []
    turn[0] = n - 1; graphs["cudnn"] = graphed(cud, iters)
    out0 = torch.empty(B, 1, H, D, device="cuda", dtype=dt)
    auto = ext.workspace_bytes(qo, ks[0], vs[0], out0, S) // max(1, B * H * (D + 2) * 4)
    for c in (0,) + counts:
        if c: os.environ["PVT_DECODE_SPLITS"] = str(c)
        try:
            out = torch.empty(B, 1, H, D, device="cuda", dtype=dt)
            ws = torch.empty(max(1, ext.workspace_bytes(qo, ks[0], vs[0], out, S)), dtype=torch.uint8, device="cuda")
            fn = lambda out=out, ws=ws: ext.attention(qo, ks[nxt()], vs[turn[0]], out, S, ws)
            turn[0] = n - 1; fn(); torch.cuda.synchronize()
            name = f"s{c}" if c else "auto"
            errs[name] = float((out.float() - ref).abs().max())
            graphs[name] = graphed(fn, iters); keep.append((out, ws))
        finally:
            os.environ.pop("PVT_DECODE_SPLITS", None)
    best = {x: 1e9 for x in graphs}
    order = list(graphs)
    for rep in range(7):
        random.Random(rep).shuffle(order)
        for x in order:
            best[x] = min(best[x], timed(graphs[x].replay, 1) / iters)
    r = {"heads": H, "B": B, "S": S, "copies": n, "auto_splits": int(auto), "us": {x: round(y, 2) for x, y in best.items()},
         "vs_cudnn": {x: round(y / best["cudnn"], 3) for x, y in best.items()}, "max_err": max(errs.values())}
    print(json.dumps(r), flush=True); rows.append(r)
    del graphs, k, v, ks, vs; keep.clear(); torch.cuda.empty_cache()
json.dump(rows, open(sys.argv[1], "w"), indent=1)
