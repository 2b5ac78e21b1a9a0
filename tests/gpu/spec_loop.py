"""Speculative decoding on one GPU, each step in CUDA graphs with no host read (issue 27).

Target: llama_loop.py's model (Llama-2-7B dimensions, or the Llama-3-8B-like GQA variant with 8 kv heads;
fp16, random weights, no rotary embedding, as there) with an embedding and an lm_head (vocab 32000, or
128256 with 8 kv heads). Draft, EAGLE-3's shape: EAGLE's fc ([embedding, feature] -> hidden), the target's
first --draft-layers layers (default 1; shared weights and embedding, their own caches) and an output layer
over the --draft-vocab most frequent tokens (default 32768, FR-Spec / EAGLE-3: 128256 -> 32768 reads a
quarter of the 1 GiB head; 32000 stays whole). With a draft vocabulary the target's logits get a fixed
unigram prior (Env: a random model has no frequent tokens). Every model has per-layer caches [cap, B, Hkv, D]
(a SeqMajorCache: VM reservation, chunks mapped by the host) with one length per sequence on the device (`lens`).
Logits are float32 (fp16 GEMM, fp32 output) and argmax picks every token, in every loop, and cuBLAS reduces
in fp32 only (allow_fp16_reduced_precision_reduction off): no exact ties made by rounding the logits, and
no fp16 split-K partials. That does not make the fp16 forwards batch-invariant: the one-token and the
k+1-token forwards run other GEMM and attention kernels, so a row's hidden state differs in its last bits
and a near-tie (fp32 top-2 margin below about 0.01) can still flip (docs/PERFORMANCE_H200.md section 5).
--invariant K makes them so: every target-shaped forward (the reference loop, the verify, draft == target)
runs k + 1 tokens a sequence (the real ones, then copies: one GEMM shape, one attention Tq), and the
attention takes fixed splits of K keys from key 0 (DecodeOptions::split_keys): a real token's logits are
then the same bits at any index, in any batch (tests/native/test_decode_invariance.cu for the attention).

The prompt: ctx - 1 tokens of random K/V in every cache (llama_loop.prompt_kv), then its last token y0
through a one-token step of the target, which gives the first token x0. From there:
  plain   (c) with tokens: one token per sequence a step (x -> the target's greedy token), the step
          captured in one CUDA graph; its ids are the reference, and its top-2 logit margins are kept.
  spec    per step, three graphs replayed back to back:
          draft   k draft forwards: the first over [y, x] (y: the last committed token, not yet in the
                  draft's cache), then one token each; the draft's own greedy token, or the oracle's
                  (below), chosen on the device by a flag
          verify  one target forward over [x, d_1..d_k] (k + 1 tokens a sequence, causal)
          accept  the project's accept/advance kernel (speculative_accept_cuda through the extension):
                  emits g_0..g_a, target lens += a + 1, draft lens += a - k (rollback = the length only),
                  then y = [x, d..][a], x = g_a
  oracle  the draft proposes, at output position o of sequence b, the plain run's token there with
          probability p (a seeded coin per (b, o)), else a token that differs: acceptance is p per position.
          Proposals stay inside the draft vocabulary: a plain token outside it is never proposed, so the
          coin for the others is p / coverage (set_oracle); the acceptance is measured either way.
  self    the draft is the target itself (all layers, its own caches): acceptance must be exactly 1.
The host replays as many steps as every unfinished sequence still certainly needs ((N - out_len) / (k + 1),
at least 1), maps every cache up to max(lens) + steps * (k + 1) before them, then reads the finished
flags (one read); torch.cuda.set_sync_debug_mode counts the reads during the timed loop.

(b) static: llama_loop.run's static-cache loop (eager SDPA over a preallocated cache; layers only).
Usage: python3 tests/gpu/spec_loop.py OUT.json [--kv-heads 32|8] [--batches 1,8,32] [--ks 2,4,6] [--new 64]
       [--ps 0.5,0.7,0.8,0.9,1.0] [--ctx 4096] [--draft-layers 1] [--draft-vocab 32768] [--draft-fc 1|0]
       [--fp32-check] [--capi] [--invariant SPLIT_KEYS|auto]
  --invariant K: batch-invariant target (decode option split_keys K, a multiple of 128; every target-shaped
       forward padded to k + 1 tokens); ids checked against the one-token loop through the same forward.
       auto: K for each batch size (invariant_split_keys), so that B x kv heads x splits fill one wave
  --capi: the extension's functions from build/spec_capi/libpvt_spec.so (pvt_capi.py) instead of build.load()
       python3 tests/gpu/spec_loop.py OUT.json --tiny-cpu     (no GPU: tiny fp32 model, torch references
                                                              for the attention and the accept kernel)
"""
import json
import sys
import time
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import llama_loop as ll  # noqa: E402


def set_shape(layers, hid, mlp, heads, head_dim, dtype, dev):
    """llama_loop's model code reads these module globals at call time."""
    ll.L, ll.HID, ll.MLP, ll.H, ll.D, ll.dt, ll.dev = layers, hid, mlp, heads, head_dim, dtype, dev


ZIPF_ALPHA = 0.3  # the target's token-frequency prior: logit bias -ZIPF_ALPHA * ln(1 + token id)


class Env:
    """What every model of one run shares: weights, the vocabulary, the extension (None: CPU references).

    draft_vocab < vocab (EAGLE-3 / FR-Spec): the draft's output layer covers only the draft_vocab most
    frequent tokens, here ids 0..draft_vocab-1, so a token outside them is never proposed. A random
    target has no frequent tokens (its greedy tokens are uniform over the vocabulary: a quarter of 128k
    would cover a quarter of them), so with a draft vocabulary the target gets a fixed unigram prior,
    a logit bias -ZIPF_ALPHA * ln(1 + id), as a trained model's output layer has one; the draft
    vocabulary's coverage of the plain run's tokens is measured and reported (draft_vocab_coverage)."""

    def __init__(self, ext, kvh, vocab, draft_vocab, draft_fc, seed=0):
        self.ext, self.kvh, self.vocab, self.draft_vocab = ext, kvh, vocab, draft_vocab
        self.W = ll.weights(kvh)
        g = torch.Generator(device=ll.dev).manual_seed(seed + 7)
        self.emb = torch.randn(vocab, ll.HID, device=ll.dev, dtype=ll.dt, generator=g)
        self.head = torch.randn(ll.HID, vocab, device=ll.dev, dtype=ll.dt, generator=g) * ll.HID ** -0.5
        self.prior = None
        if draft_vocab < vocab:
            self.prior = -ZIPF_ALPHA * torch.log1p(torch.arange(vocab, device=ll.dev, dtype=torch.float32))
        # The draft's own output layer: a copy of the first draft_vocab columns (read contiguously).
        self.draft_head = self.head[:, :draft_vocab].contiguous() if draft_vocab < vocab else self.head
        self.draft_prior = None if self.prior is None else self.prior[:draft_vocab].contiguous()
        # EAGLE's input fusion, [embedding, feature] -> hidden, one GEMM a draft forward (its cost).
        self.fc = (torch.randn(2 * ll.HID, ll.HID, device=ll.dev, dtype=ll.dt, generator=g) * (2 * ll.HID) ** -0.5
                   if draft_fc else None)


def mm_out_f32_works():
    """Whether this torch has mm(fp16, fp16, out_dtype=float32) (cuBLAS with an fp32 output)."""
    a = torch.ones(2, 8, device=ll.dev, dtype=ll.dt)
    try:
        return bool(torch.mm(a, a.t(), out_dtype=torch.float32).dtype == torch.float32)
    except (TypeError, RuntimeError):
        return False


_F32_HEADS = {}  # without out_dtype: an fp32 copy of each output layer (twice its bytes a forward)


def logits_f32(h, head):
    """h [M, HID] @ head in float32 (fp16 inputs, fp32 output: no fp16 rounding of the logits, so a
    near-tie is not made an exact tie that the two loops break differently)."""
    if h.dtype == torch.float32:
        return h @ head
    if "out_dtype" not in _F32_HEADS:
        _F32_HEADS["out_dtype"] = mm_out_f32_works()
        print(f"fp32 logits through mm(out_dtype=float32): {_F32_HEADS['out_dtype']}", flush=True)
    if _F32_HEADS["out_dtype"]:
        return torch.mm(h, head, out_dtype=torch.float32)
    if head.data_ptr() not in _F32_HEADS:
        _F32_HEADS[head.data_ptr()] = head.float()
    return h.float() @ _F32_HEADS[head.data_ptr()]


class Stack:
    """Some layers of the model over their own caches [cap, B, Hkv, D], one length per sequence (lens,
    int32 on the device: tokens in the cache before the next forward)."""

    def __init__(self, env, layers, B, cap, ctx, max_tq, draft=False):
        self.env, self.layers, self.B, self.cap = env, layers, B, cap
        # A draft: its own output layer (env.draft_head: the draft vocabulary) and EAGLE's fc over
        # [embedding, its last hidden state] (feat; the target's features in EAGLE, a cost stand-in here).
        self.head, self.prior = (env.draft_head, env.draft_prior) if draft else (env.head, env.prior)
        self.fc = env.fc if draft else None
        self.feat = torch.zeros(B, ll.HID, device=ll.dev, dtype=ll.dt) if self.fc is not None else None
        kvh, ext = env.kvh, env.ext
        self.caches, self.views = [], []
        for i in range(len(layers)):
            pair = []
            for src in ll.prompt_kv(i, B, kvh, ctx - 1):  # the prompt, less its last token
                if ext is not None:
                    c = ext.Cache(B, kvh, ll.D, {torch.float16: "float16", torch.float32: "float32"}[ll.dt], cap)
                    c.begin_append(0, ctx - 1)
                    t = c.tensor()
                else:
                    c, t = None, torch.zeros(cap, B, kvh, ll.D, dtype=ll.dt)
                t[:ctx - 1].copy_(src.permute(2, 0, 1, 3))
                pair.append((c, t))
            self.caches += [c for c, _ in pair if c is not None]
            self.views.append([t for _, t in pair])
        self.lens = torch.full((B,), ctx - 1, dtype=torch.int32, device=ll.dev)
        self.ws, self.max_tq = None, max_tq
        self.size_workspace()

    def size_workspace(self):
        """One workspace for every query count this stack runs, under the decode options set now (grown,
        never shrunk: the graphs captured before keep their pointers)."""
        ext, B = self.env.ext, self.B
        if ext is None:
            return
        K = self.views[0][0]
        need = max(ext.workspace_bytes(torch.empty(B, t, ll.H, ll.D, device=ll.dev, dtype=ll.dt), K, K,
                                       torch.empty(B, t, ll.H, ll.D, device=ll.dev, dtype=ll.dt), self.cap, self.lens)
                   for t in range(1, self.max_tq + 1))
        if self.ws is None or self.ws.numel() < need:
            self.ws = torch.empty(max(need, 1), dtype=torch.uint8, device=ll.dev)

    def reserve(self, end):
        """Host: map every cache up to token `end` (an upper bound on any sequence's length)."""
        end = min(end, self.cap)
        for c in self.caches:
            c.reserve(end)

    def forward(self, ids, pad_to=None):
        """ids int64 [B, T] -> float32 logits [B, T, this stack's vocabulary]; writes the tokens' K/V at
        lens + t (lens is not advanced: the caller does, by what it keeps).
        pad_to (--invariant): the forward runs pad_to tokens a sequence, the T real ones first, then copies
        of the last (their K/V written past the real ones, overwritten by the next forward): every GEMM
        then has the verify's M = B (k + 1) rows and the attention its Tq, so cuBLAS and the attention
        plan run the same kernels for a real token at any index; with the decode options' split_keys a
        row's result is then the same bits in the one-token loop, the draft and the verify."""
        B, T = ids.shape
        if pad_to is not None and pad_to > T:
            ids = torch.cat([ids, ids[:, -1:].expand(B, pad_to - T)], 1)
        real, T = T, ids.shape[1]
        env = self.env
        pos = (self.lens.long()[:, None] + torch.arange(T, device=ll.dev)[None]).reshape(-1)
        row = torch.arange(B, device=ll.dev).repeat_interleave(T)

        def make(i):
            def attend(q, k, v):
                K, V = self.views[i]
                K[pos, row] = k.reshape(B * T, env.kvh, ll.D)
                V[pos, row] = v.reshape(B * T, env.kvh, ll.D)
                if env.ext is None:
                    return reference_attention(q, K, V, self.lens, env.kvh)
                o = torch.empty(B, T, ll.H, ll.D, device=ll.dev, dtype=ll.dt)
                env.ext.attention(q, K, V, o, self.cap, self.ws, self.lens)
                return o
            return attend

        x = env.emb[ids.reshape(-1)]
        if self.fc is not None:
            feat = self.feat[:, None].expand(B, T, ll.HID).reshape(B * T, ll.HID)
            x = torch.cat([x, feat], 1) @ self.fc
        for i, w in enumerate(self.layers):
            x = ll.layer(x, w, make(i), env.kvh, T)
        if self.feat is not None:
            self.feat.copy_(x.view(B, T, -1)[:, real - 1])
        z = logits_f32(ll.rms_norm(x), self.head)
        if self.prior is not None:
            z = z + self.prior
        return z.view(B, T, -1)[:, :real]


def reference_attention(q, K, V, lens, kvh):
    """CPU reference: q [B, T, H, D] over K/V [cap, B, Hkv, D], query t of b sees keys < lens[b] + t + 1."""
    B, T = q.shape[:2]
    limit = lens.long()[:, None] + torch.arange(T)[None] + 1
    mask = torch.arange(K.shape[0])[None, None, :] < limit[:, :, None]
    o = F.scaled_dot_product_attention(q.transpose(1, 2), K.permute(1, 2, 0, 3), V.permute(1, 2, 0, 3),
                                       attn_mask=mask[:, None], enable_gqa=kvh != ll.H)
    return o.transpose(1, 2)


def reference_accept(drafts, tt, tl, dl, out, out_len, fin, acc, x_next, k):
    """CPU reference of speculative_accept_cuda (kernels/speculative_accept.h), slots 0..B-1, no eos."""
    N = out.shape[1]
    for i in range(drafts.shape[0]):
        if fin[i]:
            acc[i], x_next[i] = 0, 0
            continue
        a = 0
        while a < k and drafts[i, a] == tt[i, a]:
            a += 1
        for tok in tt[i, :a + 1]:
            if out_len[i] >= N:
                break
            out[i, out_len[i]] = tok
            out_len[i] += 1
        fin[i] = int(out_len[i] >= N)
        acc[i], x_next[i] = a, tt[i, a]
        tl[i] += a + 1
        dl[i] += a - k


class Graphs:
    """Callables captured once as CUDA graphs (replayed), or run as they are without a GPU."""

    def __init__(self):
        self.gpu = ll.dev == "cuda"

    def capture(self, fn, warm_reset):
        if not self.gpu:
            return fn
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # lazy initialisation outside the graph, then the state as it was
            fn()
        torch.cuda.current_stream().wait_stream(s)
        warm_reset()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):  # its own memory pool: graphs of earlier settings are gone by now
            fn()
        return g.replay


def event():
    return torch.cuda.Event(enable_timing=True) if ll.dev == "cuda" else None


def record(e):
    if e is not None:
        e.record()


def sync():
    if ll.dev == "cuda":
        torch.cuda.synchronize()


class Run:
    """One (shape, B) setting: the target and draft stacks, their prompt, the plain reference."""

    def __init__(self, env, B, ctx, N, kmax, draft_layers, self_draft):
        self.env, self.B, self.ctx, self.N = env, B, ctx, N
        self.cap = ctx + N + 2 * kmax + 8
        self.tgt = Stack(env, env.W, B, self.cap, ctx, kmax + 1)
        self.drf = Stack(env, env.W[:draft_layers], B, self.cap, ctx, 2, draft=True)
        # draft == target: padded to k + 1 tokens a forward with --invariant
        self.self_drf = Stack(env, env.W, B, self.cap, ctx, kmax + 1) if self_draft else None
        for s in self.stacks():
            s.reserve(ctx + 1)
        g = torch.Generator(device=ll.dev).manual_seed(11)
        self.y0 = torch.randint(2, env.vocab, (B,), device=ll.dev, generator=g)
        # The prompt's last token through the target: its K/V at ctx - 1 and the first token x0.
        with torch.no_grad():
            self.x0 = self.tgt.forward(self.y0[:, None])[:, 0].argmax(-1)
        self.tgt.lens.fill_(ctx)
        self.graphs = Graphs()

    def stacks(self):
        return [s for s in (self.tgt, self.drf, self.self_drf) if s is not None]

    def prime(self, pad):
        """--invariant: the prompt's last token through the target again, padded as every later target
        forward (its K/V at ctx - 1 and x0 as the loops that follow compute them)."""
        for s in self.stacks():
            s.size_workspace()
        self.tgt.lens.fill_(self.ctx - 1)
        with torch.no_grad():
            self.x0 = self.tgt.forward(self.y0[:, None], pad_to=pad)[:, 0].argmax(-1)
        self.tgt.lens.fill_(self.ctx)

    # ---- plain greedy decoding: the reference ids and the decode step's time ----
    def plain(self, pad=None):
        """pad (--invariant): every step's forward padded to pad tokens a sequence (Stack.forward)."""
        B, N, tgt = self.B, self.N, self.tgt
        out = torch.zeros(B, N, dtype=torch.int64, device=ll.dev)
        margin = torch.zeros(B, N, dtype=torch.float32, device=ll.dev)
        x = torch.zeros(B, dtype=torch.int64, device=ll.dev)
        col = torch.zeros(1, dtype=torch.int64, device=ll.dev)

        def reset():
            tgt.lens.fill_(self.ctx)
            x.copy_(self.x0)
            out.zero_()
            out[:, 0] = self.x0
            col.fill_(1)

        def step():
            z = tgt.forward(x[:, None], pad_to=pad)[:, 0]
            g = z.argmax(-1)  # as the verify picks (topk's order among equal values is not argmax's)
            top = z.topk(2, dim=-1)
            out.index_copy_(1, col, g[:, None])
            margin.index_copy_(1, col, (top.values[:, 0] - top.values[:, 1])[:, None])
            tgt.lens.add_(1)
            col.add_(1)
            x.copy_(g)

        tgt.reserve(self.ctx + N + (pad or 1))
        replay = self.graphs.capture(step, reset)
        reset()
        sync()
        e0, e1 = event(), event()
        record(e0)
        t0 = time.perf_counter()
        for _ in range(N - 1):
            replay()
        record(e1)
        sync()
        secs = e0.elapsed_time(e1) / 1e3 if e0 is not None else time.perf_counter() - t0
        self.plain_ids, self.plain_margin = out.clone(), margin.clone()
        return {"ms_per_step": round(secs * 1e3 / (N - 1), 3), "tok_s": round(B * (N - 1) / secs, 1)}

    # ---- speculative decoding ----
    def spec(self, k, rows, self_draft=False, invariant=False):
        """rows: [(name, p)], p None = the draft's own tokens. Returns one dict a row. invariant: draft ==
        target's forwards padded to k + 1 tokens (Stack.forward), as the verify and the reference."""
        B, N, env, tgt = self.B, self.N, self.env, self.tgt
        drf = self.self_drf if self_draft else self.drf
        pad = k + 1 if invariant and self_draft else None
        dev = ll.dev
        i32 = dict(dtype=torch.int32, device=dev)
        i64 = dict(dtype=torch.int64, device=dev)
        out, out_len, fin = torch.zeros(B, N, **i64), torch.ones(B, **i32), torch.zeros(B, **i32)
        acc, x_next, flag = torch.zeros(B, **i32), torch.zeros(B, **i64), torch.zeros(1, **i32)
        slots = torch.arange(B, **i32)
        x, y = torch.zeros(B, **i64), torch.zeros(B, **i64)
        drafts, ver, tt = torch.zeros(B, k, **i64), torch.zeros(B, k + 1, **i64), torch.zeros(B, k + 1, **i64)
        table = torch.zeros(B, N + k + 1, **i64)          # the oracle's token at each output position
        use_oracle = torch.zeros(1, dtype=torch.bool, device=dev)
        acc_sum, seq_steps = torch.zeros(1, **i64), torch.zeros(1, **i64)
        ar = torch.arange(k, device=dev)

        def reset():
            tgt.lens.fill_(self.ctx)
            drf.lens.fill_(self.ctx - 1)  # y0 is not in the draft's cache: its first forward writes it
            x.copy_(self.x0)
            y.copy_(self.y0)
            out.zero_()
            out[:, 0] = self.x0
            out_len.fill_(1)
            for t in (fin, acc_sum, seq_steps, flag):
                t.zero_()
            if drf.feat is not None:
                drf.feat.zero_()

        def draft():
            idx = (out_len.long()[:, None] + ar[None]).clamp(max=N + k)
            oracle = table.gather(1, idx)
            feed = torch.stack([y, x], 1)
            for j in range(k):
                own = drf.forward(feed, pad_to=pad)[:, -1].argmax(-1)
                drafts[:, j] = torch.where(use_oracle, oracle[:, j], own)
                drf.lens.add_((fin == 0).int() * feed.shape[1])  # a finished sequence's lengths stay
                feed = drafts[:, j:j + 1]

        def verify():
            ver[:, 0] = x
            ver[:, 1:] = drafts
            tt.copy_(tgt.forward(ver).argmax(-1))

        def accept():
            seq_steps.add_((fin == 0).sum())
            if env.ext is not None:
                env.ext.speculative_accept(drafts, tt, slots, tgt.lens, drf.lens, out, out_len, fin, acc, x_next,
                                           flag, target_capacity=self.cap, draft_capacity=self.cap,
                                           target_advance=1, draft_advance=-k)
            else:
                reference_accept(drafts, tt, tgt.lens, drf.lens, out, out_len, fin, acc, x_next, k)
            acc_sum.add_(acc.sum())
            y.copy_(ver.gather(1, acc.long()[:, None])[:, 0])
            x.copy_(x_next)

        for s in (tgt, drf):  # what the warm-up before each capture writes
            s.reserve(self.ctx + 2 * k + 2 + (k + 1 if pad else 0))
        phases = [self.graphs.capture(fn, reset) for fn in (draft, verify, accept)]
        results = []
        for name, p in rows:
            coverage = self.set_oracle(table, p, k)
            use_oracle.fill_(p is not None)
            reset()
            r = self.timed_spec(k, phases, drf, out_len, fin)
            r.update(name=name, k=k, p=p, draft_layers=len(drf.layers), draft_vocab=drf.head.shape[1],
                     draft_vocab_coverage=coverage)
            acc_total, seq = int(acc_sum.item()), int(seq_steps.item())
            assert int(flag.item()) == 0, f"accept kernel error flag {int(flag.item())}"
            r["mean_accepted"] = round(acc_total / seq, 3)
            r["tokens_per_seq_step"] = round((acc_total + seq) / seq, 3)
            r["acceptance_rate"] = round(acc_total / (k * seq), 4)
            r.update(self.compare(out))
            results.append(r)
        return results

    def set_oracle(self, table, p, k):
        """table[b, o] = the plain token at o with probability p overall (seeded per (b, o)), else a token
        that differs; every proposal is inside the draft vocabulary (ids < V). A plain token outside it is
        never proposed, so the coin for the others is p / coverage (capped at 1): the acceptance is p
        where the vocabulary covers p of the plain tokens, and the acceptance measured is what counts.
        Returns the coverage (plain tokens 1..N-1 inside the draft vocabulary; 1.0 without one)."""
        if p is None:
            return None
        B, N, V = self.B, self.N, self.drf.head.shape[1]
        truth = torch.zeros(B, N + k + 1, dtype=torch.int64, device=ll.dev)
        truth[:, :N] = self.plain_ids
        coverage = float((self.plain_ids[:, 1:] < V).float().mean())
        g = torch.Generator(device=ll.dev).manual_seed(1234)
        coin = torch.rand(B, N + k + 1, device=ll.dev, generator=g) < min(1.0, p / max(coverage, 1e-9))
        wrong = torch.randint(1, V, (B, N + k + 1), device=ll.dev, generator=g)
        table.copy_(torch.where(coin & (truth < V), truth, (truth % V + wrong) % V))
        return round(coverage, 4)

    def timed_spec(self, k, phases, drf, out_len, fin):
        B, N, tgt = self.B, self.N, self.tgt
        sync()
        marks, steps, reads = [], 0, 0
        e0, e1 = event(), event()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if ll.dev == "cuda":
                torch.cuda.set_sync_debug_mode("warn")
            record(e0)
            t0 = time.perf_counter()
            done, low, top = False, 1, self.ctx
            while not done:
                # Steps every unfinished sequence still needs for sure; map ahead for them.
                n = max(1, -(-(N - low) // (k + 1)))
                for s in (tgt, drf):
                    s.reserve(top + (n + 1) * (k + 1) + 1)  # + k + 1: a padded draft forward's tail
                for _ in range(n):
                    m = [event() for _ in range(4)]
                    for e, phase in zip(m, phases):
                        record(e)
                        phase()
                    record(m[3])
                    marks.append(m)
                steps += n
                # The check: one read of (finished, shortest output, longest target length).
                host = torch.stack([fin.min().long(), torch.where(fin == 0, out_len, N).min().long(),
                                    tgt.lens.max().long()]).cpu()
                reads += 1
                done, low, top = bool(host[0]), int(host[1]), int(host[2])
            record(e1)
            if ll.dev == "cuda":
                torch.cuda.set_sync_debug_mode("default")
        sync()
        secs = e0.elapsed_time(e1) / 1e3 if e0 is not None else time.perf_counter() - t0
        syncs = sum("synchroniz" in str(w.message) for w in caught)
        r = {"steps": steps, "host_checks": reads, "syncs_seen": syncs if ll.dev == "cuda" else None,
             "tok_s": round(B * (N - 1) / secs, 1), "ms_per_step": round(secs * 1e3 / steps, 3)}
        if ll.dev == "cuda":
            for j, phase in enumerate(("draft", "verify", "accept")):
                ts = sorted(m[j].elapsed_time(m[j + 1]) for m in marks)
                r[f"{phase}_ms_median"] = round(ts[len(ts) // 2], 3)
        return r

    def compare(self, out):
        """Ids against the plain run: sequences equal, and at each first difference the plain top-2 margin."""
        same = (out == self.plain_ids).all(1)
        firsts = []
        for b in torch.nonzero(~same).flatten().tolist():
            o = int(torch.nonzero(out[b] != self.plain_ids[b])[0])
            firsts.append({"seq": b, "pos": o, "plain_top2_margin": round(float(self.plain_margin[b, o]), 4)})
        return {"ids_equal_seqs": int(same.sum()), "seqs": self.B, "first_diffs": firsts[:8]}


def static_baseline(ext, W, kvh, B, ctx):
    """llama_loop's (b): eager SDPA over a preallocated cache, layers only, best of cuDNN and flash."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    best = None
    for be in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        try:
            with sdpa_kernel(be):
                ms = ll.run(ext, W, kvh, B, ctx, "static", 10)[0]
        except Exception as ex:  # noqa: BLE001 - a backend that does not take the shape
            print("static", be, str(ex).split("\n")[0][:100], flush=True)
            continue
        best = ms if best is None else min(best, ms)
    return best


def invariant_split_keys(arg, B, kvh, run_len):
    """--invariant's split size for batch B: the number given, or (auto) the fewest 128-key multiples that
    split the longest sequence of the run into as many pieces as one wave of blocks (an SM each) allows for
    B x kvh entries, as the default plan would (one split from B x kvh >= SMs). 0: not invariant. One
    size for the whole run at this B, so the reference, the verify and draft == target share it."""
    if arg == "0":
        return 0
    if arg != "auto":
        return int(arg)
    sms = torch.cuda.get_device_properties(0).multi_processor_count if ll.dev == "cuda" else 132
    per_piece = -(-run_len // max(1, sms // (B * kvh)))  # ceil
    return -(-per_piece // 128) * 128


def short(r):
    """One line of a row for the log."""
    keys = ("B", "name", "k", "tok_s", "speedup_vs_plain", "plain_inv_ms_per_step", "plain_inv_ids_equal_plain_seqs", "mean_accepted", "acceptance_rate", "draft_vocab_coverage", "verify_ms_median", "draft_ms_median",
            "plain_ms_per_step", "steps", "host_checks", "syncs_seen", "ids_equal_seqs", "seqs")
    return " ".join(f"{key}={r[key]}" for key in keys if key in r) + (f" diffs={r['first_diffs'][:2]}" if r.get("first_diffs") else "")


def main():
    out_path = sys.argv[1]
    args = sys.argv[2:]
    arg = lambda name, default: type(default)(args[args.index(name) + 1]) if name in args else default  # noqa: E731
    tiny, fp32 = "--tiny-cpu" in args, "--fp32-check" in args
    kvh = arg("--kv-heads", 32)
    # The draft (EAGLE-3's shape): draft_layers target-shaped layers behind EAGLE's fc, and an output
    # layer over the draft_vocab most frequent tokens (Env).
    draft_layers, draft_vocab, draft_fc = arg("--draft-layers", 1), arg("--draft-vocab", 32768), arg("--draft-fc", 1)
    # --invariant K: batch-invariant target (split_keys K, every forward padded to k + 1 tokens); the
    # ids are then checked against a one-token loop through that forward (Run.plain(pad)), and the
    # speed-up is still against the unpadded plain loop (c) with the default plan.
    invariant = arg("--invariant", "0")
    if tiny:
        set_shape(4, 128, 256, 4, 32, torch.float32, "cpu")
        kvh, vocab, ctx, N = 2, 256, 32, 24
        batches, ks, ps, draft_layers, draft_vocab = (1, 3), (2, 4), (0.5, 1.0), 1, arg("--draft-vocab", 128)
        ext = None
    else:
        vocab, ctx, N = (32000 if kvh == 32 else 128256), arg("--ctx", 4096), arg("--new", 64)
        batches = tuple(int(b) for b in arg("--batches", "1,8,32").split(","))
        ks = tuple(int(k) for k in arg("--ks", "2,4,6").split(","))
        ps = tuple(float(p) for p in arg("--ps", "0.5,0.7,0.8,0.9,1.0").split(","))
        if fp32:  # a small fp32 model (GQA 8/2): ids must equal the plain run's exactly
            set_shape(4, 1024, 2816, 8, 128, torch.float32, "cuda")
            kvh, vocab, ctx, N, batches, ks, ps = 2, 4096, 512, 48, (4,), (4,), (0.7,)
            draft_vocab = arg("--draft-vocab", 1024)
        # Every reduction in fp32: cuBLAS may otherwise reduce split-K partials in fp16, which rounds a
        # row's result differently for the plain step's B rows and the verify's B (k + 1) (other kernels).
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
        if "--capi" in args:  # the library built without a GPU (spec_capi_build.sh), nothing compiled here
            from pvt_capi import CApi
            ext = CApi()
        else:
            import build
            ext = build.load()
    torch.manual_seed(0)
    draft_vocab = min(draft_vocab, vocab)
    env = Env(ext, kvh, vocab, draft_vocab, bool(draft_fc))
    rows = []
    doc = {"kv_heads": kvh, "vocab": vocab, "ctx": ctx, "new_tokens": N, "layers": ll.L, "hidden": ll.HID,
           "heads": ll.H, "head_dim": ll.D, "mlp": ll.MLP, "dtype": str(ll.dt), "draft_layers": draft_layers,
           "draft_vocab": draft_vocab, "draft_fc": bool(draft_fc), "zipf_alpha": ZIPF_ALPHA if draft_vocab < vocab else None,
           "invariant": None if invariant == "0" else invariant,
           "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "rows": rows}
    if ll.dev == "cuda":
        doc.update(device=torch.cuda.get_device_name(), torch=torch.__version__)
    started = time.perf_counter()

    def save():
        doc["seconds"] = round(time.perf_counter() - started, 1)
        with open(out_path, "w") as f:
            json.dump(doc, f, indent=1)

    with torch.no_grad():
        for B in batches:
            static_ms = None
            if ext is not None and not fp32:
                static_ms = static_baseline(ext, env.W, kvh, B, ctx)
                torch.cuda.empty_cache()  # its cache back to the device before ours are mapped
            split_keys = invariant_split_keys(invariant, B, kvh, run_len=ctx + N + 2 * max(ks))
            if ext is not None and split_keys:
                ext.set_decode_options()  # the plain loop (c) as it runs by default
            run = Run(env, B, ctx, N, max(ks), draft_layers, self_draft=(B == batches[0]))
            plain = run.plain()
            fast_ids = run.plain_ids.clone()
            base = {"B": B, "plain_ms_per_step": plain["ms_per_step"], "plain_tok_s": plain["tok_s"],
                    "static_ms_per_step": None if static_ms is None else round(static_ms, 3),
                    "static_tok_s": None if static_ms is None else round(B * 1e3 / static_ms, 1)}
            print(json.dumps(base), flush=True)
            todo = [(k, [(f"oracle p={p}", p) for p in ps] + ([("draft", None)] if k == 4 else []), False) for k in ks]
            if run.self_drf is not None:
                todo.append((4, [("self (draft == target)", None)], True))
            for k, spec_rows, self_draft in todo:
                try:
                    extra = {}
                    if split_keys:  # the reference: the one-token loop through the same padded forward
                        if ext is not None:
                            ext.set_decode_options(split_keys=split_keys)
                        run.prime(k + 1)
                        ref = run.plain(pad=k + 1)
                        extra = {"invariant_split_keys": split_keys, "plain_inv_ms_per_step": ref["ms_per_step"],
                                 "plain_inv_tok_s": ref["tok_s"],
                                 "plain_inv_ids_equal_plain_seqs": int((run.plain_ids == fast_ids).all(1).sum())}
                    for r in run.spec(k, spec_rows, self_draft=self_draft, invariant=bool(split_keys)):
                        rows.append(dict(base, **extra, **r, speedup_vs_plain=round(r["tok_s"] / plain["tok_s"], 3)))
                        print(short(rows[-1]), flush=True)
                except Exception as ex:  # noqa: BLE001 - the other settings still run; the error is recorded
                    doc.setdefault("errors", []).append(f"B={B} k={k} self={self_draft}: {type(ex).__name__}: {ex}"[:300])
                    print(doc["errors"][-1], flush=True)
                save()
            del run
            if ll.dev == "cuda":
                torch.cuda.empty_cache()
    save()
    bad = [r for r in rows if r["ids_equal_seqs"] != r["seqs"]]
    selfs = [r for r in rows if r["name"].startswith("self")]
    print(f"rows {len(rows)}; ids differ in {len(bad)}; self acceptance {[r['acceptance_rate'] for r in selfs]}; "
          f"{doc['seconds']} s")
    return 0 if not bad and not doc.get("errors") and all(r["acceptance_rate"] == 1.0 for r in selfs) else 1


if __name__ == "__main__":
    sys.exit(main())
