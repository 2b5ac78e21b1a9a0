# one-off (run 29): the rows closest to 1.05x cuDNN, fp16, our kernel over both layouts against cuDNN in one
# process, best of 7 seeded orders; run once per build variant (the L2 prefetch-size hints on the kernels'
# 16-byte loads) in its own process, from that variant's tree root.
import json, random, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
sys.path.insert(0, "tests/gpu")
import build
from bench_attention import graphed, timed
ext = build.load()
D, H, dt = 128, 32, torch.float16
rows = []
for kvh, B, S in ((8, 32, 1024), (8, 32, 4096), (8, 8, 16384), (8, 1, 4096), (8, 1, 1024), (32, 1, 1024), (32, 1, 4096),
                  (32, 8, 4096), (32, 32, 1024), (32, 8, 16384)):
    q = torch.randn(B, H, 1, D, device="cuda", dtype=dt)
    k = torch.randn(B, kvh, S, D, device="cuda", dtype=dt); v = torch.randn_like(k)
    qo = q.transpose(1, 2)
    ks = k.permute(2, 0, 1, 3).contiguous(); vs = v.permute(2, 0, 1, 3).contiguous()
    smax = S + 64
    kslot = torch.zeros(B, smax, kvh, D, device="cuda", dtype=dt); vslot = torch.zeros_like(kslot)
    kslot[:, :S].copy_(k.transpose(1, 2)); vslot[:, :S].copy_(v.transpose(1, 2))
    kl, vl = kslot.transpose(0, 1), vslot.transpose(0, 1)
    lens = torch.full((B,), S - 1, dtype=torch.int32, device="cuda")
    kv_bytes = 2 * B * S * kvh * D * 2
    iters = max(5, min(200, int(2e4 / max(1.0, kv_bytes / 4e6))))
    def cud():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=kvh != H)
    ref = cud().transpose(1, 2).float()
    fns, errs, keep = {"cudnn": graphed(cud, iters)}, {}, []
    for name, kk, vv, bound, ln in (("seq", ks, vs, S, None), ("slot", kl, vl, smax, lens)):
        out = torch.empty(B, 1, H, D, device="cuda", dtype=dt)
        ws = torch.empty(max(1, ext.workspace_bytes(qo, kk, vv, out, bound, ln) if ln is not None
                             else ext.workspace_bytes(qo, kk, vv, out, bound)), dtype=torch.uint8, device="cuda")
        if ln is None:
            fn = lambda out=out, ws=ws, kk=kk, vv=vv, bound=bound: ext.attention(qo, kk, vv, out, bound, ws)
        else:
            fn = lambda out=out, ws=ws, kk=kk, vv=vv, bound=bound, ln=ln: ext.attention(qo, kk, vv, out, bound, ws, ln)
        fn(); torch.cuda.synchronize(); errs[name] = float((out.float() - ref).abs().max())
        fns[name] = graphed(fn, iters); keep.append((out, ws))
    best = {n: 1e9 for n in fns}
    order = list(fns)
    for rep in range(7):
        random.Random(rep).shuffle(order)
        for n in order:
            best[n] = min(best[n], timed(fns[n].replay, 1) / iters)
    r = {"kv_heads": kvh, "B": B, "S": S, "us": {n: round(x, 2) for n, x in best.items()},
         "vs_cudnn": {n: round(x / best["cudnn"], 3) for n, x in best.items()}, "max_err": max(errs.values()),
         "gbs": {n: round(kv_bytes / x / 1e3) for n, x in best.items()}}
    print(json.dumps(r), flush=True); rows.append(r)
    del fns, q, k, v, ks, vs, kslot, vslot; keep.clear(); torch.cuda.empty_cache()
json.dump(rows, open(sys.argv[1], "w"), indent=1)
