"""The packed buffer of the sequence-parallel exchange (paddle_vtensor/generation/sp_exchange.py),
in one process: what every rank packs, gathered (concatenated here), unpacks to each rank's own
header, lse and output bit for bit; sizes follow the agreed layout only."""
import numpy as np
import paddle
import pytest

from paddle_vtensor.generation.sp_exchange import (HEADER_BYTES, HEADER_FIELDS, Exchange, pack, payload_bytes,
                                                   unpack)


def bits(x):
    return paddle.view(x.contiguous().reshape([-1]), "uint8").numpy()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_pack_then_unpack_gives_every_rank_its_own_parts_bit_for_bit(dtype):
    rng = np.random.default_rng(3)
    world, b, t, hq, d = 3, 2, 3, 4, 8
    size = payload_bytes(b * t, hq, d, getattr(paddle, dtype))
    assert size == HEADER_BYTES + b * t * hq * (4 + d * {"float32": 4}.get(dtype, 2))
    bufs, sent = [], []
    for r in range(world):
        header = list(rng.integers(-5, 2**31 - 1, size=len(HEADER_FIELDS)))
        lse = paddle.to_tensor(rng.standard_normal([b, t, hq]).astype(np.float32))
        lse[r % b, 0, 1] = -np.inf  # a part that saw no key travels as -inf
        out = paddle.to_tensor(rng.standard_normal([b, t, hq, d]).astype(np.float32)).astype(dtype)
        bufs.append(pack(header, size, paddle.CPUPlace(), lse, out))
        assert bufs[-1].dtype == paddle.uint8 and bufs[-1].shape == [size]
        sent.append((header, lse, out))
    headers, outs, lses = unpack(paddle.concat(bufs), world, size, [b, t], hq, d, getattr(paddle, dtype))
    for r, (header, lse, out) in enumerate(sent):
        assert headers[r].tolist() == [int(h) for h in header]
        assert outs[r].dtype == out.dtype and outs[r].shape == out.shape
        assert np.array_equal(bits(outs[r]), bits(out)) and np.array_equal(bits(lses[r]), bits(lse))


def test_a_refusal_or_handshake_is_the_header_zero_filled_to_the_agreed_size():
    size = payload_bytes(2, 4, 8, paddle.float16)
    buf = pack(list(range(len(HEADER_FIELDS))), size, paddle.CPUPlace())
    assert buf.shape == [size] and not buf.numpy()[HEADER_BYTES:].any()
    headers, outs, lses = unpack(paddle.concat([buf, buf]), 2, size)
    assert headers.tolist() == [list(range(len(HEADER_FIELDS)))] * 2 and outs is None and lses is None


def test_an_exchange_of_one_rank_counts_its_call_and_bytes():
    ex = Exchange(None, 1)
    buf = pack([0] * len(HEADER_FIELDS), 64, paddle.CPUPlace())
    assert ex.run(buf) is buf and (ex.calls, ex.bytes_sent) == (1, 64)
