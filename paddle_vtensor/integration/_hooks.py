"""The mechanism behind apply(): which model is running, and the hooks that route its caches.

While an applied model's ``forward`` runs, ``ACTIVE`` holds its :class:`ModelState`; every hook
does nothing when ``ACTIVE`` is empty, so a model that was not applied (or a call outside the
model) always takes PaddleNLP's own path, even while the hooks are installed in its module.

* ``paddle.concat`` as seen by the modeling module (``PaddleProxy``): a rank-4 ``axis=1`` concat of
  two tensors that agree in batch, heads and head_dim is the KV-cache concat; it becomes
  ``paddle_vtensor.append`` (the first decode step migrates the prefill cache once; later steps
  write only the new token).
* the attention function: when K and V are VTensors it runs ``decode_attention`` on them in place
  (no transpose, no ``repeat_kv``, no contiguous copy).
* ``repeat_kv``: a VTensor passes through unrepeated; the attention reads the head groups itself.
* ``paddle.shape`` as seen by the modeling module: of a VTensor, built from its metadata. (Paddle
  makes a non-contiguous input contiguous before any op, ``shape`` and ``numel`` included, so
  ``paddle.shape(cache)`` in llama's forward would copy the whole cache every step.)

Nothing here calls a Paddle op on a cache except the two plugin ops, for the same reason.
"""
from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import types

import paddle

from .. import api, quant
from ..attention import decode_attention
from ..errors import ReservationFullError, UnsupportedModelError

_CACHE_DTYPES = (paddle.float32, paddle.float16, paddle.bfloat16)



@dataclasses.dataclass
class ModelState:
    """One applied model: its settings and what the hooks did (for tests and curious users)."""

    family: str
    max_seq_len: int
    chunk_bytes: int | None
    cache_dtype: str | None = None  # 'float8_e4m3fn' / 'int8': the caches are 8-bit (paddle_vtensor.quant)
    migrations: int = 0        # cache concats that copied a dense cache into a new VTensor
    appends_in_place: int = 0  # cache concats that wrote only the new tokens
    appends_copied: int = 0    # copy-on-write: a longer live view already saw the position
    attention_calls: int = 0   # attentions that read VTensor K/V in place

    def counters(self) -> dict:
        return {k: getattr(self, k) for k in
                ("migrations", "appends_in_place", "appends_copied", "attention_calls")}


ACTIVE: contextvars.ContextVar[ModelState | None] = contextvars.ContextVar("paddle_vtensor_active", default=None)


def _is_cache_concat(x, axis) -> bool:
    if not isinstance(x, (list, tuple)) or len(x) != 2 or not isinstance(axis, int) or axis != 1:
        return False
    past, new = x
    if not (isinstance(past, paddle.Tensor) and isinstance(new, paddle.Tensor)):
        return False
    if new.dtype not in _CACHE_DTYPES or (past.dtype != new.dtype and not quant.is_quantized(past)):
        return False  # an 8-bit cache (apply(cache_dtype=...)) takes the new float tokens
    if past.ndim != 4 or new.ndim != 4:
        return False
    return past.shape[0] == new.shape[0] and past.shape[2:] == new.shape[2:]


def cache_append(state: ModelState, past: paddle.Tensor, new: paddle.Tensor) -> paddle.Tensor:
    if paddle.is_grad_enabled() and not (past.stop_gradient and new.stop_gradient):
        raise UnsupportedModelError(
            "paddle_vtensor: VTensor caches carry no gradients; run the model under paddle.no_grad() "
            "(generate() does) or call paddle_vtensor.remove(model) first")
    # The prefill's dense cache (or a view we cannot write through) is migrated: one copy.
    migrating = not (api.is_vtensor(past) and api.storage_view(past).is_contiguous())
    # An 8-bit cache: the prefill's float cache is quantized at its migration (fp8: its scale
    # calibrated from that prefill, per layer and kv head); later appends quantize the new tokens.
    cache_dtype = state.cache_dtype if migrating else None
    try:
        out = api.append(past, new, max_seq_len=state.max_seq_len, chunk_bytes=state.chunk_bytes,
                         cache_dtype=cache_dtype)
    except ReservationFullError as e:
        raise ReservationFullError(
            f"paddle_vtensor: the KV cache is full ({past.shape[1]} tokens + {new.shape[1]} new; "
            f"{state.max_seq_len} reserved): pass a larger max_seq_len to paddle_vtensor.apply() "
            f"(the cache is unchanged)") from e
    if migrating:
        state.migrations += 1
    elif out.data_ptr() == past.data_ptr():
        state.appends_in_place += 1
    else:
        state.appends_copied += 1  # copy-on-write: a longer live view already saw this position
    return out


class PaddleProxy(types.ModuleType):
    """Stands in for ``paddle`` in a modeling module: everything is paddle's, except that the
    KV-cache concat of an applied model becomes an in-place append."""

    def __init__(self, real: types.ModuleType):
        super().__init__(real.__name__, real.__doc__)
        object.__setattr__(self, "_real", real)

    def __getattr__(self, name):
        return getattr(self._real, name)

    def concat(self, x, axis=0, name=None):
        state = ACTIVE.get()
        if state is not None and _is_cache_concat(x, axis):
            return cache_append(state, x[0], x[1])
        return self._real.concat(x, axis=axis, name=name)

    def shape(self, input):
        if ACTIVE.get() is not None and api.is_vtensor(input):
            return self._real.to_tensor(input.shape, dtype=_SHAPE_DTYPE)
        return self._real.shape(input)


_SHAPE_DTYPE = paddle.shape(paddle.zeros([1])).dtype


def both_vtensors(k, v) -> bool:
    return api.is_vtensor(k) and api.is_vtensor(v)


def run_decode_attention(state: ModelState, q, k, v, mask) -> paddle.Tensor:
    """``[B, Tq, Hq, D]`` attention of q over the VTensor caches k, v ``[B, S, Hkv, D]``."""
    bsz, q_len = q.shape[0], q.shape[1]
    if mask is not None and mask.ndim != 4:
        mask = mask.reshape([bsz, 1, q_len, k.shape[1]])  # what PaddleNLP's eager path does
    state.attention_calls += 1
    return decode_attention(q, k, v, mask)


def _refuse_unsupported_arguments(a: dict) -> None:
    for name in ("alibi", "reshard_layer", "attn_mask_startend_row_indices"):
        if a.get(name) is not None:
            raise UnsupportedModelError(f"paddle_vtensor: attention with {name} is not supported on VTensor caches")
    if a.get("sequence_parallel"):
        raise UnsupportedModelError("paddle_vtensor: sequence_parallel is not supported on VTensor caches")
    if a.get("output_attentions"):
        raise UnsupportedModelError("paddle_vtensor: output_attentions=True is not supported on VTensor caches "
                                    "(the decode attention does not form the weights)")


def wrap_sdpa(original, owner=None):
    """llama's ``scaled_dot_product_attention(query_states, config, key_states, value_states,
    attention_mask, output_attentions, ...)``: the module function (paddlenlp 2.8.1 calls it by
    name) or a layer's bound ``attn_func`` (3.0.0b4: the function or a functools.partial of it)."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def scaled_dot_product_attention(*args, **kwargs):
        state = ACTIVE.get()
        if state is None:
            return original(*args, **kwargs)
        a = signature.bind(*args, **kwargs).arguments
        k, v = a.get("key_states"), a.get("value_states")
        if not both_vtensors(k, v):
            return original(*args, **kwargs)
        _refuse_unsupported_arguments(a)
        q = a["query_states"]
        out = run_decode_attention(state, q, k, v, a.get("attention_mask"))
        bsz, q_len, heads, head_dim = q.shape
        return out.reshape([bsz, q_len, heads * head_dim])

    scaled_dot_product_attention.__pvt_original__ = original
    return scaled_dot_product_attention


def wrap_repeat_kv(original, owner=None):
    @functools.wraps(original)
    def repeat_kv(hidden_states, n_rep):
        if ACTIVE.get() is not None and n_rep > 1 and api.is_vtensor(hidden_states):
            return hidden_states  # the decode attention maps query heads to kv heads itself
        return original(hidden_states, n_rep)

    repeat_kv.__pvt_original__ = original
    return repeat_kv


def wrap_attn_method(original, owner):
    """qwen's method ``_attn(self, query, key, value, attention_mask=None) -> (out, weights)``.
    out is ``[B, Tq, H, D]`` in paddlenlp 2.8.1 (the class merges heads after, in ``_merge_heads``)
    and ``[B, Tq, H*D]`` in 3.0.0b4 (no ``_merge_heads``): the wrapper returns what the class expects."""
    merged = not hasattr(owner, "_merge_heads")

    @functools.wraps(original)
    def _attn(self, query, key, value, attention_mask=None):
        state = ACTIVE.get()
        if state is None or not both_vtensors(key, value):
            return original(self, query, key, value, attention_mask)
        if getattr(self, "sequence_parallel", False):
            raise UnsupportedModelError("paddle_vtensor: sequence_parallel is not supported on VTensor caches")
        out = run_decode_attention(state, query, key, value, attention_mask)
        if merged:
            bsz, q_len, heads, head_dim = query.shape
            out = out.reshape([bsz, q_len, heads * head_dim])
        return out, None

    _attn.__pvt_original__ = original
    return _attn
