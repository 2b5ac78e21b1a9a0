# one-off (not committed): kernels of cuDNN and ours at GQA 32/8 fp16 B=1 S=1k, for Nsight Compute
import os, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
sys.path.insert(0, "tests/gpu")
import build
ext = build.load()
D, H, dt = 128, 32, torch.float16
for kvh, B, S in [(8, 1, 1024), (8, 32, 1024)]:
    q = torch.randn(B, H, 1, D, device="cuda", dtype=dt)
    k = torch.randn(B, kvh, S, D, device="cuda", dtype=dt)
    v = torch.randn_like(k)
    qo = q.transpose(1, 2)
    ks = k.permute(2, 0, 1, 3).contiguous(); vs = v.permute(2, 0, 1, 3).contiguous()
    out = torch.empty(B, 1, H, D, device="cuda", dtype=dt)
    ws = torch.empty(max(1, ext.workspace_bytes(qo, ks, vs, out, S)), dtype=torch.uint8, device="cuda")
    def cud():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    def ours():
        ext.attention(qo, ks, vs, out, S, ws)
    for _ in range(5):
        cud(); ours()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(f"prof_b{B}")
    for _ in range(2):
        cud(); ours()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
