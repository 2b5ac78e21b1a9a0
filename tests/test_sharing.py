"""Prefix sharing between slots (share_prefix, reserve_for_write) on the CPU, against numpy mirrors of
every slot: the shared slot reads the source's rows, appends stay private to each slot, a write
after a rollback into the shared part copies that chunk first, releases in either order leave the
other slot intact, and memory_stats counts each physical chunk once (shared_bytes the aliases)."""
import numpy as np
import pytest
from conftest import to_np
from test_slots import HQ, ref_attention

import paddle
import paddle_vtensor as pvt
from paddle_vtensor.errors import SlotError

PAGE = 4096
S, HKV, D = 100, 2, 8  # rows of 64 bytes (float32): 64 per page
ROW = HKV * D * 4


class Shared:
    """One-layer K and V slot caches, filled by attention_with_kvcache, and their numpy mirror."""

    def __init__(self, num_slots=4, seed=0):
        self.k = pvt.slot_cache(num_slots, S, HKV, D, chunk_bytes=PAGE)
        self.v = pvt.slot_cache(num_slots, S, HKV, D, chunk_bytes=PAGE)
        self.kn = np.zeros([num_slots, S, HKV, D], np.float32)
        self.vn = np.zeros_like(self.kn)
        self.lens = np.zeros(num_slots, np.int32)
        self.rng = np.random.default_rng(seed)

    def write(self, slot, count, kn=None, vn=None, write_from=None):
        """Appends `count` tokens at lens[slot] through the op; returns (got, want) attention."""
        start = int(self.lens[slot])
        if write_from is not None:
            pvt.reserve_for_write((self.k, self.v), slot, start + count, write_from)
        else:
            for c in (self.k, self.v):
                pvt.reserve_slot(c, slot, start + count)
        q = self.rng.standard_normal([count, HQ, D]).astype(np.float32)
        kn = self.rng.standard_normal([count, HKV, D]).astype(np.float32) if kn is None else kn
        vn = self.rng.standard_normal([count, HKV, D]).astype(np.float32) if vn is None else vn
        got = pvt.attention_with_kvcache(paddle.to_tensor(q), self.k, self.v, paddle.to_tensor(self.lens),
                                         k_new=paddle.to_tensor(kn), v_new=paddle.to_tensor(vn),
                                         cu_seqlens_q=np.int32([0, count]), slot_ids=np.int32([slot]))
        self.kn[slot, start:start + count] = kn
        self.vn[slot, start:start + count] = vn
        want = ref_attention(q, self.kn, self.vn, self.lens, [0, count], [slot])
        self.lens[slot] += count
        return to_np(got), want

    def share(self, src, dst, tokens):
        pvt.share_prefix((self.k, self.v), src, dst, tokens)
        self.kn[dst], self.vn[dst] = self.kn[src], self.vn[src]
        self.lens[dst] = tokens

    def check(self):
        for s, n in enumerate(self.lens):
            np.testing.assert_array_equal(to_np(pvt.read_slot(self.k, s, int(n))), self.kn[s, :n])
            np.testing.assert_array_equal(to_np(pvt.read_slot(self.v, s, int(n))), self.vn[s, :n])


def chunks(lo_row, hi_row, slot, info):
    """Chunk indices of rows [lo_row, hi_row) of `slot` in a cache described by sharing_info."""
    base = slot * info["slot_rows"] * ROW
    return set(range((base + lo_row * ROW) // PAGE, (base + hi_row * ROW - 1) // PAGE + 1)) if hi_row > lo_row else set()


def test_aligned_layout():
    k = pvt.slot_cache(3, S, HKV, D, chunk_bytes=PAGE)
    info = pvt.sharing_info(k)
    assert info["max_seq_len"] == S and info["align_slots"]
    assert info["slot_rows"] == 128 and k.shape == [3, 128, HKV, D]  # 100 rows padded to 2 pages
    assert pvt.slot_info(k)["reserved_bytes"] == 3 * 128 * ROW
    pvt.reserve_slot(k, 1, 1)
    assert pvt.slot_info(k)["mapped_bytes"] == PAGE  # one row maps one page of its own slot
    with pytest.raises(pvt.ReservationFullError, match="past max_seq_len=100"):
        pvt.reserve_slot(k, 1, S + 1)
    m = pvt.slot_kv_cache(2, 2, 10, 1, 8, chunk_bytes=PAGE)  # rows of 2*2*8*4 = 128 bytes
    assert m.storage.shape[1] * 128 % PAGE == 0 and pvt.sharing_info(m)["max_seq_len"] == 10


def test_share_reads_appends_attention_and_stats():
    c = Shared()
    base = pvt.memory_stats("cpu")
    c.write(0, 90)
    T = 70  # one whole page (64 rows) aliased, rows 64..69 copied
    c.share(0, 2, T)
    c.check()
    info = pvt.sharing_info(c.k)
    # Each physical chunk once: slot 0's 2 pages, slot 2's copied page; per cache, K and V alike.
    unique = len(chunks(0, 90, 0, info)) + len(chunks(64, T, 2, info))
    aliases = len(chunks(0, 64, 2, info))
    stats = pvt.memory_stats("cpu")
    assert stats["mapped_bytes"] - base["mapped_bytes"] == 2 * unique * PAGE
    assert stats["shared_bytes"] - base["shared_bytes"] == 2 * aliases * PAGE
    assert info["mapped_bytes"] == unique * PAGE and info["shared_bytes"] == aliases * PAGE
    assert pvt.slot_info(c.k)["mapped_bytes"] == unique * PAGE
    # dst appends past the prefix; attention over dst equals the reference and an unshared copy.
    kn = c.rng.standard_normal([5, HKV, D]).astype(np.float32)
    got, want = c.write(2, 5, kn=kn, vn=kn)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    c.write(3, T, kn=c.kn[0, :T].copy(), vn=c.vn[0, :T].copy())  # slot 3: the same prefix, written
    c.rng = np.random.default_rng(7)
    got_copy, _ = c.write(3, 5, kn=kn, vn=kn)
    c.lens[2] -= 5  # rewrite the same 5 tokens over slot 2 with the same query
    c.rng = np.random.default_rng(7)
    got_shared, _ = c.write(2, 5, kn=kn, vn=kn)
    np.testing.assert_array_equal(got_shared, got_copy)
    c.write(0, 7)  # src appends past 90 too
    c.check()  # neither append changed the other slot


def test_copy_on_write_after_rollback():
    c = Shared()
    c.write(0, 90)
    c.share(0, 1, 80)
    shared = pvt.sharing_info(c.k)["shared_bytes"]
    assert shared == PAGE
    c.lens[0] = 30  # speculative rollback of slot 0 into its first (shared) page
    c.write(0, 4, write_from=30)  # reserve_for_write copies that page before the write
    c.check()  # slot 1 still reads the old rows 30..33
    assert pvt.sharing_info(c.k)["shared_bytes"] == 0
    c.lens[1] = 10  # slot 1 rolls back too: its page is its own now, nothing to copy
    c.write(1, 3, write_from=10)
    c.check()


def test_a_write_into_shared_rows_is_refused_until_announced():
    """A rollback below the shared prefix's end written without reserve_for_write would change the other
    slot's rows: refused, nothing changed; announced, the page is copied first and the write goes in."""
    c = Shared()
    c.write(0, 90)
    c.share(0, 1, 80)
    c.lens[0] = 30  # slot 0 rolls back into its first page, which slot 1 maps too
    before = snapshot(c)
    with pytest.raises(SlotError, match=r"row 30 lies in a chunk another slot maps too.*reserve_for_write"):
        c.write(0, 4)
    assert snapshot(c) == before
    c.check()
    c.write(0, 4, write_from=30)
    c.check()  # slot 1 still reads the old rows 30..33
    c.lens[1] = 64  # slot 1's second page is its own copy (the prefix ended inside it): no announcement needed
    c.write(1, 3)
    c.check()


def test_releases_in_either_order():
    for first, second in ((0, 1), (1, 0)):
        c = Shared()
        base = pvt.memory_stats("cpu")
        c.write(0, 90)
        c.share(0, 1, 64)
        c.write(1, 3)
        for s in (first, second):
            pvt.release_slot(c.k, s)
            pvt.release_slot(c.v, s)
            c.lens[s] = 0
            c.check()
        stats = pvt.memory_stats("cpu")
        assert stats["mapped_bytes"] == base["mapped_bytes"] and stats["shared_bytes"] == base["shared_bytes"]


def test_model_wide_cache():
    m = pvt.slot_kv_cache(2, 3, 40, 1, 8, chunk_bytes=PAGE)  # 128-byte rows: 32 per page
    pvt.reserve_slot(m, 0, 40)
    rng = np.random.default_rng(1)
    rows = rng.standard_normal([40, 2, 2, 1, 8]).astype(np.float32)  # [tokens, L, 2, Hkv, D]
    for layer in range(2):  # written by the op, layer by layer
        pvt.attention_with_kvcache(paddle.to_tensor(rng.standard_normal([40, 2, 8]).astype(np.float32)), m.k(layer),
                                   m.v(layer), paddle.zeros([3], "int32"), k_new=paddle.to_tensor(rows[:, layer, 0]),
                                   v_new=paddle.to_tensor(rows[:, layer, 1]), cu_seqlens_q=np.int32([0, 40]),
                                   slot_ids=np.int32([0]))
    pvt.share_prefix(m, 0, 2, 35)
    np.testing.assert_array_equal(pvt.read_slot(m, 2, 35).numpy(), rows[:35])
    np.testing.assert_array_equal(pvt.read_slot(m.v(1), 2, 35).numpy(), rows[:35, 1, 1])
    assert pvt.sharing_info(m)["shared_bytes"] == PAGE


def snapshot(c):
    info_k, info_v = pvt.sharing_info(c.k), pvt.sharing_info(c.v)
    stats = pvt.memory_stats("cpu")
    rows = [(to_np(pvt.read_slot(x, s, int(n))).tobytes()) for x in (c.k, c.v)
            for s, n in enumerate(pvt.slot_info(x)["mapped_tokens"])]
    return (info_k, info_v, stats["mapped_bytes"], stats["shared_bytes"], list(pvt.slot_info(c.k)["mapped_tokens"]),
            list(pvt.slot_info(c.v)["mapped_tokens"]), rows)


BAD = [
    (lambda c: pvt.share_prefix((c.k, c.v), 1, 2, 1), SlotError, "slot 1 has 0 tokens mapped"),  # empty
    (lambda c: pvt.share_prefix((c.k, c.v), 3, 2, 1), SlotError, "slot 3 has 0 tokens mapped"),  # released
    (lambda c: pvt.share_prefix((c.k, c.v), 0, 2, 21), SlotError, "cannot share 21"),  # past src rows
    (lambda c: pvt.share_prefix((c.k, c.v), 0, 0, 5), SlotError, "with itself"),
    (lambda c: pvt.share_prefix((c.k, c.v), 0, 4, 5), SlotError, "out of range"),
    (lambda c: pvt.share_prefix((c.k, c.v), -1, 2, 5), SlotError, "out of range"),
    (lambda c: pvt.share_prefix((c.k, c.v), 0, 2, 0), SlotError, "at least 1"),
    (lambda c: pvt.share_prefix((c.k, c.v), 0, 1, 5), SlotError, "release it before"),  # dst busy (v only)
    (lambda c: pvt.share_prefix((c.k, c.v), 0, 2, True), TypeError, "tokens must be an int"),
    (lambda c: pvt.share_prefix((c.k, c.v), 0, 2.0, 5), TypeError, "dst_slot must be an int"),
    (lambda c: pvt.share_prefix((c.k, c.v), 0, 2, 2**70), pvt.SlotError, "does not fit in 64 bits"),
    (lambda c: pvt.share_prefix(c.k, 0, 2, "5"), TypeError, "must be an int"),
    (lambda c: pvt.share_prefix((c.k, c.k), 0, 2, 5), ValueError, "one cache twice"),
    (lambda c: pvt.share_prefix((c.k, c.other), 0, 2, 5), ValueError, "k has 4 slots but v has 5"),
    (lambda c: pvt.share_prefix(paddle.zeros([4, 100, 2, 8]), 0, 2, 5), SlotError, "not a slot cache"),
    (lambda c: pvt.share_prefix(c.m.k(0), 0, 1, 5), TypeError, "not one layer's view"),
    (lambda c: pvt.share_prefix([c.k], 0, 2, 5), TypeError, "a pair must be"),
    (lambda c: pvt.reserve_for_write((c.k, c.v), 0, 10, -1), SlotError, "write_from must be >= 0"),
    (lambda c: pvt.reserve_for_write((c.k, c.v), 9, 10, 0), SlotError, "out of range"),
    (lambda c: pvt.reserve_for_write(c.k, 0, 10, False), TypeError, "write_from must be an int"),
]


@pytest.mark.parametrize("call,exc,text", BAD, ids=[b[2] for b in BAD])
def test_bad_input_changes_nothing(call, exc, text):
    c = Shared()
    c.write(0, 20)
    pvt.reserve_slot(c.v, 1, 3)  # slot 1 holds rows in V only: the pair's second share fails
    c.write(3, 2)
    for x in (c.k, c.v):
        pvt.release_slot(x, 3)
    c.lens[3] = 0
    c.other = pvt.slot_cache(5, S, HKV, D, chunk_bytes=PAGE)
    c.m = pvt.slot_kv_cache(1, 2, 10, 1, 8, chunk_bytes=PAGE)
    before = snapshot(c)
    with pytest.raises(exc, match=text):
        call(c)
    assert snapshot(c) == before
