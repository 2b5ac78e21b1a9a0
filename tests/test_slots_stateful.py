"""Issue 25 point 7: a stateful property test of the slot API against a plain numpy model of the slots.

The state machine makes a K and a V slot cache, then runs random sequences of reserve / release /
share_prefix / rollback (reserve_for_write) / attention with and without k_new / read_slot and bad calls
of every kind (the host decisions and their bad calls live in slot_model.py, shared with the 8-bit
machine of test_quant_stateful.py). The model holds what each
slot's rows must contain, how many tokens each slot has mapped (the largest reserve since its last
release) and so the mapped bytes (each slot is two whole chunks here: ceil(tokens * row / chunk)
chunks). After every step the caches must match it (slot_info, memory_stats, read_slot), every
attention output must match a float64 numpy attention, and every bad call must raise its class and
leave both caches byte-identical (every slot's mapped rows read before and after).

CI runs a fixed, derandomized set of examples; ``PADDLE_VTENSOR_HYPOTHESIS_EXAMPLES=N`` runs N random
ones (``--hypothesis-seed=S`` to repeat one).
"""
import numpy as np
import pytest

import paddle
import paddle_vtensor as pvt
from paddle_vtensor import _env

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import initialize, invariant, rule  # noqa: E402
from slot_model import SlotChunks, SlotStateMachine, reference  # noqa: E402

SLOTS, S, HKV, HQ, D = 3, 64, 2, 4, 16
CHUNK = 4096
ROW = HKV * D * 4  # bytes of one token row (float32): 128, so a slot is 8192 bytes = two chunks


class SlotMachine(SlotStateMachine):  # reserve, release, share, rollback and their bad calls: slot_model.py
    @initialize(seed=st.integers(0, 2**31 - 1))
    def create(self, seed):
        self.rng = np.random.default_rng(seed)
        self.k = pvt.slot_cache(SLOTS, S, HKV, D, chunk_bytes=CHUNK)
        self.v = pvt.slot_cache(SLOTS, S, HKV, D, chunk_bytes=CHUNK)
        self.rows = {c: np.zeros([SLOTS, S, HKV, D], np.float32) for c in "kv"}  # what each slot holds
        self.written = np.zeros(SLOTS, np.int64)  # rows of each slot written (the host's length)
        self.mapped = np.zeros(SLOTS, np.int64)   # tokens mapped: the largest reserve since the last release
        self.baseline = pvt.memory_stats("cpu")["mapped_bytes"]  # anything else of this process
        self.baseline_shared = pvt.memory_stats("cpu")["shared_bytes"]
        self.chunks = SlotChunks(SLOTS, CHUNK // ROW)  # which physical chunk backs which rows
        self.owners, self.pair, self.max_seq = [self.k, self.v], (self.k, self.v), S

    # ---- helpers

    def caches(self):
        return (("k", self.k), ("v", self.v))

    def snapshot(self):
        """Every mapped row of every slot of both caches, as bytes (what a bad call must not change)."""
        return [pvt.read_slot(c, s, int(self.mapped[s])).numpy().tobytes() for _, c in self.caches()
                for s in range(SLOTS)]

    def refused(self, call, cls, match=None):
        before = self.snapshot(), pvt.memory_stats("cpu")["mapped_bytes"]
        with pytest.raises(cls, match=match):
            call()
        assert (self.snapshot(), pvt.memory_stats("cpu")["mapped_bytes"]) == before

    def randn(self, *shape):
        return self.rng.standard_normal(shape).astype(np.float32)

    # ---- attention

    @rule(data=st.data())
    def attend_with_new_tokens(self, data):
        drawn = self.draw_writes(data)
        if drawn is None:
            return
        slots, counts, cu = drawn
        causal = data.draw(st.booleans())
        q, kn, vn = self.randn(cu[-1], HQ, D), self.randn(cu[-1], HKV, D), self.randn(cu[-1], HKV, D)
        call = lambda: pvt.attention_with_kvcache(paddle.to_tensor(q), self.k, self.v, self.written.astype(np.int32),  # noqa: E731
                                                  k_new=paddle.to_tensor(kn), v_new=paddle.to_tensor(vn),
                                                  cu_seqlens_q=cu, slot_ids=np.int32(slots), causal=causal)
        if self.refused_as_shared(slots, counts, call):
            return
        out = call().numpy()
        for b, (s, n) in enumerate(zip(slots, counts)):
            start = int(self.written[s])
            self.rows["k"][s, start:start + n] = kn[cu[b]:cu[b + 1]]
            self.rows["v"][s, start:start + n] = vn[cu[b]:cu[b + 1]]
            self.written[s] += n
            want = reference(q[cu[b]:cu[b + 1]], self.rows["k"][s, :start + n], self.rows["v"][s, :start + n], start,
                             causal)
            np.testing.assert_allclose(out[cu[b]:cu[b + 1]], want, rtol=2e-4, atol=2e-5)

    @rule(data=st.data())
    def attend_on_cached_tokens(self, data):
        """No k_new: each sequence's queries are the last q_b of its slot's written tokens."""
        drawn = self.draw_reads(data)
        if drawn is None:
            return
        slots, counts, cu = drawn
        q = self.randn(cu[-1], HQ, D)
        out = pvt.attention_with_kvcache(paddle.to_tensor(q), self.k, self.v, self.written.astype(np.int32),
                                         cu_seqlens_q=cu, slot_ids=np.int32(slots)).numpy()
        for b, (s, n) in enumerate(zip(slots, counts)):
            length = int(self.written[s])
            want = reference(q[cu[b]:cu[b + 1]], self.rows["k"][s, :length], self.rows["v"][s, :length], length - n)
            np.testing.assert_allclose(out[cu[b]:cu[b + 1]], want, rtol=2e-4, atol=2e-5)

    @rule(slot=st.integers(0, SLOTS - 1), data=st.data())
    def read(self, slot, data):
        tokens = data.draw(st.integers(0, int(self.mapped[slot])))
        for name, c in self.caches():
            got = pvt.read_slot(c, slot, tokens).numpy()
            upto = min(tokens, int(self.written[slot]))
            np.testing.assert_array_equal(got[:upto], self.rows[name][slot, :upto])

    # ---- bad calls: each raises its class, nothing changes

    @rule(bad=st.sampled_from([2.5, True, "1", None, np.float64(1.0)]))
    def reserve_not_an_int(self, bad):
        self.refused(lambda: pvt.reserve_slot(self.k, 0, bad), TypeError)

    @rule(bad=st.sampled_from([SLOTS, -1, 2**64 + 1]))
    def release_bad_slot(self, bad):
        self.refused(lambda: pvt.release_slot(self.v, bad), pvt.SlotError)

    @rule(view=st.sampled_from(["reshape", "slice", "flat"]))
    def reserve_on_a_view(self, view):
        rows = self.k.shape[1]  # S padded to whole chunks (equal here: a slot is two chunks)
        make = {"reshape": lambda c: c.reshape([SLOTS * 2, rows // 2, HKV, D]), "slice": lambda c: c[1:],
                "flat": lambda c: c.reshape([SLOTS, rows * HKV * D])}[view]
        self.refused(lambda: pvt.reserve_slot(make(self.k), 0, 1), pvt.SlotError)

    @rule(data=st.data(), kind=st.sampled_from(["unreserved", "slot_range", "slot_wraps", "duplicate", "float_ids",
                                                "lens_wrap", "causal", "max_seqlen_q", "scale", "view", "grad",
                                                "no_new_too_few"]))
    def attend_bad(self, data, kind):
        slot = data.draw(st.integers(0, SLOTS - 1))
        n = 1 + int(self.mapped[slot] - self.written[slot]) if kind == "unreserved" else 1
        lens = self.written.astype(np.int32)
        args = dict(cu_seqlens_q=np.int32([0, n]), slot_ids=np.int32([slot]))
        q, kn = paddle.to_tensor(self.randn(n, HQ, D)), paddle.to_tensor(self.randn(n, HKV, D))
        new = dict(k_new=kn, v_new=kn)
        k, v = self.k, self.v
        cls = pvt.SlotError
        if kind == "unreserved":  # one row past what is mapped: refused before the write
            pass
        elif kind == "slot_range":
            args["slot_ids"] = np.int32([SLOTS])
        elif kind == "slot_wraps":  # int64 ids past int32: were cast and ran on another slot
            args["slot_ids"] = np.int64([slot + 2**32])
        elif kind == "duplicate":
            args = dict(cu_seqlens_q=np.int32([0, 1, 2]), slot_ids=np.int32([slot, slot]))
            q, kn = paddle.to_tensor(self.randn(2, HQ, D)), paddle.to_tensor(self.randn(2, HKV, D))
            new = dict(k_new=kn, v_new=kn)
        elif kind == "float_ids":
            args["slot_ids"], cls = [float(slot)], TypeError
        elif kind == "lens_wrap":
            lens = lens.astype(np.int64)
            lens[slot] += 2**32
        elif kind == "causal":
            args["causal"], cls = "no", TypeError
        elif kind == "max_seqlen_q":
            args["max_seqlen_q"] = 10**20
        elif kind == "scale":
            args["softmax_scale"] = 1e39
        elif kind == "view":
            rows = self.k.shape[1]
            k, v = self.k.reshape([SLOTS * 2, rows // 2, HKV, D]), self.v.reshape([SLOTS * 2, rows // 2, HKV, D])
        elif kind == "grad":
            q.stop_gradient, cls = False, ValueError
        elif kind == "no_new_too_few":  # more queries than the slot holds tokens
            new = {}
            n = int(self.written[slot]) + 1
            q = paddle.to_tensor(self.randn(n, HQ, D))
            args["cu_seqlens_q"] = np.int32([0, n])
        self.refused(lambda: pvt.attention_with_kvcache(q, k, v, lens, **new, **args), cls)

    # ---- the model and the caches agree

    @invariant()
    def mapped_as_modelled(self):
        if not hasattr(self, "k"):
            return
        physical, aliases = (n * CHUNK for n in self.chunks.physical())
        for _, c in self.caches():
            info = pvt.slot_info(c)
            assert info["mapped_tokens"].tolist() == self.mapped.tolist()
            assert info["mapped_bytes"] == physical
        stats = pvt.memory_stats("cpu")
        assert stats["mapped_bytes"] - self.baseline == 2 * physical
        assert stats["shared_bytes"] - self.baseline_shared == 2 * aliases

    def teardown(self):
        for name in ("k", "v", "owners", "pair"):
            self.__dict__.pop(name, None)  # the caches go now, not at some gc


_examples = _env.hypothesis_examples()
SlotMachine.TestCase.settings = settings(
    max_examples=_examples or 300, stateful_step_count=40, derandomize=_examples is None, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much], database=None)
TestSlotMachine = SlotMachine.TestCase
