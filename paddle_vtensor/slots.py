"""Slot caches: per-sequence KV caches for inflight batching (docs/SLOT_CACHE.md).

A slot cache holds ``num_slots`` sequences of up to ``max_seq_len`` tokens each, batch-major
(flash-attn's ``k_cache`` layout ``[num_slots, max_seq_len, H, D]``), in one virtual reservation of
which nothing is mapped at first. The host maps a slot ahead of the step that needs it
(:func:`reserve_slot`) and gives its memory back when its sequence ends (:func:`release_slot`), so
mapped memory follows the sum of the slots' lengths.

    import paddle_vtensor as pvt
    k = pvt.slot_cache(8, 4096, 2, 64); v = pvt.slot_cache(8, 4096, 2, 64)
    pvt.reserve_slot(k, 3, 17); pvt.reserve_slot(v, 3, 17)
    out = pvt.attention_with_kvcache(q, k, v, cache_seqlens, k_new=kn, v_new=vn,
                                     cu_seqlens_q=cu, slot_ids=slots)

Only the slot ops read a slot cache: its tensor spans memory that is not mapped, so a plain Paddle
op on the whole tensor (printing it, ``.numpy()``) would touch unmapped pages.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import paddle

from . import _ops, errors
from ._op_names import PVT_OP_SLOT_ATTENTION, PVT_OP_SLOT_CACHE, PVT_OP_SLOT_ERRORS
from .api import _config
from .errors import SlotError


def _run(op: str, *args) -> paddle.Tensor:
    """The op's first output; a refusal raises by the one table (errors.py), bad inputs as SlotError."""
    try:
        return _ops.run(op, *args)[0]
    except Exception as e:
        raise errors.from_op_error(e, op, SlotError) from None


def _check(code: int, text: str, what: str) -> None:
    """Relays a C entry point's refusal (its status code and "<Code>: <message>")."""
    if code:
        raise errors.from_status(what, text, SlotError)


def _place(place):
    if place is None:
        return paddle.CPUPlace() if "cpu" in paddle.device.get_device() else paddle.CUDAPlace(
            int(paddle.device.get_device().split(":")[-1]))
    if isinstance(place, str):
        return paddle.CPUPlace() if "cpu" in place else paddle.CUDAPlace(int((place.split(":") + ["0"])[1]))
    return place


def _new_cache(shape, dtype, place, chunk_bytes) -> paddle.Tensor:
    # The op checks the dtype and that every dimension is positive.
    dtype = paddle.base.framework.convert_np_dtype_to_dtype_(dtype) if isinstance(dtype, str) else dtype
    like = paddle.zeros([1], dtype=dtype).to(_place(place))
    c = _config.chunk_bytes if chunk_bytes is None else int(chunk_bytes)
    return _run(PVT_OP_SLOT_CACHE, like, [int(s) for s in shape], c)


def slot_cache(num_slots: int, max_seq_len: int, num_heads: int, head_dim: int, dtype="float32", place=None,
               chunk_bytes: int | None = None) -> paddle.Tensor:
    """One layer's K (or V) slot cache ``[num_slots, max_seq_len, num_heads, head_dim]``, contiguous
    (strides ``{max_seq_len*H*D, H*D, D, 1}``), nothing mapped. ``place``: None (paddle's current
    device), 'cpu', 'gpu:N' or a Place. ``chunk_bytes``: mapping granularity (default 2 MiB)."""
    return _new_cache([num_slots, max_seq_len, num_heads, head_dim], dtype, place, chunk_bytes)


@dataclasses.dataclass(frozen=True)
class LayerKV:
    """Layer ``layer``'s K (kv=0) or V (kv=1) inside a model-wide :class:`SlotKVCache`: what
    :func:`attention_with_kvcache` takes as ``k_cache`` / ``v_cache`` (never made contiguous)."""

    storage: paddle.Tensor
    layer: int
    kv: int


class SlotKVCache:
    """The whole model's K and V in token rows that hold every layer: storage
    ``[num_slots, max_seq_len, num_layers, 2, num_kv_heads, head_dim]``. A chunk then holds a few
    tokens of one slot for all layers, so the rounding waste is at most one chunk per slot for the
    whole model (docs/SLOT_CACHE.md)."""

    def __init__(self, storage: paddle.Tensor):
        self.storage = storage
        self.num_slots, self.max_seq_len, self.num_layers, _, self.num_kv_heads, self.head_dim = storage.shape

    def k(self, layer: int) -> LayerKV:
        return LayerKV(self.storage, int(layer), 0)

    def v(self, layer: int) -> LayerKV:
        return LayerKV(self.storage, int(layer), 1)

    @property
    def dtype(self):
        return self.storage.dtype

    @property
    def place(self):
        return self.storage.place


def slot_kv_cache(num_layers: int, num_slots: int, max_seq_len: int, num_kv_heads: int, head_dim: int,
                  dtype="float32", place=None, chunk_bytes: int | None = None) -> SlotKVCache:
    """A model-wide slot cache (all layers' K and V in one reservation), nothing mapped."""
    return SlotKVCache(_new_cache([num_slots, max_seq_len, num_layers, 2, num_kv_heads, head_dim], dtype, place,
                                  chunk_bytes))


def _storage(cache) -> paddle.Tensor:
    if isinstance(cache, SlotKVCache):
        return cache.storage
    if isinstance(cache, LayerKV):
        return cache.storage
    if isinstance(cache, paddle.Tensor):
        return cache
    raise TypeError(f"expected a slot cache (slot_cache / slot_kv_cache), got {type(cache).__name__}")


def _stream(storage: paddle.Tensor) -> int | None:
    return paddle.device.current_stream().cuda_stream if "gpu" in str(storage.place).lower() else None


def reserve_slot(cache, slot: int, tokens: int) -> None:
    """Map rows ``[0, tokens)`` of ``slot`` (a host decision, made before the step that writes them).
    Raises ReservationFullError past max_seq_len or for a bad slot, VTensorOutOfMemoryError when
    memory runs out; on error nothing changed."""
    storage = _storage(cache)
    _check(*_ops.c.slot_reserve(storage.data_ptr(), int(slot), int(tokens), _stream(storage)), "reserve_slot")


def release_slot(cache, slot: int) -> None:
    """Give ``slot``'s memory back (its chunks are unmapped, except a border chunk a neighbouring slot
    still uses; not pooled: mapping is cheap next to a step). Reading the slot with a non-zero length
    afterwards is an error until it is reserved again."""
    storage = _storage(cache)
    _check(*_ops.c.slot_release(storage.data_ptr(), int(slot), _stream(storage)), "release_slot")


def slot_info(cache) -> dict:
    """num_slots, max_seq_len, row_bytes, chunk_bytes, reserved_bytes, mapped_bytes, mapped_tokens."""
    ptr = _storage(cache).data_ptr()
    info = _ops.c.slot_info(ptr)
    if info is None:
        raise ValueError("slot_info: not a slot cache")
    info["mapped_tokens"] = np.array(_ops.c.slot_mapped_tokens(ptr, info["num_slots"]), dtype=np.int32)
    return info


def read_slot(cache, slot: int, tokens: int) -> paddle.Tensor:
    """A dense copy of the first ``tokens`` rows of ``slot``: ``[tokens, H, D]`` for a one-layer cache
    or a LayerKV, ``[tokens, L, 2, Hkv, D]`` for a SlotKVCache. Only reserved rows can be read."""
    info = slot_info(cache)
    slot, tokens = int(slot), int(tokens)
    if not 0 <= slot < info["num_slots"]:
        raise SlotError(f"read_slot: slot {slot} is out of range [0, {info['num_slots']})")
    if not 0 <= tokens <= int(info["mapped_tokens"][slot]):
        raise SlotError(f"read_slot: slot {slot} has {int(info['mapped_tokens'][slot])} tokens mapped, asked for {tokens}")
    storage = _storage(cache)
    rows = storage[slot, :tokens].clone()
    if isinstance(cache, LayerKV):
        rows = rows[:, cache.layer, cache.kv]
    return rows


def check_slot_errors(cache) -> None:
    """Raise SlotError when a GPU kernel refused a sequence of this cache since the last check (its
    rows were not reserved, or past max_seq_len); clears the flag. One device-to-host read. On the
    CPU the ops raise at once, so this never raises there."""
    flag = _run(PVT_OP_SLOT_ERRORS, _storage(cache))
    if int(flag.numpy()[0]):
        raise SlotError("check_slot_errors: a kernel skipped a sequence whose slot rows were not reserved "
                        "(reserve_slot before the step) or that passed max_seq_len; its output is zeros")


def _int32(x, name: str, place) -> paddle.Tensor:
    """A list / numpy array becomes an int32 tensor on `place`; a tensor goes as it is (the op checks
    its dtype, shape and place)."""
    if isinstance(x, paddle.Tensor):
        return x
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise SlotError(f"attention_with_kvcache: {name} must hold integers, got {arr.dtype}")
    return paddle.to_tensor(arr.astype(np.int32), place=place)


def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, k_new=None, v_new=None, cu_seqlens_q=None,
                           slot_ids=None, causal: bool = True, softmax_scale: float | None = None,
                           max_seqlen_q: int | None = None, max_seqlen_k: int | None = None) -> paddle.Tensor:
    """flash-attn's ``flash_attn_varlen_func_with_kvcache`` on slot caches.

    q: packed ``[total_q, Hq, D]`` with ``cu_seqlens_q`` int32 ``[n+1]``, or ``[n, Tq, Hq, D]`` without.
    k_cache, v_cache: one-layer slot caches ``[num_slots, max_seq_len, Hkv, D]`` (:func:`slot_cache`),
        or ``cache.k(l)`` / ``cache.v(l)`` of a :class:`SlotKVCache`. ``Hq % Hkv == 0``.
    cache_seqlens: int32 ``[num_slots]``, each slot's length before this call; not modified.
    k_new, v_new: packed like q with Hkv heads; written in place at ``cache_seqlens[slot] + t`` of
        their slot. Without them, the cache already holds the new tokens' K/V: sequence b attends over
        its slot's first ``cache_seqlens[slot]`` tokens, its queries being the last ``q_b`` of them.
    slot_ids: int32 ``[n]``, distinct; default ``0..n-1``.
    causal: query t of a sequence sees keys ``< cache_seqlens[slot] + t + 1``; False: all its keys
        (CPU only).
    max_seqlen_q / max_seqlen_k: optional host-known upper bounds that size the GPU launch.

    Returns ``[total_q, Hq, D]`` (or ``[n, Tq, Hq, D]``) in q's dtype. The rows the call reads and
    writes must be reserved (:func:`reserve_slot`): on the CPU a violation raises SlotError before
    anything is written; on the GPU the sequence is skipped (zeros) and :func:`check_slot_errors`
    raises.
    """
    if not isinstance(q, paddle.Tensor):
        raise TypeError(f"attention_with_kvcache: q must be a paddle.Tensor, got {type(q).__name__}")
    layer = -1
    if isinstance(k_cache, LayerKV) or isinstance(v_cache, LayerKV):
        if not (isinstance(k_cache, LayerKV) and isinstance(v_cache, LayerKV) and k_cache.kv == 0
                and v_cache.kv == 1 and k_cache.layer == v_cache.layer and k_cache.storage is v_cache.storage):
            raise SlotError("attention_with_kvcache: with a SlotKVCache pass cache.k(l) and cache.v(l) of one layer")
        layer = k_cache.layer
    k_storage, v_storage = _storage(k_cache), _storage(v_cache)
    place = q.place
    batched = q.ndim == 4
    if batched:
        if cu_seqlens_q is not None:
            raise SlotError("attention_with_kvcache: q [n, Tq, Hq, D] takes no cu_seqlens_q (pack q to [total_q, Hq, D])")
        n, tq = q.shape[0], q.shape[1]
        q = q.reshape([n * tq, q.shape[2], q.shape[3]])
        k_new = None if k_new is None else k_new.reshape([n * tq] + list(k_new.shape[2:]))
        v_new = None if v_new is None else v_new.reshape([n * tq] + list(v_new.shape[2:]))
        cu = paddle.arange(0, n + 1, dtype="int32") * tq
        cu = cu.to(place) if "gpu" in str(place).lower() else cu
        max_seqlen_q = tq
    elif q.ndim == 3:
        if cu_seqlens_q is None:
            raise SlotError("attention_with_kvcache: packed q [total_q, Hq, D] needs cu_seqlens_q")
        cu = _int32(cu_seqlens_q, "cu_seqlens_q", place)
        if cu.ndim != 1 or cu.shape[0] < 2:
            raise SlotError(f"attention_with_kvcache: cu_seqlens_q must be int32 [n+1] with n >= 1, got shape {list(cu.shape)}")
        n = cu.shape[0] - 1
    else:
        raise SlotError(f"attention_with_kvcache: q must be [total_q, Hq, D] or [n, Tq, Hq, D], got shape {list(q.shape)}")
    if slot_ids is None:
        slots = paddle.arange(0, n, dtype="int32")
        slots = slots.to(place) if "gpu" in str(place).lower() else slots
    else:
        slots = _int32(slot_ids, "slot_ids", place)
    cache_seqlens = _int32(cache_seqlens, "cache_seqlens", place)
    if (k_new is None and v_new is None and slots.shape == [n] and cu.shape == [n + 1] and cache_seqlens.ndim == 1
            and cache_seqlens.dtype == paddle.int32):
        # The new tokens' K/V are already in the cache: the kernel's "length before the new tokens"
        # is cache_seqlens minus each sequence's query count (computed where the lengths live).
        counts = (cu[1:] - cu[:-1]).astype("int32")
        if "cpu" in str(place).lower():
            before = cache_seqlens.numpy()[slots.numpy()] - counts.numpy()
            if (before < 0).any():
                b = int(np.argmax(before < 0))
                raise SlotError(f"attention_with_kvcache: slot {int(slots.numpy()[b])} holds "
                                f"{int(cache_seqlens.numpy()[slots.numpy()[b]])} tokens, fewer than its {int(counts.numpy()[b])} queries")
        # A new tensor (the caller's is not modified), with the op's meaning of cache_seqlens.
        cache_seqlens = paddle.scatter(cache_seqlens, slots, paddle.gather(cache_seqlens, slots) - counts)
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    if not math.isfinite(scale):
        raise SlotError(f"attention_with_kvcache: softmax_scale must be finite, got {scale}")
    out = _run(PVT_OP_SLOT_ATTENTION, q, k_storage, v_storage, cache_seqlens, k_new, v_new, cu, slots, int(layer), scale,
               bool(causal), int(max_seqlen_q or 0), int(max_seqlen_k or 0))
    return out.reshape([n, -1, out.shape[1], out.shape[2]]) if batched else out


__all__ = ["LayerKV", "SlotError", "SlotKVCache", "attention_with_kvcache", "check_slot_errors", "release_slot",
           "read_slot", "reserve_slot", "slot_cache", "slot_info", "slot_kv_cache"]
