"""The chunk pool through the public API (paddle_vtensor/pool.py): a released slot's chunks are
pooled up to the bound and taken again by the next reserve (pooled_bytes falls by what is mapped, so
no new memory was created), the bound trims, trim_pool empties, fill_pool creates ahead, the mapped
limit counts pooled bytes and trims the pool rather than refuse, bad inputs raise typed errors.
Expected byte counts come from the chunk arithmetic here, not from the library."""
import math

import pytest

import paddle_vtensor as pvt
from paddle_vtensor.errors import VTensorOutOfMemoryError

PAGE = 4096
S, HKV, D = 100, 2, 8
ROW = HKV * D * 4  # float32 row: 64 bytes, 64 rows per page


def chunks(tokens: int, chunk: int = PAGE) -> int:
    return math.ceil(tokens * ROW / chunk)


def stats():
    return pvt.memory_stats("cpu")


@pytest.fixture(autouse=True)
def _pool_off():
    pvt.set_pool_limit(0)
    yield
    pvt.set_mapped_limit(None, "cpu")
    pvt.set_pool_limit(0)
    assert stats()["pooled_bytes"] == 0


def test_release_pools_and_reserve_takes_from_the_pool():
    pvt.set_pool_limit(16 * PAGE)
    assert pvt.pool_limit() == 16 * PAGE
    k = pvt.slot_cache(4, S, HKV, D, chunk_bytes=PAGE)
    pvt.reserve_slot(k, 0, 90)
    assert stats()["mapped_bytes"] == chunks(90) * PAGE
    pvt.release_slot(k, 0)
    assert stats()["pooled_bytes"] == chunks(90) * PAGE
    assert stats()["mapped_bytes"] == 0
    before = stats()
    pvt.reserve_slot(k, 2, 50)  # one chunk: taken from the pool
    after = stats()
    assert after["map_calls"] - before["map_calls"] == chunks(50)
    assert after["pooled_bytes"] == (chunks(90) - chunks(50)) * PAGE
    assert after["mapped_bytes"] == chunks(50) * PAGE
    pvt.release_slot(k, 2)
    del k
    assert stats()["pooled_bytes"] == chunks(90) * PAGE  # a destroyed cache's chunks are pooled too
    pvt.trim_pool()
    assert stats()["pooled_bytes"] == 0


def test_bound_keeps_only_what_fits_and_lowering_trims():
    pvt.set_pool_limit(PAGE)
    k = pvt.slot_cache(2, S, HKV, D, chunk_bytes=PAGE)
    pvt.reserve_slot(k, 0, S)
    assert chunks(S) == 2
    pvt.release_slot(k, 0)
    assert stats()["pooled_bytes"] == PAGE
    pvt.set_pool_limit(0)
    assert stats()["pooled_bytes"] == 0


def test_fill_pool_creates_ahead_up_to_the_bound():
    assert pvt.fill_pool(4 * PAGE, chunk_bytes=PAGE) == 0  # no pool by default
    pvt.set_pool_limit(3 * PAGE)
    assert pvt.fill_pool(8 * PAGE, chunk_bytes=PAGE) == 3
    assert stats()["pooled_bytes"] == 3 * PAGE
    assert pvt.fill_pool(8 * PAGE, chunk_bytes=PAGE) == 0  # full already
    k = pvt.slot_cache(2, S, HKV, D, chunk_bytes=PAGE)
    pvt.reserve_slot(k, 1, S)
    assert stats()["pooled_bytes"] == (3 - chunks(S)) * PAGE
    pvt.release_slot(k, 1)


def test_mapped_limit_counts_pooled_bytes_and_trims_the_pool():
    pvt.set_pool_limit(16 * PAGE)
    assert pvt.fill_pool(4 * PAGE, chunk_bytes=2 * PAGE) == 2  # of another chunk size than the cache's
    pvt.set_mapped_limit(5 * PAGE, "cpu")
    assert pvt.fill_pool(8 * PAGE, chunk_bytes=PAGE) == 1  # 4 pooled + 1 = the limit
    k = pvt.slot_cache(4, S, HKV, D, chunk_bytes=PAGE)
    pvt.reserve_slot(k, 0, S)  # 1 pooled page taken, 1 new: 4 + 2 > 5, the other pool is trimmed
    s = stats()
    assert s["mapped_bytes"] == chunks(S) * PAGE
    assert s["pooled_bytes"] == 0
    pvt.reserve_slot(k, 1, S)  # 4 pages mapped, nothing pooled to give back
    with pytest.raises(VTensorOutOfMemoryError):
        pvt.reserve_slot(k, 2, S)
    assert stats()["mapped_bytes"] == 2 * chunks(S) * PAGE
    for slot in (0, 1):
        pvt.release_slot(k, slot)


def test_collect_on_the_host_finds_nothing_pending():
    # The host has no asynchronous work: a release unmaps at once (deferral: tests/native/
    # test_deferred_release.cc with a backend whose events finish when the test says).
    k = pvt.slot_cache(2, S, HKV, D, chunk_bytes=PAGE)
    pvt.reserve_slot(k, 0, S)
    pvt.release_slot(k, 0)
    assert stats()["mapped_bytes"] == 0
    assert pvt.collect() == 0
    assert pvt.collect(wait=True) == 0


@pytest.mark.parametrize("call, exc", [
    (lambda: pvt.set_pool_limit(-1), ValueError),
    (lambda: pvt.set_pool_limit(1.5), TypeError),
    (lambda: pvt.set_pool_limit(True), TypeError),
    (lambda: pvt.fill_pool(PAGE, chunk_bytes=-PAGE), ValueError),
    (lambda: pvt.fill_pool(-1), ValueError),
    (lambda: pvt.trim_pool("tpu"), ValueError),
    (lambda: pvt.collect("tpu"), ValueError),
])
def test_bad_inputs_raise_typed_errors(call, exc):
    with pytest.raises(exc):
        call()
    assert pvt.pool_limit() == 0
