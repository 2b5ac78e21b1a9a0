# one-off (not committed): same kernel and plan, different buffers and orders (seq-major GQA spread)
import json, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
sys.path.insert(0, "tests/gpu")
import build
from bench_attention import graphed, timed
ext = build.load()
D, H, dt = 128, 32, torch.float16
rows = []
for kvh, B, S in [(8, 8, 16384), (8, 8, 65536), (32, 8, 16384)]:
    q = torch.randn(B, H, 1, D, device="cuda", dtype=dt)
    k = torch.randn(B, kvh, S, D, device="cuda", dtype=dt)
    v = torch.randn_like(k)
    qo = q.transpose(1, 2)
    ks = k.permute(2, 0, 1, 3).contiguous(); vs = v.permute(2, 0, 1, 3).contiguous()
    ks2 = ks.clone(); vs2 = vs.clone()
    kv_bytes = 2 * ks.numel() * 2
    iters = max(5, min(200, int(2e4 / max(1.0, kv_bytes / 4e6))))
    def cud():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=kvh != H)
    fns = {"cudnn": graphed(cud, iters)}
    for name, kk, vv in (("seq_a", ks, vs), ("seq_b", ks, vs), ("seq_copy", ks2, vs2), ("seq_c", ks, vs)):
        out = torch.empty(B, 1, H, D, device="cuda", dtype=dt)
        ws = torch.empty(max(1, ext.workspace_bytes(qo, kk, vv, out, S)), dtype=torch.uint8, device="cuda")
        fns[name] = graphed(lambda out=out, ws=ws, kk=kk, vv=vv: ext.attention(qo, kk, vv, out, S, ws), iters)
    names = list(fns)
    res = {}
    for order_name, order in (("fwd", names), ("rev", names[::-1])):
        best = {n: 1e9 for n in fns}
        for _ in range(7):
            for n in order:
                best[n] = min(best[n], timed(fns[n].replay, 1) / iters)
        res[order_name] = {n: round(x, 2) for n, x in best.items()}
    r = {"kvh": kvh, "B": B, "S": S, "us": res}
    print(json.dumps(r), flush=True)
    rows.append(r)
    del fns, ks2, vs2
    torch.cuda.empty_cache()
json.dump(rows, open(sys.argv[1], "w"), indent=1)
