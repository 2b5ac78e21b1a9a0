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

from . import _ops, errors
from ._op_names import PVT_OP_MERGE_ATTENTION_STATES
from .api import _no_gradients

MAX_PARTS = 64  # kernels/merge_attention_states.h: kMaxMergeParts (the op refuses more)


def merge_attention_states(outs: Sequence[paddle.Tensor], lses: Sequence[paddle.Tensor]
                           ) -> tuple[paddle.Tensor, paddle.Tensor]:
    """Merge partial attention ``outs`` (each ``[..., H, D]``) by their ``lses`` (each float32
    ``[..., H]``, the same leading shape).

    Returns ``(out [..., H, D] in the parts' dtype, lse [..., H] float32)``: attention over the union
    of the parts' keys and its log-sum-exp (so merges compose). A part that saw no key (lse -inf)
    weighs nothing; a row no part saw gets zeros and -inf.

    Raises ``TypeError`` for something that is not a list of tensors and ``ValueError`` (from the
    op's own checks) when the parts disagree (count, shape, dtype, place) or exceed ``MAX_PARTS``
    (merge in groups: the result's lse lets merges compose), or when an input requires gradients
    (stop_gradient=False while grad is enabled: the merge carries none); nothing is written then.
    """
    # What the op cannot see: Paddle turns a list of non-tensors into an error of its own.
    for name, xs in (("outs", outs), ("lses", lses)):
        if isinstance(xs, paddle.Tensor) or not isinstance(xs, Sequence):
            raise TypeError(f"merge_attention_states: {name} must be a list of tensors, got {type(xs).__name__}")
        for i, x in enumerate(xs):
            if not isinstance(x, paddle.Tensor):
                raise TypeError(f"merge_attention_states: {name}[{i}] must be a paddle.Tensor, got {type(x).__name__}")
    _no_gradients("merge_attention_states", *outs, *lses)
    try:
        out, lse = _ops.run(PVT_OP_MERGE_ATTENTION_STATES, list(outs), list(lses))
    except Exception as e:
        raise errors.from_op_error(e, PVT_OP_MERGE_ATTENTION_STATES) from None
    return out, lse


__all__ = ["merge_attention_states", "MAX_PARTS"]
