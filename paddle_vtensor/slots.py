"""Slot caches: per-sequence KV caches for inflight batching (docs/SLOT_CACHE.md).

A slot cache holds ``num_slots`` sequences of up to ``max_seq_len`` tokens each, batch-major
(flash-attn's ``k_cache`` layout ``[num_slots, rows, H, D]``, ``rows`` being ``max_seq_len`` padded
so that every slot starts on a chunk, in virtual memory only), in one virtual reservation of which
nothing is mapped at first. The host maps a slot ahead of the step that needs it
(:func:`reserve_slot`) and gives its memory back when its sequence ends (:func:`release_slot`), so
mapped memory follows the sum of the slots' lengths.

    import paddle_vtensor as pvt
    k = pvt.slot_cache(8, 4096, 2, 64); v = pvt.slot_cache(8, 4096, 2, 64)
    pvt.reserve_slot(k, 3, 17); pvt.reserve_slot(v, 3, 17)
    out = pvt.attention_with_kvcache(q, k, v, cache_seqlens, k_new=kn, v_new=vn,
                                     cu_seqlens_q=cu, slot_ids=slots)

A slot cache tensor spans memory that is mostly not mapped. On the CPU that memory reads as zeros
(printing the cache, ``.numpy()``, a slice, ``paddle.save`` work and copy the whole reservation); on
a GPU only the slot ops and :func:`read_slot` may read it. The slot functions take only the tensor
:func:`slot_cache` returned (or ``cache.k(l)`` / ``cache.v(l)`` of a :class:`SlotKVCache`), never a
view of it: SlotError otherwise, TypeError for what is not a tensor. Every integer argument is
range-checked before any cast (api._int), and every check runs before the first write.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import weakref

import numpy as np
import paddle

from . import _ops, errors, quant
from ._op_names import PVT_OP_QUANT_SLOT_ATTENTION, PVT_OP_SLOT_ATTENTION, PVT_OP_SLOT_CACHE, PVT_OP_SLOT_ERRORS
from .api import _config, _int, _no_gradients
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


_INT32 = (-(1 << 31), (1 << 31) - 1)  # what the kernels' int32 ids and lengths hold
_INT64_MAX = (1 << 63) - 1


def _new_cache(fn: str, dims: dict, dtype, place, chunk_bytes) -> paddle.Tensor:
    # Python checks each is an int of at least 1; the op checks the dtype and the sizes' product.
    shape = [_int(fn, name, value, 1, _INT64_MAX, SlotError) for name, value in dims.items()]
    c = _config.chunk_bytes if chunk_bytes is None else _int(fn, "chunk_bytes", chunk_bytes, 1, _INT64_MAX, SlotError)
    dtype = paddle.base.framework.convert_np_dtype_to_dtype_(dtype) if isinstance(dtype, str) else dtype
    like = paddle.zeros([1], dtype=dtype).to(_place(place))
    return _run(PVT_OP_SLOT_CACHE, like, shape, c)


def _quant_cache(fn: str, dims: dict, cache_dtype, scale, place, chunk_bytes) -> paddle.Tensor | None:
    """An 8-bit slot cache (codes) carrying its scale, or None for cache_dtype None: int8, a scale slot
    cache of the same shape with head_dim 1 (written by the appends); fp8, ``scale`` as given."""
    name = quant.cache_dtype_name(fn, cache_dtype)
    if name is None:
        if scale is not None:
            raise ValueError(f"{fn}: a scale is for 8-bit caches only (give cache_dtype=)")
        return None
    if name == "int8" and scale is not None:
        raise ValueError(f"{fn}: an int8 cache computes its own per-token scales; give no scale")
    if name != "int8":
        if not isinstance(scale, paddle.Tensor):
            raise ValueError(f"{fn}: a float8_e4m3fn slot cache needs its scale (float32, one per kv head; k_scale / "
                             "v_scale): a slot cache has no prefill to calibrate from")
        scale = scale.astype("float32").to(_place(place))
    codes = _new_cache(fn, dims, quant.CACHE_DTYPES[name], place, chunk_bytes)
    if name == "int8":
        scale = _new_cache(fn, {**dims, "head_dim": 1}, "float32", place, chunk_bytes)
    setattr(codes, "pvt_kv_scale", scale)
    return codes


def slot_cache(num_slots: int, max_seq_len: int, num_heads: int, head_dim: int, dtype="float32", place=None,
               chunk_bytes: int | None = None, cache_dtype=None, scale: paddle.Tensor | None = None) -> paddle.Tensor:
    """One layer's K (or V) slot cache ``[num_slots, max_seq_len, num_heads, head_dim]``, contiguous
    (strides ``{max_seq_len*H*D, H*D, D, 1}``), nothing mapped. ``place``: None (paddle's current
    device), 'cpu', 'gpu:N' or a Place. ``chunk_bytes``: mapping granularity (default 2 MiB).
    ``cache_dtype`` 'int8' / 'float8_e4m3fn': an 8-bit slot cache (paddle_vtensor.quant; CPU), fp8
    with ``scale`` float32 ``[num_heads]``."""
    dims = {"num_slots": num_slots, "max_seq_len": max_seq_len, "num_heads": num_heads, "head_dim": head_dim}
    codes = _quant_cache("slot_cache", dims, cache_dtype, scale, place, chunk_bytes)
    return codes if codes is not None else _new_cache("slot_cache", dims, dtype, place, chunk_bytes)


def _summary(kind: str, storage: paddle.Tensor, extra: str = "") -> str:
    """What a slot cache object prints: its sizes and what is mapped, never the storage tensor."""
    shape = storage.shape
    try:
        info = slot_info(storage)
        max_seq_len = info["max_seq_len"]  # dimension 1 is that padded to whole chunks
        mapped = f"tokens mapped {int(info['mapped_tokens'].sum())}, mapped_bytes {info['mapped_bytes']}"
    except Exception as e:  # a repr must not raise: say why instead
        max_seq_len, mapped = shape[1], f"not a live slot cache ({type(e).__name__})"
    heads = f"num_kv_heads {shape[-2]}, head_dim {shape[-1]}"
    layers = f"num_layers {shape[2]}, " if len(shape) == 6 else ""
    return (f"{kind}({extra}num_slots {shape[0]}, max_seq_len {max_seq_len}, {layers}{heads}, "
            f"dtype {str(storage.dtype).replace('paddle.', '')}, place {storage.place}, {mapped})")


class _NotCopyable:
    """Copying a slot cache object would copy its whole reservation (or, on a GPU, read unmapped
    memory); pickling one cannot keep what makes it a slot cache. Both raise a TypeError that says
    what to do instead."""

    def _refuse(self, what: str):
        raise TypeError(f"{type(self).__name__} cannot be {what}: it holds a slot cache (mostly unmapped "
                        "virtual memory). Copy what you need with paddle_vtensor.read_slot(cache, slot, tokens) "
                        "(a dense tensor that saves, pickles and copies), or make a new cache and write into it")

    def __copy__(self):
        return self  # a shallow copy would share the one cache anyway

    def __deepcopy__(self, memo):
        self._refuse("deep-copied")

    def __reduce_ex__(self, protocol):
        self._refuse("pickled or saved (paddle.save)")


@dataclasses.dataclass(frozen=True, repr=False, eq=False)  # eq would compare the caches' every element
class LayerKV(_NotCopyable):
    """Layer ``layer``'s K (kv=0) or V (kv=1) inside a model-wide :class:`SlotKVCache`: what
    :func:`attention_with_kvcache` takes as ``k_cache`` / ``v_cache`` (never made contiguous)."""

    storage: paddle.Tensor
    layer: int
    kv: int

    def __post_init__(self):
        if not isinstance(self.storage, paddle.Tensor) or len(self.storage.shape) != 6:
            raise SlotError("LayerKV: storage must be a SlotKVCache's storage [num_slots, max_seq_len, num_layers, 2, "
                            "num_kv_heads, head_dim]: use cache.k(layer) / cache.v(layer)")
        object.__setattr__(self, "layer", _int("LayerKV", "layer", self.layer, 0, self.storage.shape[2] - 1, SlotError))
        object.__setattr__(self, "kv", _int("LayerKV", "kv", self.kv, 0, 1, SlotError))

    def __repr__(self) -> str:
        return _summary("LayerKV", self.storage, f"layer {self.layer}, {'KV'[self.kv]}, ")


class SlotKVCache(_NotCopyable):
    """The whole model's K and V in token rows that hold every layer: storage
    ``[num_slots, max_seq_len, num_layers, 2, num_kv_heads, head_dim]``. A chunk then holds a few
    tokens of one slot for all layers, so the rounding waste is at most one chunk per slot for the
    whole model (docs/SLOT_CACHE.md)."""

    def __init__(self, storage: paddle.Tensor):
        if len(_storage(storage, "SlotKVCache").shape) != 6:
            raise SlotError(f"SlotKVCache: the storage must be a slot cache [num_slots, max_seq_len, num_layers, 2, "
                            f"num_kv_heads, head_dim] (slot_kv_cache makes one), got shape {list(storage.shape)}")
        self.storage = storage
        self.num_slots, _, self.num_layers, _, self.num_kv_heads, self.head_dim = storage.shape
        # Dimension 1 is max_seq_len padded to whole chunks (every slot starts on a chunk): the
        # tokens a slot may hold are the cache's own max_seq_len.
        self.max_seq_len = slot_info(storage)["max_seq_len"]

    def k(self, layer: int) -> LayerKV:
        return LayerKV(self.storage, layer, 0)

    def v(self, layer: int) -> LayerKV:
        return LayerKV(self.storage, layer, 1)

    def __repr__(self) -> str:
        return _summary("SlotKVCache", self.storage)

    @property
    def dtype(self):
        return self.storage.dtype

    @property
    def place(self):
        return self.storage.place


def slot_kv_cache(num_layers: int, num_slots: int, max_seq_len: int, num_kv_heads: int, head_dim: int,
                  dtype="float32", place=None, chunk_bytes: int | None = None, cache_dtype=None,
                  k_scale: paddle.Tensor | None = None, v_scale: paddle.Tensor | None = None) -> SlotKVCache:
    """A model-wide slot cache (all layers' K and V in one reservation), nothing mapped.
    ``cache_dtype`` 'int8' / 'float8_e4m3fn': 8-bit (paddle_vtensor.quant; CPU), fp8 with ``k_scale``
    and ``v_scale`` float32 ``[num_layers, num_kv_heads]``."""
    dims = {"num_slots": num_slots, "max_seq_len": max_seq_len, "num_layers": num_layers, "kv": 2,
            "num_kv_heads": num_kv_heads, "head_dim": head_dim}
    scale = None
    if (k_scale is None) != (v_scale is None):
        raise ValueError("slot_kv_cache: give both k_scale and v_scale or neither")
    if k_scale is not None:
        if list(k_scale.shape) != [num_layers, num_kv_heads] or list(v_scale.shape) != [num_layers, num_kv_heads]:
            raise ValueError(f"slot_kv_cache: k_scale and v_scale must be [num_layers, num_kv_heads] = "
                             f"[{num_layers}, {num_kv_heads}], got {list(k_scale.shape)} and {list(v_scale.shape)}")
        scale = paddle.stack([k_scale.astype("float32"), v_scale.astype("float32")], axis=1)  # [L, 2, Hkv]
    codes = _quant_cache("slot_kv_cache", dims, cache_dtype, scale, place, chunk_bytes)
    return SlotKVCache(codes if codes is not None else _new_cache("slot_kv_cache", dims, dtype, place, chunk_bytes))


def _storage(cache, fn: str, by_pointer: bool = True) -> paddle.Tensor:
    """The slot cache tensor behind ``cache`` (a slot cache, a SlotKVCache or a LayerKV of one).
    TypeError for what is not one of those; SlotError for a tensor that is not a slot cache itself.
    For the C entry points (``by_pointer``), which find the cache by its base pointer, which a reshape
    of the cache shares: the tensor's shape, row size and strides are checked here. The ops check the
    tensor itself (its allocation, dims, dtype, strides): for them only the type is checked here."""
    tensor = cache.storage if isinstance(cache, (SlotKVCache, LayerKV)) else cache
    if not isinstance(tensor, paddle.Tensor):
        raise TypeError(f"{fn}: expected a slot cache (slot_cache / slot_kv_cache), got {type(cache).__name__}")
    if not by_pointer:
        return tensor
    shape = tensor.shape
    seen = _checked.get(id(tensor))
    if seen is not None and seen[0]() is tensor and seen[1] == shape and tensor.is_contiguous():
        return tensor  # this very tensor passed before, its shape unchanged (reshape_ changes it in place)
    info = _ops.c.slot_info(tensor.data_ptr())
    if info is None:
        raise SlotError(f"{fn}: the tensor is not a slot cache (or is a view inside a slot cache, not the cache "
                        "itself): pass the tensor paddle_vtensor.slot_cache or slot_kv_cache returned")
    rows = _ops.c.slot_share_info(tensor.data_ptr())["slot_rows"]  # dimension 1: max_seq_len padded to a chunk
    if (len(shape) < 3 or shape[:2] != [info["num_slots"], rows] or not tensor.is_contiguous()
            or math.prod(shape[2:]) * tensor.element_size() != info["row_bytes"]):
        raise SlotError(f"{fn}: the tensor (shape {list(shape)}) is a view of a slot cache of {info['num_slots']} slots x "
                        f"{rows} rows x {info['row_bytes']} bytes, not a slot cache itself: pass the tensor "
                        "slot_cache returned, unchanged")
    key = id(tensor)
    _checked[key] = (weakref.ref(tensor, lambda _, key=key: _checked.pop(key, None)), shape)
    return tensor


# id(tensor) -> (a weak reference to it, its shape): the slot cache tensors _storage has checked, so a
# scheduler's reserve_slot per slot and step pays the C lookup once per cache (3 us -> under 1 us).
# Keyed by id, not by the tensor: a tensor's == compares elements. The entry goes with the tensor.
_checked: dict[int, tuple] = {}


def _stream(storage: paddle.Tensor) -> int | None:
    return paddle.device.current_stream().cuda_stream if "gpu" in str(storage.place).lower() else None


def reserve_slot(cache, slot: int, tokens: int) -> None:
    """Map rows ``[0, tokens)`` of ``slot`` (a host decision, made before the step that writes them).
    Raises ReservationFullError past max_seq_len or for a bad slot, VTensorOutOfMemoryError when
    memory runs out; on error nothing changed."""
    storage = _storage(cache, "reserve_slot")
    slot, tokens = _int("reserve_slot", "slot", slot, out_of_range=SlotError), _int("reserve_slot", "tokens", tokens,
                                                                                    out_of_range=SlotError)
    _all_or_nothing(_with_scales(storage), slot, lambda s: _ops.c.slot_reserve(s.data_ptr(), slot, tokens, _stream(s)),
                   "reserve_slot")


def _all_or_nothing(caches: list, slot: int, reserve, where: str) -> None:
    """reserve(c) -> (code, text) on each cache in order (an int8 cache's scales, then its codes); when
    one fails, the reservations before it are taken back (pvt_slot_unreserve) so every cache holds the
    slot's rows as before, and the error is raised."""
    done = []
    for i, c in enumerate(caches):
        old = 0
        if i + 1 < len(caches):  # what to go back to, should a later cache fail (a bad slot fails first)
            mapped = slot_info(c)["mapped_tokens"]
            old = int(mapped[slot]) if 0 <= slot < len(mapped) else 0
        code, text = reserve(c)
        if code:
            for d, d_old in reversed(done):
                _check(*_ops.c.slot_unreserve(d.data_ptr(), slot, d_old), where)
            _check(code, text, where)
        done.append((c, old))


def _with_scales(storage: paddle.Tensor) -> list:
    """The caches a slot operation applies to: an int8 slot cache's scale slot cache, then the cache."""
    scale = getattr(storage, "pvt_kv_scale", None)
    return [scale, storage] if scale is not None and storage.dtype == paddle.int8 else [storage]


def release_slot(cache, slot: int) -> None:
    """Give ``slot``'s memory back: its chunks are unmapped (a chunk another slot still maps through
    share_prefix stays for that slot) and go back to the device's chunk pool when one is set
    (pvt.set_pool_limit). On a GPU the unmap waits, without blocking the host, for the kernels queued
    on the cache. Reading the slot with a non-zero length afterwards is an error until it is reserved
    again."""
    storage = _storage(cache, "release_slot")
    slot = _int("release_slot", "slot", slot, out_of_range=SlotError)
    for s in _with_scales(storage)[::-1]:
        _check(*_ops.c.slot_release(s.data_ptr(), slot, _stream(s)), "release_slot")


def slot_info(cache) -> dict:
    """num_slots, max_seq_len, row_bytes, chunk_bytes, reserved_bytes, mapped_bytes, mapped_tokens."""
    ptr = _storage(cache, "slot_info").data_ptr()
    info = _ops.c.slot_info(ptr)
    info["mapped_tokens"] = np.array(_ops.c.slot_mapped_tokens(ptr, info["num_slots"]), dtype=np.int32)
    return info


def read_slot(cache, slot: int, tokens: int) -> paddle.Tensor:
    """A dense copy of the first ``tokens`` rows of ``slot``: ``[tokens, H, D]`` for a one-layer cache
    or a LayerKV, ``[tokens, L, 2, Hkv, D]`` for a SlotKVCache. Only reserved rows can be read."""
    info = slot_info(cache)
    slot, tokens = _int("read_slot", "slot", slot, out_of_range=SlotError), _int("read_slot", "tokens", tokens,
                                                                                  out_of_range=SlotError)
    if not 0 <= slot < info["num_slots"]:
        raise SlotError(f"read_slot: slot {slot} is out of range [0, {info['num_slots']})")
    if not 0 <= tokens <= int(info["mapped_tokens"][slot]):
        raise SlotError(f"read_slot: slot {slot} has {int(info['mapped_tokens'][slot])} tokens mapped, asked for {tokens}")
    storage = _storage(cache, "read_slot")
    rows = storage[slot, :tokens].clone()
    if isinstance(cache, LayerKV):
        rows = rows[:, cache.layer, cache.kv]
    return rows


def check_slot_errors(cache) -> None:
    """Raise SlotError when a GPU kernel refused a sequence of this cache since the last check (its
    rows were not reserved, or past max_seq_len); clears the flag. One device-to-host read. On the
    CPU the ops raise at once, so this never raises there."""
    flag = _run(PVT_OP_SLOT_ERRORS, _storage(cache, "check_slot_errors", by_pointer=False))
    if int(flag.numpy()[0]):
        raise SlotError("check_slot_errors: a kernel skipped a sequence whose slot rows were not reserved "
                        "(reserve_slot before the step) or that passed max_seq_len; its output is zeros")


def _int32(x, name: str, place) -> paddle.Tensor:
    """A list / numpy array becomes an int32 tensor on `place`, each value checked to fit int32
    first (a cast would run on other values); a tensor goes as it is (the op checks its dtype,
    shape and place)."""
    if isinstance(x, paddle.Tensor):
        return x
    arr = np.asarray(x)
    if arr.dtype == object:  # Python ints past int64 (or anything else): each checked as an int
        arr = np.array([_int("attention_with_kvcache", name, v, *_INT32, SlotError) for v in arr.reshape(-1)],
                       dtype=np.int64).reshape(arr.shape)
    if arr.dtype.kind not in "iu":  # floats and bools too: ids and lengths are integers
        raise TypeError(f"attention_with_kvcache: {name} must hold integers, got {arr.dtype}")
    if arr.size and (int(arr.min()) < _INT32[0] or int(arr.max()) > _INT32[1]):
        bad = int(arr.max()) if int(arr.max()) > _INT32[1] else int(arr.min())
        raise SlotError(f"attention_with_kvcache: {name} must be in [{_INT32[0]}, {_INT32[1]}] (int32), got {bad}")
    return paddle.to_tensor(arr.astype(np.int32), place=place)


def _optional_tensor(fn: str, name: str, x):
    if x is not None and not isinstance(x, paddle.Tensor):
        raise TypeError(f"{fn}: {name} must be a paddle.Tensor or None, got {type(x).__name__}")
    return x


def _scale(fn: str, softmax_scale, head_dim: int) -> float:
    if softmax_scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(softmax_scale, (bool, np.bool_)) or not isinstance(softmax_scale, numbers.Real):
        raise TypeError(f"{fn}: softmax_scale must be a float or None, got {type(softmax_scale).__name__}")
    scale = float(softmax_scale)
    if not abs(scale) <= float(np.finfo(np.float32).max):  # the op takes it as float32: 1e39 is inf there
        raise SlotError(f"{fn}: softmax_scale must be finite in float32, got {scale}")
    return scale


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
    fn = "attention_with_kvcache"
    if not isinstance(q, paddle.Tensor):
        raise TypeError(f"{fn}: q must be a paddle.Tensor, got {type(q).__name__}")
    k_new, v_new = _optional_tensor(fn, "k_new", k_new), _optional_tensor(fn, "v_new", v_new)
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"{fn}: causal must be a bool, got {type(causal).__name__} {causal!r}")
    bounds = [0 if m is None else _int(fn, name, m, 0, _INT32[1], SlotError)
              for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k))]
    scale = _scale(fn, softmax_scale, q.shape[-1])
    layer = -1
    if isinstance(k_cache, LayerKV) or isinstance(v_cache, LayerKV):
        if not (isinstance(k_cache, LayerKV) and isinstance(v_cache, LayerKV) and k_cache.kv == 0
                and v_cache.kv == 1 and k_cache.layer == v_cache.layer and k_cache.storage is v_cache.storage):
            raise SlotError("attention_with_kvcache: with a SlotKVCache pass cache.k(l) and cache.v(l) of one layer")
        layer = k_cache.layer
    k_storage, v_storage = _storage(k_cache, fn, by_pointer=False), _storage(v_cache, fn, by_pointer=False)
    _no_gradients(fn, *[t for t in (q, k_new, v_new, k_storage, v_storage) if t is not None])
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
        bounds[0] = tq
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
            ids = slots.numpy()
            if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= cache_seqlens.shape[0]):
                bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
                raise SlotError(f"{fn}: slot id {bad} is out of range [0, {cache_seqlens.shape[0]}) (cache_seqlens)")
            before = cache_seqlens.numpy()[ids] - counts.numpy()
            if (before < 0).any():
                b = int(np.argmax(before < 0))
                raise SlotError(f"{fn}: slot {int(ids[b])} holds {int(cache_seqlens.numpy()[ids[b]])} tokens, fewer "
                                f"than its {int(counts.numpy()[b])} queries")
        # A new tensor (the caller's is not modified), with the op's meaning of cache_seqlens.
        cache_seqlens = paddle.scatter(cache_seqlens, slots, paddle.gather(cache_seqlens, slots) - counts)
    if quant.is_quantized(k_storage) or quant.is_quantized(v_storage):  # 8-bit slot caches (CPU)
        scales = [quant.cache_scale(t) for t in (k_storage, v_storage)]
        out = _run(PVT_OP_QUANT_SLOT_ATTENTION, q, k_storage, scales[0], v_storage, scales[1], cache_seqlens, k_new,
                   v_new, cu, slots, int(layer), scale, bool(causal))
    else:
        out = _run(PVT_OP_SLOT_ATTENTION, q, k_storage, v_storage, cache_seqlens, k_new, v_new, cu, slots, int(layer),
                   scale, bool(causal), *bounds)
    return out.reshape([n, -1, out.shape[1], out.shape[2]]) if batched else out


__all__ = ["LayerKV", "SlotError", "SlotKVCache", "attention_with_kvcache", "check_slot_errors", "release_slot",
           "read_slot", "reserve_slot", "slot_cache", "slot_info", "slot_kv_cache"]
