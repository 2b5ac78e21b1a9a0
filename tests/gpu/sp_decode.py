"""Sequence-parallel decode on 2 GPUs of one host (issue 10, points 1, 3 and 4), NCCL through PyTorch.

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node 2 tests/gpu/sp_decode.py OUT.json [--quick]

1. Merge on CUDA (each rank, its own GPU): decode_attention_cuda with lse over a cache split into 1-5
   parts, merged by merge_attention_states_cuda, against attention over the whole cache (same kernel)
   and a float64 PyTorch reference; fp32, fp16, bf16.
2. A Llama-shaped decode (tests/gpu/llama_loop.py's layer: Llama-3-8B-like, 32 layers, 32 query
   heads, 8 kv heads, head_dim 128, fp16, random weights, real GEMMs), B=1, at long context:
   (a) one GPU: rank 0 holds the whole cache (one SeqMajorCache per layer and K/V), rank 1 idles;
   (b) two GPUs: each rank holds its half of the prompt's K/V in its own caches; each new token's K/V
       goes to the rank holding fewer tokens; per layer each rank attends over its part with lse, one
       NCCL all_gather moves the (out, lse) pairs (B*H*(D*2+4) bytes per rank) and the merge kernel
       combines them. Weights are replicated, so only the attention's cache read is split.
   Each step's hidden state of (b) is compared with (a)'s; median ms/step of the timed steps, with
   the same for attention alone (no GEMMs: the part sequence parallelism speeds up).
3. Tokens and mapped bytes per rank at the end.
Writes OUT.json on rank 0 (and prints one JSON line per row).
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build  # noqa: E402  (helper F's extension: Cache, append, attention [+ lse])
import llama_loop  # noqa: E402  (the Llama-shaped layer and its weights)
import sp_build  # noqa: E402  (the merge kernel)

L, H, D, KVH = llama_loop.L, llama_loop.H, llama_loop.D, 8
dt = llama_loop.dt


def log(*a):
    if dist.get_rank() == 0:
        print(*a, flush=True)


# ---- 1. merge correctness on CUDA

def ref_attention(q, k, v):
    """float64: q [B, 1, Hq, D], k/v [S, B, Hkv, D] -> out [B, 1, Hq, D], lse [B, 1, Hq]."""
    q, k, v = q.double(), k.double(), v.double()
    rep = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(rep, dim=2)
    v = v.repeat_interleave(rep, dim=2)
    s = torch.einsum("bthd,sbhd->bths", q, k) / q.shape[-1] ** 0.5
    lse = torch.logsumexp(s, dim=-1)
    return torch.einsum("bths,sbhd->bthd", torch.softmax(s, -1), v), lse


def attention_lse(ext, q, k, v, kv_len):
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    ws = torch.empty(ext.workspace_bytes(q, k, v, out, kv_len, lse=lse), dtype=torch.uint8, device=q.device)
    ext.attention(q, k, v, out, kv_len, ws, lse=lse)
    return out, lse


def check_merge(ext, spx):
    rows = []
    g = torch.Generator(device="cuda").manual_seed(10 + dist.get_rank())
    B, S = 2, 5000
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        q = torch.randn(B, 1, H, D, device="cuda", generator=g).to(dtype)
        k = torch.randn(S, B, KVH, D, device="cuda", generator=g).to(dtype)
        v = torch.randn(S, B, KVH, D, device="cuda", generator=g).to(dtype)
        whole, whole_lse = attention_lse(ext, q, k, v, S)
        ref, ref_lse = ref_attention(q, k, v)
        for parts in (1, 2, 3, 5):
            cuts = sorted(torch.randint(1, S, (parts - 1,), generator=g, device="cuda").tolist())
            bounds = [0] + cuts + [S]
            outs, lses = [], []
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                if hi > lo:
                    o, l = attention_lse(ext, q, k[lo:hi], v[lo:hi], hi - lo)
                    outs.append(o)
                    lses.append(l)
            out = torch.empty_like(q)
            lse = torch.empty(q.shape[:3], dtype=torch.float32, device="cuda")
            spx.merge(outs, lses, out, lse)
            torch.cuda.synchronize()
            rows.append({"dtype": str(dtype).split(".")[-1], "parts": len(outs),
                         "max_err_vs_whole": float((out.double() - whole.double()).abs().max()),
                         "max_err_vs_float64": float((out.double() - ref).abs().max()),
                         "whole_err_vs_float64": float((whole.double() - ref).abs().max()),
                         "lse_err_vs_float64": float((lse.double() - ref_lse).abs().max()),
                         "whole_lse_err_vs_float64": float((whole_lse.double() - ref_lse).abs().max())})
    return rows


# ---- 2. the Llama-shaped decode

def prompt_kv(i, ctx):
    """Layer i's prompt K and V as [ctx, B=1, Hkv, D] (the cache's storage order), the same on every rank."""
    g = torch.Generator(device="cuda").manual_seed(1000 + i)
    return [torch.randn(ctx, 1, KVH, D, device="cuda", dtype=dt, generator=g) for _ in range(2)]


class Part:
    """One rank's caches (K and V per layer) over its tokens of the sequence."""

    def __init__(self, ext, ctx, ctx_lo, ctx_hi, capacity):
        self.ext, self.n = ext, ctx_hi - ctx_lo
        self.caches, self.views = [], []
        for i in range(L):
            pair = []
            for src in prompt_kv(i, ctx):  # generated whole (the same values on every rank), kept in part
                c = ext.Cache(1, KVH, D, "float16", capacity)
                if self.n:
                    c.begin_append(0, self.n)
                    c.tensor()[:self.n].copy_(src[ctx_lo:ctx_hi])
                pair.append(c)
            del src
            self.caches.append(pair)
            self.views.append([c.tensor() for c in pair])
        torch.cuda.synchronize()
        torch.cuda.empty_cache()

    def append(self, i, k, v, pos):
        for c, src in zip(self.caches[i], (k, v)):  # src [B, 1, Hkv, D]
            c.begin_append(pos, 1)  # maps a chunk when the token crosses into one
            self.ext.append(c, src, pos)
            if pos:
                c.remove_view(pos)  # the previous length's view is gone (as in the adapter)

    def mapped_bytes(self):
        return sum(c.mapped_bytes() for pair in self.caches for c in pair)


def run(ext, spx, W, ctx, steps, mode, attn_only):
    """mode 'one': rank 0 alone over the whole cache; 'sp': both ranks, half each. Returns (median ms
    per step on rank 0, the hidden state after every step, stats)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    capacity = ctx + steps + 8
    if mode == "one":
        if rank != 0:
            dist.barrier()
            return None, None, None
        part = Part(ext, ctx, 0, ctx, capacity)
        tokens = [ctx]
    else:
        half = ctx // world
        lo, hi = rank * half, ctx if rank == world - 1 else (rank + 1) * half
        part = Part(ext, ctx, lo, hi, capacity)
        tokens = [half] * (world - 1) + [ctx - half * (world - 1)]
    B = 1
    out = torch.empty(B, 1, H, D, device="cuda", dtype=dt)
    lse = torch.empty(B, 1, H, dtype=torch.float32, device="cuda")
    ws = torch.empty(max(ext.workspace_bytes(out, part.views[0][0], part.views[0][1], out, capacity, lse=lse),
                         ext.workspace_bytes(out, part.views[0][0], part.views[0][1], out, capacity)),
                     dtype=torch.uint8, device="cuda")
    # One all_gather per layer: this rank's out (fp16) and lse (fp32) packed into one byte buffer.
    n_out, n_lse = out.numel() * out.element_size(), lse.numel() * 4
    send = torch.empty(n_out + n_lse, dtype=torch.uint8, device="cuda")
    recv = torch.empty(world * (n_out + n_lse), dtype=torch.uint8, device="cuda")
    my_out = send[:n_out].view(dt).view(out.shape)
    my_lse = send[n_out:].view(torch.float32).view(lse.shape)
    parts_out = [recv[r * (n_out + n_lse):r * (n_out + n_lse) + n_out].view(dt).view(out.shape) for r in range(world)]
    parts_lse = [recv[r * (n_out + n_lse) + n_out:(r + 1) * (n_out + n_lse)].view(torch.float32).view(lse.shape)
                 for r in range(world)]
    merged_lse = torch.empty_like(lse)
    g = torch.Generator(device="cuda").manual_seed(7)
    fixed_qkv = [[torch.randn(B, 1, h, D, device="cuda", dtype=dt, generator=g) for h in (H, KVH, KVH)]
                 for _ in range(L)]

    def attend_fn(i, owner, pos):
        def attend(q, k, v):
            if owner:
                part.append(i, k, v, pos)
            n = part.n + (1 if owner else 0)
            if mode == "one":
                o = torch.empty_like(out)
                ext.attention(q, part.views[i][0], part.views[i][1], o, n, ws)
                return o
            if n:
                ext.attention(q, part.views[i][0], part.views[i][1], my_out, n, ws, lse=my_lse)
            else:
                my_out.zero_()
                my_lse.fill_(float("-inf"))
            dist.all_gather_into_tensor(recv, send)
            o = torch.empty_like(out)
            spx.merge(parts_out, parts_lse, o, merged_lse)
            return o
        return attend

    x0 = torch.randn(B, llama_loop.HID, device="cuda", dtype=dt, generator=torch.Generator(device="cuda").manual_seed(1))
    ys, times = [], []
    for step in range(steps):
        owner_rank = 0 if mode == "one" else min(range(world), key=lambda r: (tokens[r], r))
        owner = owner_rank == rank
        pos = part.n
        fns = [attend_fn(i, owner, pos) for i in range(L)]
        e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
        if mode == "sp":
            dist.barrier()
        e0.record()
        y = x0
        for i in range(L):
            if attn_only:
                q, k, v = fixed_qkv[i]
                y = y + fns[i](q, k, v).reshape(B, H * D)[:, :llama_loop.HID]
            else:
                y = llama_loop.layer(y, W[i], fns[i], KVH)
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1))
        ys.append(y.float().clone())
        if owner:
            part.n += 1
        tokens[owner_rank] += 1
    stats = {"rank": rank, "tokens": part.n, "tokens_per_rank": tokens, "mapped_bytes": part.mapped_bytes()}
    del part
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    if mode == "one":
        dist.barrier()
    timed = sorted(times[2:])
    return timed[len(timed) // 2], ys, stats


def main():
    out_path = sys.argv[1]
    quick = "--quick" in sys.argv
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    # Build once (rank 0), then load from the same directories.
    if rank == 0:
        build.load()
        sp_build.load()
    dist.barrier()
    ext, spx = build.load(), sp_build.load()
    result = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "world": world,
              "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "nccl": str(torch.cuda.nccl.version()), "nvls": os.environ.get("NCCL_NVLS_ENABLE")}
    with torch.no_grad():
        merge_rows = check_merge(ext, spx)
        gathered = [None] * world
        dist.all_gather_object(gathered, merge_rows)
        result["merge"] = gathered
        for rows in gathered:
            for r in rows:
                log(json.dumps(r))
        torch.manual_seed(0)
        W = llama_loop.weights(KVH)
        steps = 6 if quick else 20
        rows = []
        for ctx in ((131072,) if quick else (131072, 524288)):
            for attn_only in (False, True):
                ms_one, ys_one, st_one = run(ext, spx, W, ctx, steps, "one", attn_only)
                ms_sp, ys_sp, st_sp = run(ext, spx, W, ctx, steps, "sp", attn_only)
                stats = [None] * world
                dist.all_gather_object(stats, st_sp)
                if rank == 0:
                    diffs = [float((a - b).abs().max()) for a, b in zip(ys_one, ys_sp)]
                    row = {"ctx": ctx, "B": 1, "layers": L, "q_heads": H, "kv_heads": KVH, "head_dim": D,
                           "dtype": "float16", "attention_only": attn_only, "steps": steps,
                           "one_gpu_ms": round(ms_one, 3), "two_gpu_ms": round(ms_sp, 3),
                           "speedup": round(ms_one / ms_sp, 3),
                           "max_hidden_diff_vs_one_gpu": max(diffs),
                           "hidden_absmax": float(max(y.abs().max() for y in ys_one)),
                           "one_gpu_mapped_gib": round(st_one["mapped_bytes"] / 2**30, 3),
                           "per_rank": [{"tokens": s["tokens"], "mapped_gib": round(s["mapped_bytes"] / 2**30, 3)}
                                        for s in stats]}
                    rows.append(row)
                    log(json.dumps(row))
        result["decode"] = rows
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(result, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
