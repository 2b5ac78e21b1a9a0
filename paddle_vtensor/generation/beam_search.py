"""beam_search: PaddleNLP's beam search on the slot runner, reordering beams by forking slots
instead of ``index_select``-ing every layer's whole cache every step.

Each beam lives in a slot of a :class:`SlotModelRunner`; a batch row owns ``num_beams`` slots. The
prompt is prefilled once per row and each step feeds one token per live beam. When the scorer picks
the next beams, a child beam whose parent has no earlier child takes the parent's slot as it is
(nothing done); every further child of a parent takes the slot of a beam that died this step and
is forked into it (slot_fork.py: the divergent tail copied when short, whole chunks remapped with
one partial chunk copied when long). So a step copies at most one partial chunk (or one short tail)
per reordered beam, never a whole cache.

Ids and scores equal PaddleNLP 2.8.1's ``model.generate(decode_strategy="beam_search", ...)``: the
scorer below is BeamSearchScorer's (length penalty ``((new_tokens + 5) / 6) ** length_penalty``,
``early_stopping`` ending a row once ``num_beams`` hypotheses are in, an EOS candidate kept only when
ranked among the top ``num_beams``), and left padding keeps PaddleNLP's rotary positions (llama:
the padded index; qwen: the padded index in the prefill, 0 for each decoded token).
"""
from __future__ import annotations

import collections
import dataclasses

import numpy as np
import paddle
import paddle.nn.functional as F

from ..api import _int
from ..slots import check_slot_errors
from .model_runner import SlotModelRunner
from .slot_fork import SlotForker, feed

_FN = "beam_search"
_NEG = -1e6  # PaddleNLP's get_scale_by_dtype(return_positive=False) for float32: beams 1.. at step 0


class BeamSearchOutput(collections.namedtuple("BeamSearchOutput", ["ids", "scores", "stats"])):
    """``ids``: int64 [batch * num_return_sequences, new_len] (PaddleNLP's ``generate()`` ids);
    ``scores``: float32 [batch * num_return_sequences, 1]; ``stats``: a dict, ``steps`` one entry
    per step (copied_bytes, cow_bytes, mapped_chunks, reordered beams, mapped_bytes, shared_bytes,
    index_select_bytes: what PaddleNLP's reorder_cache would copy at that step) and totals."""


class _Hypotheses:
    """PaddleNLP 2.8.1's BeamHypotheses, statement for statement (the order of ``beams`` decides
    ties), on host floats."""

    def __init__(self, num_beams, length_penalty, early_stopping):
        self.num_beams, self.length_penalty, self.early_stopping = num_beams, length_penalty, early_stopping
        self.beams = []
        self.worst_score = -_NEG

    def add(self, new_tokens: np.ndarray, sum_logprobs: float) -> None:
        score = sum_logprobs / (((len(new_tokens) + 5) / 6) ** self.length_penalty)
        if len(self.beams) < self.num_beams or score > self.worst_score:
            self.beams.append((score, new_tokens))
            if len(self.beams) > self.num_beams:
                ranked = sorted([(s, i) for i, (s, _) in enumerate(self.beams)])
                del self.beams[ranked[0][1]]
                self.worst_score = ranked[1][0]
            else:
                self.worst_score = min(score, self.worst_score)

    def is_done(self, best_sum_logprobs: float, new_len: int) -> bool:
        if len(self.beams) < self.num_beams:
            return False
        if self.early_stopping:
            return True
        return self.worst_score >= best_sum_logprobs / ((new_len + 5) / 6) ** self.length_penalty


def _check_inputs(input_ids, attention_mask, pad_token_id):
    ids = np.asarray(input_ids.numpy() if isinstance(input_ids, paddle.Tensor) else input_ids)
    if ids.ndim != 2 or ids.shape[1] == 0 or ids.shape[0] == 0:
        raise ValueError(f"{_FN}: input_ids must be [batch, seq_len] with both at least 1, got shape {list(ids.shape)}")
    if attention_mask is None:  # as PaddleNLP: padding is where the pad token is
        mask = (ids != pad_token_id) if pad_token_id is not None else np.ones(ids.shape, dtype=bool)
    else:
        mask = np.asarray(attention_mask.numpy() if isinstance(attention_mask, paddle.Tensor) else attention_mask)
        if mask.shape != ids.shape:
            raise ValueError(f"{_FN}: attention_mask has shape {list(mask.shape)}, input_ids {list(ids.shape)}")
        if not np.isin(mask, (0, 1)).all():
            raise ValueError(f"{_FN}: attention_mask must hold 0 (padding) and 1 (a token) only")
    mask = mask.astype(bool)
    real = mask.sum(axis=1)
    if (real == 0).any():
        raise ValueError(f"{_FN}: row {int(np.argmin(real))} of attention_mask has no token")
    width = ids.shape[1]
    for row, n in enumerate(real):
        if not mask[row, width - n:].all():
            raise ValueError(f"{_FN}: row {row} is not left-padded (its padding must come before its tokens)")
    return ids, width - real


def _defaults(model, eos_token_id, pad_token_id):
    eos = eos_token_id if eos_token_id is not None else getattr(model.config, "eos_token_id", None)
    pad = pad_token_id if pad_token_id is not None else getattr(model.config, "pad_token_id", None)
    if isinstance(eos, (list, tuple)):
        raise ValueError(f"{_FN}: one eos_token_id (an int), got {eos!r}")
    eos = None if eos is None else _int(_FN, "eos_token_id", eos, 0)
    pad = eos if pad is None else _int(_FN, "pad_token_id", pad)
    return eos, pad


@paddle.no_grad()
def beam_search(model, input_ids, attention_mask=None, max_new_tokens: int = 20, num_beams: int = 4, *,
                length_penalty: float = 1.0, early_stopping: bool = False, num_return_sequences: int = 1,
                eos_token_id: int | None = None, pad_token_id: int | None = None, copy_max_chunks: int = 2,
                chunk_bytes: int | None = None, on_step=None) -> BeamSearchOutput:
    """Beam search of a PaddleNLP llama or qwen over a slot cache; see the module docstring.

    ``input_ids`` / ``attention_mask``: [batch, seq_len] tensors or arrays, left-padded (mask 0 on
    padding); without a mask, padding is where ``pad_token_id`` is. ``eos_token_id`` /
    ``pad_token_id`` default to the model config's, as in ``generate()``. ``copy_max_chunks``: the
    fork policy (slot_fork.py). ``on_step``: called with each step's stats entry.
    Returns :class:`BeamSearchOutput` (ids, scores, stats).
    """
    num_beams = _int(_FN, "num_beams", num_beams, 2, 1 << 16)
    max_new_tokens = _int(_FN, "max_new_tokens", max_new_tokens, 1, 1 << 30)
    num_return_sequences = _int(_FN, "num_return_sequences", num_return_sequences, 1, num_beams)
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, (int, float)):
        raise TypeError(f"{_FN}: length_penalty must be a float, got {type(length_penalty).__name__}")
    if not isinstance(early_stopping, bool):
        raise TypeError(f"{_FN}: early_stopping must be a bool, got {type(early_stopping).__name__}")
    if on_step is not None and not callable(on_step):
        raise TypeError(f"{_FN}: on_step must be callable or None, got {type(on_step).__name__}")
    eos, pad = _defaults(model, eos_token_id, pad_token_id)
    ids, pads = _check_inputs(input_ids, attention_mask, pad)
    batch, width = ids.shape
    runner = SlotModelRunner(model, batch * num_beams, width + max_new_tokens, chunk_bytes=chunk_bytes)
    prompts = [runner.check_ids(ids[b, pads[b]:], _FN) for b in range(batch)]
    forker = SlotForker(runner, copy_max_chunks, _FN)
    search = _Search(runner, forker, prompts, pads, width, num_beams, max_new_tokens, float(length_penalty),
                     early_stopping, eos, on_step)
    try:
        hyps = search.run()
    finally:
        runner.reset()
    return _finalize(hyps, num_return_sequences, width, max_new_tokens, eos, pad, search.stats())


@dataclasses.dataclass
class _Row:
    """One batch row: its slots, its live beams (generated tokens, slot, score) and hypotheses."""

    pool: list          # the num_beams slots this row owns
    prompt: np.ndarray
    pad: int
    hyps: _Hypotheses
    gen: list = dataclasses.field(default_factory=list)    # per beam: generated ids (np.int64)
    slot: list = dataclasses.field(default_factory=list)   # per beam: its slot
    scores: np.ndarray | None = None
    done: bool = False


class _Search:
    def __init__(self, runner, forker, prompts, pads, width, num_beams, max_new, length_penalty, early_stopping,
                 eos, on_step):
        self.runner, self.forker, self.width, self.k, self.max_new = runner, forker, width, num_beams, max_new
        self.eos, self.on_step, self.steps = eos, on_step, []
        self.rows = [_Row(list(range(b * num_beams, (b + 1) * num_beams)), p, int(pads[b]),
                          _Hypotheses(num_beams, length_penalty, early_stopping)) for b, p in enumerate(prompts)]
        self.qwen = runner.family.name == "qwen"

    def _positions(self, live, first: bool):
        """PaddleNLP's rotary positions under left padding; None when no row is padded (the runner's
        defaults are the same then)."""
        if not any(r.pad for r in live):
            return None
        pos = []
        for r in live:
            if first:
                pos.append(r.pad + np.arange(len(r.prompt)))
            else:
                for s in r.slot:
                    pos.append([0 if self.qwen else r.pad + int(self.runner.host_lens[s])])
        return np.concatenate([np.asarray(p, dtype=np.int64) for p in pos])

    def run(self) -> list:
        k = self.k
        live = list(self.rows)
        # Step 0: each prompt once, into its row's first slot; every beam starts from that slot.
        logits = feed(self.runner, [r.pool[0] for r in live], [r.prompt for r in live], self._positions(live, True))
        logits = paddle.repeat_interleave(logits, k, axis=0)
        for r in live:
            r.gen, r.slot = [np.zeros(0, np.int64)] * k, [r.pool[0]] * k
            r.scores = np.array([0.0] + [_NEG] * (k - 1), dtype=np.float32)
        for step in range(self.max_new):
            before = self.forker.counts.as_dict()
            choices = self._select(live, logits)
            new_len = step + 1
            finished = [r for r in live if r.done]
            live = [r for r in live if not r.done]
            reordered = 0
            if new_len < self.max_new:
                reordered = sum(self._reorder(r, *choices[id(r)]) for r in live)
            else:  # the last step: the scorer's finalize takes every live beam
                for r in live:
                    self._advance(r, *choices[id(r)])
            for r in finished:
                for s in r.pool:
                    if self.runner.host_lens[s]:
                        self.runner.release(s)
            self.forker.sync_lengths()
            self._record(step, before, reordered)
            if not live or new_len >= self.max_new:
                break
            slots = [s for r in live for s in r.slot]
            tokens = [[int(g[-1])] for r in live for g in r.gen]
            logits = feed(self.runner, slots, tokens, self._positions(live, False))
        check_slot_errors(self.runner.cache)
        for r in live:  # open beams become hypotheses, as BeamSearchScorer.finalize does
            for g, s in zip(r.gen, r.scores):
                r.hyps.add(g, float(s))
        return [r.hyps for r in self.rows]

    def _select(self, live, logits) -> dict:
        """PaddleNLP's candidate choice and BeamSearchScorer.process for each live row: returns
        {row: (parent beams, tokens, scores)} of the next beams and marks finished rows done."""
        k = self.k
        scores = paddle.to_tensor(np.concatenate([r.scores for r in live]), place=logits.place)
        next_scores = paddle.log(F.softmax(logits)) + scores.unsqueeze(-1)
        vocab = next_scores.shape[-1]
        top_scores, top = paddle.topk(next_scores.reshape([len(live), k * vocab]), 2 * k, axis=1)
        top_scores, top = top_scores.numpy(), top.numpy()
        out = {}
        for i, r in enumerate(live):
            parents, tokens, beam_scores = [], [], []
            for rank in range(2 * k):
                token, parent, score = int(top[i, rank] % vocab), int(top[i, rank] // vocab), top_scores[i, rank]
                if self.eos is not None and token == self.eos:
                    if rank < k:  # an EOS ranked past num_beams is dropped, as PaddleNLP does
                        r.hyps.add(r.gen[parent], float(score))
                else:
                    parents.append(parent)
                    tokens.append(token)
                    beam_scores.append(score)
                if len(parents) == k:
                    break
            if r.hyps.is_done(float(top_scores[i].max()), len(r.gen[0])):
                r.done = True
            out[id(r)] = (parents, tokens, np.asarray(beam_scores, dtype=np.float32))
        return out

    def _advance(self, r: _Row, parents, tokens, scores) -> None:
        r.gen = [np.append(r.gen[p], t) for p, t in zip(parents, tokens)]
        r.scores = scores

    def _reorder(self, r: _Row, parents, tokens, scores) -> int:
        """Gives each next beam its parent's cache; returns how many beams needed a fork."""
        tokens_now = len(r.prompt) + len(r.gen[0])
        rows_of = {r.slot[p]: r.gen[p] for p in range(self.k)}  # what each used slot holds now
        new_slot = [None] * self.k
        pending = []
        for child, parent in enumerate(parents):
            s = r.slot[parent]
            if s in new_slot:
                pending.append((child, s))
            else:
                new_slot[child] = s  # the parent's first child keeps its slot: nothing to do
        free = [s for s in r.pool if s not in new_slot]
        for child, src in pending:
            # The dead beam's slot that shares the longest prefix with the parent needs the least.
            common = [_common(rows_of.get(x), rows_of[src]) for x in free]
            x = free.pop(int(np.argmax(common)))
            held = 0 if rows_of.get(x) is None else len(r.prompt) + max(common)
            self.forker.fork(src, x, tokens_now, held)
            new_slot[child] = x
        r.slot = new_slot
        self._advance(r, parents, tokens, scores)
        return len(pending)

    def _record(self, step, before, reordered) -> None:
        after = self.forker.counts.as_dict()
        entry = {"step": step, "reordered": reordered, **{n: after[n] - before[n] for n in after},
                 **self.forker.memory(),
                 "index_select_bytes": len(self.rows) * self.k * (self.width + step) * self.forker.row_bytes}
        self.steps.append(entry)
        if self.on_step is not None:
            self.on_step(entry)

    def stats(self) -> dict:
        totals = {n: sum(e[n] for e in self.steps) for n in ("copied_bytes", "cow_bytes", "mapped_chunks", "copies",
                                                             "remaps", "reordered", "index_select_bytes")}
        return {"steps": self.steps, "totals": totals, "row_bytes": self.forker.row_bytes,
                "chunk_bytes": self.forker.chunk_bytes, "copy_max_chunks": self.forker.copy_max_chunks}


def _common(a, b) -> int:
    """Leading generated ids two beams share (-1 for a slot holding nothing)."""
    if a is None:
        return -1
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def _finalize(hyps, num_return, width, max_new, eos, pad, stats) -> BeamSearchOutput:
    """BeamSearchScorer.finalize's output: the best hypotheses, EOS after those that end early,
    padding when lengths differ; only the new tokens (``trunc_input``)."""
    best = []
    for h in hyps:
        ranked = sorted(h.beams, key=lambda x: x[0])
        best += [ranked.pop() for _ in range(num_return)]
    lengths = [len(g) for _, g in best]
    out_len = min(max(lengths) + 1, max_new)
    ids = np.full((len(best), out_len), pad if min(lengths) != max(lengths) else 0, dtype=np.int64)
    for i, (_, g) in enumerate(best):
        ids[i, :len(g)] = g
        if len(g) < max_new:
            ids[i, len(g)] = eos
    scores = np.array([[s] for s, _ in best], dtype=np.float32)
    return BeamSearchOutput(paddle.to_tensor(ids), paddle.to_tensor(scores), stats)


__all__ = ["BeamSearchOutput", "beam_search"]
