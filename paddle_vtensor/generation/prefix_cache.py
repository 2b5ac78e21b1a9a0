"""The prefix cache of generate_inflight (issue 31): which slot holds which token ids, so that a new
prompt maps another slot's chunks (:func:`paddle_vtensor.share_prefix`) instead of recomputing them.

Reuse is by whole *blocks*: the fewest tokens whose rows fill whole chunks
(``chunk_bytes / gcd(chunk_bytes, row_bytes)``), so a reused prefix is mapped, never copied. A block
is keyed by a hash chained over every block before it, so ``_index[key]`` holds exactly the slots
whose ids agree with the prompt up to that block (hash collisions aside: a match is checked against
the slot's own ids before it is used, so a collision costs a miss, never a wrong id).

A slot is indexed from the moment its ids are fed (its rows are being written by this step), but a
match only counts rows already written (``_written``); :meth:`PrefixCache.match` reports both, so the
scheduler can hold back a prompt one step to reuse rows a same-step prefill is computing.

Finished sequences stay in their slots ("kept") while slots and the byte budget allow; the least
recently used is evicted first (when a waiting prompt needs a slot or the budget is exceeded).
"""
from __future__ import annotations

import collections
import dataclasses
import math

_SEED = 0x9E3779B97F4A7C15  # the chain's start: any constant


@dataclasses.dataclass(frozen=True)
class Match:
    slot: int | None   # the slot to share from (None: no reusable rows)
    tokens: int        # rows reusable now: whole blocks, written, at most len(prompt) - 1
    pending: int       # rows reusable once this step's writes are done (>= tokens)


def block_tokens(chunk_bytes: int, row_bytes: int) -> int:
    """Tokens of the shortest prefix whose rows end on a chunk boundary."""
    return chunk_bytes // math.gcd(chunk_bytes, row_bytes)


class PrefixCache:
    """Host bookkeeping only: the slots and their memory are the runner's (generate_inflight maps,
    shares and releases; this class says which slot, how many rows, and whom to evict)."""

    def __init__(self, block: int, budget_bytes: int | None = None, index_generated: bool = True):
        self.block = block
        self.budget_bytes = budget_bytes
        # False for models whose generated rows differ from a prefill of the same ids (qwen rotates
        # a decoded token as position 0): then only prompt rows are indexed.
        self.index_generated = index_generated
        self._ids: dict[int, list[int]] = {}       # slot -> ids whose rows are written or being written
        self._written: dict[int, int] = {}         # slot -> rows written (before this step's)
        self._keys: dict[int, list[int]] = {}      # slot -> chained key of each whole block of its ids
        self._index: dict[int, dict[int, None]] = {}  # key -> slots holding that prefix
        self.kept: collections.OrderedDict[int, int] = collections.OrderedDict()  # LRU first -> bytes
        self.evicted = 0

    # ---- what the slots hold ----
    def start(self, slot: int, ids, written: int) -> None:
        """``slot`` now holds ``ids`` (a prompt being prefilled); its first ``written`` rows are done."""
        self.drop(slot)
        self._ids[slot], self._keys[slot], self._written[slot] = [], [], written
        self._extend(slot, ids)

    def feed(self, slot: int, ids) -> None:
        """This step writes the rows of ``ids`` after the slot's others (a decode's fed token)."""
        if self.index_generated:
            self._extend(slot, ids)

    def wrote(self, slot: int, rows: int) -> None:
        """The slot's first ``rows`` rows are written (after a step)."""
        self._written[slot] = min(rows, len(self._ids[slot]))

    def _extend(self, slot: int, ids) -> None:
        held, keys, b = self._ids[slot], self._keys[slot], self.block
        held.extend(int(t) for t in ids)
        while (len(keys) + 1) * b <= len(held):
            i = len(keys)
            key = hash((keys[-1] if keys else _SEED, tuple(held[i * b:(i + 1) * b])))
            keys.append(key)
            self._index.setdefault(key, {})[slot] = None

    def drop(self, slot: int) -> None:
        """Forget ``slot`` (released, or about to hold other ids)."""
        for key in self._keys.pop(slot, ()):
            holders = self._index[key]
            holders.pop(slot, None)
            if not holders:
                del self._index[key]
        self._ids.pop(slot, None)
        self._written.pop(slot, None)
        self.kept.pop(slot, None)

    # ---- lookups ----
    def match(self, prompt) -> Match:
        """The slot holding the longest reusable prefix of ``prompt`` (written rows, whole blocks,
        never the prompt's last token: its logits must be computed). Live slots before kept ones;
        among kept ones the most recently used."""
        b = self.block
        limit = (len(prompt) - 1) // b
        key, best, pending = _SEED, (0, None), 0
        for i in range(limit):
            key = hash((key, tuple(prompt[i * b:(i + 1) * b])))
            holders = self._index.get(key)
            if not holders:
                break
            ready = [s for s in holders if self._written[s] >= (i + 1) * b]
            pending = i + 1
            if ready:
                best = (i + 1, min(ready, key=self._preference))
        blocks, slot = best
        if slot is not None:  # collisions: trust only the ids themselves
            blocks = _common_blocks(self._ids[slot], prompt, blocks, b)
        return Match(slot if blocks else None, blocks * b, max(pending, blocks) * b)

    def _preference(self, slot: int):
        if slot not in self.kept:
            return (0, slot)
        return (1, -list(self.kept).index(slot))  # most recently used kept slot first

    # ---- finished sequences ----
    def keep(self, slot: int, nbytes: int) -> list[int]:
        """A finished sequence stays in ``slot`` (holding ``nbytes``); returns the slots to evict
        (least recently used first) to get back under the budget, possibly ``slot`` itself."""
        self.kept[slot] = nbytes
        out = []
        while self.budget_bytes is not None and self.kept and sum(self.kept.values()) > self.budget_bytes:
            out.append(self._evict(next(iter(self.kept))))
        return out

    def touch(self, slot: int) -> None:
        if slot in self.kept:
            self.kept.move_to_end(slot)

    def victim(self, spare: int | None = None) -> int | None:
        """The least recently used kept slot other than ``spare``, forgotten (the caller releases it)."""
        for slot in self.kept:
            if slot != spare:
                return self._evict(slot)
        return None

    def _evict(self, slot: int) -> int:
        self.drop(slot)
        self.evicted += 1
        return slot


def _common_blocks(held: list[int], prompt, blocks: int, b: int) -> int:
    """Whole blocks (at most ``blocks``) on which ``held`` and ``prompt`` agree."""
    for i in range(blocks):
        if held[i * b:(i + 1) * b] != list(prompt[i * b:(i + 1) * b]):
            return i
    return blocks


__all__ = ["Match", "PrefixCache", "block_tokens"]
