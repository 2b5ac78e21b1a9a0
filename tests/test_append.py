"""append / reserve_one_token / from_dense against paddle.concat, for random shapes and dtypes."""
import numpy as np
import pytest
from conftest import DTYPES, rand, to_np

import paddle
import paddle_vtensor as pvt
from paddle_vtensor import api

SHAPES = [(1, 1, 1, 1), (1, 7, 4, 8), (3, 5, 2, 16), (8, 3, 32, 128), (2, 0, 3, 40)]


def seq_major_strides(b, h, d):
    return [h * d, b * h * d, d, 1]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b,s,h,d", SHAPES)
def test_reserve_one_token_matches_concat(dtype, b, s, h, d):
    cache = rand([b, s, h, d], dtype, seed=1)
    token = rand([b, 1, h, d], dtype, seed=2)
    out = pvt.reserve_one_token(cache, token, chunk_bytes=4096)
    ref = paddle.concat([cache, token], axis=1)
    assert out.shape == [b, s + 1, h, d]
    assert out.dtype == cache.dtype
    assert out.strides == seq_major_strides(b, h, d)
    assert pvt.is_vtensor(out) and not pvt.is_vtensor(cache)
    np.testing.assert_array_equal(to_np(out), to_np(ref))


@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_loop_appends_in_place(dtype):
    b, h, d = 3, 2, 8
    cache = pvt.from_dense(rand([b, 4, h, d], dtype, seed=3), max_seq_len=64, chunk_bytes=4096)
    ref = cache.astype("float32").numpy()
    base = cache.data_ptr()
    for step in range(40):
        tok = rand([b, 1, h, d], dtype, seed=100 + step)
        cache = pvt.reserve_one_token(cache, tok)
        ref = np.concatenate([ref, to_np(tok)], axis=1)
        assert cache.data_ptr() == base, "a decode step must write in place, not move the cache"
    np.testing.assert_array_equal(to_np(cache), ref)
    assert pvt.memory_stats("cpu")["live_regions"] == 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t", [1, 2, 5, 17])
def test_append_many_tokens_matches_concat(dtype, t):
    b, s, h, d = 2, 3, 4, 8
    cache = rand([b, s, h, d], dtype, seed=4)
    toks = rand([b, t, h, d], dtype, seed=5)
    out = pvt.append(cache, toks, chunk_bytes=4096)
    np.testing.assert_array_equal(to_np(out), to_np(paddle.concat([cache, toks], axis=1)))
    more = rand([b, t, h, d], dtype, seed=6)
    out2 = pvt.append(out, more)
    assert out2.data_ptr() == out.data_ptr()
    np.testing.assert_array_equal(to_np(out2), to_np(paddle.concat([cache, toks, more], axis=1)))


def test_strided_tokens_are_read_correctly():
    b, s, h, d = 2, 3, 4, 8
    cache = pvt.from_dense(rand([b, s, h, d], seed=7))
    wide = rand([b, 2, h, 2 * d], seed=8)
    toks = wide[:, :, :, ::2]  # a non-contiguous view
    out = pvt.append(cache, toks)
    np.testing.assert_array_equal(to_np(out), np.concatenate([to_np(cache), to_np(toks)], axis=1))


def test_from_dense_copies_once_and_keeps_values():
    x = rand([4, 9, 3, 16], "float16", seed=9)
    v = pvt.from_dense(x, max_seq_len=100)
    assert pvt.is_vtensor(v)
    assert v.strides == seq_major_strides(4, 3, 16)
    np.testing.assert_array_equal(to_np(v), to_np(x))
    x += 1  # the VTensor is a copy, not an alias of the dense input
    assert not np.array_equal(to_np(v), to_np(x))


def test_result_works_with_ordinary_paddle_ops():
    """Attention-style use of a VTensor through Paddle ops (which copy it contiguous) is correct."""
    b, s, h, d = 2, 6, 3, 8
    dense = rand([b, s, h, d], seed=10)
    v = pvt.from_dense(dense)
    q = rand([b, h, 1, d], seed=11)
    got = paddle.matmul(q, v.transpose([0, 2, 1, 3]), transpose_y=True)
    want = paddle.matmul(q, dense.transpose([0, 2, 1, 3]), transpose_y=True)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_large_cache_maps_chunk_by_chunk():
    """A 512 MiB cache mapped 2 MiB at a time on the host (the H200 harness covers caches of GiBs)."""
    b, h, d = 8, 8, 128  # 16 KiB per token in float16
    tokens = 1 << 15  # 512 MiB
    cache = pvt.from_dense(rand([b, 1, h, d], "float16", seed=12), max_seq_len=tokens + 1)
    big = paddle.zeros([b, tokens - 2, h, d], dtype="float16")
    cache = pvt.append(cache, big)
    last = rand([b, 1, h, d], "float16", seed=13)
    cache = pvt.reserve_one_token(cache, last)
    assert cache.shape[1] == tokens
    assert pvt.memory_stats("cpu")["mapped_bytes"] >= tokens * b * h * d * 2
    np.testing.assert_array_equal(to_np(cache[:, -1:]), to_np(last))
    del big, cache


def test_migration_reserves_room_for_the_append():
    """README: a plain cache is migrated into max(max_seq_len, S + T) tokens."""
    cache, tokens = rand([1, 40, 2, 8], seed=14), rand([1, 3, 2, 8], seed=15)
    out = pvt.append(cache, tokens, max_seq_len=16)
    assert out.shape == [1, 43, 2, 8]
    np.testing.assert_array_equal(to_np(out), to_np(paddle.concat([cache, tokens], axis=1)))
    assert api._cache_info(out)["capacity_tokens"] == 43  # capacity: exactly S + T, max_seq_len being smaller
    assert api._cache_info(pvt.append(rand([1, 4, 2, 8]), tokens, max_seq_len=16))["capacity_tokens"] == 16


def test_fork_inherits_the_source_settings():
    """Copy-on-write forks keep the source's max_seq_len and chunk size unless the call overrides."""
    token_bytes = 1 * 2 * 8 * 4
    src = pvt.from_dense(rand([1, 4, 2, 8], seed=16), max_seq_len=64, chunk_bytes=4096)
    first = pvt.append(src, rand([1, 1, 2, 8], seed=17))  # in place: src's cache now has 5 tokens seen
    before = pvt.memory_stats("cpu")
    fork = pvt.append(src, rand([1, 1, 2, 8], seed=18))   # position 4 is seen by `first`: copies
    after = pvt.memory_stats("cpu")
    assert fork.data_ptr() != first.data_ptr()
    assert api._cache_info(fork)["capacity_tokens"] == 64 == api._cache_info(first)["capacity_tokens"]
    assert after["reserved_bytes"] - before["reserved_bytes"] == 64 * token_bytes  # 4096: one chunk
    assert after["mapped_bytes"] - before["mapped_bytes"] == 4096  # chunk 4096, not the 2 MiB default
    override = pvt.append(src, rand([1, 1, 2, 8], seed=19), max_seq_len=100, chunk_bytes=8192)
    assert api._cache_info(override)["capacity_tokens"] == 100
    # both branches can grow to the same length
    for branch in (first, fork):
        assert pvt.append(branch, rand([1, 59, 2, 8])).shape[1] == 64
        with pytest.raises(pvt.ReservationFullError):
            pvt.append(branch, rand([1, 60, 2, 8]))


def test_an_in_place_change_of_a_result_is_seen():
    """The API remembers each result's storage view; an in-place op on the result must make it
    look again rather than append to what the tensor no longer is."""
    cache = pvt.from_dense(rand([2, 5, 3, 8], seed=20))
    cache.reshape_([2, 5, 24])
    with pytest.raises(ValueError, match="rank 4"):
        pvt.append(cache, rand([2, 1, 3, 8]))
    other = pvt.from_dense(rand([2, 5, 3, 8], seed=21))
    plain = rand([2, 5, 3, 8], seed=22)
    paddle.assign(plain, output=other)  # now a plain dense tensor's values
    out = pvt.append(other, rand([2, 1, 3, 8], seed=23))
    np.testing.assert_array_equal(to_np(out[:, :5]), to_np(plain))


def test_results_are_recognised_without_the_registry(monkeypatch):
    """The fast path: a result of the API needs no registry lookup (ctypes) to be used again."""
    cache = pvt.from_dense(rand([1, 3, 2, 8], seed=24), max_seq_len=16)

    def no_lookup(x):
        raise AssertionError("registry lookup on the fast path")

    monkeypatch.setattr(api, "_cache_info", no_lookup)
    cache = pvt.reserve_one_token(cache, rand([1, 1, 2, 8]))
    cache = pvt.append(cache, rand([1, 2, 2, 8]))
    cache = pvt.truncate(cache, 4)
    assert pvt.is_vtensor(cache)
    out = pvt.decode_attention(rand([1, 1, 2, 8]), cache, cache)
    assert out.shape == [1, 1, 2, 8]
