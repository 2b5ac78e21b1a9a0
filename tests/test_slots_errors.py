"""Point 5 of issue 7: every bad input raises a clear error naming the problem, and the cache (its
contents and what is mapped) is exactly as before."""
import numpy as np
import pytest

import paddle
import paddle_vtensor as pvt

S, HKV, HQ, D = 16, 2, 4, 8


def make_caches():
    k = pvt.slot_cache(3, S, HKV, D, chunk_bytes=4096)
    v = pvt.slot_cache(3, S, HKV, D, chunk_bytes=4096)
    rng = np.random.default_rng(0)
    for c in (k, v):
        pvt.reserve_slot(c, 0, 6)
        pvt.reserve_slot(c, 1, 4)
    kn = paddle.to_tensor(rng.standard_normal([9, HKV, D]).astype(np.float32))
    pvt.attention_with_kvcache(paddle.to_tensor(rng.standard_normal([9, HQ, D]).astype(np.float32)), k, v,
                               paddle.zeros([3], "int32"), k_new=kn, v_new=kn, cu_seqlens_q=np.int32([0, 5, 9]),
                               slot_ids=np.int32([0, 1]))
    return k, v


def snapshot(k, v):
    lens = [5, 4, 0]
    return ([pvt.read_slot(c, s, n).numpy().copy() for c in (k, v) for s, n in enumerate(lens)],
            [list(pvt.slot_info(c)["mapped_tokens"]) for c in (k, v)])


def call(k, v, lens=(5, 4, 0), cu=(0, 1, 2), slots=(0, 1), q_heads=HQ, kv_heads=HKV, total=None, lens_dtype="int32",
         slots_dtype="int32"):
    total = cu[-1] if total is None else total
    q = paddle.ones([total, q_heads, D])
    kn = paddle.ones([total, kv_heads, D])
    return pvt.attention_with_kvcache(q, k, v, paddle.to_tensor(np.array(lens), dtype=lens_dtype), k_new=kn, v_new=kn,
                                      cu_seqlens_q=paddle.to_tensor(np.array(cu), dtype="int32"),
                                      slot_ids=paddle.to_tensor(np.array(slots), dtype=slots_dtype))


BAD = {
    "cache_seqlens_int64": (dict(lens_dtype="int64"), "cache_seqlens must be int32"),
    "slot_ids_int64": (dict(slots_dtype="int64"), "slot_ids must be int32"),
    "slot_out_of_range": (dict(slots=(0, 3)), r"slot_ids\[1\] = 3 is out of range \[0, 3\)"),
    "slot_negative": (dict(slots=(-1, 0)), r"slot_ids\[0\] = -1 is out of range"),
    "slot_repeated": (dict(slots=(0, 0)), "slot 0 appears twice"),
    "cu_not_increasing": (dict(cu=(0, 1, 1), slots=(0, 1)), "cu_seqlens_q must be strictly increasing"),
    "cu_not_matching_q": (dict(cu=(0, 1, 2), total=3), "end at total_q = 3"),
    "past_max_seq_len": (dict(lens=(5, S - 1, 0), cu=(0, 1, 3)), f"slot 1 would hold {S + 1} tokens, past max_seq_len = {S}"),
    "not_reserved": (dict(cu=(0, 2, 3)), "slot 0 needs 7 tokens but only 6 are mapped"),
    "q_heads_not_multiple": (dict(q_heads=3), r"q_heads \(3\) must be a multiple"),
    "k_new_heads": (dict(kv_heads=1), "k_new/v_new must be"),
    "wrong_slot_count": (dict(slots=(0,)), r"cu_seqlens_q must have shape \[2\]"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_raises_and_changes_nothing(name):
    k, v = make_caches()
    kwargs, match = BAD[name]
    before = snapshot(k, v)
    with pytest.raises(pvt.SlotError, match=match):
        call(k, v, **kwargs)
    after = snapshot(k, v)
    for a, b in zip(before[0], after[0]):
        np.testing.assert_array_equal(a, b)
    assert before[1] == after[1]


def test_released_slot_read_with_nonzero_length():
    k, v = make_caches()
    pvt.release_slot(k, 1)
    pvt.release_slot(v, 1)
    with pytest.raises(pvt.SlotError, match="slot 1 needs 5 tokens but only 0 are mapped"):
        call(k, v)
    # reading it at length 0 (a new prompt in the released slot) is fine once reserved again
    for c in (k, v):
        pvt.reserve_slot(c, 1, 1)
    call(k, v, lens=(5, 0, 0))


def test_reserve_past_max_seq_len_and_bad_slot():
    k, _ = make_caches()
    with pytest.raises(pvt.ReservationFullError, match=f"holds at most max_seq_len={S}"):
        pvt.reserve_slot(k, 0, S + 1)
    with pytest.raises(pvt.SlotError, match=r"InvalidArgument: slot 7 is out of range \[0, 3\)"):
        pvt.reserve_slot(k, 7, 1)
    assert list(pvt.slot_info(k)["mapped_tokens"]) == [6, 4, 0]


def test_reserve_over_mapped_limit_changes_nothing():
    k = pvt.slot_cache(2, 1024, HKV, D, chunk_bytes=4096)  # 64 KiB per slot: slot 1 needs new chunks
    pvt.reserve_slot(k, 0, 10)
    before = pvt.slot_info(k)
    pvt.set_mapped_limit(pvt.memory_stats("cpu")["mapped_bytes"], "cpu")
    try:
        with pytest.raises(pvt.VTensorOutOfMemoryError):
            pvt.reserve_slot(k, 1, 1024)
    finally:
        pvt.set_mapped_limit(None, "cpu")
    after = pvt.slot_info(k)
    assert after["mapped_bytes"] == before["mapped_bytes"]
    assert list(after["mapped_tokens"]) == list(before["mapped_tokens"])


def test_mixed_layer_views_rejected():
    cache = pvt.slot_kv_cache(2, 2, S, HKV, D)
    with pytest.raises(pvt.SlotError, match="cache.k\\(l\\) and cache.v\\(l\\) of one layer"):
        pvt.attention_with_kvcache(paddle.ones([1, HQ, D]), cache.k(0), cache.v(1), paddle.zeros([2], "int32"),
                                   cu_seqlens_q=[0, 1], slot_ids=[0])
