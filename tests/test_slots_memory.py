"""Slot-cache memory: mapped memory follows the slots' own lengths; every slot starts on a chunk, so no
chunk holds rows of two slots; a neighbour's release never takes a live slot's rows."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import paddle
import paddle_vtensor as pvt

PAGE = 4096


def needed_chunks(lens, span_bytes, row_bytes, chunk):
    need = set()
    for s, n in enumerate(lens):
        if n:
            lo, hi = s * span_bytes, s * span_bytes + n * row_bytes
            need.update(range(lo // chunk, (hi - 1) // chunk + 1))
    return need


def test_aligned_slots_share_no_border_chunk():
    # 100 rows x 64 bytes = 6400 bytes: unaligned, slot 1 would start inside slot 0's second page.
    # Aligned, each slot spans 128 rows (2 pages) and maps only its own pages.
    k = pvt.slot_cache(3, 100, 1, 16, chunk_bytes=PAGE)
    assert pvt.sharing_info(k)["slot_rows"] == 128
    pvt.reserve_slot(k, 0, 100)
    assert pvt.slot_info(k)["mapped_bytes"] == 2 * PAGE
    pvt.reserve_slot(k, 1, 10)  # its own first page
    assert pvt.slot_info(k)["mapped_bytes"] == 3 * PAGE
    pvt.release_slot(k, 0)  # both of slot 0's pages go
    assert pvt.slot_info(k)["mapped_bytes"] == PAGE
    assert list(pvt.slot_info(k)["mapped_tokens"]) == [0, 10, 0]
    pvt.release_slot(k, 1)
    assert pvt.slot_info(k)["mapped_bytes"] == 0


def test_neighbour_release_keeps_data():
    k = pvt.slot_cache(2, 100, 1, 16, chunk_bytes=PAGE)
    v = pvt.slot_cache(2, 100, 1, 16, chunk_bytes=PAGE)
    rng = np.random.default_rng(0)
    kn = rng.standard_normal([100 + 30, 1, 16]).astype(np.float32)
    for c in (k, v):
        pvt.reserve_slot(c, 0, 100)
        pvt.reserve_slot(c, 1, 30)
    q = paddle.to_tensor(rng.standard_normal([130, 2, 16]).astype(np.float32))
    pvt.attention_with_kvcache(q, k, v, paddle.zeros([2], "int32"), k_new=paddle.to_tensor(kn), v_new=paddle.to_tensor(kn),
                               cu_seqlens_q=np.int32([0, 100, 130]), slot_ids=np.int32([0, 1]))
    pvt.release_slot(k, 0)
    np.testing.assert_array_equal(pvt.read_slot(k, 1, 30).numpy(), kn[100:])


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["reserve", "release"]), st.integers(0, 4), st.integers(0, 70)),
                min_size=1, max_size=25))
def test_mapped_chunks_are_the_union_of_slot_needs(ops):
    rows, row_bytes = 70, 3 * 16 * 4  # 13440 bytes per slot, padded to a whole number of pages
    k = pvt.slot_cache(5, rows, 3, 16, chunk_bytes=PAGE)
    span = pvt.sharing_info(k)["slot_rows"] * row_bytes
    lens = [0] * 5
    for op, slot, n in ops:
        if op == "reserve":
            pvt.reserve_slot(k, slot, n)
            lens[slot] = max(lens[slot], n)
        else:
            pvt.release_slot(k, slot)
            lens[slot] = 0
        info = pvt.slot_info(k)
        assert list(info["mapped_tokens"]) == lens
        assert info["mapped_bytes"] == PAGE * len(needed_chunks(lens, span, row_bytes, PAGE))
    del k
    assert pvt.memory_stats("cpu")["mapped_bytes"] == 0
