"""merge_attention_states against numpy: attention over a key set split into parts, merged by the
parts' log-sum-exp, equals attention over the whole key set; and decode_attention(return_lse=True)
over VTensor parts of a cache, merged, equals decode_attention over the whole cache."""
import math

import numpy as np
import paddle
import pytest
from conftest import to_np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import paddle_vtensor as pvt

# Merged output vs the whole attention: fp32 within 1e-5; fp16/bf16 parts are rounded once on the way
# in and once on the way out.
ATOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def np_attention(q, k, v, scale):
    """q [B, Tq, H, D], k/v [B, S, H, D] float64, no mask (every query sees every key).
    Returns out [B, Tq, H, D] and lse [B, Tq, H]; an empty key set gives zeros and -inf."""
    if k.shape[1] == 0:
        return np.zeros(q.shape), np.full(q.shape[:3], -np.inf)
    s = np.einsum("bthd,bshd->bths", q, k) * scale
    mx = s.max(-1, keepdims=True)
    p = np.exp(s - mx)
    out = np.einsum("bths,bshd->bthd", p / p.sum(-1, keepdims=True), v)
    return out, (mx + np.log(p.sum(-1, keepdims=True)))[..., 0]


def split_points(rng, s_len, parts):
    """`parts` contiguous ranges covering [0, s_len); some may be empty."""
    cuts = np.sort(rng.integers(0, s_len + 1, size=parts - 1))
    return np.concatenate([[0], cuts, [s_len]])


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from(["float32", "float16", "bfloat16"]), b=st.integers(1, 3), tq=st.integers(1, 3),
       h=st.integers(1, 4), d=st.sampled_from([1, 4, 16, 64]), s_len=st.integers(1, 40),
       parts=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_merge_of_parts_equals_whole_attention(dtype, b, tq, h, d, s_len, parts, seed):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(shape) for shape in ([b, tq, h, d], [b, s_len, h, d], [b, s_len, h, d]))
    scale = 1.0 / math.sqrt(d)
    whole, whole_lse = np_attention(q, k, v, scale)
    bounds = split_points(rng, s_len, parts)
    outs, lses = [], []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        o, l = np_attention(q, k[:, lo:hi], v[:, lo:hi], scale)
        outs.append(paddle.to_tensor(o.astype(np.float32)).astype(dtype))
        lses.append(paddle.to_tensor(l.astype(np.float32)))
    out, lse = pvt.merge_attention_states(outs, lses)
    assert out.dtype == outs[0].dtype and list(out.shape) == [b, tq, h, d]
    assert lse.dtype == paddle.float32 and list(lse.shape) == [b, tq, h]
    np.testing.assert_allclose(to_np(out), whole, atol=ATOL[dtype], rtol=0)
    np.testing.assert_allclose(lse.numpy(), whole_lse, atol=1e-5, rtol=1e-6)


def test_rows_no_part_saw_are_zero_and_minus_inf():
    outs = [paddle.full([2, 3, 4], 7.0), paddle.full([2, 3, 4], 5.0)]
    lse0 = np.full([2, 3], -np.inf, np.float32)
    lse1 = lse0.copy()
    lse1[1, 2] = 0.5  # one row seen by part 1 only
    out, lse = pvt.merge_attention_states(outs, [paddle.to_tensor(lse0), paddle.to_tensor(lse1)])
    expect = np.zeros([2, 3, 4], np.float32)
    expect[1, 2] = 5.0
    np.testing.assert_array_equal(out.numpy(), expect)
    expect_lse = np.full([2, 3], -np.inf, np.float32)
    expect_lse[1, 2] = 0.5
    np.testing.assert_array_equal(lse.numpy(), expect_lse)


def test_merges_compose():
    rng = np.random.default_rng(3)
    outs = [paddle.to_tensor(rng.standard_normal([3, 2, 8]).astype(np.float32)) for _ in range(3)]
    lses = [paddle.to_tensor(rng.standard_normal([3, 2]).astype(np.float32) * 4) for _ in range(3)]
    all3, all3_lse = pvt.merge_attention_states(outs, lses)
    ab, ab_lse = pvt.merge_attention_states(outs[:2], lses[:2])
    abc, abc_lse = pvt.merge_attention_states([ab, outs[2]], [ab_lse, lses[2]])
    np.testing.assert_allclose(abc.numpy(), all3.numpy(), atol=1e-6)
    np.testing.assert_allclose(abc_lse.numpy(), all3_lse.numpy(), atol=1e-6)


def test_large_lse_does_not_overflow():
    # exp(lse) overflows float32 past ~88; the merge subtracts the max first.
    outs = [paddle.full([1, 1, 2], 1.0), paddle.full([1, 1, 2], 3.0)]
    lses = [paddle.to_tensor([[1000.0]]), paddle.to_tensor([[1000.0]])]
    out, lse = pvt.merge_attention_states(outs, lses)
    np.testing.assert_allclose(out.numpy(), np.full([1, 1, 2], 2.0), atol=1e-6)
    np.testing.assert_allclose(lse.numpy(), [[1000.0 + math.log(2.0)]], rtol=1e-6)


def _parts(n=2, shape=(2, 1, 4, 8), dtype="float32"):
    return ([paddle.ones(list(shape), dtype=dtype) for _ in range(n)],
            [paddle.zeros(list(shape[:-1]), dtype="float32") for _ in range(n)])


@pytest.mark.parametrize("case, error, match", [
    ("no parts", ValueError, "at least one part"),
    ("count mismatch", ValueError, "2 outputs but 1 lse"),
    ("shape mismatch", ValueError, "part 1's output has shape"),
    ("dtype mismatch", ValueError, "part 1's output is"),
    ("lse shape", ValueError, "part 0's lse has shape"),
    ("lse dtype", ValueError, "lse must be float32"),
    ("too many parts", ValueError, "at most 64 parts"),
    ("rank 1", ValueError, r"\[\.\.\., heads, head_dim\]"),
    ("not a list", TypeError, "must be a list of tensors"),
    ("not a tensor", TypeError, r"outs\[1\] must be a paddle.Tensor"),
])
def test_bad_input_is_a_clear_error_and_changes_nothing(case, error, match):
    outs, lses = _parts()
    if case == "no parts":
        outs, lses = [], []
    elif case == "count mismatch":
        lses = lses[:1]
    elif case == "shape mismatch":
        outs[1] = paddle.ones([2, 1, 4, 4])
    elif case == "dtype mismatch":
        outs[1] = outs[1].astype("float16")
    elif case == "lse shape":
        lses[0] = paddle.zeros([2, 4])
    elif case == "lse dtype":
        lses[1] = lses[1].astype("float16")
    elif case == "too many parts":
        outs, lses = _parts(65)
    elif case == "rank 1":
        outs, lses = [paddle.ones([4])], [paddle.zeros([4])]
    elif case == "not a list":
        outs = paddle.ones([2, 2])
    elif case == "not a tensor":
        outs[1] = np.ones([2, 1, 4, 8], np.float32)
    before = [to_np(x).copy() for x in list(outs if isinstance(outs, list) else []) + lses
              if isinstance(x, paddle.Tensor)]
    with pytest.raises(error, match=match):
        pvt.merge_attention_states(outs, lses)
    after = [to_np(x) for x in list(outs if isinstance(outs, list) else []) + lses if isinstance(x, paddle.Tensor)]
    for x, y in zip(before, after):
        np.testing.assert_array_equal(x, y)


def test_raw_op_checks_shapes_itself(ops):
    # The Python checks sit in front; the op refuses a mismatch on its own too (the static path).
    outs, lses = _parts()
    with pytest.raises(OSError, match="every part must have the same shape"):
        ops.vtensor_merge_attention_states([outs[0], paddle.ones([2, 1, 4, 4])], lses)
    with pytest.raises(OSError, match="lse has shape"):
        ops.vtensor_merge_attention_states(outs, [lses[0], paddle.zeros([2, 1, 5])])


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("tq, hq, hkv", [(1, 4, 2), (1, 2, 2), (3, 4, 1)])
def test_decode_attention_over_vtensor_parts_merges_to_whole_cache(dtype, tq, hq, hkv):
    """Caches split along the sequence into VTensors, each attended with return_lse=True and an
    explicit causal mask, then merged."""
    rng = np.random.default_rng(tq * 100 + hq * 10 + hkv)
    b, d, s_len = 2, 16, 29
    q = paddle.to_tensor(rng.standard_normal([b, tq, hq, d]).astype(np.float32)).astype(dtype)
    k = paddle.to_tensor(rng.standard_normal([b, s_len, hkv, d]).astype(np.float32)).astype(dtype)
    v = paddle.to_tensor(rng.standard_normal([b, s_len, hkv, d]).astype(np.float32)).astype(dtype)
    whole, whole_lse = pvt.decode_attention(q, k, v, return_lse=True)
    # The lse itself, against numpy (float64, causal: query t sees keys s < S - Tq + t + 1).
    qf, kf = to_np(q).astype(np.float64), np.repeat(to_np(k).astype(np.float64), hq // hkv, axis=2)
    scores = np.einsum("bthd,bshd->bths", qf, kf) / math.sqrt(d)
    visible = np.arange(s_len)[None, :] < s_len - tq + np.arange(tq)[:, None] + 1  # [Tq, S]
    scores = np.where(visible[None, :, None, :], scores, -np.inf)
    np.testing.assert_allclose(whole_lse.numpy(), np.log(np.exp(scores).sum(-1)), atol=1e-4, rtol=1e-5)
    assert np.abs(to_np(whole) - to_np(pvt.decode_attention(q, k, v))).max() == 0  # lse changes nothing

    outs, lses = [], []
    for lo, hi in [(0, 7), (7, 10), (10, 20), (20, s_len)]:
        kp = pvt.from_dense(k[:, lo:hi], max_seq_len=64, chunk_bytes=4096)
        vp = pvt.from_dense(v[:, lo:hi], max_seq_len=64, chunk_bytes=4096)
        mask = paddle.to_tensor(np.broadcast_to(visible[None, None, :, lo:hi], [1, 1, tq, hi - lo]).copy())
        o, l = pvt.decode_attention(q, kp, vp, mask, return_lse=True)
        outs.append(o)
        lses.append(l)
    out, lse = pvt.merge_attention_states(outs, lses)
    atol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype]
    np.testing.assert_allclose(to_np(out), to_np(whole), atol=atol, rtol=0)
    np.testing.assert_allclose(lse.numpy(), whole_lse.numpy(), atol=1e-5, rtol=1e-6)
