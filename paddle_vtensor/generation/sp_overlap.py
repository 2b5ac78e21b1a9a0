"""Sequence-parallel decode with the per-layer collective overlapped: the batch split into
micro-batches, each with its own :class:`SequenceParallelKVCache`.

Per layer, every micro-batch's QKV and partial attention run and its all-gather starts at once; then
each micro-batch in turn waits for its gather, merges and runs the rest of the layer (``post``: the
output projection, the MLP). So micro-batch 0's gather runs while micro-batch 1's QKV and attention
run, and micro-batch 1's while micro-batch 0's MLP runs::

    compute  | qkv+attn m0 | qkv+attn m1 | merge+MLP m0 | merge+MLP m1 | qkv+attn m0 (next layer)
    collect  |             | gather m0 ..... | gather m1 ..... |

Every rank makes the same calls in the same order, so the collectives of all micro-batches line up
across ranks (one per layer per micro-batch). Rows of the batch are independent in attention and in
a decoder layer, so the result is the unsplit batch's, exactly.
"""
from __future__ import annotations

import time

import paddle

from .distributed import SequenceParallelKVCache


class SplitBatchSequenceParallel:
    """``micro_batches`` contiguous groups of a batch's rows, each group's KV caches split across the
    ranks by its own :class:`SequenceParallelKVCache` (``sp_kwargs``: its constructor's arguments)."""

    def __init__(self, num_layers: int, batch: int, micro_batches: int = 2, **sp_kwargs):
        if not 1 <= int(micro_batches) <= int(batch):
            raise ValueError(f"SplitBatchSequenceParallel: micro_batches must be in [1, batch={batch}], "
                             f"got {micro_batches}")
        base, extra = divmod(int(batch), int(micro_batches))
        sizes = [base + (1 if m < extra else 0) for m in range(int(micro_batches))]
        self.bounds = [(sum(sizes[:m]), sum(sizes[:m + 1])) for m in range(len(sizes))]
        self.batch, self.num_layers = int(batch), int(num_layers)
        self.parts = [SequenceParallelKVCache(num_layers, **sp_kwargs) for _ in sizes]

    def step(self, hidden: paddle.Tensor, n_new: int, qkv, post, trace: list | None = None) -> paddle.Tensor:
        """One model step over ``hidden [batch, n_new, ...]`` (the step's new tokens, batch first).

        ``qkv(layer, h) -> (q [b, Tq, Hq, D], k [b, n_new, Hkv, D], v)`` for ``h``, a micro-batch's
        rows (replicated projections: every rank computes them itself); ``post(layer, h, attn) -> h``,
        the rest of the layer. A refused call raises its ValueError (every rank alike) after the
        layer's other gathers are drained; the refused micro-batch's and the later ones' caches of
        that layer are unchanged (the earlier ones appended, as the layers before did). Returns the last layer's hidden states, rows in the original order.
        ``trace``: a list that receives ``(what, micro_batch, layer, t_begin, t_end)`` in
        ``time.perf_counter()`` seconds (the timeline of docs/SEQUENCE_PARALLEL.md)."""
        if hidden.shape[0] != self.batch:
            raise ValueError(f"SplitBatchSequenceParallel.step: hidden has {hidden.shape[0]} rows, "
                             f"the micro-batches hold {self.batch}")
        hs = [hidden[lo:hi] for lo, hi in self.bounds]
        for sp in self.parts:
            sp.begin_step(n_new)
        for layer in range(self.num_layers):
            pending = []
            for m, sp in enumerate(self.parts):
                t0 = time.perf_counter()
                pending.append(sp.attention_start(layer, *qkv(layer, hs[m])))
                if trace is not None:
                    trace.append(("qkv+attention", m, layer, t0, time.perf_counter()))
            for m, p in enumerate(pending):
                t0 = time.perf_counter()
                try:
                    attn = p.wait()
                except Exception:
                    for rest in pending[m + 1:]:
                        rest.cancel()  # drain their gathers (every rank started them); keep no append
                    raise
                t1 = time.perf_counter()
                hs[m] = post(layer, hs[m], attn)
                if trace is not None:
                    trace += [("wait+merge", m, layer, t0, t1), ("post", m, layer, t1, time.perf_counter())]
        for sp in self.parts:
            sp.end_step()
        return paddle.concat(hs, axis=0)


__all__ = ["SplitBatchSequenceParallel"]
