# one-off: kernel-level timeline of CUDA-graph replays (torch.profiler / CUPTI): per call, which kernels
# run, how long each takes and the gaps between them; ours against cuDNN, same process.
import json, sys, statistics as st
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import profile, ProfilerActivity
sys.path.insert(0, "tests/gpu")
import build
from bench_attention import graphed, timed
ext = build.load()
D, H, dt = 128, 32, torch.float16
N = 20
rows = []
for kvh, B, S in [(8, 1, 1024), (8, 1, 4096), (8, 8, 1024), (8, 32, 1024), (8, 1, 16384), (32, 1, 1024), (32, 8, 1024)]:
    q = torch.randn(B, H, 1, D, device="cuda", dtype=dt)
    k = torch.randn(B, kvh, S, D, device="cuda", dtype=dt)
    v = torch.randn_like(k)
    qo = q.transpose(1, 2)
    ks = k.permute(2, 0, 1, 3).contiguous(); vs = v.permute(2, 0, 1, 3).contiguous()
    out = torch.empty(B, 1, H, D, device="cuda", dtype=dt)
    ws = torch.empty(max(1, ext.workspace_bytes(qo, ks, vs, out, S)), dtype=torch.uint8, device="cuda")
    def cud():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=kvh != H)
    graphs = {"cudnn": graphed(cud, N), "ours": graphed(lambda: ext.attention(qo, ks, vs, out, S, ws), N)}
    for g in graphs.values():
        g.replay()
    torch.cuda.synchronize()
    r = {"kvh": kvh, "B": B, "S": S}
    for name, g in graphs.items():
        per_call = min(timed(g.replay, 1) / N for _ in range(5))
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            g.replay()
            torch.cuda.synchronize()
        ev = sorted([(e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                     if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > e.time_range.start],
                     key=lambda x: x[0])
        kinds = {}
        for s0, e0, n in ev:
            kinds.setdefault(n[:60], []).append(e0 - s0)
        gaps = [ev[i + 1][0] - ev[i][1] for i in range(len(ev) - 1)]
        span = (ev[-1][1] - ev[0][0]) / N if ev else 0
        r[name] = {"graph_us_per_call": round(per_call, 2), "profiled_span_per_call": round(span, 2),
                   "kernels": {n: {"count": len(d), "median_us": round(st.median(d), 2)} for n, d in kinds.items()},
                   "gap_median_us": round(st.median(gaps), 2) if gaps else None,
                   "gaps_first": [round(x, 2) for x in gaps[:6]]}
    print(json.dumps(r), flush=True)
    rows.append(r)
    del graphs
    torch.cuda.empty_cache()
json.dump(rows, open(sys.argv[1], "w"), indent=1)
