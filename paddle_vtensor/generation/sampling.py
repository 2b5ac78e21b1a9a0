"""parallel_sample: ``n`` continuations of one prompt that share the prompt's cache.

The prompt is prefilled once, into one slot of a :class:`SlotModelRunner`; each further
continuation's slot is forked from it (slot_fork.py: whole chunks mapped, the partial chunk
copied; a prompt shorter than ``copy_max_chunks`` chunks is copied). Then every step decodes one
token of each live continuation. Continuation ``i`` draws from its own
``numpy.random.default_rng(seeds[i])`` with :func:`sample_next`, so it equals a solo run of the
prompt with that seed; ``temperature=0`` is greedy (every continuation equals solo greedy).
"""
from __future__ import annotations

import collections

import numpy as np
import paddle

from ..api import _int
from ..slots import check_slot_errors
from .model_runner import SlotModelRunner
from .slot_fork import SlotForker, feed

_FN = "parallel_sample"


class SampleOutput(collections.namedtuple("SampleOutput", ["sequences", "stats"])):
    """``sequences``: n lists of new token ids; ``stats``: prefill_tokens (computed once),
    the forks' copied_bytes / mapped_chunks / copies / remaps, and peak mapped_bytes and
    shared_bytes of the cache."""


def sample_next(logits, rng: np.random.Generator, temperature: float = 1.0, top_k: int = 0,
                top_p: float = 1.0) -> int:
    """One token from float logits [vocab]: argmax when ``temperature == 0``; else softmax of
    ``logits / temperature`` kept to the ``top_k`` most likely (0: all) and to the smallest set
    whose probability reaches ``top_p``, then one draw ``rng.random()`` against the cumulative sum
    (in float64, ids in descending probability, ties by id)."""
    x = np.asarray(logits, dtype=np.float64).reshape(-1)
    if temperature == 0:
        return int(np.argmax(x))
    order = np.argsort(-x, kind="stable")
    x = x[order] / temperature
    p = np.exp(x - x[0])
    if top_k:
        p[top_k:] = 0.0
    p /= p.sum()
    if top_p < 1.0:
        keep = np.searchsorted(np.cumsum(p), top_p) + 1  # the first prefix reaching top_p
        p[keep:] = 0.0
        p /= p.sum()
    cdf = np.cumsum(p)
    return int(order[min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), len(cdf) - 1)])


def _check_sampling(temperature, top_k, top_p, vocab):
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
        raise ValueError(f"{_FN}: temperature must be a float >= 0 (0: greedy), got {temperature!r}")
    top_k = _int(_FN, "top_k", top_k, 0, vocab)
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ValueError(f"{_FN}: top_p must be a float in (0, 1], got {top_p!r}")
    return float(temperature), top_k, float(top_p)


@paddle.no_grad()
def parallel_sample(model, prompt, n: int, max_new_tokens: int, *, temperature: float = 1.0, top_k: int = 0,
                    top_p: float = 1.0, seeds=None, eos_token_id: int | None = None, copy_max_chunks: int = 2,
                    chunk_bytes: int | None = None) -> SampleOutput:
    """``n`` continuations of ``prompt`` (a list of token ids) of up to ``max_new_tokens`` each
    (one ends early at ``eos_token_id``, kept as its last id), sharing the prompt's cache.
    ``seeds``: n ints (default 0..n-1), continuation i samples with ``default_rng(seeds[i])``.
    Returns :class:`SampleOutput` (sequences, stats)."""
    if isinstance(prompt, (str, bytes)) or not hasattr(prompt, "__len__"):
        raise TypeError(f"{_FN}: prompt must be a list of token ids, got {type(prompt).__name__}")
    if len(prompt) == 0:
        raise ValueError(f"{_FN}: the prompt needs at least one token")
    n = _int(_FN, "n", n, 1, 1 << 16)
    max_new_tokens = _int(_FN, "max_new_tokens", max_new_tokens, 1, 1 << 30)
    seeds = list(range(n)) if seeds is None else [_int(_FN, "a seed", s, 0) for s in seeds]
    if len(seeds) != n:
        raise ValueError(f"{_FN}: {len(seeds)} seeds for n={n} continuations")
    if eos_token_id is not None:
        eos_token_id = _int(_FN, "eos_token_id", eos_token_id, 0)
    runner = SlotModelRunner(model, n, len(prompt) + max_new_tokens, chunk_bytes=chunk_bytes)
    sampling = _check_sampling(temperature, top_k, top_p, runner.vocab_size)
    prompt = runner.check_ids(prompt, _FN)
    forker = SlotForker(runner, copy_max_chunks, _FN)
    try:
        return _run(runner, forker, prompt, n, max_new_tokens, sampling, seeds, eos_token_id)
    finally:
        runner.reset()


def _run(runner, forker, prompt, n, max_new, sampling, seeds, eos) -> SampleOutput:
    rngs = [np.random.default_rng(s) for s in seeds]
    logits = feed(runner, [0], [prompt]).numpy()
    out = [[sample_next(logits[0], rng, *sampling)] for rng in rngs]
    for slot in range(1, n):
        forker.fork(0, slot, len(prompt), 0)
    forker.sync_lengths()
    peak = forker.memory()
    live = [i for i in range(n) if len(out[i]) < max_new and out[i][-1] != eos]
    while live:
        logits = feed(runner, live, [[out[i][-1]] for i in live]).numpy()
        for i, row in zip(live, logits):
            out[i].append(sample_next(row, rngs[i], *sampling))
        mem = forker.memory()
        peak = {k: max(peak[k], mem[k]) for k in peak}
        ended = [i for i in live if len(out[i]) >= max_new or out[i][-1] == eos]
        if ended:
            check_slot_errors(runner.cache)
            for i in ended:
                runner.release(i)
        live = [i for i in live if i not in ended]
    stats = {"prefill_tokens": len(prompt), **forker.counts.as_dict(), "peak_mapped_bytes": peak["mapped_bytes"],
             "peak_shared_bytes": peak["shared_bytes"], "row_bytes": forker.row_bytes, "chunk_bytes": forker.chunk_bytes}
    return SampleOutput(out, stats)


__all__ = ["SampleOutput", "parallel_sample", "sample_next"]
