"""Issue 28 under a stateful property test: 8-bit slot caches (int8, float8_e4m3fn) against a numpy model.

The state machine makes a K and a V slot cache of one 8-bit kind (or one model-wide slot_kv_cache of
two layers, attending at one), then runs random sequences of
reserve / release / share_prefix / rollback (reserve_for_write) / attention with k_new / attention on
cached tokens, and bad calls of every kind, among them a write into rows another slot maps too (a prefix
shared past the writer's length, not announced with reserve_for_write): refused, since it would change
the other slot's rows. The model holds the float value of every token
written to each slot; the codes and scales it expects come from tests/quant_reference.py (an encoder
written apart from the C++ one). After every step the codes of every written row must match bit for
bit, and so must an int8 cache's per-token scales, which live in a scale slot cache mapped exactly as
the codes (shared and copied with them). Every attention output must match float64 numpy attention on
the dequantized model. Every bad call must raise its class and leave codes, scales and mapped tokens of
both caches as they were.

CI runs a fixed, derandomized set of examples; ``PADDLE_VTENSOR_HYPOTHESIS_EXAMPLES=N`` runs N random
ones (``--hypothesis-seed=S`` to repeat one).
"""
import numpy as np
import pytest

import paddle
import paddle_vtensor as pvt
from paddle_vtensor import _env
from quant_reference import dequantize, quantize

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import initialize, invariant, rule  # noqa: E402
from slot_model import SlotChunks, SlotStateMachine, reference  # noqa: E402

SLOTS, S, HKV, HQ, D = 3, 160, 2, 4, 32
LAYERS, LAYER = 2, 1  # the model-wide cache (slot_kv_cache): its layer 1 is attended, layer 0 only held
CHUNK = 4096  # one-layer codes: 64 bytes a row, so a slot spans 3 chunks (64 rows each: sharing aliases whole
#               ones and copies the one a prefix ends in); model-wide 256 bytes a row (16 a chunk); int8
#               scales 8 or 32 bytes a row
KINDS = ["int8", "float8_e4m3fn"]
IN_DTYPES = ["float32", "float16", "bfloat16"]


def as_bits(codes: paddle.Tensor) -> np.ndarray:
    """Codes as integers: fp8 through a uint8 view (bit patterns, so NaN codes compare too)."""
    return (codes.view(paddle.uint8) if codes.dtype == paddle.float8_e4m3fn else codes).numpy()


class QuantSlotMachine(SlotStateMachine):  # reserve, release, share, rollback and their bad calls: slot_model.py
    @initialize(kind=st.sampled_from(KINDS), model_wide=st.booleans(), seed=st.integers(0, 2**31 - 1))
    def create(self, kind, model_wide, seed):
        self.kind, self.model_wide, self.rng = kind, model_wide, np.random.default_rng(seed)
        self.fp8 = {c: None if kind == "int8" else self.rng.uniform(0.002, 0.02, HKV).astype(np.float32) for c in "kv"}
        if model_wide:  # one cache of every layer's K and V a token row; the ops see layer LAYER
            scales = {} if kind == "int8" else {
                f"{c}_scale": paddle.to_tensor(np.stack([self.fp8[c] * 3, self.fp8[c]])) for c in "kv"}
            self.cache = pvt.slot_kv_cache(LAYERS, SLOTS, S, HKV, D, chunk_bytes=CHUNK, cache_dtype=kind, **scales)
            self.k, self.v = self.cache.k(LAYER), self.cache.v(LAYER)
            self.owners, self.pair, row = [self.cache], self.cache, LAYERS * 2 * HKV * D
        else:
            self.k, self.v = (pvt.slot_cache(SLOTS, S, HKV, D, chunk_bytes=CHUNK, cache_dtype=kind,
                                             scale=None if kind == "int8" else paddle.to_tensor(self.fp8[c]))
                              for c in "kv")
            self.owners, self.pair, row = [self.k, self.v], (self.k, self.v), HKV * D
        self.rows = {c: np.zeros([SLOTS, S, HKV, D], np.float32) for c in "kv"}  # float values written
        self.written = np.zeros(SLOTS, np.int64)  # rows of each slot written (the host's length)
        self.mapped = np.zeros(SLOTS, np.int64)  # tokens mapped: the largest reserve since the last release
        self.chunks = SlotChunks(SLOTS, CHUNK // row)  # which physical code chunk backs which rows
        self.max_seq = S

    # ---- helpers

    def caches(self):
        return (("k", self.k), ("v", self.v))

    @staticmethod
    def scales_of(owner):
        """An int8 cache's scale slot cache (of a one-layer cache or a SlotKVCache)."""
        return pvt.cache_scale(owner.storage if isinstance(owner, pvt.SlotKVCache) else owner)

    def scale_rows(self, kvi, slot, n):
        """The int8 scales [n, HKV] of K (kvi 0) or V (1) at the attended layer."""
        if self.model_wide:
            return pvt.read_slot(self.scales_of(self.cache), slot, n).numpy()[:, LAYER, kvi, :, 0]
        return pvt.read_slot(self.scales_of(self.owners[kvi]), slot, n).numpy()[..., 0]

    def snapshot(self):
        """Codes and scales of every mapped row of the caches (every layer), and the mapped tokens (what a
        bad call must not change)."""
        snap = []
        for c in self.owners:
            for s in range(SLOTS):
                snap.append(as_bits(pvt.read_slot(c, s, int(self.mapped[s]))).tobytes())
                if self.kind == "int8":
                    snap.append(pvt.read_slot(self.scales_of(c), s, int(self.mapped[s])).numpy().tobytes())
            snap.append(pvt.slot_info(c)["mapped_tokens"].tobytes())
        return snap

    def refused(self, call, cls, match=None):
        before = self.snapshot()
        with pytest.raises(cls, match=match):
            call()
        assert self.snapshot() == before

    def tokens(self, n, data):
        """n new tokens [n, HKV, D] in a drawn dtype, sometimes with an outlier (fp8 saturates at
        448 x scale; an int8 token's scale follows its amax); returned with their float32 values."""
        dtype = data.draw(st.sampled_from(IN_DTYPES))
        x = self.rng.standard_normal([n, HKV, D]).astype(np.float32)
        if data.draw(st.booleans()):
            x[self.rng.integers(n), self.rng.integers(HKV), self.rng.integers(D)] = 40.0 * self.rng.choice([-1, 1])
        t = paddle.to_tensor(x).astype(dtype)
        return t, t.astype("float32").numpy()

    def dequantized(self, c, slot, length):
        """The model's rows [0, length) of a slot as the cache must hold them, in float64."""
        x = self.rows[c][slot, :length][None]
        return dequantize(*quantize(x, self.kind, self.fp8[c]), self.kind)[0]

    # ---- attention

    @rule(data=st.data())
    def attend_with_new_tokens(self, data):
        drawn = self.draw_writes(data, most=24)
        if drawn is None:
            return
        slots, counts, cu = drawn
        causal = data.draw(st.booleans())
        q = self.rng.standard_normal([cu[-1], HQ, D]).astype(np.float32)
        (kn, kf), (vn, vf) = self.tokens(int(cu[-1]), data), self.tokens(int(cu[-1]), data)
        call = lambda: pvt.attention_with_kvcache(paddle.to_tensor(q), self.k, self.v, self.written.astype(np.int32),  # noqa: E731
                                                  k_new=kn, v_new=vn, cu_seqlens_q=cu, slot_ids=np.int32(slots),
                                                  causal=causal)
        if self.refused_as_shared(slots, counts, call):
            return
        out = call().numpy()
        for b, (s, n) in enumerate(zip(slots, counts)):
            start = int(self.written[s])
            self.rows["k"][s, start:start + n] = kf[cu[b]:cu[b + 1]]
            self.rows["v"][s, start:start + n] = vf[cu[b]:cu[b + 1]]
            self.written[s] += n
            want = reference(q[cu[b]:cu[b + 1]], self.dequantized("k", s, start + n),
                             self.dequantized("v", s, start + n), start, causal)
            np.testing.assert_allclose(out[cu[b]:cu[b + 1]], want, rtol=2e-4, atol=2e-5)

    @rule(data=st.data())
    def attend_on_cached_tokens(self, data):
        """No k_new: each sequence's queries are the last q_b of its slot's written tokens."""
        drawn = self.draw_reads(data, most=8)
        if drawn is None:
            return
        slots, counts, cu = drawn
        q = self.rng.standard_normal([cu[-1], HQ, D]).astype(np.float32)
        out = pvt.attention_with_kvcache(paddle.to_tensor(q), self.k, self.v, self.written.astype(np.int32),
                                         cu_seqlens_q=cu, slot_ids=np.int32(slots)).numpy()
        for b, (s, n) in enumerate(zip(slots, counts)):
            length = int(self.written[s])
            want = reference(q[cu[b]:cu[b + 1]], self.dequantized("k", s, length), self.dequantized("v", s, length),
                             length - n, True)
            np.testing.assert_allclose(out[cu[b]:cu[b + 1]], want, rtol=2e-4, atol=2e-5)

    # ---- bad calls: each raises its class, nothing changes

    @rule(data=st.data(), bad=st.sampled_from(["unreserved", "slot_range", "slot_wraps", "duplicate", "int_tokens",
                                               "heads", "head_dim", "v_missing", "slice", "float_cache",
                                               "other_kind", "no_new_too_few"]))
    def attend_bad(self, data, bad):
        slot = data.draw(st.integers(0, SLOTS - 1))
        n = 1 + int(self.mapped[slot] - self.written[slot]) if bad == "unreserved" else 1
        lens = self.written.astype(np.int32)
        args = dict(cu_seqlens_q=np.int32([0, n]), slot_ids=np.int32([slot]))
        q = paddle.to_tensor(self.rng.standard_normal([n, HQ, D]).astype(np.float32))
        kn = paddle.to_tensor(self.rng.standard_normal([n, HKV, D]).astype(np.float32))
        new, k, v, cls = dict(k_new=kn, v_new=kn), self.k, self.v, (pvt.SlotError, ValueError)
        if bad == "slot_range":
            args["slot_ids"] = np.int32([SLOTS])
        elif bad == "slot_wraps":  # an int64 id past int32 must not be cast onto another slot
            args["slot_ids"] = np.int64([slot + 2**32])
        elif bad == "duplicate":
            args = dict(cu_seqlens_q=np.int32([0, 1, 2]), slot_ids=np.int32([slot, slot]))
            q = paddle.concat([q, q])
            new = dict(k_new=paddle.concat([kn, kn]), v_new=paddle.concat([kn, kn]))
        elif bad == "int_tokens":  # nothing to quantize from
            new["k_new"] = kn.astype("int32")
        elif bad == "heads":
            new["v_new"] = paddle.concat([kn, kn], axis=1)
        elif bad == "head_dim":
            new["k_new"] = kn[:, :, : D // 2]
        elif bad == "v_missing":
            new = dict(k_new=kn)
        elif bad == "slice":  # a view of the codes has no scale
            k = self.cache.storage[:2] if self.model_wide else self.k[:2]
            v = self.cache.storage[:2] if self.model_wide else v
        elif bad == "float_cache":
            v = pvt.slot_cache(SLOTS, S, HKV, D, chunk_bytes=CHUNK)
        elif bad == "other_kind":
            other = "float8_e4m3fn" if self.kind == "int8" else "int8"
            v = pvt.slot_cache(SLOTS, S, HKV, D, chunk_bytes=CHUNK, cache_dtype=other,
                               scale=paddle.ones([HKV]) if other != "int8" else None)
        elif bad == "no_new_too_few":  # more queries than the slot holds tokens
            new, n = {}, int(self.written[slot]) + 1
            q = paddle.to_tensor(self.rng.standard_normal([n, HQ, D]).astype(np.float32))
            args["cu_seqlens_q"] = np.int32([0, n])
        self.refused(lambda: pvt.attention_with_kvcache(q, k, v, lens, **new, **args), cls)

    # ---- the model and the caches agree

    @invariant()
    def codes_and_scales_as_modelled(self):
        if not hasattr(self, "k"):
            return
        for owner in self.owners:
            assert pvt.slot_info(owner)["mapped_tokens"].tolist() == self.mapped.tolist()
            if self.kind == "int8":  # the scale slot cache is mapped as the codes
                assert pvt.slot_info(self.scales_of(owner))["mapped_tokens"].tolist() == self.mapped.tolist()
        for kvi, (c, cache) in enumerate(self.caches()):
            for s in range(SLOTS):
                n = int(self.written[s])
                codes, scale = quantize(self.rows[c][s, :n][None], self.kind, self.fp8[c])
                np.testing.assert_array_equal(as_bits(pvt.read_slot(cache, s, n)),
                                              codes[0].view(np.uint8) if self.kind != "int8" else codes[0])
                if self.kind == "int8":
                    np.testing.assert_array_equal(self.scale_rows(kvi, s, n), scale[0])

    def teardown(self):
        for name in ("k", "v", "cache", "owners", "pair"):
            self.__dict__.pop(name, None)  # the caches go now, not at some gc


_examples = _env.hypothesis_examples()
QuantSlotMachine.TestCase.settings = settings(
    max_examples=_examples or 200, stateful_step_count=40, derandomize=_examples is None, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much], database=None)
TestQuantSlotMachine = QuantSlotMachine.TestCase
