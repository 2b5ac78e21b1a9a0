"""Unmapped memory reads as zeros (issue 30 point 4, custom_ops/core/zero_cover.h).

On the CPU a reservation is readable always: ``print(cache)``, ``.numpy()``, slices and sums of a
slot cache read zeros where nothing is mapped. On a GPU the same needs a *zero cover*: read-only
zero handles mapped at every reserved place no chunk is mapped at, in buddy blocks of at most
``granule`` bytes (a 100 GiB reservation at 64 MiB: 1,600 mappings, ~61 ms on an H200, and
2 x granule of device memory for the zero handles), then about one extra map and unmap of zeros per
chunk mapped (docs/SLOT_CACHE.md). Off by default on the GPU until measured there in full:

    pvt.set_zero_reads(64 << 20, device="gpu:0")   # caches made from now on read zeros when unmapped

Writes outside mapped memory stay refused either way (the cover is read-only; the ops check).
"""
from __future__ import annotations

from . import _ops, errors
from .api import _device, _int


def set_zero_reads(granule_bytes: int, device="gpu:0") -> None:
    """Cover reservations made from now on with read-only zeros in blocks of at most
    ``granule_bytes`` (rounded down to the granularity x 2^j; 0: off). The host needs none (its
    reservation reads zeros) and ignores it."""
    granule = _int("set_zero_reads", "granule_bytes", granule_bytes)
    code, text = _ops.c.set_zero_reads(*_device(device), granule)
    if code:
        raise errors.from_status("set_zero_reads", text)


def zero_reads(device="gpu:0") -> int:
    """The granule in effect (0: no cover; the host always reads zeros and reports 0)."""
    return _ops.c.zero_reads(*_device(device))


__all__ = ["set_zero_reads", "zero_reads"]
