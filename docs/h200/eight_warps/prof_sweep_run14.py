# one-off: the tensor-core kernel with 4 against 8 warps a block, plan's splits and forced ones, cluster and
# workspace, seq-major and per-slot (bound S + 64); cuDNN in the same process.
import json, os, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
sys.path.insert(0, "tests/gpu")
import build
from bench_attention import graphed, timed
ext = build.load()
D, H, dt = 128, 32, torch.float16
rows = []
keep = []
for kvh, B, S in [(8, 1, 1024), (8, 1, 4096), (8, 8, 1024), (8, 8, 4096), (32, 1, 1024), (32, 1, 4096), (32, 1, 16384), (32, 8, 1024), (32, 8, 4096)]:
    q = torch.randn(B, H, 1, D, device="cuda", dtype=dt)
    k = torch.randn(B, kvh, S, D, device="cuda", dtype=dt); v = torch.randn_like(k)
    qo = q.transpose(1, 2)
    ks = k.permute(2, 0, 1, 3).contiguous(); vs = v.permute(2, 0, 1, 3).contiguous()
    smax = S + 64
    kslot = torch.zeros(B, smax, kvh, D, device="cuda", dtype=dt); vslot = torch.zeros_like(kslot)
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
    KN = ("PVT_DECODE_SPLITS", "PVT_DECODE_NO_CLUSTER", "PVT_DECODE_MMA_WARPS", "PVT_DECODE_MMA_MHA")
    configs = [("seq", 0, False, None, False), ("slot", 0, False, None, False)]
    if kvh == H:
        configs += [("seq", 0, False, None, True), ("slot", 0, False, None, True), ("seq", 0, False, "8", True),
                    ("slot", 0, False, "8", True)]
        if B == 1:
            configs += [("slot", sp, nc, None, mha) for sp in (4, 8, 16) for nc in (False, True) for mha in (False, True)
                        if sp * 128 <= S]
    else:
        configs += [("slot", sp, nc, w, False) for sp in ((4, 8, 16) if B == 1 else (2, 4)) for nc in (False, True)
                    for w in ("4", "8") if sp * 128 <= S]
    for layout, sp, nc, w, mha in configs:
        for kn in KN:
            os.environ.pop(kn, None)
        if sp: os.environ["PVT_DECODE_SPLITS"] = str(sp)
        if nc: os.environ["PVT_DECODE_NO_CLUSTER"] = "1"
        if w: os.environ["PVT_DECODE_MMA_WARPS"] = w
        if mha: os.environ["PVT_DECODE_MMA_MHA"] = "1"
        out = torch.empty(B, 1, H, D, device="cuda", dtype=dt)
        if layout == "seq":
            wsb = ext.workspace_bytes(qo, ks, vs, out, S)
            ws = torch.empty(max(1, wsb), dtype=torch.uint8, device="cuda")
            fn = lambda out=out, ws=ws: ext.attention(qo, ks, vs, out, S, ws)
        else:
            wsb = ext.workspace_bytes(qo, kl, vl, out, smax, lens)
            ws = torch.empty(max(1, wsb), dtype=torch.uint8, device="cuda")
            fn = lambda out=out, ws=ws: ext.attention(qo, kl, vl, out, smax, ws, lens)
        name = f"{layout}_{'auto' if sp == 0 else sp}_w{w or 'auto'}{'_mma' if mha else ''}{'_ws' if nc else ''}{'_cl' if wsb == 0 and not nc else ''}"
        fn(); torch.cuda.synchronize()
        errs[name] = float((out.float() - ref).abs().max())
        fns[name] = graphed(fn, iters)
        keep.append((out, ws, fn))
        for kn in KN:
            os.environ.pop(kn, None)
    best = {n: 1e9 for n in fns}
    for _ in range(5):
        for n, g in fns.items():
            best[n] = min(best[n], timed(g.replay, 1) / iters)
    r = {"kvh": kvh, "B": B, "S": S, "us": {n: round(x, 2) for n, x in best.items()}, "max_err": round(max(errs.values()), 4)}
    print(json.dumps(r), flush=True)
    rows.append(r)
    torch.cuda.synchronize()
    del fns
    keep.clear()
    torch.cuda.empty_cache()
json.dump(rows, open(sys.argv[1], "w"), indent=1)
