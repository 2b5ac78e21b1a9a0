"""Decode attention that reads a KV cache where it lies.

PaddleNLP's eager attention transposes the cache to ``[B, H, S, D]``, repeats it for grouped-query
heads and lets ``matmul`` make it contiguous: whole-cache copies every step and layer. This op reads
the VTensor's seq-major memory in place, handles the head grouping by indexing, and accumulates the
softmax in float32.
"""
from __future__ import annotations

import math

import paddle

from . import _ops
from .api import storage_view

_FLOAT_DTYPES = (paddle.float32, paddle.float16, paddle.bfloat16)


def decode_attention(q: paddle.Tensor, k_cache: paddle.Tensor, v_cache: paddle.Tensor,
                     attn_mask: paddle.Tensor | None = None, scale: float | None = None,
                     return_lse: bool = False):
    """``softmax(q k^T * scale + attn_mask) v`` for a few new query tokens over a cache.

    q: ``[B, Tq, Hq, D]`` (Tq = 1 in generate(), k for speculative decoding).
    k_cache, v_cache: logical ``[B, S, Hkv, D]`` caches, ``Hq % Hkv == 0`` (query head ``h`` reads
        kv head ``h // (Hq // Hkv)``). VTensors are read in place; any other tensor is first made
        seq-major by Paddle (one copy).
    attn_mask: optional ``[B or 1, Hq or 1, Tq or 1, S]``, bool (True = attend) or additive float
        (float32 or q's dtype), as PaddleNLP builds it (``[B, 1, Tq, S]``). None: causal, query ``t``
        sees keys ``s < S - Tq + t + 1``.
    scale: default ``1 / sqrt(D)``.

    return_lse: also return the float32 log-sum-exp ``[B, Tq, Hq]`` of the scaled, masked scores
        (natural log; -inf for a query that sees no key), so attention over parts of a cache can be
        merged exactly with :func:`paddle_vtensor.merge_attention_states`.

    Returns ``[B, Tq, Hq, D]`` in q's dtype (with ``return_lse``: ``(out, lse)``). A query that sees
    no key gets zeros.
    """
    for name, x in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(x, paddle.Tensor):
            raise TypeError(f"decode_attention: {name} must be a paddle.Tensor, got {type(x).__name__}")
        if x.ndim != 4:
            raise ValueError(f"decode_attention: {name} must have rank 4, got shape {list(x.shape)}")
    if q.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"decode_attention: q has dtype {q.dtype}; expected float32, float16 or bfloat16")
    if attn_mask is not None and not isinstance(attn_mask, paddle.Tensor):
        raise TypeError(f"decode_attention: attn_mask must be a paddle.Tensor or None, got {type(attn_mask).__name__}")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scale = float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"decode_attention: scale must be finite, got {scale}")
    if return_lse:
        out, lse = _ops.ops().vtensor_decode_attention_lse(q, storage_view(k_cache), storage_view(v_cache),
                                                           attn_mask, scale)
        return out, lse
    return _ops.ops().vtensor_decode_attention(q, storage_view(k_cache), storage_view(v_cache), attn_mask, scale)


__all__ = ["decode_attention"]
