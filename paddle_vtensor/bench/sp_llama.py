"""A PaddleNLP causal LM decoding with its KV cache split across ranks (sequence parallelism).

The model runs through helper E's :class:`paddle_vtensor.SlotModelRunner` (the model's own
embeddings, norms, projections, rotary, MLP and lm_head over packed tokens) with its ``attention=``
hook set to :meth:`SequenceParallelKVCache.attention`: the runner's own slot cache is never
reserved (it maps nothing), each layer's K/V go to this rank's part of the sequence-parallel cache,
and the ranks' partial attention is merged. Every rank runs the same tokens. B sequences of equal
length share one step (the sequence-parallel cache is seq-major: one length for the batch).
"""
from __future__ import annotations

import numpy as np
import paddle

from ..generation.distributed import SequenceParallelKVCache


class SequenceParallelLM:
    """``forward(input_ids [B, T], start)`` -> the last position's logits ``[B, vocab]`` float32,
    the tokens before ``start`` living in the ranks' caches."""

    def __init__(self, model, sp: SequenceParallelKVCache, batch: int, max_seq_len: int):
        from ..generation.model_runner import SlotModelRunner

        self.sp, self.batch = sp, int(batch)
        self.runner = SlotModelRunner(model, num_slots=self.batch, max_seq_len=max_seq_len, attention=self._attend)
        self._shape = None

    def _attend(self, layer, q, k_new, v_new, ctx):
        b, t = self._shape  # packed rows are sequence-major: row = b * T + t
        out = self.sp.attention(layer, q.reshape([b, t, *q.shape[1:]]), k_new.reshape([b, t, *k_new.shape[1:]]),
                                v_new.reshape([b, t, *v_new.shape[1:]]))
        return out.reshape([b * t, *out.shape[2:]])

    @paddle.no_grad()
    def forward(self, input_ids: paddle.Tensor, start: int) -> paddle.Tensor:
        b, t = input_ids.shape
        if b != self.batch:
            raise ValueError(f"SequenceParallelLM.forward: batch {b}, but the runner was made for {self.batch}")
        self._shape = (b, t)
        positions = np.tile(np.arange(start, start + t, dtype=np.int64), b)  # each sequence's own positions
        self.sp.begin_step(t)
        logits = self.runner.forward(input_ids.reshape([-1]), np.arange(0, b * t + 1, t, dtype=np.int64),
                                     np.arange(b, dtype=np.int64), positions=positions)
        self.sp.end_step()
        return logits.reshape([b, t, -1])[:, -1]


@paddle.no_grad()
def greedy(model, sp: SequenceParallelKVCache, prompt: paddle.Tensor, new_tokens: int, max_seq_len: int,
           on_step=None) -> paddle.Tensor:
    """Greedy decoding of ``new_tokens`` after ``prompt [B, S]`` (prefill through the ranks, then one
    token per step). Returns the new token ids ``[B, new_tokens]`` int64, the same on every rank.
    ``on_step(i)`` is called after each generated token (timing)."""
    lm = SequenceParallelLM(model, sp, prompt.shape[0], max_seq_len)
    ids = []
    logits = lm.forward(prompt, 0)
    pos = prompt.shape[1]
    for i in range(new_tokens):
        token = paddle.argmax(logits, axis=-1, keepdim=True).astype("int64")  # [B, 1]
        ids.append(token)
        if on_step is not None:
            on_step(i)
        if i + 1 < new_tokens:
            logits = lm.forward(token, pos)
            pos += 1
    return paddle.concat(ids, axis=1)


__all__ = ["SequenceParallelLM", "greedy"]
