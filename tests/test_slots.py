"""Slot caches and attention_with_kvcache (CPU) against an independent numpy reference: the caches
are mirrored in numpy arrays, attention is a plain softmax over each slot's first len + q_b rows."""
import numpy as np
import pytest
from conftest import to_np

import paddle
import paddle_vtensor as pvt

S, HQ, D = 48, 4, 8


def ref_attention(q, kc, vc, lens_before, cu, slots, causal=True, scale=None):
    """q [total, Hq, D]; kc/vc [slots, S, Hkv, D] already holding the new tokens."""
    hkv = kc.shape[2]
    g = q.shape[1] // hkv
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    out = np.zeros_like(q, dtype=np.float64)
    for b, s in enumerate(slots):
        lo, hi = cu[b], cu[b + 1]
        n = lens_before[s] + (hi - lo)
        for t in range(hi - lo):
            for h in range(q.shape[1]):
                k = kc[s, :n, h // g].astype(np.float64)
                v = vc[s, :n, h // g].astype(np.float64)
                x = k @ q[lo + t, h].astype(np.float64) * scale
                if causal:
                    x[lens_before[s] + t + 1:] = -np.inf
                w = np.exp(x - x.max())
                out[lo + t, h] = (w / w.sum()) @ v
    return out


class Mirror:
    """A pair of one-layer slot caches and their numpy copy."""

    def __init__(self, num_slots, hkv, dtype="float32", chunk_bytes=4096):
        self.k = pvt.slot_cache(num_slots, S, hkv, D, dtype=dtype, chunk_bytes=chunk_bytes)
        self.v = pvt.slot_cache(num_slots, S, hkv, D, dtype=dtype, chunk_bytes=chunk_bytes)
        self.kn = np.zeros([num_slots, S, hkv, D], np.float32)
        self.vn = np.zeros_like(self.kn)
        self.lens = np.zeros(num_slots, np.int32)
        self.hkv, self.dtype = hkv, dtype
        self.rng = np.random.default_rng(0)

    def step(self, counts, slots, causal=True):
        """One attention_with_kvcache call writing counts[b] new tokens into slots[b]; returns (got, want)."""
        total = int(sum(counts))
        cu = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        q = self.rng.standard_normal([total, HQ, D]).astype(np.float32)
        kn = self.rng.standard_normal([total, self.hkv, D]).astype(np.float32)
        vn = self.rng.standard_normal([total, self.hkv, D]).astype(np.float32)
        cast = lambda a: paddle.to_tensor(a).astype(self.dtype)
        q_t, kn_t, vn_t = cast(q), cast(kn), cast(vn)
        q, kn, vn = to_np(q_t), to_np(kn_t), to_np(vn_t)  # the values the op sees, rounded to dtype
        for b, s in enumerate(slots):
            for c in (self.k, self.v):
                pvt.reserve_slot(c, s, self.lens[s] + counts[b])
        got = pvt.attention_with_kvcache(q_t, self.k, self.v, paddle.to_tensor(self.lens), k_new=kn_t, v_new=vn_t,
                                         cu_seqlens_q=paddle.to_tensor(cu), slot_ids=paddle.to_tensor(np.int32(slots)),
                                         causal=causal)
        before = self.lens.copy()
        for b, s in enumerate(slots):
            n = counts[b]
            self.kn[s, before[s]:before[s] + n] = kn[cu[b]:cu[b + 1]]
            self.vn[s, before[s]:before[s] + n] = vn[cu[b]:cu[b + 1]]
        want = ref_attention(q, self.kn, self.vn, before, cu, slots, causal)
        for b, s in enumerate(slots):
            self.lens[s] += counts[b]
        return to_np(got), want

    def check_cache(self):
        for s in range(len(self.lens)):
            n = int(self.lens[s])
            np.testing.assert_array_equal(to_np(pvt.read_slot(self.k, s, n)), self.kn[s, :n])
            np.testing.assert_array_equal(to_np(pvt.read_slot(self.v, s, n)), self.vn[s, :n])


TOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 2e-2}


@pytest.mark.parametrize("hkv", [1, 2, 4], ids=["mqa", "gqa", "mha"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_varlen_steps_match_numpy(hkv, dtype):
    m = Mirror(6, hkv, dtype)
    # prefill of different lengths (slot 4 stays empty, slot 5 gets 1 token), then the issue's [1, 1, 3, 1]
    # mix with slot 2 taking a new 3-token prompt, slot ids out of order, then a slot filled to max_seq_len.
    for counts, slots in (([5, 9, 1, 20], [0, 1, 5, 3]), ([1, 1, 3, 1], [1, 0, 2, 3]),
                          ([S - 21], [3]), ([1, 2], [5, 0])):
        got, want = m.step(counts, slots)
        np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])
    assert m.lens[3] == S  # filled to max_seq_len
    m.check_cache()


def test_non_causal_matches_numpy():
    m = Mirror(3, 2)
    m.step([4, 2], [0, 2])
    got, want = m.step([3, 1], [2, 0], causal=False)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_batched_q_default_slots_and_no_new():
    """q [n, Tq, Hq, D] without cu_seqlens; then the same query again without k_new, whose K/V are
    now in the cache (cache_seqlens then counts them)."""
    m = Mirror(3, 2)
    m.step([3, 5, 2], [0, 1, 2])
    rng = np.random.default_rng(5)
    q = rng.standard_normal([3, 2, HQ, D]).astype(np.float32)
    kn = rng.standard_normal([3, 2, 2, D]).astype(np.float32)
    vn = rng.standard_normal([3, 2, 2, D]).astype(np.float32)
    for s in range(3):
        for c in (m.k, m.v):
            pvt.reserve_slot(c, s, m.lens[s] + 2)
    got = pvt.attention_with_kvcache(paddle.to_tensor(q), m.k, m.v, paddle.to_tensor(m.lens), k_new=paddle.to_tensor(kn),
                                     v_new=paddle.to_tensor(vn))
    before = m.lens.copy()
    for s in range(3):
        m.kn[s, before[s]:before[s] + 2] = kn[s]
        m.vn[s, before[s]:before[s] + 2] = vn[s]
    cu = np.arange(4) * 2
    want = ref_attention(q.reshape([6, HQ, D]), m.kn, m.vn, before, cu, [0, 1, 2])
    np.testing.assert_allclose(got.numpy().reshape([6, HQ, D]), want, rtol=1e-5, atol=1e-5)
    m.lens += 2
    again = pvt.attention_with_kvcache(paddle.to_tensor(q), m.k, m.v, paddle.to_tensor(m.lens))
    np.testing.assert_allclose(again.numpy(), got.numpy(), rtol=1e-6, atol=1e-6)
    m.check_cache()


def test_model_wide_cache_layer_views():
    """SlotKVCache: layer l's K/V written and read through cache.k(l)/v(l), other layers untouched."""
    L, hkv = 3, 2
    cache = pvt.slot_kv_cache(L, 4, S, hkv, D, chunk_bytes=4096)
    rng = np.random.default_rng(1)
    kn_all = np.zeros([4, S, L, 2, hkv, D], np.float32)
    lens = np.zeros(4, np.int32)
    for counts, slots in (([4, 7], [1, 3]), ([1, 2], [3, 0])):
        cu = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        for b, s in enumerate(slots):
            pvt.reserve_slot(cache, s, lens[s] + counts[b])
        for layer in range(L):
            q = rng.standard_normal([cu[-1], HQ, D]).astype(np.float32)
            kn = rng.standard_normal([cu[-1], hkv, D]).astype(np.float32)
            vn = rng.standard_normal([cu[-1], hkv, D]).astype(np.float32)
            got = pvt.attention_with_kvcache(paddle.to_tensor(q), cache.k(layer), cache.v(layer), paddle.to_tensor(lens),
                                             k_new=paddle.to_tensor(kn), v_new=paddle.to_tensor(vn), cu_seqlens_q=cu,
                                             slot_ids=np.int32(slots))
            for b, s in enumerate(slots):
                kn_all[s, lens[s]:lens[s] + counts[b], layer, 0] = kn[cu[b]:cu[b + 1]]
                kn_all[s, lens[s]:lens[s] + counts[b], layer, 1] = vn[cu[b]:cu[b + 1]]
            want = ref_attention(q, kn_all[:, :, layer, 0], kn_all[:, :, layer, 1], lens, cu, slots)
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
        for b, s in enumerate(slots):
            lens[s] += counts[b]
    for s in range(4):
        np.testing.assert_array_equal(pvt.read_slot(cache, s, lens[s]).numpy(), kn_all[s, :lens[s]])
        np.testing.assert_array_equal(pvt.read_slot(cache.v(2), s, lens[s]).numpy(), kn_all[s, :lens[s], 2, 1])


def test_layout_and_nothing_mapped():
    k = pvt.slot_cache(5, 100, 3, 16)
    # Rows of 192 bytes: 100 padded so every slot starts on a chunk (virtual only): 32768 rows for
    # 2 MiB chunks, in general a multiple of chunk / gcd(chunk, 192).
    shape, strides, rows = list(k.shape), list(k.strides), pvt.sharing_info(k)["slot_rows"]
    unit = pvt.slot_info(k)["chunk_bytes"] // np.gcd(pvt.slot_info(k)["chunk_bytes"], 192)
    assert rows == -(-100 // unit) * unit and shape == [5, rows, 3, 16] and strides == [rows * 3 * 16, 3 * 16, 16, 1]
    info = pvt.slot_info(k)
    assert info["mapped_bytes"] == 0 and info["reserved_bytes"] >= 5 * 100 * 3 * 16 * 4
    assert pvt.memory_stats("cpu")["mapped_bytes"] == 0
