"""What the slot-cache state machines (test_slots_stateful.py, test_quant_stateful.py) share: numpy
attention of one sequence, a model of the physical chunks behind each slot's rows, and the draw of a
valid share_prefix."""
import numpy as np
from hypothesis import strategies as st


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
