"""The chunk pool (issue 30 point 1, custom_ops/core/chunk_pool.h): physical chunks kept ready
between a release and the next reserve, so mapping a chunk on the step path creates nothing
(on CUDA: no ``cuMemCreate``, only map + set access).

    pvt.set_pool_limit(256 << 20, device="gpu:0")   # keep up to 256 MiB of released chunks
    pvt.fill_pool(64 << 20, device="gpu:0")         # create 64 MiB of 2 MiB chunks now, off the step
    pvt.memory_stats("gpu:0")["pooled_bytes"]
    pvt.trim_pool("gpu:0")                          # give every pooled chunk back to the driver

One pool per device (per chunk size inside it). A released slot's chunks go back to the pool while
it is under its bound, the rest to the driver; reserving takes pooled chunks of the cache's chunk
size before creating any.

The default bound is 0 (no pool): released memory goes back to the driver at once, as before the
pool, so nothing held idle surprises Paddle's allocator or a process sharing the GPU; a server sets
a bound of about the chunks its worst step maps (64 slots crossing a 2 MiB chunk: 128 MiB).

How Paddle's own allocator still gets memory: the pool never holds more than its bound;
``trim_pool()`` hands it all back (call it before a phase that needs memory elsewhere); the mapped
limit (``set_mapped_limit``) caps mapped + pooled bytes, and a reserve that would pass it trims the
pool first; on CUDA a ``cuMemCreate`` that finds the GPU full trims the pool and retries once.

Pooled bytes are not ``mapped_bytes`` (nothing maps them) but physical memory all the same:
``memory_stats()["pooled_bytes"]``.

Contents: a pooled chunk keeps its bytes (host pages are not punched until the chunk leaves the
pool; CUDA memory is never zeroed), so a slot reserved from the pool holds what its last user
wrote. The slot ops read only rows written since the reserve, so a KV cache never sees them; code
that reads unwritten rows must not expect zeros.
"""
from __future__ import annotations

from . import _ops, errors
from .api import _device, _int


def set_pool_limit(limit_bytes: int, device="cpu") -> None:
    """Keep at most ``limit_bytes`` of released chunks pooled on ``device`` (0: no pool, the
    default); what is pooled over the new bound is released now."""
    limit = _int("set_pool_limit", "limit_bytes", limit_bytes)
    code, text = _ops.c.set_pool_limit(*_device(device), limit)
    if code:
        raise errors.from_status("set_pool_limit", text)


def pool_limit(device="cpu") -> int:
    """The bound set with :func:`set_pool_limit` (0: no pool)."""
    return _ops.c.pool_limit(*_device(device))


def trim_pool(device="cpu") -> None:
    """Release every pooled chunk of ``device`` to the driver (on the host: punch its pages)."""
    code, text = _ops.c.trim_pool(*_device(device))
    if code:
        raise errors.from_status("trim_pool", text)


def collect(device="cpu", wait: bool = False) -> int:
    """Unmap the chunks of released slots whose streams have finished, without blocking (``wait``:
    block until every such stream is done, then unmap all). Returns the chunks still pending.

    ``release_slot`` never blocks the host (issue 30 point 3): while kernels queued before it may
    still read the slot, its chunks leave the slot at once (the slot reads as released) but are
    unmapped only once those kernels finished: at a later reserve, release or share on the same
    cache, at ``collect()``, or when the cache goes. Until then their memory counts in
    ``mapped_bytes``. The host runs nothing asynchronously: nothing is ever pending there."""
    code, text, pending = _ops.c.collect(*_device(device), wait)
    if code:
        raise errors.from_status("collect", text)
    return pending


def fill_pool(nbytes: int, device="cpu", chunk_bytes: int = 0) -> int:
    """Create chunks of ``chunk_bytes`` (0: the caches' default, 2 MiB; rounded up to the device's
    granularity as a cache rounds it) until the pool holds ``nbytes`` of them, or until the pool's
    bound or the mapped limit would be passed (stops there, no error). Returns the chunks created.
    Call it off the step (at start-up, between batches): creating is what the pool saves the step."""
    nbytes = _int("fill_pool", "nbytes", nbytes)
    chunk_bytes = _int("fill_pool", "chunk_bytes", chunk_bytes)
    code, text, created = _ops.c.fill_pool(*_device(device), chunk_bytes, nbytes)
    if code:
        raise errors.from_status("fill_pool", text)
    return created
