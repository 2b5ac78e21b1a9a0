"""Watched slot caches (issue 30 point 5, paddle_vtensor.watch_ahead, core/lookahead.h) on the host: after a
seeded sequence of reservations and releases, the background thread brings every live slot to exactly the
end of the chunk `rows` beyond its last reserved length (a model computed here from the chunk size) and
never maps a released slot again; stopping the watch stops it; a mapping it cannot make is left to the
slot's own reserve (no error, nothing else changed); bad input is refused with the cache as it was.
generate_inflight watches its runner's cache (tests/test_inflight.py checks its tokens)."""
import random
import time

import numpy as np
import pytest

import paddle_vtensor as pvt

SLOTS, MAX, H, D = 6, 300, 2, 8
ROW, CHUNK = H * D * 4, 4096  # float32 rows of 64 bytes: 64 rows a chunk


def _cache():
    return pvt.slot_cache(SLOTS, MAX, H, D, chunk_bytes=CHUNK, place="cpu")


def _mapped(c):
    return pvt.slot_info(c)["mapped_tokens"].tolist()


def _chunk_end(rows):
    """The rows of `rows` rounded up to the end of their chunk, at most max_seq_len (what a look maps to)."""
    per = CHUNK // ROW
    return min(-(-rows // per) * per, MAX)


def _settles_at(c, want, timeout=10.0):
    """Waits for the thread (it looks every millisecond) until the cache holds `want`; the last state."""
    end = time.monotonic() + timeout
    while _mapped(c) != want and time.monotonic() < end:
        time.sleep(0.002)
    return _mapped(c)


def test_slots_are_kept_a_chunk_ahead_and_released_ones_stay_unmapped():
    c = _cache()
    rows = CHUNK // ROW + 1
    pvt.watch_ahead(c, rows)
    try:
        rng = random.Random(5)
        want = [0] * SLOTS
        for step in range(60):
            s = rng.randrange(SLOTS)
            if rng.random() < 0.25:
                pvt.release_slot(c, s)
                want[s] = 0
            else:
                n = rng.randint(want[s] and max(0, want[s] - 200), MAX)  # grows, or asks for rows it holds
                pvt.reserve_slot(c, s, n)
                # The reserve maps n rows at once; the thread then maps to the chunk end `rows` past n (it
                # never unmaps).
                want[s] = max(want[s], n, _chunk_end(n + rows))
            assert _settles_at(c, want) == want, step
        time.sleep(0.02)  # twenty looks more: nothing else gets mapped
        assert _mapped(c) == want
    finally:
        pvt.watch_ahead(c, 0)


def test_a_slot_released_at_once_is_not_mapped_again():
    c = _cache()
    pvt.watch_ahead(c, MAX)
    try:
        for s in range(SLOTS):  # released before the thread's next look, which then must skip it
            pvt.reserve_slot(c, s, 1)
            pvt.release_slot(c, s)
        time.sleep(0.02)
        assert _mapped(c) == [0] * SLOTS
        assert pvt.memory_stats("cpu")["mapped_bytes"] >= 0
    finally:
        pvt.watch_ahead(c, 0)


def test_stopping_the_watch_stops_the_mapping():
    c = _cache()
    pvt.watch_ahead(c, 100)
    pvt.watch_ahead(c, 0)
    pvt.reserve_slot(c, 3, 10)
    time.sleep(0.02)
    assert _mapped(c) == [0, 0, 0, 10, 0, 0]


def test_a_look_past_the_mapped_limit_leaves_the_reserve_to_map():
    c = _cache()
    pvt.reserve_slot(c, 1, 10)
    mapped = pvt.memory_stats("cpu")["mapped_bytes"]
    pvt.set_mapped_limit(mapped + 2 * CHUNK, "cpu")  # room for slot 2's own chunk and one more
    pvt.watch_ahead(c, 200)  # slot 2 at 10 rows would want 4 chunks: the look fails
    try:
        pvt.reserve_slot(c, 2, 10)  # no error: the reserve maps its own chunk
        time.sleep(0.02)
        assert _mapped(c)[2] == 10
        assert _mapped(c)[1] == 10  # never marked: it has not reserved since the watch
        pvt.reserve_slot(c, 2, 70)  # the step's reserve still maps what it needs under the limit
        assert _mapped(c)[2] >= 70
    finally:
        pvt.watch_ahead(c, 0)
        pvt.set_mapped_limit(0, "cpu")


@pytest.mark.parametrize("rows, error, match", [
    (-1, ValueError, r"rows must be in \[0"),
    (MAX + 1, ValueError, "max_seq_len"),
    (1.5, TypeError, "must be an int"),
    (np.float32(2), TypeError, "must be an int"),
])
def test_bad_rows_are_refused(rows, error, match):
    c = _cache()
    pvt.reserve_slot(c, 0, 5)
    with pytest.raises(error, match=match):
        pvt.watch_ahead(c, rows)
    pvt.reserve_slot(c, 1, 5)
    time.sleep(0.01)
    assert _mapped(c) == [5, 5, 0, 0, 0, 0]  # not watched


def test_not_a_slot_cache_is_refused():
    with pytest.raises(TypeError, match="slot cache"):
        pvt.watch_ahead(np.zeros(3), 1)
