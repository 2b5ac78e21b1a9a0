"""generate_inflight: continuous batching of greedy generation over a slot cache.

At most ``max_batch`` sequences are in flight, one per slot of a :class:`SlotModelRunner`. Every step
runs one forward over the packed new tokens of all live sequences (a newly admitted prompt's whole
prefill shares the step with the others' one-token decodes), so no padding is computed. When a
sequence ends (EOS or its token budget) its slot is released and the next waiting prompt takes it in
the very next step.

The host knows every slot's length from what it scheduled (``runner.host_lens``) and maps ahead
(``runner.reserve``) before each step; the one device read per step is the step's next-token ids,
which greedy decoding needs on the host anyway.
"""
from __future__ import annotations

import collections
from typing import Callable, Sequence

import numpy as np
import paddle

from ..api import _int
from ..slots import check_slot_errors
from .model_runner import SlotModelRunner


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
                      runner: SlotModelRunner | None = None, cache_dtype=None) -> list[list[int]]:
    """Greedy ids for every prompt (a list of token-id lists), equal to ``model.generate()`` on each
    prompt alone, with at most ``max_batch`` sequences in flight.

    Every argument is checked before the first step (each prompt id against the model's
    vocabulary); a run that fails anyway leaves the runner reset (every slot released, every
    length zero), so a runner passed in is reusable. A runner passed in must have no live slots.

    max_new_tokens: an int, or one per prompt. A sequence ends after its budget or when it produces
    ``eos_token_id`` (kept as its last id). max_seq_len: the slots' capacity (default: the longest
    prompt + budget). on_step: called after each step with {"step", "live", "tokens", "finished"}.
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
    try:
        return _run(runner, prompts, budgets, max_batch, eos_token_id, on_step)
    finally:
        runner.reset()  # after a failure too: no slot stays mapped, no length stays advanced


def _run(runner, prompts, budgets, max_batch, eos_token_id, on_step) -> list[list[int]]:
    outputs: list[list[int]] = [[] for _ in prompts]
    waiting = collections.deque(i for i in range(len(prompts)) if budgets[i] > 0)
    free = list(range(max_batch))[::-1]
    live: dict[int, int] = {}        # slot -> request
    pending: dict[int, list[int]] = {}  # slot -> tokens to feed this step
    step = 0
    while waiting or live:
        while waiting and free:
            slot, req = free.pop(), waiting.popleft()
            live[slot] = req
            pending[slot] = prompts[req]
        slots = sorted(live)
        counts = [len(pending[s]) for s in slots]
        for s, c in zip(slots, counts):
            runner.reserve(s, int(runner.host_lens[s]) + c)  # map ahead: a host decision
        ids = np.concatenate([np.asarray(pending[s], dtype=np.int64) for s in slots])
        cu = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        logits = runner.forward(ids, cu, np.asarray(slots, dtype=np.int32))
        last = paddle.to_tensor(cu[1:] - 1, dtype="int64", place=logits.place)
        next_ids = paddle.gather(logits, last).argmax(axis=-1).numpy()
        runner.advance(np.asarray(slots, dtype=np.int32), np.asarray(counts, dtype=np.int32))
        finished = []
        for s, tok in zip(slots, next_ids.tolist()):
            req = live[s]
            outputs[req].append(int(tok))
            if len(outputs[req]) >= budgets[req] or (eos_token_id is not None and tok == eos_token_id):
                finished.append(s)
            else:
                pending[s] = [int(tok)]
        if finished:
            check_slot_errors(runner.cache)  # the finished-sequence check: one read of the GPU flag
        for s in finished:
            runner.release(s)
            del live[s], pending[s]
            free.append(s)
        step += 1
        if on_step is not None:
            on_step({"step": step, "live": len(slots), "tokens": int(cu[-1]), "finished": len(finished)})
    return outputs


__all__ = ["generate_inflight"]
