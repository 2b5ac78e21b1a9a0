# one-off (not committed): small-shape sweep, cluster vs workspace, forced splits; cuDNN same process
import json, os, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
sys.path.insert(0, "tests/gpu")
import build
from bench_attention import graphed, timed
ext = build.load()
D, H, dt = 128, 32, torch.float16
out_rows = []
for kvh, B, S in [(8, 1, 1024), (8, 1, 4096), (8, 8, 1024), (8, 32, 1024), (32, 8, 1024), (8, 8, 16384)]:
    q = torch.randn(B, H, 1, D, device="cuda", dtype=dt)
    k = torch.randn(B, kvh, S, D, device="cuda", dtype=dt)
    v = torch.randn_like(k)
    qo = q.transpose(1, 2)
    ks = k.permute(2, 0, 1, 3).contiguous(); vs = v.permute(2, 0, 1, 3).contiguous()
    iters = 200
    fns = {}
    def cud():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=kvh != H)
    fns["cudnn"] = graphed(cud, iters)
    for splits in (0, 2, 4, 8, 16):
        for nc in (False, True):
            os.environ.pop("PVT_DECODE_SPLITS", None); os.environ.pop("PVT_DECODE_NO_CLUSTER", None)
            if splits: os.environ["PVT_DECODE_SPLITS"] = str(splits)
            if nc: os.environ["PVT_DECODE_NO_CLUSTER"] = "1"
            out = torch.empty(B, 1, H, D, device="cuda", dtype=dt)
            wsb = ext.workspace_bytes(qo, ks, vs, out, S)
            ws = torch.empty(max(1, wsb), dtype=torch.uint8, device="cuda")
            name = f"{'auto' if splits == 0 else splits}{'_ws' if nc else ('_cl' if wsb == 0 else '_ws*')}"
            fns[name] = graphed(lambda out=out, ws=ws: ext.attention(qo, ks, vs, out, S, ws), iters)
            os.environ.pop("PVT_DECODE_SPLITS", None); os.environ.pop("PVT_DECODE_NO_CLUSTER", None)
    best = {n: 1e9 for n in fns}
    for _ in range(5):
        for n, g in fns.items():
            best[n] = min(best[n], timed(g.replay, 1) / iters)
    r = {"kvh": kvh, "B": B, "S": S, "us": {n: round(x, 2) for n, x in best.items()}}
    print(json.dumps(r), flush=True)
    out_rows.append(r)
    del fns
    torch.cuda.empty_cache()
json.dump(out_rows, open(sys.argv[1], "w"), indent=1)
