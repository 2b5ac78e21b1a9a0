"""Zero-copy prefix sharing between the slots of a slot cache (issue 31, docs/SLOT_CACHE.md).

Every slot of a slot cache starts on a chunk boundary, so a slot can map the physical chunks of
another slot's prefix into its own range: the attention kernels read it at the usual addresses and
nothing is copied but the one chunk the prefix ends inside.

    pvt.share_prefix((k, v), src_slot=0, dst_slot=3, tokens=1000)   # one-layer K and V
    pvt.share_prefix(model_cache, 0, 3, 1000)                        # a SlotKVCache
    # slot 3 now holds slot 0's first 1000 tokens; it appends from row 1000 as usual
    pvt.reserve_for_write(model_cache, 0, tokens=1200, write_from=990)  # after rolling slot 0 back

A write into rows another slot also maps (only after a rollback below a shared prefix: appending
past it never is) must be announced with :func:`reserve_for_write`, which replaces those chunks by
private copies first; the kernels never write shared memory and never wait.
"""
from __future__ import annotations

from . import _ops, api, errors
from .errors import SlotError
from .slots import LayerKV, SlotKVCache, _all_or_nothing, _stream, _with_scales


def _int(value, name: str, where: str) -> int:
    """An int (or numpy integer) in int64; bools and floats are refused (TypeError), not rounded:
    the package's one integer check (api._int), out of range a SlotError."""
    return api._int(where, name, value, out_of_range=SlotError)


def _caches(cache, where: str) -> list:
    """The cache tensors one call acts on: [storage] of a SlotKVCache or of one tensor, [k, v] of a pair."""
    if isinstance(cache, LayerKV):
        raise TypeError(f"{where}: pass the SlotKVCache, not one layer's view (a token row holds every layer)")
    if isinstance(cache, SlotKVCache):
        return [cache.storage]
    if isinstance(cache, (tuple, list)):
        if len(cache) != 2 or any(isinstance(c, (SlotKVCache, LayerKV, tuple, list)) for c in cache):
            raise TypeError(f"{where}: a pair must be the (k, v) tensors of one layer's two slot caches")
        if cache[0] is cache[1] or cache[0].data_ptr() == cache[1].data_ptr():
            raise ValueError(f"{where}: the pair holds one cache twice; pass (k, v) of two caches or the cache alone")
        if cache[0].shape[0] != cache[1].shape[0]:
            raise ValueError(f"{where}: k has {cache[0].shape[0]} slots but v has {cache[1].shape[0]}")
        return list(cache)
    return [cache]


def _caches_and_scales(cache, where: str) -> list:
    """_caches plus an int8 cache's scale slot cache before it: its rows are shared and copied with the codes'."""
    return [s for c in _caches(cache, where) for s in _with_scales(c)]


def _info(storage, where: str) -> dict:
    try:
        ptr = storage.data_ptr()
    except AttributeError:
        raise TypeError(f"{where}: expected a slot cache (slot_cache / slot_kv_cache), got "
                        f"{type(storage).__name__}") from None
    info = _ops.c.slot_share_info(ptr)
    if info is None:
        raise SlotError(f"{where}: the tensor is not a slot cache (or is a view inside one)")
    return info


def _check(code: int, text: str, where: str) -> None:
    if code:
        raise errors.from_status(where, text, SlotError)


def share_prefix(cache, src_slot: int, dst_slot: int, tokens: int) -> None:
    """Make ``dst_slot`` hold the first ``tokens`` tokens of ``src_slot`` without copying them.

    ``cache``: a :class:`SlotKVCache`, a one-layer slot cache tensor, or a ``(k, v)`` pair of
    one-layer caches (both shared, all or nothing). ``dst_slot`` must be empty (never reserved, or
    released). Afterwards the slots map the same physical chunks for every whole chunk below row
    ``tokens`` (``memory_stats()["mapped_bytes"]`` counts them once, ``["shared_bytes"]`` counts the
    further mappings); the chunk holding row ``tokens`` is copied (at most one chunk, on the current
    stream on a GPU); ``dst_slot`` has ``tokens`` rows mapped and appends from there as usual
    (:func:`paddle_vtensor.reserve_slot` maps more). Releasing either slot leaves the other intact.

    Raises TypeError for a non-int slot or count (bools and floats included) or a LayerKV;
    SlotError for an empty or released source, ``tokens`` past its mapped rows, ``tokens < 1``, a
    slot with itself, a slot out of range or a destination holding rows. On error nothing changed.
    """
    where = "share_prefix"
    src, dst, n = (_int(v, name, where) for v, name in ((src_slot, "src_slot"), (dst_slot, "dst_slot"),
                                                       (tokens, "tokens")))
    caches = _caches_and_scales(cache, where)
    for c in caches:
        _info(c, where)
    done = []
    for c in caches:
        code, text = _ops.c.slot_share_prefix(c.data_ptr(), src, dst, n, _stream(c))
        if code:
            for d in done:  # all or nothing: dst was empty in each cache before
                _check(*_ops.c.slot_release(d.data_ptr(), dst, _stream(d)), where)
            _check(code, text, where)
        done.append(c)


def reserve_for_write(cache, slot: int, tokens: int, write_from: int) -> None:
    """:func:`paddle_vtensor.reserve_slot` (map rows ``[0, tokens)``) for a step that writes rows
    ``[write_from, tokens)``: every chunk of those rows that another slot maps too (a prefix shared
    with :func:`share_prefix`) is first replaced by a private copy (copy-on-write, one chunk each;
    waits for the streams that used the cache). Needed only when writing below a shared prefix's
    end, e.g. after lowering ``cache_seqlens`` (truncation, speculative rollback); appending after
    it never touches shared chunks. ``cache`` as for :func:`share_prefix`."""
    where = "reserve_for_write"
    s, n, w = (_int(v, name, where) for v, name in ((slot, "slot"), (tokens, "tokens"), (write_from, "write_from")))
    caches = _caches_and_scales(cache, where)
    for c in caches:
        _info(c, where)
    # An int8 cache's scales, then its codes: a failure on the codes takes the scales' new rows back.
    _all_or_nothing(caches, s, lambda c: _ops.c.slot_reserve_for_write(c.data_ptr(), s, n, w, _stream(c)), where)


def sharing_info(cache) -> dict:
    """The sharing bookkeeping of one cache (a tensor or a SlotKVCache): ``max_seq_len`` (rows a
    slot may hold), ``slot_rows`` (a slot's padded row stride: the tensor's dimension 1),
    ``align_slots``, ``mapped_bytes`` (physical: a shared chunk once) and ``shared_bytes`` (the
    further mappings of shared chunks)."""
    caches = _caches(cache, "sharing_info")
    if len(caches) != 1:
        raise TypeError("sharing_info: pass one cache, not a pair")
    info = _info(caches[0], "sharing_info")
    info["align_slots"] = bool(info["align_slots"])
    return info


__all__ = ["reserve_for_write", "share_prefix", "sharing_info"]
