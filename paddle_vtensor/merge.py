"""Exact merge of attention computed over parts of a key set (sequence parallelism, split caches).

Attention of a query over keys split into parts gives, per part ``i``, an output ``o_i`` (softmax over
that part's keys) and its log-sum-exp ``lse_i``. Over all keys::

    lse = log(sum_i exp(lse_i))        o = sum_i exp(lse_i - lse) * o_i

``decode_attention(..., return_lse=True)`` gives the pairs; this merges any number of them in one
kernel (float32 accumulation, max subtracted), on the CPU or the GPU.
"""
from __future__ import annotations

from collections.abc import Sequence

import paddle

from . import _ops

_FLOAT_DTYPES = (paddle.float32, paddle.float16, paddle.bfloat16)
MAX_PARTS = 64  # kernels/merge_attention_states.h: kMaxMergeParts


def merge_attention_states(outs: Sequence[paddle.Tensor], lses: Sequence[paddle.Tensor]
                           ) -> tuple[paddle.Tensor, paddle.Tensor]:
    """Merge partial attention ``outs`` (each ``[..., H, D]``) by their ``lses`` (each float32
    ``[..., H]``, the same leading shape).

    Returns ``(out [..., H, D] in the parts' dtype, lse [..., H] float32)``: attention over the union
    of the parts' keys and its log-sum-exp (so merges compose). A part that saw no key (lse -inf)
    weighs nothing; a row no part saw gets zeros and -inf.

    Raises ``TypeError`` for something that is not a list of tensors and ``ValueError`` when the
    parts disagree (count, shape, dtype, place) or exceed ``MAX_PARTS``; nothing is written then.
    """
    for name, xs in (("outs", outs), ("lses", lses)):
        if isinstance(xs, paddle.Tensor) or not isinstance(xs, Sequence):
            raise TypeError(f"merge_attention_states: {name} must be a list of tensors, got {type(xs).__name__}")
        for i, x in enumerate(xs):
            if not isinstance(x, paddle.Tensor):
                raise TypeError(f"merge_attention_states: {name}[{i}] must be a paddle.Tensor, got {type(x).__name__}")
    if len(outs) == 0:
        raise ValueError("merge_attention_states: needs at least one part, got none")
    if len(outs) != len(lses):
        raise ValueError(f"merge_attention_states: got {len(outs)} outputs but {len(lses)} lse tensors; "
                         "each part needs both")
    if len(outs) > MAX_PARTS:
        raise ValueError(f"merge_attention_states: at most {MAX_PARTS} parts per merge, got {len(outs)} "
                         "(merge in groups: the result's lse lets merges compose)")
    shape, dtype, place = list(outs[0].shape), outs[0].dtype, str(outs[0].place)
    if len(shape) < 2:
        raise ValueError(f"merge_attention_states: outputs must be [..., heads, head_dim], got shape {shape}")
    if dtype not in _FLOAT_DTYPES:
        raise ValueError(f"merge_attention_states: outputs have dtype {dtype}; expected float32, float16 or bfloat16")
    for i, (o, l) in enumerate(zip(outs, lses)):
        if list(o.shape) != shape:
            raise ValueError(f"merge_attention_states: part {i}'s output has shape {list(o.shape)} but part 0's "
                             f"has {shape}; every part must have the same shape")
        if o.dtype != dtype:
            raise ValueError(f"merge_attention_states: part {i}'s output is {o.dtype} but part 0's is {dtype}")
        if list(l.shape) != shape[:-1]:
            raise ValueError(f"merge_attention_states: part {i}'s lse has shape {list(l.shape)}; expected "
                             f"the output's shape without head_dim, {shape[:-1]}")
        if l.dtype != paddle.float32:
            raise ValueError(f"merge_attention_states: part {i}'s lse must be float32, got {l.dtype}")
        if str(o.place) != place or str(l.place) != place:
            raise ValueError(f"merge_attention_states: part {i} is on {o.place} (lse on {l.place}) but part 0's "
                             f"output is on {place}; all parts must share a place")
    out, lse = _ops.ops().vtensor_merge_attention_states(list(outs), list(lses))
    return out, lse


__all__ = ["merge_attention_states", "MAX_PARTS"]
