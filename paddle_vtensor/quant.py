"""8-bit KV caches: float8_e4m3fn and int8 codes that grow in place, half the bytes of float16.

An 8-bit cache is a VTensor of codes, logical ``[B, S, H, D]`` of dtype ``paddle.float8_e4m3fn`` or
``paddle.int8`` (one byte per value, seq-major like every VTensor), that carries its scale
(:func:`cache_scale`; docs/QUANTIZED_CACHE.md):

* ``float8_e4m3fn``: one float32 scale per kv head ``[H]``, fixed for the cache's life: given
  (vLLM's ``k_scale`` / ``v_scale``) or calibrated from the prefill the cache is made from
  (:func:`calibrate_fp8_scale`: amax / 448 per head). value = e4m3(code) * scale.
* ``int8``: one float32 scale per token and head, written by every append (amax / 127 over the
  head's values: PaddleNLP's dynamic int8), kept in a second VTensor ``[B, S, H, 1]`` that grows,
  truncates and copies-on-write together with the codes. value = code * scale.

Appends quantize float32/float16/bfloat16 tokens (round to nearest even, saturating); attention
dequantizes in registers. The public entry points are the usual ones with ``cache_dtype=``
(:func:`paddle_vtensor.from_dense`, :func:`~paddle_vtensor.append`, ``reserve_one_token``,
``truncate``, ``decode_attention``); this module is what they call. It raises the ops' refusals
as they come (the callers turn them into typed errors) and imports nothing above the op layer.
"""
from __future__ import annotations

import paddle
from paddle import _C_ops

from . import _ops
from ._op_names import PVT_OP_QUANT_APPEND, PVT_OP_QUANT_DECODE_ATTENTION, PVT_OP_QUANT_FROM_DENSE

CACHE_DTYPES = {"float8_e4m3fn": paddle.float8_e4m3fn, "int8": paddle.int8}
_QUANT_DTYPES = tuple(CACHE_DTYPES.values())
_FP8_MAX = 448.0
_SCALE = "pvt_kv_scale"  # the attribute of a codes tensor that holds its scale
_PERM = [1, 0, 2, 3]


def cache_dtype_name(fn: str, cache_dtype) -> str | None:
    """None, or 'float8_e4m3fn' / 'int8' from that name or the paddle dtype; ValueError otherwise
    (a float dtype is not an 8-bit cache dtype: leave cache_dtype out for those)."""
    if cache_dtype is None:
        return None
    for name, dtype in CACHE_DTYPES.items():
        if cache_dtype == name or cache_dtype is dtype or cache_dtype == dtype:
            return name
    raise ValueError(f"{fn}: cache_dtype must be 'float8_e4m3fn' or 'int8' (or None for the tokens' own dtype), "
                     f"got {cache_dtype!r}")


def is_quantized(x) -> bool:
    """True for a tensor of an 8-bit cache dtype (float8_e4m3fn or int8)."""
    return isinstance(x, paddle.Tensor) and x.dtype in _QUANT_DTYPES


def cache_scale(cache: paddle.Tensor) -> paddle.Tensor:
    """The scale an 8-bit cache carries: float8_e4m3fn ``[H]`` float32 (per kv head), int8
    ``[B, S, H, 1]`` float32 (per token and head, a VTensor of its own). ValueError for a tensor that
    is not an 8-bit cache made by this package (a slice or copy of one loses its scale)."""
    scale = getattr(cache, _SCALE, None) if is_quantized(cache) else None
    if scale is None:
        raise ValueError("an 8-bit cache must be made by paddle_vtensor.from_dense / append with cache_dtype= "
                         "(it carries its scale); a slice, copy or cast of one does not, got a tensor of dtype "
                         f"{getattr(cache, 'dtype', type(cache).__name__)}")
    return scale


def calibrate_fp8_scale(x: paddle.Tensor) -> paddle.Tensor:
    """The float8_e4m3fn scale of a prefill ``x`` ``[B, S, H, D]``: amax over batch, tokens and
    head_dim per head / 448, as float32 ``[H]`` (a head that is all zeros gets 1.0; a NaN in x gives
    a NaN scale, which the op refuses)."""
    amax = paddle.max(paddle.abs(x.astype("float32")), axis=[0, 1, 3])
    return paddle.where(amax > 0, amax / _FP8_MAX, paddle.ones_like(amax))


def _attach(codes_storage: paddle.Tensor, scale: paddle.Tensor) -> paddle.Tensor:
    codes = _C_ops.transpose(codes_storage, _PERM)
    setattr(codes, _SCALE, _C_ops.transpose(scale, _PERM) if len(scale.shape) == 4 else scale)
    return codes


def _storage(x: paddle.Tensor) -> paddle.Tensor:
    s = _ops.fast().storage(x)  # a whole VTensor view: its storage view, free
    return s if s is not None else _C_ops.transpose(x, _PERM)


def _scale_storage(scale: paddle.Tensor) -> paddle.Tensor:
    return _storage(scale) if len(scale.shape) == 4 else scale


def from_dense(x: paddle.Tensor, cache_dtype: str, scale, max_seq_len: int, chunk_bytes: int) -> paddle.Tensor:
    """A new 8-bit cache of ``x`` ``[B, S, H, D]`` (checked ints and a cache_dtype_name given)."""
    if cache_dtype == "float8_e4m3fn" and scale is None:
        scale = calibrate_fp8_scale(x)
    out, out_scale = _ops.run(PVT_OP_QUANT_FROM_DENSE, x.contiguous(), scale, max_seq_len, chunk_bytes, cache_dtype)
    return _attach(out, out_scale)


def append(cache: paddle.Tensor, tokens: paddle.Tensor, max_seq_len: int, chunk_bytes: int,
           expect_tokens: int) -> paddle.Tensor:
    """``cache`` (an 8-bit cache) with ``tokens`` ``[B, T, H, D]`` quantized after it."""
    scale = cache_scale(cache)
    out, out_scale = _ops.run(PVT_OP_QUANT_APPEND, _storage(cache), _scale_storage(scale), tokens, max_seq_len,
                              chunk_bytes, expect_tokens)
    return _attach(out, out_scale)


def truncate(cache: paddle.Tensor, seq_len: int, truncate_vtensor) -> paddle.Tensor:
    """The first ``seq_len`` tokens of an 8-bit cache, codes and (int8) scales alike, no copy.
    ``truncate_vtensor`` is the plain VTensor truncate (api.truncate's own path)."""
    scale = cache_scale(cache)
    codes = truncate_vtensor(cache, seq_len)
    if len(scale.shape) == 4:
        scale = truncate_vtensor(scale, seq_len)
    setattr(codes, _SCALE, scale)
    return codes


def decode_attention(q, k_cache, v_cache, attn_mask, scale: float):
    """``(out, lse)`` of q over the 8-bit caches k_cache, v_cache (read in place)."""
    k_scale, v_scale = cache_scale(k_cache), cache_scale(v_cache)
    out, lse = _ops.run(PVT_OP_QUANT_DECODE_ATTENTION, q, _storage(k_cache), _scale_storage(k_scale),
                        _storage(v_cache), _scale_storage(v_scale), attn_mask, scale)
    return out, lse


__all__ = ["CACHE_DTYPES", "cache_dtype_name", "cache_scale", "calibrate_fp8_scale", "is_quantized"]
