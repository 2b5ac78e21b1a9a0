"""Every bad input: a clear error naming the problem, and the cache left byte-identical."""
import numpy as np
import pytest
from conftest import rand, to_np

import paddle
import paddle_vtensor as pvt


def snapshot(cache):
    return to_np(cache).copy(), cache.shape, pvt.memory_stats("cpu")


def assert_unchanged(cache, snap):
    values, shape, stats = snap
    assert cache.shape == shape
    np.testing.assert_array_equal(to_np(cache), values)
    now = pvt.memory_stats("cpu")
    for key in ("mapped_bytes", "live_regions", "live_vtensors", "reserved_bytes"):
        assert now[key] == stats[key], key


def make_cache():
    # Not a fixture: pytest keeps fixture values alive past the leak check in conftest.
    return pvt.from_dense(rand([2, 5, 3, 8], seed=1), max_seq_len=8, chunk_bytes=4096)


BAD_APPENDS = [
    (lambda: rand([2, 1, 3, 8], "float16"), ValueError, "dtype"),
    (lambda: rand([2, 1, 3, 4]), ValueError, "do not match"),
    (lambda: rand([3, 1, 3, 8]), ValueError, "do not match"),
    (lambda: rand([2, 1, 2, 8]), ValueError, "do not match"),
    (lambda: rand([2, 3, 8]), ValueError, "rank 4"),
    (lambda: rand([2, 0, 3, 8]), ValueError, "at least one token"),
]


@pytest.mark.parametrize("make_tokens,exc,match", BAD_APPENDS)
def test_bad_tokens_are_rejected_and_cache_kept(make_tokens, exc, match):
    cache = make_cache()
    tokens = make_tokens()
    snap = snapshot(cache)
    with pytest.raises(exc, match=match):
        pvt.append(cache, tokens)
    assert_unchanged(cache, snap)


def test_reserve_one_token_rejects_two_tokens():
    cache = make_cache()
    snap = snapshot(cache)
    with pytest.raises(ValueError, match="exactly 1 token"):
        pvt.reserve_one_token(cache, rand([2, 2, 3, 8]))
    assert_unchanged(cache, snap)


def test_cache_rank_and_dtype_checked():
    with pytest.raises(ValueError, match="rank 4"):
        pvt.append(rand([2, 5, 24]), rand([2, 1, 24]))
    with pytest.raises(ValueError, match="supported KV cache dtypes"):
        pvt.append(paddle.zeros([1, 2, 1, 4], "int32"), paddle.zeros([1, 1, 1, 4], "int32"))
    with pytest.raises(TypeError, match="paddle.Tensor"):
        pvt.append(np.zeros([1, 2, 1, 4], "float32"), rand([1, 1, 1, 4]))


def test_past_reservation_is_an_error_and_cache_kept():
    cache = make_cache()
    cache = pvt.append(cache, rand([2, 3, 3, 8]))  # 8 tokens: full
    snap = snapshot(cache)
    with pytest.raises(pvt.ReservationFullError, match="OutOfRange.*reservation holds 8"):
        pvt.reserve_one_token(cache, rand([2, 1, 3, 8]))
    assert_unchanged(cache, snap)


def test_out_of_memory_is_an_error_and_cache_stays_usable():
    cache = pvt.from_dense(rand([4, 1, 4, 64], seed=2), max_seq_len=4096, chunk_bytes=4096)
    limit = pvt.memory_stats("cpu")["mapped_bytes"] + 3 * 4096
    pvt.set_mapped_limit(limit, "cpu")
    try:
        snap = snapshot(cache)
        with pytest.raises(pvt.VTensorOutOfMemoryError, match="OutOfMemory.*limit"):
            pvt.append(cache, rand([4, 64, 4, 64]))  # needs 256 KiB more
        assert_unchanged(cache, snap)
        cache = pvt.append(cache, rand([4, 2, 4, 64], seed=3))  # fits in the limit
        assert cache.shape[1] == 3
    finally:
        pvt.set_mapped_limit(0, "cpu")
    tokens = rand([4, 64, 4, 64], seed=4)
    longer = pvt.append(cache, tokens)
    np.testing.assert_array_equal(to_np(longer[:, 3:]), to_np(tokens))


def test_truncate_bounds_and_non_vtensor():
    cache = make_cache()
    snap = snapshot(cache)
    with pytest.raises(ValueError, match=r"seq_len must be in \[0, 5\]"):
        pvt.truncate(cache, -1)
    with pytest.raises(ValueError, match=r"seq_len must be in \[0, 5\]"):
        pvt.truncate(cache, 6)
    assert_unchanged(cache, snap)
    with pytest.raises(ValueError, match="not a VTensor"):
        pvt.truncate(rand([2, 5, 3, 8]), 2)


def test_configure_rejects_nonsense():
    with pytest.raises(ValueError, match="max_seq_len must be positive"):
        pvt.configure(max_seq_len=0)
    with pytest.raises(ValueError, match="chunk_bytes must be positive"):
        pvt.append(rand([1, 1, 1, 4]), rand([1, 1, 1, 4]), chunk_bytes=-5)


@pytest.mark.skipif(not paddle.is_compiled_with_cuda(), reason="needs a second place: a GPU build of paddle")
def test_tokens_on_another_place():
    cache = make_cache()
    snap = snapshot(cache)
    with pytest.raises(ValueError, match="are on"):
        pvt.append(cache, rand([2, 1, 3, 8]).cuda())
    assert_unchanged(cache, snap)


# The raw ops carry the same checks, for callers (and graph passes) that bypass the Python layer.
def test_raw_op_checks(ops):
    cache = make_cache()
    storage = pvt.storage_view(cache)
    snap = snapshot(cache)
    with pytest.raises(Exception, match="tokens have dtype float16 but the cache has dtype float32"):
        ops.vtensor_append(storage, rand([2, 1, 3, 8], "float16"), 8, 4096)
    with pytest.raises(Exception, match=r"do not match the cache \[batch, seq, heads, head_dim\] = \[2, 5, 3, 8\]"):
        ops.vtensor_append(storage, rand([2, 1, 3, 7]), 8, 4096)
    with pytest.raises(Exception, match="expects exactly 1 token"):
        ops.vtensor_reserve_one_token(storage, rand([2, 2, 3, 8]), 8, 4096)
    with pytest.raises(Exception, match="not a VTensor"):
        ops.vtensor_truncate(rand([5, 2, 3, 8]), 1)
    with pytest.raises(Exception, match=r"seq_len must be in \[0, 5\]"):
        ops.vtensor_truncate(storage, 9)
    with pytest.raises(Exception, match="supported KV cache dtypes"):
        ops.vtensor_from_dense(paddle.zeros([1, 2, 1, 4], "int64"), 8, 4096)
    assert_unchanged(cache, snap)
