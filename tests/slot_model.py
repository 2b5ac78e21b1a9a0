"""What the slot-cache state machines (test_slots_stateful.py, test_quant_stateful.py) share: numpy
attention of one sequence, a model of the physical chunks behind each slot's rows, and a base machine
with the host decisions (reserve, release, share_prefix, rollback), their bad calls and the draws of a
batch, modelled the same way for float and 8-bit caches."""
import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

import paddle_vtensor as pvt


def reference(q, k, v, before, causal=True):
    """q [n, Hq, D] of one sequence over k/v [L, Hkv, D], in float64: query t sees keys < before + t + 1,
    or all of them when not causal."""
    group, d = q.shape[1] // k.shape[1], q.shape[2]
    out = np.zeros(q.shape, np.float64)
    for t in range(q.shape[0]):
        keys = before + t + 1 if causal else k.shape[0]
        for h in range(q.shape[1]):
            s = k[:keys, h // group].astype(np.float64) @ q[t, h].astype(np.float64) / np.sqrt(d)
            w = np.exp(s - s.max())
            out[t, h] = (w / w.sum()) @ v[:keys, h // group].astype(np.float64)
    return out


class SlotChunks:
    """Each slot's mapped chunks as ids of physical chunks: one id in two slots is one chunk that
    share_prefix mapped twice. Slots start on a chunk, so a slot's n-th chunk holds its rows
    [n * per, (n + 1) * per) (`per` rows a chunk, a whole number here)."""

    def __init__(self, slots: int, per: int):
        self.per, self.next = per, 0
        self.of = [[] for _ in range(slots)]

    def grow(self, slot, tokens):
        """A reserve of `tokens` rows: fresh chunks up to the one holding row tokens - 1."""
        while len(self.of[slot]) * self.per < tokens:
            self.of[slot].append(self.next)
            self.next += 1

    def share(self, src, dst, tokens):
        """dst maps src's whole chunks below row `tokens`, and a copy of the one the prefix ends in."""
        self.of[dst] = self.of[src][:tokens // self.per]
        self.grow(dst, tokens)

    def release(self, slot):
        self.of[slot] = []

    def shared(self, slot, start, end):
        """Whether rows [start, end) of slot lie in a chunk another slot maps too."""
        others = {c for s, ids in enumerate(self.of) if s != slot for c in ids}
        return any(self.of[slot][i] in others for i in range(start // self.per, -(-end // self.per)))

    def make_private(self, slot, start):
        """reserve_for_write from row `start`: each shared chunk from there on becomes a private copy."""
        for i in range(start // self.per, len(self.of[slot])):
            if self.shared(slot, i * self.per, (i + 1) * self.per):
                self.of[slot][i] = self.next
                self.next += 1

    def physical(self):
        """Chunks mapped, each once, and the further mappings of shared ones."""
        ids = [c for chunks in self.of for c in chunks]
        return len(set(ids)), len(ids) - len(set(ids))


def draw_share(data, mapped):
    """(src, dst, tokens) of a valid share_prefix, or None: src holds rows, dst none. Often every mapped
    row of src, past what it wrote, so that src's next write lands in shared rows."""
    sources = [s for s in range(len(mapped)) if mapped[s] > 0]
    empty = [s for s in range(len(mapped)) if mapped[s] == 0]
    if not sources or not empty:
        return None
    src, dst = data.draw(st.sampled_from(sources)), data.draw(st.sampled_from(empty))
    return src, dst, data.draw(st.one_of(st.just(int(mapped[src])), st.integers(1, int(mapped[src]))))


class SlotStateMachine(RuleBasedStateMachine):
    """A subclass's initialize sets: owners (what reserve_slot / release_slot take), pair (what
    share_prefix / reserve_for_write take), max_seq, rows {"k", "v"} (float32 [slots, S, Hkv, D]: the
    values written), written and mapped (int64 [slots]: rows written, the host's length; rows mapped,
    the largest reserve since the last release), chunks (SlotChunks); and it defines
    refused(call, cls, match=None): the call raises cls and changes nothing."""

    def slot(self, data):
        return data.draw(st.integers(0, len(self.mapped) - 1))

    # ---- host decisions

    @rule(data=st.data())
    def reserve(self, data):
        slot, tokens = self.slot(data), data.draw(st.integers(0, self.max_seq))
        for c in self.owners:
            pvt.reserve_slot(c, slot, tokens)
        self.mapped[slot] = max(self.mapped[slot], tokens)
        self.chunks.grow(slot, int(self.mapped[slot]))

    @rule(data=st.data())
    def release(self, data):
        slot = self.slot(data)
        for c in self.owners:
            pvt.release_slot(c, slot)
        self.mapped[slot] = self.written[slot] = 0
        self.chunks.release(slot)
        for c in "kv":
            self.rows[c][slot] = 0

    @rule(data=st.data())
    def share(self, data):
        """share_prefix: dst (empty) holds src's first `tokens` mapped rows (unwritten ones read as zeros
        in both); whole chunks are the same physical chunks, the partial one a copy; later writes to
        either never show in the other."""
        drawn = draw_share(data, self.mapped)
        if drawn is None:
            return
        src, dst, tokens = drawn
        pvt.share_prefix(self.pair, src, dst, tokens)
        for c in "kv":
            self.rows[c][dst, :tokens] = self.rows[c][src, :tokens]
        self.written[dst] = self.mapped[dst] = tokens
        self.chunks.share(src, dst, tokens)

    @rule(data=st.data())
    def rollback(self, data):
        """The host lowers a slot's length (speculative rollback) and announces the rewrite with
        reserve_for_write: rows below a shared prefix's end get private copies."""
        have = [s for s in range(len(self.mapped)) if self.written[s] > 0]
        if not have:
            return
        slot = data.draw(st.sampled_from(have))
        keep = data.draw(st.integers(0, int(self.written[slot]) - 1))
        pvt.reserve_for_write(self.pair, slot, int(self.mapped[slot]), keep)
        self.written[slot] = keep  # rows past it still hold their values, the next writes replace them
        self.chunks.make_private(slot, keep)

    # ---- bad host calls: each raises its class, nothing changes

    @rule(data=st.data())
    def reserve_past_max_seq_len(self, data):
        slot, extra = self.slot(data), data.draw(st.integers(1, 5))
        self.refused(lambda: pvt.reserve_slot(self.owners[-1], slot, self.max_seq + extra), pvt.ReservationFullError)

    @rule(data=st.data())
    def reserve_bad_slot(self, data):
        bad = data.draw(st.sampled_from([len(self.mapped), -1, 2**64, 2**63, -(2**64)]))
        tokens = data.draw(st.integers(0, self.max_seq))
        self.refused(lambda: pvt.reserve_slot(self.owners[0], bad, tokens), pvt.SlotError)

    @rule(data=st.data())
    def share_bad(self, data):
        """Into a slot holding rows, from an empty one, with itself, past the source: nothing shared in
        any cache (an int8 cache's scales included)."""
        src, dst = self.slot(data), self.slot(data)
        tokens = data.draw(st.integers(1, self.max_seq))
        if src != dst and self.mapped[dst] == 0 and tokens <= self.mapped[src]:
            return  # a valid share (the rule above)
        self.refused(lambda: pvt.share_prefix(self.pair, src, dst, tokens), (pvt.SlotError, ValueError))

    # ---- for the subclasses' attention rules

    def draw_writes(self, data, most=None):
        """(slots, counts, cu_seqlens_q) of a batch writing new tokens into slots with mapped room (at most
        `most` a slot), or None when no slot has room."""
        room = [s for s in range(len(self.mapped)) if self.mapped[s] > self.written[s]]
        if not room:
            return None
        slots = data.draw(st.lists(st.sampled_from(room), min_size=1, max_size=len(room), unique=True))
        counts = [data.draw(st.integers(1, min(most or self.max_seq, int(self.mapped[s] - self.written[s]))))
                  for s in slots]
        return slots, counts, np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)

    def draw_reads(self, data, most=None):
        """(slots, counts, cu_seqlens_q) of a batch whose queries are each slot's last written tokens (at
        most `most` a slot), or None when no slot holds any."""
        have = [s for s in range(len(self.mapped)) if self.written[s] > 0]
        if not have:
            return None
        slots = data.draw(st.lists(st.sampled_from(have), min_size=1, max_size=len(have), unique=True))
        counts = [data.draw(st.integers(1, min(most or self.max_seq, int(self.written[s])))) for s in slots]
        return slots, counts, np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)

    def refused_as_shared(self, slots, counts, call):
        """True, after checking that `call` is refused and changes nothing, when a batch's new rows lie in a
        chunk another slot maps too (a prefix shared past the writer's length, not announced with
        reserve_for_write): the write would show in that slot."""
        if not any(self.chunks.shared(s, int(self.written[s]), int(self.written[s]) + n) for s, n in zip(slots, counts)):
            return False
        self.refused(call, pvt.SlotError, match="reserve_for_write")
        return True
