"""Giving one slot's cache to another inside a SlotModelRunner: what parallel sampling (one prompt,
``n`` continuations) and beam search (a child beam takes its parent's cache) do instead of copying
whole caches. docs/SLOT_CACHE.md, "Who copies when".

The policy, one number (``copy_max_chunks``). ``dst`` must end up holding ``src``'s first ``tokens``
rows and already holds ``common`` of them (rows equal by construction: the same token prefix,
computed once and then shared or copied byte for byte). The rows it lacks, the *divergent tail*
``[common, tokens)``:

* a tail of at most ``copy_max_chunks`` chunks' bytes is **copied** row by row into ``dst`` (after
  ``reserve_for_write`` made any chunk of those rows that another slot maps private: copy-on-write);
* a longer tail **remaps**: ``dst`` is released and ``share_prefix`` maps every whole chunk of
  ``src``'s first ``tokens`` rows into it (no bytes) and copies the one partial chunk.

Why: on an H200 mapping costs ~35 us per chunk (``cuMemSetAccess``) while copying a 2 MiB chunk
costs ~1 us (issue 31), so a short tail is cheaper to copy; a long shared run is stored once only if
mapped. ``copy_max_chunks=0`` always maps, a huge value always copies.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import paddle

from ..api import _int
from ..sharing import reserve_for_write, share_prefix, sharing_info
from ..slots import slot_info


@dataclasses.dataclass
class ForkCounts:
    """What forks did: bytes copied (row copies, copy-on-write chunks and share_prefix's partial
    chunks, all together), whole chunks mapped by share_prefix, and how many forks took each path."""

    copied_bytes: int = 0
    cow_bytes: int = 0        # the part of copied_bytes that copy-on-write of shared chunks cost
    mapped_chunks: int = 0
    copies: int = 0
    remaps: int = 0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class SlotForker:
    """Forks slots of ``runner`` (a SlotModelRunner) by the policy above, keeping the runner's
    lengths (``host_lens`` at once, ``cache_seqlens`` at :meth:`sync_lengths`) and counting."""

    def __init__(self, runner, copy_max_chunks: int, fn: str):
        self.runner = runner
        self.copy_max_chunks = _int(fn, "copy_max_chunks", copy_max_chunks, 0)
        info = slot_info(runner.cache)
        self.row_bytes, self.chunk_bytes = info["row_bytes"], info["chunk_bytes"]
        self.counts = ForkCounts()

    def fork(self, src: int, dst: int, tokens: int, common: int) -> None:
        """``dst`` holds ``src``'s first ``tokens`` rows afterwards; it holds 0 or ``tokens`` rows
        now, of which the first ``common`` equal ``src``'s."""
        runner, cache, c = self.runner, self.runner.cache, self.counts
        have = int(runner.host_lens[dst])
        if have not in (0, tokens) or not 0 <= common <= have or src == dst:
            raise ValueError(f"fork: slot {dst} holds {have} rows ({common} in common), expected 0 or {tokens}")
        tail = (tokens - common) * self.row_bytes
        if tail <= self.copy_max_chunks * self.chunk_bytes:
            shared_before = sharing_info(cache)["shared_bytes"]
            reserve_for_write(cache, dst, tokens, write_from=common)  # private copies of shared chunks first
            cow = shared_before - sharing_info(cache)["shared_bytes"]  # each one drops one chunk's alias
            cache.storage[dst, common:tokens] = cache.storage[src, common:tokens]
            c.copies += 1
            c.cow_bytes += cow
            c.copied_bytes += tail + cow
        else:
            if have:
                runner.release(dst)
            share_prefix(cache, src, dst, tokens)
            c.remaps += 1
            c.mapped_chunks += tokens * self.row_bytes // self.chunk_bytes
            c.copied_bytes += tokens * self.row_bytes % self.chunk_bytes
        runner.host_lens[dst] = tokens

    def sync_lengths(self) -> None:
        """The device lengths from the host's, once after a round of forks and releases."""
        r = self.runner
        r.cache_seqlens = paddle.to_tensor(r.host_lens.astype(np.int32), place=r.place)

    def memory(self) -> dict:
        """The cache's physical ``mapped_bytes`` (a shared chunk once) and ``shared_bytes``."""
        info = sharing_info(self.runner.cache)
        return {"mapped_bytes": info["mapped_bytes"], "shared_bytes": info["shared_bytes"]}


def feed(runner, slots, tokens, positions=None) -> paddle.Tensor:
    """One forward of ``tokens[i]`` (a list of ids) appended to slot ``slots[i]`` for every i: maps
    ahead, runs, advances the lengths. Returns float32 logits [len(slots), vocab] of each
    sequence's last token."""
    counts = [len(t) for t in tokens]
    for s, n in zip(slots, counts):
        runner.reserve(s, int(runner.host_lens[s]) + n)
    cu = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    slot_arr = np.asarray(slots, dtype=np.int32)
    logits = runner.forward(np.concatenate([np.asarray(t, dtype=np.int64) for t in tokens]), cu, slot_arr,
                            positions=positions)
    runner.advance(slot_arr, np.asarray(counts, dtype=np.int32))
    return paddle.gather(logits, paddle.to_tensor(cu[1:] - 1, dtype="int64", place=logits.place))


__all__ = ["ForkCounts", "SlotForker", "feed"]
