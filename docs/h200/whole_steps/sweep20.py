# one-off (run 20): MHA B=1 per-slot at bound S + 64 with the one-row kernel, forced split counts against the
# plan's, against cuDNN and the seq-major S in the same process; run as three processes (run 19 saw the per-slot
# S=1k call at 9.41 us in one process and 8.83-8.89 in others).
import json, os, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
sys.path.insert(0, "tests/gpu")
import build
from bench_attention import graphed, timed
ext = build.load()
D, H, kvh, B = 128, 32, 32, 1
rows = []
for dt in (torch.float16, torch.bfloat16):
    for S in (1024, 2048, 4096):
        q = torch.randn(B, H, 1, D, device="cuda", dtype=dt)
        k = torch.randn(B, kvh, S, D, device="cuda", dtype=dt); v = torch.randn_like(k)
        qo = q.transpose(1, 2)
        ks = k.permute(2, 0, 1, 3).contiguous(); vs = v.permute(2, 0, 1, 3).contiguous()
        smax = S + 64
        kslot = torch.empty(B, smax, kvh, D, device="cuda", dtype=dt); vslot = torch.empty_like(kslot)
        kslot[:, :S].copy_(k.transpose(1, 2)); vslot[:, :S].copy_(v.transpose(1, 2))
        kl, vl = kslot.transpose(0, 1), vslot.transpose(0, 1)
        lens = torch.full((B,), S - 1, dtype=torch.int32, device="cuda")
        iters = 200
        def cud():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v)
        ref = cud().transpose(1, 2).float()
        fns = {"cudnn": graphed(cud, iters)}
        keep, errs = [], {}
        for layout, n in [("seq", 0), ("slot", 0)] + [("slot", n) for n in (8, 9, 10, 12, 16)] + [("seq", n) for n in (9, 16)]:
            os.environ.pop("PVT_DECODE_SPLITS", None)
            if n: os.environ["PVT_DECODE_SPLITS"] = str(n)
            out = torch.empty(B, 1, H, D, device="cuda", dtype=dt)
            if layout == "seq":
                ws = torch.empty(max(1, ext.workspace_bytes(qo, ks, vs, out, S)), dtype=torch.uint8, device="cuda")
                fn = lambda out=out, ws=ws: ext.attention(qo, ks, vs, out, S, ws)
            else:
                ws = torch.empty(max(1, ext.workspace_bytes(qo, kl, vl, out, smax, lens)), dtype=torch.uint8, device="cuda")
                fn = lambda out=out, ws=ws: ext.attention(qo, kl, vl, out, smax, ws, lens)
            name = f"{layout}_{n or 'auto'}"
            fn(); torch.cuda.synchronize(); errs[name] = float((out.float() - ref).abs().max())
            fns[name] = graphed(fn, iters); keep.append((out, ws))
            os.environ.pop("PVT_DECODE_SPLITS", None)
        best = {n: 1e9 for n in fns}
        order = list(fns)
        import random
        for rep in range(7):
            random.Random(rep).shuffle(order)
            for n in order:
                best[n] = min(best[n], timed(fns[n].replay, 1) / iters)
        r = {"dtype": str(dt).split(".")[-1], "S": S, "bound": smax, "us": {n: round(x, 2) for n, x in best.items()},
             "max_err": max(errs.values())}
        print(json.dumps(r), flush=True); rows.append(r)
        del fns; keep.clear(); torch.cuda.empty_cache()
json.dump(rows, open(sys.argv[1], "w"), indent=1)
