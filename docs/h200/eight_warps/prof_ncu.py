# one-off: one eager call each of cuDNN and ours at GQA 32/8 B=1 S=1k (and B=1 S=4k), for ncu --set full
import sys, torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
sys.path.insert(0, "tests/gpu")
import build
ext = build.load()
D, H, dt = 128, 32, torch.float16
for kvh, B, S in [(8, 1, 1024), (8, 1, 4096)]:
    q = torch.randn(B, H, 1, D, device="cuda", dtype=dt)
    k = torch.randn(B, kvh, S, D, device="cuda", dtype=dt); v = torch.randn_like(k)
    qo = q.transpose(1, 2)
    ks = k.permute(2, 0, 1, 3).contiguous(); vs = v.permute(2, 0, 1, 3).contiguous()
    out = torch.empty(B, 1, H, D, device="cuda", dtype=dt)
    ws = torch.empty(max(1, ext.workspace_bytes(qo, ks, vs, out, S)), dtype=torch.uint8, device="cuda")
    for _ in range(3):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        ext.attention(qo, ks, vs, out, S, ws)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(f"prof_s{S}")
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    ext.attention(qo, ks, vs, out, S, ws)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
