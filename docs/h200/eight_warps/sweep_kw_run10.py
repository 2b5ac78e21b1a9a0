# one-off (run 10): the tensor-core kernel with 64-key tiles (KW=16) against 128-key tiles of 4 warps
# (KW=32, tiles_of_128.patch, not kept), the plan's splits and forced ones, seq-major and per-slot (bound
# S + 64); cuDNN in the same process. It stopped at GQA B=32 S=4k with an illegal address: the lambda that
# held each variant's output and workspace was replaced in the loop, so a captured graph wrote into freed
# memory once empty_cache() returned it (a bug of this script; prof_sweep_run14.py keeps them alive).
import json, os, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
sys.path.insert(0, "tests/gpu")
import build
from bench_attention import graphed, timed
ext = build.load()
D, H = 128, 32
dt = torch.bfloat16 if "--bf16" in sys.argv else torch.float16
rows = []
shapes = [(8, B, S) for B in (1, 8, 32) for S in (1024, 4096, 16384, 65536)] + [(32, 8, 1024), (32, 8, 4096)]
for kvh, B, S in shapes:
    q = torch.randn(B, H, 1, D, device="cuda", dtype=dt)
    k = torch.randn(B, kvh, S, D, device="cuda", dtype=dt)
    v = torch.randn_like(k)
    qo = q.transpose(1, 2)
    ks = k.permute(2, 0, 1, 3).contiguous(); vs = v.permute(2, 0, 1, 3).contiguous()
    smax = S + 64
    kslot = torch.empty(B, smax, kvh, D, device="cuda", dtype=dt); vslot = torch.empty_like(kslot)
    kslot[:, :S].copy_(k.transpose(1, 2)); vslot[:, :S].copy_(v.transpose(1, 2))
    kl, vl = kslot.transpose(0, 1), vslot.transpose(0, 1)
    lens = torch.full((B,), S - 1, dtype=torch.int32, device="cuda")
    kv_bytes = 2 * ks.numel() * 2
    iters = max(5, min(200, int(2e4 / max(1.0, kv_bytes / 4e6))))
    def cud():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=kvh != H)
    ref = cud().transpose(1, 2).float()
    fns = {"cudnn": graphed(cud, iters)}
    errs = {}
    splits_list = [0] + ([2, 4, 8, 16] if S <= 1024 else [4, 8, 16, 32] if S <= 4096 else [])
    for kw in ("16", "32"):
        for sp in splits_list:
            for layout in ("seq", "slot"):
                if layout == "slot" and sp:
                    continue
                os.environ["PVT_DECODE_MMA_KW"] = kw
                os.environ.pop("PVT_DECODE_SPLITS", None)
                if sp:
                    os.environ["PVT_DECODE_SPLITS"] = str(sp)
                out = torch.empty(B, 1, H, D, device="cuda", dtype=dt)
                if layout == "seq":
                    wsb = ext.workspace_bytes(qo, ks, vs, out, S)
                    ws = torch.empty(max(1, wsb), dtype=torch.uint8, device="cuda")
                    fn = lambda out=out, ws=ws: ext.attention(qo, ks, vs, out, S, ws)
                else:
                    wsb = ext.workspace_bytes(qo, kl, vl, out, smax, lens)
                    ws = torch.empty(max(1, wsb), dtype=torch.uint8, device="cuda")
                    fn = lambda out=out, ws=ws: ext.attention(qo, kl, vl, out, smax, ws, lens)
                name = f"kw{kw}_{layout}_{'auto' if sp == 0 else sp}{'_cl' if wsb == 0 else ''}"
                fn(); torch.cuda.synchronize()
                errs[name] = float((out.float() - ref).abs().max())
                fns[name] = graphed(fn, iters)
                os.environ.pop("PVT_DECODE_MMA_KW", None); os.environ.pop("PVT_DECODE_SPLITS", None)
    best = {n: 1e9 for n in fns}
    for _ in range(5):
        for n, g in fns.items():
            best[n] = min(best[n], timed(g.replay, 1) / iters)
    r = {"dtype": str(dt), "kvh": kvh, "B": B, "S": S, "us": {n: round(x, 2) for n, x in best.items()},
         "max_err": round(max(errs.values()), 4)}
    print(json.dumps(r), flush=True)
    rows.append(r)
    del fns, q, k, v, ks, vs, kslot, vslot
    torch.cuda.empty_cache()
json.dump(rows, open(sys.argv[1], "w"), indent=1)
