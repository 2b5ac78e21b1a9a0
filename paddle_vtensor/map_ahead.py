"""Mapping ahead in the background (issue 30 point 2, custom_ops/core/background_mapper.h): a
scheduler hands the next step's reservations to a background thread right after it launched the
current step, so the mapping (on CUDA: map + set access, ~35 µs per 2 MiB chunk) runs while the
device computes instead of on the step path.

    ticket = pvt.reserve_slots_async(cache, [0, 3, 5], [129, 40, 7])   # returns at once
    ...                                                                # the step runs meanwhile
    ticket.wait()          # raises what reserve_slot would have raised; usually returns at once

Ordering: every later call on the cache (reserve_slot, release_slot, share_prefix, the slot ops)
waits until the batches queued before it have run, so it sees them, in program order; that wait is
a host wait (never a device sync) and only happens when the thread has not finished yet.
A batch is all or nothing: when one of its reservations fails (memory, the mapped limit) every
slot of the batch is as before, and the error is raised by ``wait()``. Bad slots or lengths are
refused by the call itself (nothing queued).

``prefetch=True`` queues rows needed later, not by the next step: a scheduler asks for a whole
chunk more than a slot holds, so a slot's chunk crossing finds its next chunk mapped 16 steps
(one chunk of Llama-3-8B token rows) after the request, and the step path never waits for the
driver. reserve_slot and the slot ops do not wait for a prefetch (it only adds mappings, and the
rows they need are mapped already or are mapped by reserve_slot itself); release_slot and
share_prefix do. Slots are mapped one at a time, each all or nothing; ``wait()`` raises the first
error, and the slots before it stay mapped.

``watch_ahead(cache, rows)`` does the same with no call on the step at all: from then on every
``reserve_slot`` / ``reserve_slots`` on the cache only publishes each slot's length (atomic stores,
no lock), and the background thread, looking every millisecond, maps a slot up to the end of the chunk
``rows`` beyond that length once the slot has entered a new chunk. A released slot is never mapped
again by it. ``watch_ahead(cache, 0)`` stops. A mapping the thread cannot make (memory, the mapped
limit) is left to the step's own ``reserve_slot``, which maps what it needs or raises as usual.
"""
from __future__ import annotations

from collections.abc import Sequence

from . import _ops
from .api import _int
from .errors import SlotError
from .slots import _check, _storage


class Ticket:
    """A batch queued by :func:`reserve_slots_async`. ``wait()`` once to learn how it ended."""

    __slots__ = ("_id", "_waited")

    def __init__(self, ticket_id: int):
        self._id, self._waited = ticket_id, False

    def done(self) -> bool:
        """Whether the batch has run (without blocking)."""
        return self._waited or _ops.c.ahead_done(self._id)

    def wait(self) -> None:
        """Block until the batch has run; raise its error (ReservationFullError, SlotError,
        VTensorOutOfMemoryError ...) with every slot of the batch as before it. A second wait
        returns at once."""
        if self._waited:
            return
        self._waited = True
        _check(*_ops.c.ahead_wait(self._id), "reserve_slots_async")

    def __del__(self):
        if not self._waited and _ops is not None:
            _ops.c.ahead_forget(self._id)  # the batch still runs; nobody asks how it ended


def reserve_slots_async(cache, slots: Sequence[int], lengths: Sequence[int], *, prefetch: bool = False) -> Ticket:
    """Queue ``reserve_slot(cache, slots[i], lengths[i])`` for every i on the background mapper and
    return at once (``prefetch``: as rows needed later, see the module's docstring). Raises at once
    (nothing queued) for a bad slot or length, a length list of another size, or what is not a slot
    cache."""
    if not isinstance(prefetch, bool):
        raise TypeError(f"reserve_slots_async: prefetch must be True or False, got {type(prefetch).__name__}")
    storage = _storage(cache, "reserve_slots_async")
    slots = [_int("reserve_slots_async", "slot", s, out_of_range=SlotError) for s in slots]
    lengths = [_int("reserve_slots_async", "length", n, out_of_range=SlotError) for n in lengths]
    code, text, ticket = _ops.c.reserve_slots_async(storage.data_ptr(), slots, lengths, prefetch)
    _check(code, text, "reserve_slots_async")
    return Ticket(ticket)


def watch_ahead(cache, rows: int) -> None:
    """Keep every slot of ``cache`` mapped ``rows`` beyond the length last reserved for it, mapped by
    the background thread (see the module's docstring); ``rows=0`` stops. ValueError for rows < 0 or
    past the cache's max_seq_len, TypeError for what is not an int or not a slot cache."""
    storage = _storage(cache, "watch_ahead")
    rows = _int("watch_ahead", "rows", rows, lo=0)
    _check(*_ops.c.watch_ahead(storage.data_ptr(), rows), "watch_ahead")


def pending_tickets() -> int:
    """Tickets neither waited for nor dropped (for tests: nothing is left behind)."""
    return _ops.c.ahead_tickets()


__all__ = ["Ticket", "reserve_slots_async", "watch_ahead", "pending_tickets"]
