"""speculative_generate: greedy speculative decoding of a PaddleNLP llama target with a smaller
draft llama, over per-sequence slot caches (docs/SLOT_CACHE.md) that grow and roll back in place.

Each step, for every live sequence at once (state kept on the device):

1. draft: k forwards of the draft propose d_1..d_k. The first feeds two tokens per sequence, the
   last committed token y and the pending token x (so a step after a fully accepted one needs no
   catch-up forward: y is rewritten at the same position), the others one token each.
2. verify: one target forward over [x, d_1..d_k] (k + 1 tokens per sequence, causal over the slot)
   gives the target's greedy token g_0..g_k at each position.
3. accept/advance: the op vtensor_speculative_accept (kernels/speculative_accept.h) counts the
   accepted drafts a (leading d_j == g_{j-1}), emits g_0..g_a, and moves both caches' lengths:
   target += a + 1, draft += a - k (what drafting advanced past the accepted tokens). That length
   update *is* the rollback: the rejected positions' K/V stay mapped past the slot's length and are
   overwritten next step; no K/V is copied, and the chunks are kept for the next step (a slot's
   memory goes back at the check that sees its sequence finished).

With adaptive=True each step drafts k in 0..num_speculative_tokens as speculation_policy.py picks
from measured acceptance and costs; k = 0 is a plain target step (the host-side accept is then a few
device ops), after which the draft lags: its next first forward feeds every token it missed, then x.

The only host read per step is the finished-sequence check (out_len, finished, error flag: one
small copy), which also gives the host the exact lengths it maps ahead with (reserve before the
step) and lets it drop finished sequences from the batch and release their slots. The slot caches'
own error flags are read once, at the end.

Exactness: llama's generate() gives a left-padded token the rotary position of its index in the
padded row (``prepare_inputs_for_generation`` passes ``arange(seq_len)``) and masks pad keys; the
slot caches hold only the real tokens, fed at those same positions, so ids equal generate()'s.
"""
from __future__ import annotations

import time

import numpy as np
import paddle

from ..api import _int
from ..errors import SpeculativeError, UnsupportedModelError
from ..slots import check_slot_errors
from .model_runner import SlotModelRunner, check_token_ids
from .speculation_policy import AdaptiveSpeculation, Controller
from .speculative_accept import ERROR_NAMES, speculative_accept


def _llama_class():
    from paddlenlp.transformers import LlamaForCausalLM

    return LlamaForCausalLM


def _token_id(value, name):
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise ValueError(f"speculative_generate: {name} must be one token id, got {value}")
        value = value[0]
    return int(value)


def _generation_ids(model):
    """(eos, pad) as the model's own generate() picks them: generation_config, then config."""
    gen = getattr(model, "generation_config", None)
    pick = lambda name: (getattr(gen, name, None) if gen is not None and getattr(gen, name, None) is not None
                         else getattr(model.config, name, None))
    return _token_id(pick("eos_token_id"), "eos_token_id"), _token_id(pick("pad_token_id"), "pad_token_id")


def _check_models(target, draft, k, adaptive):
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        hint = " (for a k chosen each step pass adaptive=True; num_speculative_tokens is then the most)" \
            if isinstance(k, str) else ""
        raise TypeError(f"speculative_generate: num_speculative_tokens must be an int, got {type(k).__name__}{hint}")
    if int(k) < 1:
        raise ValueError(f"speculative_generate: num_speculative_tokens must be an int >= 1, got {k!r}")
    if not isinstance(adaptive, (bool, AdaptiveSpeculation)):
        raise TypeError(f"speculative_generate: adaptive must be a bool or an AdaptiveSpeculation, "
                        f"got {type(adaptive).__name__}")
    llama = _llama_class()
    for name, model in (("target", target), ("draft", draft)):
        if not isinstance(model, llama):
            raise UnsupportedModelError(f"speculative_generate: the {name} must be a PaddleNLP LlamaForCausalLM, "
                                        f"got {type(model).__name__}")
    tv, dv = int(target.config.vocab_size), int(draft.config.vocab_size)
    if tv != dv:
        raise ValueError(f"speculative_generate: the target and the draft must share the vocabulary, "
                         f"got vocab_size {tv} (target) and {dv} (draft)")
    tp, dp = (str(next(iter(m.parameters())).place) for m in (target, draft))
    if tp != dp:
        raise ValueError(f"speculative_generate: the target is on {tp} but the draft on {dp}; put both on one device")


def _prompts(input_ids, attention_mask, pad_id):
    """(ids [B, S] int64 numpy, real lengths [B], left pads [B]) from generate()-style inputs."""
    ids = input_ids.numpy() if isinstance(input_ids, paddle.Tensor) else np.asarray(input_ids)
    if ids.ndim != 2 or ids.shape[0] < 1 or ids.shape[1] < 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"speculative_generate: input_ids must be integer [batch, seq_len] with batch, "
                         f"seq_len >= 1, got {ids.dtype} {list(ids.shape)}")
    if attention_mask is None:  # as generate() builds it: pads are the tokens equal to pad_token_id
        mask = (ids != pad_id) if pad_id is not None and (ids == pad_id).any() else np.ones_like(ids, bool)
    else:
        mask = attention_mask.numpy() if isinstance(attention_mask, paddle.Tensor) else np.asarray(attention_mask)
        if mask.ndim != 2 or mask.shape[0] != ids.shape[0]:
            raise ValueError(f"speculative_generate: attention_mask must be [batch, seq_len] with input_ids' batch "
                             f"{ids.shape[0]}, got {list(mask.shape)} (batch mismatch)")
        if mask.shape != ids.shape:
            raise ValueError(f"speculative_generate: attention_mask {list(mask.shape)} does not match "
                             f"input_ids {list(ids.shape)}")
        if not np.isin(mask, (0, 1)).all():
            raise ValueError("speculative_generate: attention_mask must hold only 0 (pad) and 1 (token)")
        mask = mask.astype(bool)
    lens = mask.sum(axis=1).astype(np.int64)
    pads = ids.shape[1] - lens
    left = np.arange(ids.shape[1])[None, :] >= pads[:, None]
    if not (mask == left).all():
        raise ValueError("speculative_generate: attention_mask must be left-padded (each row: 0s, then 1s), "
                         "as for generate()")
    if (lens == 0).any():
        raise ValueError(f"speculative_generate: sequence {int(np.argmax(lens == 0))} has no tokens (all padding)")
    return ids.astype(np.int64), lens, pads


class _Clock:
    """Seconds per phase; with profile=True on a GPU it synchronizes at phase ends (benchmarks only)."""

    def __init__(self, on: bool, place):
        self.on, self.gpu = on, "gpu" in str(place).lower() or "cuda" in str(place).lower()
        self.total = {"draft": 0.0, "verify": 0.0, "accept": 0.0, "check": 0.0}
        self.t = 0.0

    def start(self):
        if self.on:
            self.t = time.perf_counter()

    def lap(self, phase):
        if self.on:
            if self.gpu:
                paddle.device.synchronize()
            now = time.perf_counter()
            self.total[phase] += now - self.t
            self.t = now


@paddle.no_grad()
def speculative_generate(target, draft, input_ids, attention_mask=None, max_new_tokens: int = 20,
                         num_speculative_tokens: int = 4, *, adaptive: bool | AdaptiveSpeculation = False,
                         accept_on_device: bool = True, profile: bool = False, chunk_bytes: int | None = None,
                         oracle_proposals=None):
    """Greedy speculative decoding: ``(ids, stats)``.

    target, draft: PaddleNLP ``LlamaForCausalLM`` models sharing the vocabulary (sizes may differ),
    on one device. input_ids int [batch, seq_len], attention_mask [batch, seq_len] of 0/1,
    left-padded (None: built from pad_token_id as generate() does). Returns ids int64
    [batch, n] equal to ``target.generate(input_ids=..., attention_mask=..., max_new_tokens=...,
    decode_strategy="greedy_search")[0]``: n = max_new_tokens, or fewer when every sequence ended
    with the target's eos token earlier (tokens after a sequence's eos are pad_token_id, as there).

    adaptive=True (or an AdaptiveSpeculation with its settings): num_speculative_tokens is the most
    tokens a step drafts, k_max; each step drafts the k in 0..k_max with the most expected tokens per
    second (generation/speculation_policy.py) from each sequence's measured acceptance and this run's
    measured times of a draft forward, of a verify by its token count and of a plain step; k = 0 is a
    plain target step (the draft catches up on the tokens it missed in its next forward), and after
    ``probe_every`` plain steps in a row one step drafts again so the acceptance stays current. The
    ids are the same; only the speed changes. Costs are host wall times: exact on the CPU, launch
    times on a GPU unless profile=True (or pass fixed ``AdaptiveSpeculation(costs=...)``).

    stats: acceptance_rate (accepted drafts / proposed), accepted, proposed, target_forwards,
    draft_forwards, steps, k_per_step (the k each step drafted), host_reads (finished-sequence checks
    + the two caches' error flags at the end); with profile=True also
    time_s {draft, verify, accept, check} (accept = the rollback: the length update).

    accept_on_device=False runs the accept/advance bookkeeping on the host instead (a device read of
    the draft and target tokens every step): the reference path, kept so both stay tested.

    oracle_proposals (benchmarks that control acceptance): int [batch, max_new_tokens +
    num_speculative_tokens]; the draft token proposed for output position o of sequence b is
    ``oracle_proposals[b, o]`` instead of the draft model's own (which still runs: its cost stays).
    The ids are the target's greedy ids all the same; only the acceptance changes.
    """
    k = num_speculative_tokens
    _check_models(target, draft, k, adaptive)
    k = int(k)
    max_new = _int("speculative_generate", "max_new_tokens", max_new_tokens, 1, (1 << 31) - 1)
    eos, pad = _generation_ids(target)
    pad = 0 if pad is None else pad
    ids, lens, pads = _prompts(input_ids, attention_mask, pad)
    n, width = ids.shape
    limit = min(int(m.config.max_position_embeddings) for m in (target, draft))
    if width + max_new + k > limit:
        raise ValueError(f"speculative_generate: seq_len {width} + max_new_tokens {max_new} + "
                         f"num_speculative_tokens {k} = {width + max_new + k} positions, past the models' "
                         f"max_position_embeddings ({limit})")
    for s in range(n):  # every real token against the vocabulary, before anything is made
        check_token_ids(ids[s, pads[s]:], int(target.config.vocab_size), "speculative_generate")
    oracle = _oracle_table(oracle_proposals, n, max_new + k, int(target.config.vocab_size))
    cap = int(lens.max()) + max_new + k
    runners = SlotModelRunner(target, n, cap, chunk_bytes=chunk_bytes), SlotModelRunner(draft, n, cap, chunk_bytes=chunk_bytes)
    loop = _Loop(runners, ids, lens, pads, max_new, k, eos, pad, accept_on_device, profile)
    if adaptive is not False:
        loop.controller = Controller(AdaptiveSpeculation() if adaptive is True else adaptive, n, k)
    if oracle is not None:
        loop.oracle = paddle.to_tensor(oracle, place=loop.place)
    try:
        return loop.run()
    finally:
        for r in runners:  # after a failure too: no slot stays mapped
            r.reset()


def _oracle_table(table, n, width, vocab):
    """oracle_proposals as int64 [n, width] numpy, checked (None stays None)."""
    if table is None:
        return None
    arr = table.numpy() if isinstance(table, paddle.Tensor) else np.asarray(table)
    if arr.shape != (n, width) or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"speculative_generate: oracle_proposals must be integer [batch, max_new_tokens + "
                         f"num_speculative_tokens] = [{n}, {width}], got {arr.dtype} {list(arr.shape)}")
    check_token_ids(arr.reshape(-1), vocab, "speculative_generate: oracle_proposals")
    return arr.astype(np.int64)


class _Loop:
    """One speculative_generate call: the two runners (slot i of each holds sequence i), the host's
    view of the prompts, and the stats."""

    def __init__(self, runners, ids, lens, pads, max_new, k, eos, pad, on_device, profile):
        self.t, self.d = runners
        self.place = self.t.place
        self.n, self.k, self.max_new, self.eos, self.pad = len(lens), k, max_new, eos, pad
        self.ids, self.lens, self.pads = ids, lens, pads
        self.on_device = on_device
        self.clock = _Clock(profile, self.place)
        self.stats = {"target_forwards": 0, "draft_forwards": 0, "steps": 0, "host_reads": 0, "proposed": 0,
                      "k_per_step": []}
        self.host_accepted = 0  # accepted drafts, counted by the host path
        self.oracle = None  # int64 [n, max_new + k] on the device: proposals that replace the draft's
        self.controller = None  # speculation_policy.Controller with adaptive=True: picks each step's k
        self.last = None  # the last step as the controller sees it: (k, accepted [m] int32, seconds, lag)

    def dev(self, array, dtype):
        return paddle.to_tensor(np.ascontiguousarray(array).astype(dtype), place=self.place)

    # ---- prefill: the prompts' real tokens, packed, at their padded-row positions ----
    def prefill(self):
        n, lens = self.n, self.lens
        flat = np.concatenate([self.ids[i, self.pads[i]:] for i in range(n)])
        pos = np.concatenate([self.pads[i] + np.arange(lens[i]) for i in range(n)])
        cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        slots = np.arange(n, dtype=np.int32)
        for r in (self.t, self.d):
            for s in range(n):
                r.reserve(s, int(lens[s]))
        positions = self.dev(pos, "int64")
        self.d.forward(flat, cu, slots, positions)  # the draft's K/V of the prompt; logits unused
        logits = self.t.forward(flat, cu, slots, positions)
        x = paddle.gather(logits, self.dev(cu[1:] - 1, "int64")).argmax(axis=-1).astype("int64")
        self.t.advance(slots, lens.astype(np.int32))
        # The draft keeps one token fewer: its first step rewrites the prompt's last token (y) with x.
        self.d.advance(slots, (lens - 1).astype(np.int32))
        self.stats["target_forwards"] += 1
        self.stats["draft_forwards"] += 1
        y = self.dev(self.ids[:, -1], "int64")
        return x, y

    def run(self):
        n, max_new = self.n, self.max_new
        x, y = self.prefill()
        # The tokens the draft has not seen, then x: [n, lag + 1]. lag is 1 after a speculative step (y,
        # the last committed token, is rewritten at its position) and grows by one a plain step.
        recent = paddle.stack([y, x], axis=1)
        # Global results (device) and the first emitted token.
        out = paddle.full([n, max_new], self.pad, dtype="int64").to(self.place)
        out[:, 0] = x
        out_len = paddle.ones([n], dtype="int32").to(self.place)
        first_done = paddle.full([n], max_new == 1, dtype="bool").to(self.place)
        if self.eos is not None:
            first_done = paddle.logical_or(first_done, x == self.eos)
        finished = first_done.astype("int32")
        flag = paddle.zeros([1], dtype="int32").to(self.place)
        accepted_total = paddle.zeros([1], dtype="int64").to(self.place)
        active = np.arange(n)
        a_out, a_len, a_fin = out, out_len, finished  # the active rows' state (all rows at first)
        while True:
            # The finished-sequence check: the one host read of a step.
            self.clock.start()
            ctl, last = self.controller, self.last
            host = paddle.concat([a_len, a_fin, flag] + ([last[1]] if ctl and last and last[0] else [])).numpy()
            self.stats["host_reads"] += 1
            m = len(active)
            lens_now, fin_now, err = host[:m], host[m:2 * m], int(host[2 * m])
            if ctl and last:  # the last step's accepted counts came with the check: no extra read
                last[2]["rest"] += time.perf_counter() - last[2].pop("end")
                ctl.observe(last[0], active, host[2 * m + 1:], last[2], lag=last[3])
            if err:
                self.check_caches()
                raise SpeculativeError(f"speculative_generate: the accept step failed: {ERROR_NAMES.get(err, err)}")
            keep = np.nonzero(fin_now == 0)[0]
            if len(keep) < m:  # write the finished rows back, continue with the others
                idx = self.dev(active, "int64")
                out = paddle.scatter(out, idx, a_out)
                out_len = paddle.scatter(out_len, idx, a_len)
                for s in active[fin_now != 0]:  # a finished sequence's slot memory goes back now
                    self.t.release(int(s))
                    self.d.release(int(s))
                if len(keep) == 0:
                    break
                sel = self.dev(keep, "int64")
                a_out, a_len = paddle.gather(a_out, sel), paddle.gather(a_len, sel)
                a_fin = paddle.zeros([len(keep)], dtype="int32").to(self.place)
                x, recent = paddle.gather(x, sel), paddle.gather(recent, sel)
                active, lens_now = active[keep], lens_now[keep]
            committed = self.lens[active] + lens_now - 1  # exact target lengths (tokens in the cache)
            k = self.k if ctl is None else ctl.next_k(active, max_new - lens_now)
            self.clock.lap("check")
            x, recent = self.step(active, committed, k, x, recent, a_out, a_len, a_fin, flag, accepted_total)
        self.check_caches()
        if self.on_device:
            accepted = int(accepted_total.numpy()[0])
        else:
            accepted = self.host_accepted
        result = out.numpy()[:, : int(out_len.numpy().max())]
        stats = dict(self.stats, accepted=accepted,
                     acceptance_rate=(accepted / self.stats["proposed"]) if self.stats["proposed"] else 1.0)
        if self.clock.on:
            stats["time_s"] = dict(self.clock.total)
        return paddle.to_tensor(result), stats

    def check_caches(self):
        """The slot caches' own error flags (a GPU attention/append that met an unreserved slot): one
        read each, at the end of the run or when the accept step failed."""
        for r in (self.t, self.d):
            check_slot_errors(r.cache)
            self.stats["host_reads"] += 1

    def device_slots(self, active):
        """(slots int64, slots int32, pads int64) of the active sequences on the device, uploaded once
        per batch composition rather than every step."""
        key = tuple(active.tolist())
        if getattr(self, "_slots_key", None) != key:
            self._slots_key = key
            self._slots_dev = (self.dev(active, "int64"), self.dev(active, "int32"), self.dev(self.pads[active], "int64"))
        return self._slots_dev

    def step(self, active, committed, k, x, recent, out, out_len, fin, flag, accepted_total):
        """One step for the active sequences (in slots `active`) drafting k tokens (k = 0: a plain target
        step); returns the new (x, recent)."""
        began = time.perf_counter()
        m, lag = len(active), recent.shape[1] - 1
        slots = active.astype(np.int32)
        slots_dev, slots32, pads = self.device_slots(active)
        # Map ahead (host decision): target writes [T, T + k], draft [T - lag, T + k - 1].
        for s, t in zip(slots, committed):
            self.t.reserve(int(s), int(t) + k + 1)
            if k:
                self.d.reserve(int(s), int(t) + k)
        self.t.host_lens[slots] = committed
        self.d.host_lens[slots] = committed - lag
        self.clock.start()
        reserved = time.perf_counter()
        draft_tokens = self.draft(k, recent, slots, slots_dev, pads, out_len) if k else None
        self.clock.lap("draft")
        drafted = time.perf_counter()  # (host wall times: exact on the CPU, see the docstring)
        verify = paddle.concat([x[:, None], draft_tokens], axis=1) if k else x[:, None]  # [m, k + 1]
        base = paddle.gather(self.t.cache_seqlens, slots_dev).astype("int64") + pads
        pos = (base[:, None] + paddle.arange(k + 1, dtype="int64").to(self.place)[None, :]).reshape([-1])
        cu = np.arange(0, m * (k + 1) + 1, k + 1, dtype=np.int32)
        logits = self.t.forward(verify.reshape([-1]), cu, slots, pos)
        target_tokens = logits.reshape([m, k + 1, -1]).argmax(axis=-1).astype("int64")
        self.stats["target_forwards"] += 1
        self.clock.lap("verify")
        verified = time.perf_counter()
        if not self.on_device:
            accepted, x_next = self.host_accept(slots, k, draft_tokens, target_tokens, out, out_len, fin)
        elif k:
            accepted = paddle.zeros([m], dtype="int32").to(self.place)
            x_next = paddle.zeros([m], dtype="int64").to(self.place)
            speculative_accept(draft_tokens, target_tokens, slots32, self.t.cache_seqlens,
                               self.d.cache_seqlens, out, out_len, fin, accepted, x_next, flag,
                               target_capacity=self.t.max_seq_len, draft_capacity=self.d.max_seq_len,
                               target_advance=1, draft_advance=-k, eos_token_id=self.eos, pad_token_id=self.pad)
            paddle.assign(accepted_total + accepted.astype("int64").sum(), accepted_total)
        else:
            accepted, x_next = None, self.plain_accept(slots, target_tokens[:, 0], out, out_len, fin)
        if k:  # y for the next step: the token before x_next, i.e. d_a (or x when nothing was accepted)
            y_next = paddle.take_along_axis(verify, accepted.astype("int64")[:, None], axis=1)[:, 0]
            recent = paddle.stack([y_next, x_next], axis=1)
        else:  # the draft missed x too
            recent = paddle.concat([recent, x_next[:, None]], axis=1)
        self.stats["steps"] += 1
        self.stats["proposed"] += k * m
        self.stats["k_per_step"].append(k)
        self.clock.lap("accept")
        if self.controller is not None:
            self.last = (k, accepted, {"draft": drafted - reserved, "verify": verified - drafted,
                                       "rest": reserved - began, "end": verified}, lag)
        return x_next, recent

    def draft(self, k, recent, slots, slots_dev, pads, out_len):
        """k draft forwards proposing d_1..d_k [m, k]: the first feeds `recent` (the tokens the draft has
        not seen, then x), the others one token each; the draft cache advances by what it was fed."""
        m, per = len(slots), recent.shape[1]
        drafts = []
        feed = recent.reshape([-1])
        # Positions of the draft's tokens, once a step: recent at base .. base + per - 1, then d_j.
        base = paddle.gather(self.d.cache_seqlens, slots_dev).astype("int64") + pads
        last = base + (per - 1)
        proposals = None
        if self.oracle is not None:  # the proposals for output positions out_len .. out_len + k - 1, once
            at = out_len.astype("int64")[:, None] + paddle.arange(k, dtype="int64").to(self.place)[None, :]
            proposals = paddle.take_along_axis(paddle.gather(self.oracle, slots_dev),
                                               paddle.clip(at, max=self.oracle.shape[1] - 1), axis=1)
        for j in range(k):
            pos = (base[:, None] + paddle.arange(per, dtype="int64").to(self.place)[None, :]).reshape([-1]) if j == 0 \
                else last + j
            cu = np.arange(0, m * per + 1, per, dtype=np.int32)
            logits = self.d.forward(feed, cu, slots, pos)
            nxt = logits.reshape([m, per, -1])[:, -1].argmax(axis=-1)  # int64
            if proposals is not None:  # the proposal for output position out_len + j instead
                nxt = proposals[:, j]
            self.d.advance(slots, np.full(m, per, np.int32))
            drafts.append(nxt)
            feed, per = nxt, 1
        self.stats["draft_forwards"] += k
        return paddle.stack(drafts, axis=1)

    def plain_accept(self, slots, g, out, out_len, fin):
        """A plain step's bookkeeping on the device (the accept op needs k >= 1): every active row emits the
        target's token g at out_len (no row is finished at a step's start), the target cache advances by
        one, the draft not at all (it catches up when it next drafts)."""
        at = out_len.astype("int64")[:, None]
        paddle.assign(paddle.put_along_axis(out, at, g[:, None], axis=1), out)
        grown = out_len + 1
        done = grown >= self.max_new
        if self.eos is not None:
            done = paddle.logical_or(done, g == self.eos)
        paddle.assign(grown, out_len)
        paddle.assign(done.astype("int32"), fin)
        self.t.advance(slots, np.ones(len(slots), np.int32))
        return g

    def host_accept(self, slots, k, draft_tokens, target_tokens, out, out_len, fin):
        """The same rule on the host (accept_on_device=False): reads the tokens back every step."""
        d, t = (draft_tokens.numpy() if k else None), target_tokens.numpy()
        o, ol, f = out.numpy(), out_len.numpy(), fin.numpy()
        acc = np.zeros(len(slots), np.int32)
        for i in range(len(slots)):
            while acc[i] < k and d[i, acc[i]] == t[i, acc[i]]:
                acc[i] += 1
            for tok in t[i, : acc[i] + 1]:
                if ol[i] >= self.max_new:
                    break
                o[i, ol[i]] = tok
                ol[i] += 1
                if self.eos is not None and tok == self.eos:
                    f[i] = 1
                    break
            f[i] |= ol[i] >= self.max_new
        self.t.advance(slots, acc + 1)
        self.d.advance(slots, acc - k)
        for dst, src in ((out, o), (out_len, ol), (fin, f)):
            paddle.assign(self.dev(src, src.dtype), dst)
        self.host_accepted += int(acc.sum())
        accepted = self.dev(acc, "int32")
        return accepted, paddle.take_along_axis(target_tokens, accepted.astype("int64")[:, None], axis=1)[:, 0]


__all__ = ["AdaptiveSpeculation", "SpeculativeError", "speculative_generate"]
