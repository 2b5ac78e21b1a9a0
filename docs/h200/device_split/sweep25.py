# one-off (run 25): a per-slot cache planned for its capacity (the bound a captured CUDA graph keeps) against the
# tight bound S + 64 and cuDNN, in one process; run from the repository root of this commit's tree and of the
# previous one's (aad8711: split positions from the bound, so a short entry fills only the first splits).
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
for kvh, B, S, caps in ((32, 1, 1024, (4096, 16448)), (32, 1, 4096, (16448,)), (32, 8, 1024, (4096, 12288)),
                        (8, 1, 1024, (4096, 16448)), (8, 8, 1024, (4096, 16448)), (8, 32, 1024, (12288,))):
    q = torch.randn(B, H, 1, D, device="cuda", dtype=dt)
    k = torch.randn(B, kvh, S, D, device="cuda", dtype=dt); v = torch.randn_like(k)
    qo = q.transpose(1, 2)
    smax = max(caps)
    kslot = torch.zeros(B, smax, kvh, D, device="cuda", dtype=dt); vslot = torch.zeros_like(kslot)
    kslot[:, :S].copy_(k.transpose(1, 2)); vslot[:, :S].copy_(v.transpose(1, 2))
    kl, vl = kslot.transpose(0, 1), vslot.transpose(0, 1)
    lens = torch.full((B,), S - 1, dtype=torch.int32, device="cuda")
    iters = 200
    def cud():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=kvh != H)
    ref = cud().transpose(1, 2).float()
    fns = {"cudnn": graphed(cud, iters)}
    keep, errs = [], {}
    for bound in (S + 64,) + caps:
        out = torch.empty(B, 1, H, D, device="cuda", dtype=dt)
        ws = torch.empty(max(1, ext.workspace_bytes(qo, kl, vl, out, bound, lens)), dtype=torch.uint8, device="cuda")
        fn = lambda out=out, ws=ws, bound=bound: ext.attention(qo, kl, vl, out, bound, ws, lens)
        fn(); torch.cuda.synchronize(); errs[bound] = float((out.float() - ref).abs().max())
        fns[f"slot_{bound}"] = graphed(fn, iters); keep.append((out, ws))
    best = {n: 1e9 for n in fns}
    order = list(fns)
    for rep in range(7):
        random.Random(rep).shuffle(order)
        for n in order:
            best[n] = min(best[n], timed(fns[n].replay, 1) / iters)
    r = {"kv_heads": kvh, "B": B, "S": S, "us": {n: round(x, 2) for n, x in best.items()},
         "vs_cudnn": {n: round(x / best["cudnn"], 3) for n, x in best.items()}, "max_err": max(errs.values())}
    print(json.dumps(r), flush=True); rows.append(r)
    del fns; keep.clear(); torch.cuda.empty_cache()
json.dump(rows, open(sys.argv[1], "w"), indent=1)
