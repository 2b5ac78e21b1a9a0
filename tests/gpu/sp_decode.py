"""Sequence-parallel decode on 2 GPUs of one host (issues 10 and 29), NCCL through PyTorch.

    python3 tests/gpu/build.py > /dev/null && python3 tests/gpu/sp_build.py > /dev/null
    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node 2 tests/gpu/sp_decode.py OUT.json [--quick] [--trace DIR]

1. Merge on CUDA (each rank, its own GPU): decode_attention_cuda with lse over a cache split into 1-5
   parts, merged by merge_attention_states_cuda, against attention over the whole cache (same kernel)
   and a float64 PyTorch reference; fp32, fp16, bf16.
2. A Llama-3-8B-shaped decode (tests/gpu/llama_loop.py's layer: 32 layers, 32 query heads, 8 kv heads,
   head_dim 128, fp16, random weights, real GEMMs) at long context, rows B x context:
   (a) one GPU: rank 0 holds the whole cache, rank 1 idles (skipped when the cache and the weights
       do not fit one GPU: the 1M-token row, B=8 at 128k);
   (b) two GPUs, one packed collective per layer: every rank computes QKV itself (replicated
       weights: nothing crosses before attention), the new token's K/V goes to the rank holding fewer
       tokens, each rank attends over its part with lse, ONE all_gather_into_tensor moves every
       rank's (lse, out) packed in one byte buffer, the merge kernel combines them;
   (c) (b) overlapped: two micro-batches per layer (B >= 2: halves of the batch, each with its own
       caches; B = 1: halves of the heads, 16 query / 4 kv heads each), each gather started
       asynchronously (NCCL's stream) right after its micro-batch's attention, so micro-batch 0's
       gather runs during micro-batch 1's attention (and, for batch halves, micro-batch 1's during
       micro-batch 0's output projection and MLP).
   Each step's hidden state of (b) and (c) is compared with (a)'s (or (b)'s when (a) does not fit);
   median ms/step of the timed steps, tokens/s = B * 1000 / ms; per-rank memory.
3. --trace DIR: a torch.profiler trace (Chrome JSON) of one step of (b) and (c) at the first row, per
   rank: the GPU timeline of the gathers against the attention and GEMM kernels.
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

KV_BYTES_PER_TOKEN = L * 2 * KVH * D * 2  # every layer's K and V, fp16, one sequence
SEED_CHUNK = 65536  # the prompt's K/V are drawn per (layer, K or V, chunk of tokens): any rank draws its part alone
ROWS = [(1, 131072), (1, 262144), (1, 524288), (1, 1048576), (8, 65536), (8, 131072), (8, 262144), (8, 524288)]


def prompt_kv(i, kv, B, lo, hi):
    """Tokens lo..hi of layer i's prompt K (kv=0) or V (kv=1) as [hi-lo, B, Hkv, D], the same values
    whatever the split (drawn per SEED_CHUNK tokens)."""
    parts = []
    for c in range(lo // SEED_CHUNK, (hi - 1) // SEED_CHUNK + 1):
        g = torch.Generator(device="cuda").manual_seed(1000 + 4096 * i + 2 * c + kv)
        chunk = torch.randn(SEED_CHUNK, B, KVH, D, device="cuda", dtype=dt, generator=g)
        a, b = max(lo, c * SEED_CHUNK) - c * SEED_CHUNK, min(hi, (c + 1) * SEED_CHUNK) - c * SEED_CHUNK
        parts.append(chunk[a:b].clone())
        del chunk
    return torch.cat(parts) if len(parts) > 1 else parts[0]


class Part:
    """One rank's caches (K and V per layer) over its tokens lo..hi of the prompt, rows r0..r1 of a
    batch of B."""

    def __init__(self, ext, B, r0, r1, lo, hi, capacity):
        self.ext, self.n, self.B = ext, hi - lo, r1 - r0
        self.caches, self.views = [], []
        for i in range(L):
            pair = []
            for kv in range(2):
                c = ext.Cache(self.B, KVH, D, "float16", capacity)
                if self.n:
                    c.begin_append(0, self.n)
                    for t in range(lo, hi, SEED_CHUNK):  # chunk by chunk: bounded temporary memory
                        e = min(hi, t + SEED_CHUNK)
                        c.tensor()[t - lo:e - lo].copy_(prompt_kv(i, kv, B, t, e)[:, r0:r1])
                pair.append(c)
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


class Micro:
    """One micro-batch of a layer: batch rows of its Part, a group of heads, and its packed buffers
    (send: this rank's lse float32 then out fp16; recv: every rank's, in rank order)."""

    def __init__(self, part, g, h0, h1, world):
        self.part, self.g, self.h0, self.h1 = part, g, h0, h1
        rows = part.B * (h1 - h0)
        self.n_lse, self.n_out = rows * 4, rows * D * 2
        size = self.n_lse + self.n_out
        self.send = torch.empty(size, dtype=torch.uint8, device="cuda")
        self.recv = torch.empty(world * size, dtype=torch.uint8, device="cuda")
        shape = (part.B, 1, h1 - h0)
        self.my_lse = self.send[:self.n_lse].view(torch.float32).view(shape)
        self.my_out = self.send[self.n_lse:].view(dt).view(*shape, D)
        self.lses = [self.recv[r * size:r * size + self.n_lse].view(torch.float32).view(shape) for r in range(world)]
        self.outs = [self.recv[r * size + self.n_lse:(r + 1) * size].view(dt).view(*shape, D) for r in range(world)]
        self.merged_lse = torch.empty(shape, dtype=torch.float32, device="cuda")
        self.bytes_sent = size


def run(ext, spx, W, B, ctx, steps, mode, trace_path=None):
    """mode 'one': rank 0 alone over the whole cache; 'sp': every rank its part, one packed gather per
    layer; 'overlap': 'sp' with two micro-batches whose gathers run asynchronously. Returns (median
    ms per step on rank 0, the hidden state after every step, stats)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    capacity = ctx + steps + 8
    torch.cuda.reset_peak_memory_stats()
    if mode == "one":
        if rank != 0:
            dist.barrier()
            return None, None, None
        lo, hi, tokens, ranks = 0, ctx, [ctx], 1
    else:
        half = ctx // world
        lo, hi = rank * half, ctx if rank == world - 1 else (rank + 1) * half
        tokens, ranks = [half] * (world - 1) + [ctx - half * (world - 1)], world
    groups = [(0, B // 2), (B // 2, B)] if mode == "overlap" and B >= 2 else [(0, B)]
    heads = [(0, H // 2), (H // 2, H)] if mode == "overlap" and B == 1 else [(0, H)]
    parts = [Part(ext, B, r0, r1, lo, hi, capacity) for r0, r1 in groups]
    micros = [[Micro(p, g, h0, h1, ranks) for h0, h1 in heads] for g, p in enumerate(parts)]
    q_like = torch.empty(B, 1, H, D, device="cuda", dtype=dt)
    lse_like = torch.empty(B, 1, H, dtype=torch.float32, device="cuda")
    v0 = parts[0].views[0]
    ws = torch.empty(max(ext.workspace_bytes(q_like, v0[0], v0[1], q_like, capacity, lse=lse_like),
                         ext.workspace_bytes(q_like, v0[0], v0[1], q_like, capacity)), dtype=torch.uint8, device="cuda")
    kv_per_q = H // KVH

    def attend_part(m, i, q, n):
        """This rank's (lse, out) of micro-batch m into its send buffer; then its gather starts."""
        K, V = (t[:, :, m.h0 // kv_per_q:m.h1 // kv_per_q] for t in m.part.views[i])
        if n:
            ext.attention(q[:, :, m.h0:m.h1], K, V, m.my_out, n, ws, lse=m.my_lse)
        else:
            m.my_out.zero_()
            m.my_lse.fill_(float("-inf"))
        return dist.all_gather_into_tensor(m.recv, m.send, async_op=True)

    def step(x, owner):
        xs = [x[r0:r1] for r0, r1 in groups]
        pos = parts[0].n
        for i in range(L):
            pending = []
            for g, part in enumerate(parts):
                q, k, v = llama_loop.layer_qkv(xs[g], W[i], KVH)  # replicated: every rank computes QKV
                if owner:
                    part.append(i, k, v, pos)
                n = part.n + (1 if owner else 0)
                if mode == "one":
                    o = torch.empty_like(q)
                    ext.attention(q, part.views[i][0], part.views[i][1], o, n, ws)
                    pending.append([o])
                    continue
                pending.append([(m, attend_part(m, i, q, n)) for m in micros[g]])
            for g in range(len(parts)):
                if mode != "one":
                    halves = []
                    for m, work in pending[g]:
                        work.wait()  # the current stream waits for this gather only
                        o = torch.empty_like(m.my_out)
                        spx.merge(m.outs, m.lses, o, m.merged_lse)
                        halves.append(o)
                    pending[g] = [torch.cat(halves, dim=2) if len(halves) > 1 else halves[0]]
                xs[g] = llama_loop.layer_post(xs[g], pending[g][0], W[i])
        return torch.cat(xs) if len(xs) > 1 else xs[0]

    x0 = torch.randn(B, llama_loop.HID, device="cuda", dtype=dt, generator=torch.Generator(device="cuda").manual_seed(1))
    ys, times = [], []
    for s in range(steps):
        owner_rank = 0 if mode == "one" else min(range(world), key=lambda r: (tokens[r], r))
        owner = owner_rank == rank
        e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
        if mode != "one":
            dist.barrier()
        prof = None
        if trace_path and s == steps - 1:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                      torch.profiler.ProfilerActivity.CUDA])
            prof.__enter__()
        e0.record()
        y = step(x0, owner)
        e1.record()
        torch.cuda.synchronize()
        if prof is not None:
            prof.__exit__(None, None, None)
            prof.export_chrome_trace(trace_path)
        times.append(e0.elapsed_time(e1))
        ys.append(y.float().clone())
        if owner:
            for p in parts:
                p.n += 1
        tokens[owner_rank] += 1
    stats = {"rank": rank, "tokens": parts[0].n, "tokens_per_rank": tokens,
             "mapped_bytes": sum(p.mapped_bytes() for p in parts),
             "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
             "gathers_per_step": 0 if mode == "one" else L * sum(len(m) for m in micros),
             "bytes_sent_per_layer": 0 if mode == "one" else sum(m.bytes_sent for ms in micros for m in ms)}
    del parts, micros
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    if mode == "one":
        dist.barrier()
    timed = sorted(times[2:])
    return timed[len(timed) // 2], ys, stats


def fits(B, ctx, ranks, weights_bytes, free_bytes):
    """Whether a rank's share of the cache (and the weights, a 4 GiB margin) fits its free memory."""
    need = -(-B * ctx // ranks) * KV_BYTES_PER_TOKEN + weights_bytes + 4 * 2**30
    return need <= free_bytes, need


def main():
    out_path = sys.argv[1]
    quick = "--quick" in sys.argv
    trace_dir = sys.argv[sys.argv.index("--trace") + 1] if "--trace" in sys.argv else None
    if trace_dir:
        os.makedirs(trace_dir, exist_ok=True)
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
        weights_bytes = sum(t.numel() * t.element_size() for w in W for t in w.values())
        free = torch.cuda.mem_get_info()[0] + weights_bytes  # what this rank has besides the weights
        steps = 6 if quick else 12
        rows = []
        for B, ctx in (ROWS[:1] if quick else ROWS):
            one_fits, one_need = fits(B, ctx, 1, weights_bytes, free)
            two_fits, two_need = fits(B, ctx, world, weights_bytes, free)
            row = {"ctx": ctx, "B": B, "layers": L, "q_heads": H, "kv_heads": KVH, "head_dim": D, "dtype": "float16",
                   "steps": steps, "one_gpu_need_gib": round(one_need / 2**30, 1),
                   "per_rank_need_gib": round(two_need / 2**30, 1)}
            if not two_fits:
                row["skipped"] = "does not fit two GPUs"
                rows.append(row)
                log(json.dumps(row))
                continue
            runs = {}
            for mode in (("one",) if one_fits else ()) + ("sp", "overlap"):
                trace = (os.path.join(trace_dir, f"{mode}_B{B}_ctx{ctx}_rank{rank}.json")
                         if trace_dir and not rows and mode != "one" else None)
                runs[mode] = run(ext, spx, W, B, ctx, steps, mode, trace)
            stats = {}
            for mode in ("sp", "overlap"):
                stats[mode] = [None] * world
                dist.all_gather_object(stats[mode], runs[mode][2])
            if rank == 0:
                ref_mode = "one" if one_fits else "sp"
                ys_ref = runs[ref_mode][1]
                for mode in ("sp", "overlap"):
                    ms, ys, _ = runs[mode]
                    row[f"{mode}_ms"] = round(ms, 3)
                    row[f"{mode}_tokens_per_s"] = round(B * 1000 / ms, 1)
                    row[f"{mode}_max_hidden_diff_vs_{ref_mode}"] = max(float((a - b).abs().max())
                                                                      for a, b in zip(ys_ref, ys))
                    row[f"{mode}_per_rank"] = [{"tokens": s["tokens"], "mapped_gib": round(s["mapped_bytes"] / 2**30, 3),
                                                "peak_allocated_gib": round(s["peak_allocated_bytes"] / 2**30, 2),
                                                "gathers_per_step": s["gathers_per_step"],
                                                "bytes_sent_per_layer": s["bytes_sent_per_layer"]}
                                               for s in stats[mode]]
                    if one_fits:
                        row[f"{mode}_speedup_vs_one_gpu"] = round(runs["one"][0] / ms, 3)
                if one_fits:
                    row["one_gpu_ms"] = round(runs["one"][0], 3)
                    row["one_gpu_tokens_per_s"] = round(B * 1000 / runs["one"][0], 1)
                    row["one_gpu_mapped_gib"] = round(runs["one"][2]["mapped_bytes"] / 2**30, 3)
                    row["hidden_absmax"] = float(max(y.abs().max() for y in ys_ref))
                else:
                    row["one_gpu"] = "does not fit one GPU"
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
