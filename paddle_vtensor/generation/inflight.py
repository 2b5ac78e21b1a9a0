"""generate_inflight: continuous batching of greedy generation over a slot cache.

At most ``max_batch`` sequences are in flight, one per slot of a :class:`SlotModelRunner`. Every step
runs one forward over the packed new tokens of all live sequences (a newly admitted prompt's whole
prefill shares the step with the others' one-token decodes), so no padding is computed. When a
sequence ends (EOS or its token budget) its slot is freed and the next waiting prompt takes it in
the very next step.

The host knows every slot's length from what it scheduled (``runner.host_lens``) and maps ahead
(``runner.reserve``) before each step. The cache is watched (``watch_ahead``) for the run: that
reserve only publishes each slot's length, and the background mapper keeps a whole chunk beyond it
mapped, so a slot's chunk crossing finds its chunk mapped one chunk of tokens earlier, the reserve
is a lock-free no-op and the step makes no queue call; the one device read per step is the step's
next-token ids, which greedy decoding needs on the host anyway.

With the prefix cache (default) a sequence that ends keeps its slot while slots and the budget
allow, and an admitted prompt first maps the whole chunks another slot holds of its prefix
(prefix_cache.py): only the rest of the prompt is computed. A prompt that a same-step prefill would
give a longer prefix waits one step for it.
"""
from __future__ import annotations

import collections
from typing import Callable, Sequence

import numpy as np
import paddle

from ..api import _int
from ..map_ahead import watch_ahead
from ..sharing import reserve_for_write, share_prefix, sharing_info
from ..slots import check_slot_errors, slot_info
from .model_runner import SlotModelRunner
from .prefix_cache import Match, PrefixCache, block_tokens


_FN = "generate_inflight"
_INT32_MAX = (1 << 31) - 1


def _budgets(max_new_tokens, n: int) -> list[int]:
    if isinstance(max_new_tokens, (list, tuple, np.ndarray)):
        budgets = [_int(_FN, "max_new_tokens", m, 0, _INT32_MAX) for m in max_new_tokens]
        if len(budgets) != n:
            raise ValueError(f"generate_inflight: max_new_tokens has {len(budgets)} entries for {n} prompts")
        return budgets
    return [_int(_FN, "max_new_tokens", max_new_tokens, 0, _INT32_MAX)] * n


@paddle.no_grad()
def generate_inflight(model, prompts: Sequence[Sequence[int]], max_new_tokens, max_batch: int,
                      eos_token_id: int | None = None, max_seq_len: int | None = None,
                      chunk_bytes: int | None = None, on_step: Callable[[dict], None] | None = None,
                      runner: SlotModelRunner | None = None, prefix_cache: bool = True,
                      prefix_cache_bytes: int | None = None, cache_dtype=None) -> "InflightResult":
    """Greedy ids for every prompt (a list of token-id lists), equal to ``model.generate()`` on each
    prompt alone, with at most ``max_batch`` sequences in flight.

    Every argument is checked before the first step (each prompt id against the model's
    vocabulary); a run that fails anyway leaves the runner reset (every slot released, every
    length zero), so a runner passed in is reusable. A runner passed in must have no live slots.

    max_new_tokens: an int, or one per prompt. A sequence ends after its budget or when it produces
    ``eos_token_id`` (kept as its last id). max_seq_len: the slots' capacity (default: the longest
    prompt + budget). on_step: called after each step with {"step", "live", "tokens", "finished",
    "prefill_tokens", "prefix_hit_tokens", "mapped_bytes", "shared_bytes"}.

    prefix_cache (default on): a prompt whose first whole chunks' worth of tokens another live or
    kept slot already holds maps those chunks (share_prefix) instead of computing them; finished
    sequences stay in their slots (a runner's spare slots beyond max_batch too) until a prompt needs
    the slot or their bytes pass ``prefix_cache_bytes`` (None: no byte bound), least recently used
    first. The ids are the same either way. Returns an :class:`InflightResult` (the ids; ``.stats``).
    cache_dtype: 'int8' keeps the slots' K/V as int8 with per-token scales (paddle_vtensor.quant; CPU);
    the ids then follow the quantized cache (docs/QUANTIZED_CACHE.md has the agreement measured).
    float8_e4m3fn needs per-layer scales before the first prefill: make a runner with
    slot_kv_cache(..., k_scale=, v_scale=) for it.
    """
    if isinstance(prompts, (str, bytes, paddle.Tensor)) or not hasattr(prompts, "__iter__"):
        raise TypeError(f"generate_inflight: prompts must be a list of token-id lists, got {type(prompts).__name__}")
    prompts = [list(p) for p in prompts]
    if any(len(p) == 0 for p in prompts):
        raise ValueError("generate_inflight: every prompt needs at least one token")
    max_batch = _int(_FN, "max_batch", max_batch, 1, _INT32_MAX)
    budgets = _budgets(max_new_tokens, len(prompts))
    if eos_token_id is not None:
        eos_token_id = _int(_FN, "eos_token_id", eos_token_id)
    if max_seq_len is not None:
        max_seq_len = _int(_FN, "max_seq_len", max_seq_len, 1, _INT32_MAX)
    if not isinstance(prefix_cache, bool):
        raise TypeError(f"generate_inflight: prefix_cache must be True or False, got {type(prefix_cache).__name__}")
    if prefix_cache_bytes is not None:
        prefix_cache_bytes = _int(_FN, "prefix_cache_bytes", prefix_cache_bytes, 0, (1 << 63) - 1)
    if on_step is not None and not callable(on_step):
        raise TypeError(f"generate_inflight: on_step must be callable or None, got {type(on_step).__name__}")
    need = max((len(p) + m for p, m in zip(prompts, budgets)), default=1)
    if runner is None:
        runner = SlotModelRunner(model, max_batch, max_seq_len or need, chunk_bytes=chunk_bytes, cache_dtype=cache_dtype)
    elif cache_dtype is not None:
        raise ValueError("generate_inflight: cache_dtype is the new runner's; a runner passed in keeps its own cache")
    elif not isinstance(runner, SlotModelRunner):
        raise TypeError(f"generate_inflight: runner must be a SlotModelRunner, got {type(runner).__name__}")
    elif runner.num_slots < max_batch:
        raise ValueError(f"generate_inflight: the runner has {runner.num_slots} slots, fewer than max_batch={max_batch}")
    elif runner.host_lens.any():
        raise ValueError("generate_inflight: the runner has live slots (its own use, not a failed run: those reset "
                         "it); call runner.reset() first")
    if need > runner.max_seq_len:
        raise ValueError(f"generate_inflight: a prompt plus its budget needs {need} tokens, past max_seq_len={runner.max_seq_len}")
    prompts = [runner.check_ids(p, _FN).tolist() for p in prompts]  # every id, before the first step
    sizes = slot_info(runner.cache)
    try:
        # A chunk (its rows rounded up) and a row beyond every reserved length, mapped by the background thread.
        watch_ahead(runner.cache, min(-(-sizes["chunk_bytes"] // sizes["row_bytes"]) + 1, runner.max_seq_len))
        pc = None
        if prefix_cache:
            pc = PrefixCache(block_tokens(sizes["chunk_bytes"], sizes["row_bytes"]), prefix_cache_bytes,
                             index_generated=runner.family.name != "qwen")
        return _run(runner, prompts, budgets, max_batch, eos_token_id, on_step, pc)
    finally:
        watch_ahead(runner.cache, 0)
        runner.reset()  # after a failure too: no slot stays mapped, no length stays advanced


class InflightResult(list):
    """generate_inflight's ids, one list per prompt (equal to a plain list of lists), with ``stats``:
    prompt_tokens, prefill_tokens (prompt tokens computed), prefix_hit_tokens (prompt tokens whose
    rows were mapped from another slot instead), decode_tokens, steps, mapped_bytes_peak and
    shared_bytes_peak (the runner's cache after each step: physical bytes, each shared chunk once,
    and the further mappings), prefix_cache (on or off), block_tokens (the reuse granularity: rows
    filling whole chunks), kept_evicted (finished sequences evicted from the prefix cache),
    deferred (prompts held back one step to reuse a prefix a same-step prefill was computing)."""

    stats: dict


class _Scheduler:
    """One run's host state: which request is in which slot, what each slot feeds next."""

    def __init__(self, runner, prompts, budgets, max_batch, pc: PrefixCache | None):
        self.runner, self.prompts, self.budgets, self.pc, self.max_batch = runner, prompts, budgets, pc, max_batch
        self.outputs: list[list[int]] = [[] for _ in prompts]
        self.waiting = collections.deque(i for i in range(len(prompts)) if budgets[i] > 0)
        # With the prefix cache finished sequences may stay in the runner's spare slots too.
        self.free = list(range(runner.num_slots if pc else max_batch))[::-1]
        self.live: dict[int, int] = {}          # slot -> request
        self.pending: dict[int, list[int]] = {}  # slot -> tokens to feed this step
        self.offset: dict[int, int] = {}        # slot -> position of its first fed token, per call (qwen)
        self.deferred: set[int] = set()
        self.stats = {"prompt_tokens": sum(len(prompts[i]) for i in self.waiting), "prefill_tokens": 0,
                      "prefix_hit_tokens": 0, "decode_tokens": 0, "steps": 0, "mapped_bytes_peak": 0,
                      "shared_bytes_peak": 0, "prefix_cache": pc is not None,
                      "block_tokens": pc.block if pc else None, "kept_evicted": 0, "deferred": 0}

    def admit(self) -> int:
        """Waiting prompts into slots while fewer than max_batch run; returns the rows reused."""
        held, hit = [], 0
        while self.waiting and len(self.live) < self.max_batch and (self.free or (self.pc and self.pc.kept)):
            req = self.waiting.popleft()
            prompt = self.prompts[req]
            m = self.pc.match(prompt) if self.pc else Match(None, 0, 0)
            if m.pending > m.tokens and req not in self.deferred:
                self.deferred.add(req)  # a same-step prefill is writing a longer prefix: reuse it next step
                held.append(req)
                continue
            slot = self._place(m)
            if self.pc:
                self.pc.start(slot, prompt, written=m.tokens)
            self.live[slot], self.pending[slot], self.offset[slot] = req, prompt[m.tokens:], m.tokens
            hit += m.tokens
        self.waiting.extendleft(reversed(held))
        self.stats["deferred"] = len(self.deferred)
        self.stats["prefix_hit_tokens"] += hit
        return hit

    def _place(self, m: Match) -> int:
        """A slot for a new sequence, holding the ``m.tokens`` reusable rows of ``m.slot``."""
        runner, pc = self.runner, self.pc
        if m.tokens and pc:
            pc.touch(m.slot)
        if self.free:
            slot = self.free.pop()
        else:
            slot = pc.victim(spare=m.slot if m.tokens else None)
            if slot is None:  # the only kept slot is the source: the new sequence takes it over
                self._take_over(m)
                return m.slot
            runner.release(slot)
        if m.tokens:
            share_prefix(runner.cache, m.slot, slot, m.tokens)  # whole chunks: mapped, nothing copied
            runner.advance([slot], [m.tokens])
        return slot

    def _take_over(self, m: Match) -> None:
        """Keep the first ``m.tokens`` rows of a kept slot and write the new sequence after them."""
        runner, slot = self.runner, m.slot
        self.pc.drop(slot)
        runner.advance([slot], [m.tokens - int(runner.host_lens[slot])])
        # Rows from m.tokens on are rewritten; chunks there another slot still maps get private
        # copies first, all at once, so later plain reserves never write shared memory.
        mapped = int(slot_info(runner.cache)["mapped_tokens"][slot])
        reserve_for_write(runner.cache, slot, max(mapped, m.tokens), write_from=m.tokens)

    def step(self, eos_token_id) -> dict:
        runner, pc = self.runner, self.pc
        slots = sorted(self.live)
        counts = [len(self.pending[s]) for s in slots]
        prefill = sum(c for s, c in zip(slots, counts) if not self.outputs[self.live[s]])
        for s, c in zip(slots, counts):
            runner.reserve(s, int(runner.host_lens[s]) + c)  # map ahead: a host decision
        ids = np.concatenate([np.asarray(self.pending[s], dtype=np.int64) for s in slots])
        cu = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        positions = None
        if runner.family.name == "qwen" and any(self.offset[s] for s in slots):
            # qwen rotates the tokens of each call from 0; a prompt whose first rows were reused
            # continues from where they end, as its solo prefill would have.
            positions = np.concatenate([self.offset[s] + np.arange(c) for s, c in zip(slots, counts)]).astype(np.int64)
        # While the step runs, the background mapper maps a chunk beyond the lengths the reserve above
        # published (watch_ahead); that reserve stays the authority (a no-op then, the mapping itself
        # when the mapper failed or has not looked yet).
        logits = runner.forward(ids, cu, np.asarray(slots, dtype=np.int32), positions=positions)
        last = paddle.to_tensor(cu[1:] - 1, dtype="int64", place=logits.place)
        next_ids = paddle.gather(logits, last).argmax(axis=-1).numpy()
        runner.advance(np.asarray(slots, dtype=np.int32), np.asarray(counts, dtype=np.int32))
        finished = []
        for s, tok in zip(slots, next_ids.tolist()):
            req = self.live[s]
            self.outputs[req].append(int(tok))
            self.offset[s] = 0
            if pc:
                pc.wrote(s, int(runner.host_lens[s]))
            if len(self.outputs[req]) >= self.budgets[req] or (eos_token_id is not None and tok == eos_token_id):
                finished.append(s)
            else:
                self.pending[s] = [int(tok)]
                if pc:
                    pc.feed(s, [int(tok)])
        info = sharing_info(runner.cache)  # before finished sequences give their memory back
        if finished:
            check_slot_errors(runner.cache)  # the finished-sequence check: one read of the GPU flag
            self._finish(finished)
        st = self.stats
        st["steps"] += 1
        st["prefill_tokens"] += prefill
        st["decode_tokens"] += int(cu[-1]) - prefill
        st["mapped_bytes_peak"] = max(st["mapped_bytes_peak"], info["mapped_bytes"])
        st["shared_bytes_peak"] = max(st["shared_bytes_peak"], info["shared_bytes"])
        return {"step": st["steps"], "live": len(slots), "tokens": int(cu[-1]), "finished": len(finished),
                "prefill_tokens": prefill, "mapped_bytes": info["mapped_bytes"], "shared_bytes": info["shared_bytes"]}

    def _finish(self, finished) -> None:
        runner, pc = self.runner, self.pc
        sizes = slot_info(runner.cache) if pc else None
        for s in finished:
            del self.live[s], self.pending[s], self.offset[s]
            if pc is None:
                runner.release(s)
                self.free.append(s)
                continue
            chunk, row = sizes["chunk_bytes"], sizes["row_bytes"]
            held = -(-int(sizes["mapped_tokens"][s]) * row // chunk) * chunk
            for v in pc.keep(s, held):  # over the budget: the least recently used go
                runner.release(v)
                self.free.append(v)
        self.stats["kept_evicted"] = pc.evicted if pc else 0


def _run(runner, prompts, budgets, max_batch, eos_token_id, on_step, pc) -> InflightResult:
    sched = _Scheduler(runner, prompts, budgets, max_batch, pc)
    while sched.waiting or sched.live:
        hit = sched.admit()
        info = sched.step(eos_token_id)
        if on_step is not None:
            on_step({**info, "prefix_hit_tokens": hit})
    result = InflightResult(sched.outputs)
    result.stats = sched.stats
    return result


__all__ = ["InflightResult", "generate_inflight"]
