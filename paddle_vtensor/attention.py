"""Decode attention that reads a KV cache where it lies.

PaddleNLP's eager attention transposes the cache to ``[B, H, S, D]``, repeats it for grouped-query
heads and lets ``matmul`` make it contiguous: whole-cache copies every step and layer. This op reads
the VTensor's seq-major memory in place, handles the head grouping by indexing, and accumulates the
softmax in float32.
"""
from __future__ import annotations

import math

import paddle

from . import _ops, quant
from ._op_names import PVT_OP_DECODE_ATTENTION, PVT_OP_DECODE_ATTENTION_LSE
from .api import _failure, _no_gradients, _storage


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
    scale: default ``1 / sqrt(D)``; must be finite.

    return_lse: also return the float32 log-sum-exp ``[B, Tq, Hq]`` of the scaled, masked scores
        (natural log; -inf for a query that sees no key), so attention over parts of a cache can be
        merged exactly with :func:`paddle_vtensor.merge_attention_states`.

    Returns ``[B, Tq, Hq, D]`` in q's dtype (with ``return_lse``: ``(out, lse)``). A query that sees
    no key gets zeros. The op checks its inputs (ValueError naming the problem; TypeError for an
    argument that is not a tensor); there are no gradients (ValueError when one is asked for).
    8-bit caches (``cache_dtype=`` of from_dense/append, :mod:`paddle_vtensor.quant`) are read as
    codes and dequantized in registers; k and v must both be 8-bit caches of one dtype.
    """
    try:
        if paddle.is_grad_enabled() and not (q.stop_gradient and k_cache.stop_gradient and v_cache.stop_gradient):
            _no_gradients("decode_attention", q, k_cache, v_cache)
        if scale is None:
            d = q.shape[-1] if q.shape else 0
            scale = 1.0 / math.sqrt(d) if d > 0 else 1.0  # d <= 0: the op refuses q anyway
        if quant.is_quantized(k_cache) or quant.is_quantized(v_cache):  # 8-bit caches, dequantized in registers
            out, lse = quant.decode_attention(q, k_cache, v_cache, attn_mask, scale)
            return (out, lse) if return_lse else out
        if return_lse:
            out, lse = _ops.run(PVT_OP_DECODE_ATTENTION_LSE, q, _storage(k_cache), _storage(v_cache), attn_mask,
                                scale)
            return out, lse
        # VTensor caches: the op's function directly (api.py, "Host cost"); else the op.
        out = _ops.fast().decode_attention(q, k_cache, v_cache, attn_mask, scale)
        if out is None:
            out = _ops.run(PVT_OP_DECODE_ATTENTION, q, _storage(k_cache), _storage(v_cache), attn_mask, scale)[0]
    except Exception as e:
        raise _failure("decode_attention", e,
                       {"q": q, "k_cache": k_cache, "v_cache": v_cache, "attn_mask": attn_mask}) from None
    return out


__all__ = ["decode_attention"]
