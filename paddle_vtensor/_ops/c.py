"""The library's plain C entry points (what is not a tensor op), declared once with ctypes and
wrapped in typed functions. ``kind``/``index`` name a device as the entry points take it: (0, 0)
the host, (1, N) GPU N. Entry points that can fail return ``(code, text)``: ``code`` 0, or the
core's status code with ``text`` = ``"<Code>: <message>"`` for errors.from_status.
"""
from __future__ import annotations

import ctypes
import functools

from . import _loader

_I64 = ctypes.c_int64
_ERR_LEN = 512
STAT_KEYS = ("reserved_bytes", "mapped_bytes", "peak_mapped_bytes", "live_regions", "live_vtensors",
             "map_calls", "unmap_calls", "mapped_limit", "bytes_written",
             "shared_bytes", "pooled_bytes")  # c_api.cc pvt_memory_stats
CACHE_INFO_KEYS = ("batch", "heads", "head_dim", "elem_bytes", "capacity_tokens", "longest_view")
SLOT_INFO_KEYS = ("num_slots", "max_seq_len", "row_bytes", "chunk_bytes", "reserved_bytes", "mapped_bytes")
# vtensor_slot_share_c_api.cc pvt_slot_share_info
SLOT_SHARE_KEYS = ("max_seq_len", "slot_rows", "align_slots", "mapped_bytes", "shared_bytes")

# name: (restype, argtypes)
_SIGNATURES = {
    "pvt_memory_stats": (None, [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_I64)]),
    "pvt_set_mapped_limit": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, _I64, ctypes.c_char_p, _I64]),
    "pvt_reset_peak_mapped": (None, [ctypes.c_int, ctypes.c_int]),
    # pool_c_api.cc
    "pvt_set_pool_limit": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, _I64, ctypes.c_char_p, _I64]),
    "pvt_pool_limit": (_I64, [ctypes.c_int, ctypes.c_int]),
    "pvt_trim_pool": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, _I64]),
    "pvt_fill_pool": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, _I64, _I64, ctypes.POINTER(_I64), ctypes.c_char_p,
                                     _I64]),
    "pvt_collect": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_I64), ctypes.c_char_p,
                                   _I64]),
    # background_mapper_c_api.cc
    "pvt_reserve_slots_async": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_I64), _I64, ctypes.POINTER(_I64), _I64,
                                               ctypes.c_int, ctypes.POINTER(ctypes.c_uint64), ctypes.c_char_p, _I64]),
    "pvt_ahead_wait": (ctypes.c_int, [ctypes.c_uint64, ctypes.c_char_p, _I64]),
    "pvt_ahead_done": (ctypes.c_int, [ctypes.c_uint64]),
    "pvt_ahead_forget": (None, [ctypes.c_uint64]),
    "pvt_ahead_tickets": (_I64, []),
    # lookahead_c_api.cc
    "pvt_watch_ahead": (ctypes.c_int, [ctypes.c_void_p, _I64, ctypes.c_char_p, _I64]),
    # zero_reads_c_api.cc
    "pvt_set_zero_reads": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, _I64, ctypes.c_char_p, _I64]),
    "pvt_zero_reads": (_I64, [ctypes.c_int, ctypes.c_int]),
    "pvt_code_name": (ctypes.c_char_p, [ctypes.c_int]),
    "pvt_find_cache": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_I64)]),
    "pvt_slot_reserve": (ctypes.c_int, [ctypes.c_void_p, _I64, _I64, ctypes.c_void_p, ctypes.c_char_p, _I64]),
    "pvt_slot_release": (ctypes.c_int, [ctypes.c_void_p, _I64, ctypes.c_void_p, ctypes.c_char_p, _I64]),
    "pvt_slot_unreserve": (ctypes.c_int, [ctypes.c_void_p, _I64, _I64, ctypes.c_char_p, _I64]),
    "pvt_slot_info": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_I64)]),
    "pvt_slot_share_prefix": (ctypes.c_int, [ctypes.c_void_p, _I64, _I64, _I64, ctypes.c_void_p, ctypes.c_char_p, _I64]),
    "pvt_slot_reserve_for_write": (ctypes.c_int, [ctypes.c_void_p, _I64, _I64, _I64, ctypes.c_void_p, ctypes.c_char_p,
                                                  _I64]),
    "pvt_slot_share_info": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_I64)]),
    "pvt_slot_mapped_tokens": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), _I64]),
    "pvt_speculative_accept_launches": (_I64, [ctypes.c_int]),
    "pvt_last_pass_report": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int]),
    "pvt_cpu_attention_isa": (ctypes.c_char_p, []),
    "pvt_cpu_attention_threads": (ctypes.c_int, []),
    "pvt_set_cpu_attention_isa": (ctypes.c_int, [ctypes.c_char_p]),
}


@functools.lru_cache(maxsize=None)
def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(_loader.load()[1])
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def fast_calls_module():
    """The CPython module that custom_ops/paddle/fast_calls.cc builds (PyDLL: it holds the GIL)."""
    make = ctypes.PyDLL(_loader.load()[1]).pvt_fast_calls
    make.restype, make.argtypes = ctypes.py_object, []
    return make()


def _ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def memory_stats(kind: int, index: int) -> dict:
    out = (_I64 * len(STAT_KEYS))()
    _lib().pvt_memory_stats(kind, index, out)
    return dict(zip(STAT_KEYS, _ints(out)))


def set_mapped_limit(kind: int, index: int, limit_bytes: int) -> tuple[int, str]:
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = _lib().pvt_set_mapped_limit(kind, index, limit_bytes, err, _ERR_LEN)
    return code, err.value.decode(errors="replace")


def reset_peak_mapped(kind: int, index: int) -> None:
    _lib().pvt_reset_peak_mapped(kind, index)


def set_pool_limit(kind: int, index: int, limit_bytes: int) -> tuple[int, str]:
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = _lib().pvt_set_pool_limit(kind, index, limit_bytes, err, _ERR_LEN)
    return code, err.value.decode(errors="replace")


def pool_limit(kind: int, index: int) -> int:
    return int(_lib().pvt_pool_limit(kind, index))


def trim_pool(kind: int, index: int) -> tuple[int, str]:
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = _lib().pvt_trim_pool(kind, index, err, _ERR_LEN)
    return code, err.value.decode(errors="replace")


def fill_pool(kind: int, index: int, chunk_bytes: int, nbytes: int) -> tuple[int, str, int]:
    """(code, text, chunks created)."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    created = _I64(0)
    code = _lib().pvt_fill_pool(kind, index, chunk_bytes, nbytes, ctypes.byref(created), err, _ERR_LEN)
    return code, err.value.decode(errors="replace"), int(created.value)


def collect(kind: int, index: int, wait: bool) -> tuple[int, str, int]:
    """(code, text, chunks still pending)."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    pending = _I64(0)
    code = _lib().pvt_collect(kind, index, int(bool(wait)), ctypes.byref(pending), err, _ERR_LEN)
    return code, err.value.decode(errors="replace"), int(pending.value)


def reserve_slots_async(ptr: int, slots, tokens, prefetch: bool) -> tuple[int, str, int]:
    """(code, text, ticket): queues the batch (prefetch: rows needed later) on the background mapper."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    ticket = ctypes.c_uint64(0)
    code = _lib().pvt_reserve_slots_async(ctypes.c_void_p(ptr), (_I64 * len(slots))(*slots), len(slots),
                                          (_I64 * len(tokens))(*tokens), len(tokens), int(bool(prefetch)),
                                          ctypes.byref(ticket), err, _ERR_LEN)
    return code, err.value.decode(errors="replace"), int(ticket.value)


def watch_ahead(ptr: int, rows: int) -> tuple[int, str]:
    """(code, text): the background mapper keeps the cache's slots mapped `rows` ahead (0: stop)."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = _lib().pvt_watch_ahead(ctypes.c_void_p(ptr), rows, err, _ERR_LEN)
    return code, err.value.decode(errors="replace")


def ahead_wait(ticket: int) -> tuple[int, str]:
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = _lib().pvt_ahead_wait(ticket, err, _ERR_LEN)
    return code, err.value.decode(errors="replace")


def ahead_done(ticket: int) -> bool:
    return bool(_lib().pvt_ahead_done(ticket))


def ahead_forget(ticket: int) -> None:
    _lib().pvt_ahead_forget(ticket)


def ahead_tickets() -> int:
    return int(_lib().pvt_ahead_tickets())


def set_zero_reads(kind: int, index: int, granule: int) -> tuple[int, str]:
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = _lib().pvt_set_zero_reads(kind, index, granule, err, _ERR_LEN)
    return code, err.value.decode(errors="replace")


def zero_reads(kind: int, index: int) -> int:
    return int(_lib().pvt_zero_reads(kind, index))


def code_name(code: int) -> str | None:
    """The core's name of status code ``code`` (pvt::code_name), or None past the last one."""
    name = _lib().pvt_code_name(code)
    return None if name is None else name.decode()


def find_cache(ptr: int) -> dict | None:
    """The VTensor cache whose reservation holds address ``ptr`` (CACHE_INFO_KEYS), or None."""
    out = (_I64 * len(CACHE_INFO_KEYS))()
    return dict(zip(CACHE_INFO_KEYS, _ints(out))) if _lib().pvt_find_cache(ctypes.c_void_p(ptr), out) else None


def slot_reserve(ptr: int, slot: int, tokens: int, stream: int | None) -> tuple[int, str]:
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = _lib().pvt_slot_reserve(ctypes.c_void_p(ptr), slot, tokens, ctypes.c_void_p(stream), err, _ERR_LEN)
    return code, err.value.decode(errors="replace")


def slot_unreserve(ptr: int, slot: int, tokens: int) -> tuple[int, str]:
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = _lib().pvt_slot_unreserve(ctypes.c_void_p(ptr), slot, tokens, err, _ERR_LEN)
    return code, err.value.decode(errors="replace")


def slot_release(ptr: int, slot: int, stream: int | None) -> tuple[int, str]:
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = _lib().pvt_slot_release(ctypes.c_void_p(ptr), slot, ctypes.c_void_p(stream), err, _ERR_LEN)
    return code, err.value.decode(errors="replace")


def slot_info(ptr: int) -> dict | None:
    """The slot cache whose reservation holds ``ptr`` (SLOT_INFO_KEYS), or None."""
    out = (_I64 * len(SLOT_INFO_KEYS))()
    return dict(zip(SLOT_INFO_KEYS, _ints(out))) if _lib().pvt_slot_info(ctypes.c_void_p(ptr), out) else None


def slot_share_prefix(ptr: int, src: int, dst: int, tokens: int, stream: int | None) -> tuple[int, str]:
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = _lib().pvt_slot_share_prefix(ctypes.c_void_p(ptr), src, dst, tokens, ctypes.c_void_p(stream), err, _ERR_LEN)
    return code, err.value.decode(errors="replace")


def slot_reserve_for_write(ptr: int, slot: int, tokens: int, write_from: int, stream: int | None) -> tuple[int, str]:
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = _lib().pvt_slot_reserve_for_write(ctypes.c_void_p(ptr), slot, tokens, write_from, ctypes.c_void_p(stream),
                                             err, _ERR_LEN)
    return code, err.value.decode(errors="replace")


def slot_share_info(ptr: int) -> dict | None:
    """Sharing bookkeeping of the slot cache whose base is ``ptr`` (SLOT_SHARE_KEYS), or None."""
    out = (_I64 * len(SLOT_SHARE_KEYS))()
    return dict(zip(SLOT_SHARE_KEYS, _ints(out))) if _lib().pvt_slot_share_info(ctypes.c_void_p(ptr), out) else None


def slot_mapped_tokens(ptr: int, num_slots: int) -> list[int]:
    out = (ctypes.c_int32 * num_slots)()
    _lib().pvt_slot_mapped_tokens(ctypes.c_void_p(ptr), out, num_slots)
    return list(out)


def speculative_accept_launches(kind: int) -> int:
    return int(_lib().pvt_speculative_accept_launches(kind))


def last_pass_report() -> str:
    """The JSON text of the PIR pass's last run in this process (passes/pass_report.h)."""
    fn = _lib().pvt_last_pass_report
    size = fn(None, 0)
    buf = ctypes.create_string_buffer(size + 1)
    fn(buf, size + 1)
    return buf.value.decode("utf-8")


def cpu_attention_isa() -> str:
    return _lib().pvt_cpu_attention_isa().decode()


def set_cpu_attention_isa(name: str | None) -> None:
    """Ask the host decode attention for a lower instruction-set build ("scalar", "avx2", "avx512";
    None: the best the CPU has). Process-wide; PADDLE_VTENSOR_CPU_ISA sets the starting value."""
    if not _lib().pvt_set_cpu_attention_isa(None if name is None else name.encode()):
        raise ValueError(f"set_cpu_attention_isa: expected 'scalar', 'avx2', 'avx512' or None, got {name!r}")


def cpu_attention_threads() -> int:
    return int(_lib().pvt_cpu_attention_threads())
