"""Every bad input: a clear, typed error naming the problem, and the cache left byte-identical.

One test (or more) per row of the error table (paddle_vtensor.errors: its docstring, ERRORS).
"""
import builtins
import copy
import os
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import rand, to_np

import paddle
import paddle_vtensor as pvt
from paddle_vtensor import _ops, api, errors


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


def capacity(cache) -> int:
    return api._cache_info(cache)["capacity_tokens"]


# ---- row "a check at an op's entry" -> ValueError, through every function, cache unchanged ----

BAD_CALLS = [
    # (call on the cache, exception, message)
    (lambda c: pvt.append(c, rand([2, 1, 3, 8], "float16")), ValueError, "tokens have dtype float16"),
    (lambda c: pvt.append(c, rand([2, 1, 3, 4])), ValueError, r"do not match the cache .* = \[2, 5, 3, 8\]"),
    (lambda c: pvt.append(c, rand([3, 1, 3, 8])), ValueError, "do not match"),
    (lambda c: pvt.append(c, rand([2, 1, 2, 8])), ValueError, "do not match"),
    (lambda c: pvt.append(c, rand([2, 3, 8])), ValueError, "tokens must have rank 4"),
    (lambda c: pvt.append(c, rand([2, 0, 3, 8])), ValueError, "at least one token"),
    (lambda c: pvt.reserve_one_token(c, rand([2, 2, 3, 8])), ValueError, "exactly 1 token"),
    (lambda c: pvt.append(c, rand([2, 1, 3, 8]), chunk_bytes=-5), ValueError, "chunk_bytes must be positive"),
    (lambda c: pvt.append(c, rand([2, 1, 3, 8]), max_seq_len=-1), ValueError, "max_seq_len must be positive"),
    (lambda c: pvt.truncate(c, -1), ValueError, r"seq_len must be in \[0, 5\]"),
    (lambda c: pvt.truncate(c, 6), ValueError, r"seq_len must be in \[0, 5\]"),
    (lambda c: pvt.truncate(c[:1], 2), ValueError, "not a VTensor"),  # a batch slice
    (lambda c: pvt.truncate(c[:, 1:], 2), ValueError, "not a VTensor"),  # a sequence slice
    (lambda c: pvt.decode_attention(rand([2, 1, 3, 4]), c, c), ValueError, "does not match q"),
    (lambda c: pvt.decode_attention(rand([2, 1, 4, 8]), c, c), ValueError, r"q_heads \(4\) must be a multiple"),
    (lambda c: pvt.decode_attention(rand([2, 1, 3, 8]), c, c, scale=float("inf")), ValueError, "scale must be finite"),
    (lambda c: pvt.decode_attention(rand([2, 1, 3, 8]).astype("int32"), c, c), ValueError, "share one dtype"),
    (lambda c: pvt.decode_attention(rand([2, 1, 3, 8]), c, c, rand([2, 1, 1, 4])), ValueError,
     "the mask must broadcast"),
    # ---- TypeError: not a tensor, not an int ----
    (lambda c: pvt.append(c, np.zeros([2, 1, 3, 8], "float32")), TypeError, "append: tokens must be a paddle.Tensor"),
    (lambda c: pvt.append(c, None), TypeError, "append: tokens must be a paddle.Tensor, got NoneType"),
    (lambda c: pvt.decode_attention(rand([2, 1, 3, 8]), c, [1, 2]), TypeError, "v_cache must be a paddle.Tensor"),
    (lambda c: pvt.decode_attention(rand([2, 1, 3, 8]), c, c, attn_mask=3), TypeError, "attn_mask must be"),
    (lambda c: pvt.truncate(c, 2.9), TypeError, "seq_len must be an int, got float"),
    (lambda c: pvt.truncate(c, True), TypeError, "seq_len must be an int, got bool"),
    (lambda c: pvt.truncate(c, "3"), TypeError, "seq_len must be an int, got str"),
    (lambda c: pvt.append(c, rand([2, 1, 3, 8]), max_seq_len=2.5), TypeError, "max_seq_len must be an int"),
    # ---- integers past int64 (Paddle would wrap them) and reservations past 64 bits ----
    (lambda c: pvt.truncate(c, 2**63), ValueError, "does not fit in 64 bits"),
    (lambda c: pvt.append(c, rand([2, 1, 3, 8]), max_seq_len=2**63), ValueError, "does not fit in 64 bits"),
    # ---- gradients: refused, not dropped ----
    (lambda c: pvt.append(c, grad_tokens()), ValueError, "requires gradients"),
    (lambda c: pvt.reserve_one_token(c, grad_tokens()), ValueError, "requires gradients"),
    (lambda c: pvt.decode_attention(grad_tokens(), c, c), ValueError, "requires gradients"),
]


def grad_tokens():
    t = rand([2, 1, 3, 8])
    t.stop_gradient = False
    return t


@pytest.mark.parametrize("call,exc,match", BAD_CALLS)
def test_bad_input_is_refused_and_cache_kept(call, exc, match):
    cache = make_cache()
    snap = snapshot(cache)
    with pytest.raises(exc, match=match) as info:
        call(cache)
    assert type(info.value) is exc  # ValueError, not a VTensorError or an OSError
    assert_unchanged(cache, snap)
    cache = pvt.append(cache, rand([2, 1, 3, 8]))  # and the cache still works
    assert cache.shape[1] == 6


@pytest.mark.parametrize("call,match", [
    (lambda: pvt.append(rand([2, 5, 24]), rand([2, 1, 24])), "x must have rank 4"),
    (lambda: pvt.append(paddle.zeros([1, 2, 1, 4], "int32"), paddle.zeros([1, 1, 1, 4], "int32")),
     "supported KV cache dtypes"),
    (lambda: pvt.from_dense(paddle.zeros([1, 2, 1, 4], "int64")), "x has dtype int64"),
    (lambda: pvt.from_dense(paddle.zeros([1, 2, 1, 4], "float64")), "x has dtype float64"),
    (lambda: pvt.from_dense(rand([1, 2, 1, 4]), max_seq_len=2**62 + 1), "does not fit in 64 bits"),
    (lambda: pvt.truncate(rand([2, 5, 3, 8]), 2), "not a VTensor"),
    (lambda: pvt.configure(max_seq_len=0), "max_seq_len must be positive"),
    (lambda: pvt.configure(chunk_bytes=-3), "chunk_bytes must be positive"),
    (lambda: pvt.set_mapped_limit(-5, "cpu"), r"limit_bytes must be >= 0 .* got -5"),
    (lambda: pvt.set_mapped_limit(2**64, "cpu"), "does not fit in 64 bits"),
])
def test_bad_plain_input_is_a_value_error(call, match):
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert type(info.value) is ValueError
    assert pvt.memory_stats("cpu")["mapped_limit"] == 0


def test_a_bad_append_to_a_plain_cache_leaves_no_migrated_copy():
    plain = rand([2, 5, 3, 8], seed=2)
    before = to_np(plain).copy()
    stats = pvt.memory_stats("cpu")
    with pytest.raises(ValueError, match="do not match") as info:
        pvt.append(plain, rand([2, 1, 3, 4]))
    # the traceback is still alive here, and must not hold the migrated copy
    assert info.value is not None
    for key in ("live_regions", "live_vtensors", "reserved_bytes"):
        assert pvt.memory_stats("cpu")[key] == stats[key], key
    np.testing.assert_array_equal(to_np(plain), before)


def test_zero_sized_cache_is_invalid_argument():
    # row "InvalidArgument" (a core Status) -> ValueError
    with pytest.raises(ValueError, match="vtensor_from_dense: InvalidArgument: cache shape must be positive"):
        pvt.from_dense(paddle.zeros([0, 2, 1, 4]))


def test_past_reservation_is_reservation_full_and_cache_kept():
    # row "OutOfRange" -> ReservationFullError
    cache = make_cache()
    cache = pvt.append(cache, rand([2, 3, 3, 8]))  # 8 tokens: full
    snap = snapshot(cache)
    with pytest.raises(pvt.ReservationFullError, match="OutOfRange.*reservation holds 8"):
        pvt.reserve_one_token(cache, rand([2, 1, 3, 8]))
    assert_unchanged(cache, snap)


def test_out_of_memory_is_an_error_and_cache_stays_usable():
    # row "OutOfMemory" -> VTensorOutOfMemoryError
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


def test_every_status_code_has_one_exception():
    """The table covers every code the C++ side can report, and maps an op's error text by it
    (DriverError, Unsupported and Conflict cannot be provoked on a CPU build: mapped from the text)."""
    names = []
    code = 1  # 0 is Ok
    while _ops.c.code_name(code) is not None:
        names.append(_ops.c.code_name(code))
        code += 1
    assert set(names) == set(errors.ERRORS), (names, sorted(errors.ERRORS))
    for name in names:
        for bad_input in (ValueError, pvt.SlotError):
            err = errors.from_op_error(OSError(f"vtensor_append: {name}: what happened\n  [x.cc:1]"), None, bad_input)
            assert type(err) is (errors.ERRORS[name] or bad_input)
            assert str(err) == f"vtensor_append: {name}: what happened"
    err = api._failure("append", OSError("vtensor_append: tokens must hold at least one token"), {})
    assert type(err) is ValueError


def test_numpy_integers_are_ints():
    cache = make_cache()
    assert pvt.truncate(cache, np.int64(3)).shape[1] == 3
    assert pvt.append(cache, rand([2, 1, 3, 8]), max_seq_len=np.int32(16)).shape[1] == 6


def test_no_gradients_needed_under_no_grad():
    cache = make_cache()
    with paddle.no_grad():
        out = pvt.append(cache, grad_tokens())
    assert out.shape[1] == 6


def test_set_mapped_limit_accepts_none_and_zero():
    pvt.set_mapped_limit(4096 * 8, "cpu")
    assert pvt.memory_stats("cpu")["mapped_limit"] == 4096 * 8
    pvt.set_mapped_limit(None, "cpu")
    assert pvt.memory_stats("cpu")["mapped_limit"] == 0


@pytest.mark.skipif(not paddle.is_compiled_with_cuda(), reason="needs a second place: a GPU build of paddle")
def test_tokens_on_another_place():
    cache = make_cache()
    snap = snapshot(cache)
    with pytest.raises(ValueError, match="are on"):
        pvt.append(cache, rand([2, 1, 3, 8]).cuda())
    assert_unchanged(cache, snap)


# ---- the raw ops: the only checks, for callers (and graph passes) that bypass the Python layer ----
def test_raw_op_checks(ops):
    cache = make_cache()
    storage = pvt.storage_view(cache)
    snap = snapshot(cache)
    with pytest.raises(OSError, match="tokens have dtype float16 but the cache has dtype float32"):
        ops.vtensor_append(storage, rand([2, 1, 3, 8], "float16"), 8, 4096)
    with pytest.raises(OSError, match=r"do not match the cache \[batch, seq, heads, head_dim\] = \[2, 5, 3, 8\]"):
        ops.vtensor_append(storage, rand([2, 1, 3, 7]), 8, 4096)
    with pytest.raises(OSError, match="expects exactly 1 token"):
        ops.vtensor_reserve_one_token(storage, rand([2, 2, 3, 8]), 8, 4096)
    with pytest.raises(OSError, match="not a VTensor"):
        ops.vtensor_truncate(rand([5, 2, 3, 8]), 1)
    with pytest.raises(OSError, match=r"seq_len must be in \[0, 5\]"):
        ops.vtensor_truncate(storage, 9)
    with pytest.raises(OSError, match="supported KV cache dtypes"):
        ops.vtensor_from_dense(paddle.zeros([1, 2, 1, 4], "int64"), 8, 4096)
    with pytest.raises(OSError, match="max_seq_len must be positive"):
        ops.vtensor_append(storage, rand([2, 1, 3, 8]), -3, 4096)
    assert_unchanged(cache, snap)


@pytest.mark.parametrize("op,args", [
    ("vtensor_truncate", (None, 1)),
    ("vtensor_from_dense", (None, 8, 4096)),
    ("vtensor_append", (None, None, 8, 4096)),
    ("vtensor_reserve_one_token", (None, None, 8, 4096)),
    ("vtensor_decode_attention", (None, None, None, None, 1.0)),
])
def test_raw_ops_refuse_none_instead_of_crashing(ops, op, args):
    with pytest.raises(OSError, match="must be a tensor, got None"):
        _ops.run(op, *args)


def test_set_mapped_limit_c_entry_refuses_negative():
    code, text = _ops.c.set_mapped_limit(0, 0, -1)
    assert _ops.c.code_name(code) == "InvalidArgument"
    assert text == "InvalidArgument: limit_bytes must be >= 0 (0 or None: no limit), got -1"
    assert pvt.memory_stats("cpu")["mapped_limit"] == 0


# ---- the table in paddle_vtensor/errors.py's docstring (README copies it), walked row by row ----

def _table_rows():
    """(code, exception names) of each row of the docstring's table."""
    rows = []
    for line in errors.__doc__.splitlines():
        m = re.match(r"^(\(none\)|[A-Z]\w+)\s{2,}(\S+(?: / \S+)?)\s{2,}", line)
        if m and m.group(1) != "code":
            rows.append((m.group(1), m.group(2).split(" / ")))
    return rows


def _slot_cache():
    return pvt.slot_cache(2, 8, 1, 8, chunk_bytes=4096)


def _slot_attention(cache_seqlens):
    k, v = _slot_cache(), _slot_cache()
    pvt.attention_with_kvcache(rand([1, 1, 8]), k, v, cache_seqlens, k_new=rand([1, 1, 8]), v_new=rand([1, 1, 8]),
                               cu_seqlens_q=[0, 1])


def _write_into_shared_rows():
    """Slot 0's first chunk shared into slot 1, then slot 0 writes its row 0 (no reserve_for_write)."""
    k, v = (pvt.slot_cache(2, 256, 1, 8, chunk_bytes=4096) for _ in "kv")  # 32-byte rows: 128 a chunk
    for c in (k, v):
        pvt.reserve_slot(c, 0, 128)
    pvt.share_prefix((k, v), 0, 1, 128)  # the whole first chunk: mapped in both slots
    pvt.attention_with_kvcache(rand([1, 1, 8]), k, v, [0, 128], k_new=rand([1, 1, 8]), v_new=rand([1, 1, 8]),
                               cu_seqlens_q=[0, 1], slot_ids=[0])


def _past_reservation():
    cache = pvt.from_dense(rand([1, 2, 1, 8]), max_seq_len=2, chunk_bytes=4096)
    pvt.append(cache, rand([1, 1, 1, 8]))


def _over_the_limit(call):
    def run():
        pvt.set_mapped_limit(pvt.memory_stats("cpu")["mapped_bytes"] + 4096, "cpu")
        try:
            call()
        finally:
            pvt.set_mapped_limit(0, "cpu")
    return run


# A real call that makes the library report each code, through each door that reports it: an op
# (vtensor_*), a C entry point (slots, set_mapped_limit), the slot API's op (vtensor_slot_*).
PROVOKE = {
    "(none)": [(lambda: pvt.append(make_cache(), rand([2, 1, 3, 4])), ValueError, "^vtensor_append: tokens "),
               (lambda: _slot_attention(paddle.zeros([2], "int64")), pvt.SlotError,
                "^vtensor_slot_attention: cache_seqlens must be int32")],
    "InvalidArgument": [(lambda: pvt.from_dense(paddle.zeros([0, 2, 1, 4])), ValueError,
                         "^vtensor_from_dense: InvalidArgument: "),
                        (lambda: pvt.set_mapped_limit(-5, "cpu"), ValueError, "^set_mapped_limit: InvalidArgument: "),
                        (lambda: pvt.reserve_slot(_slot_cache(), 0, -3), pvt.SlotError,
                         "^reserve_slot: InvalidArgument: ")],
    "OutOfRange": [(_past_reservation, pvt.ReservationFullError, "^vtensor_append: OutOfRange: "),
                   (lambda: pvt.reserve_slot(_slot_cache(), 0, 9), pvt.ReservationFullError,
                    "^reserve_slot: OutOfRange: ")],
    "OutOfMemory": [(_over_the_limit(lambda: pvt.append(pvt.from_dense(rand([2, 1, 3, 8]), max_seq_len=4096,
                                                                       chunk_bytes=4096),
                                                        rand([2, 200, 3, 8]))),
                     pvt.VTensorOutOfMemoryError, "^vtensor_append: OutOfMemory: "),
                    (_over_the_limit(lambda: pvt.reserve_slot(pvt.slot_cache(2, 4096, 1, 8, chunk_bytes=4096), 0, 4096)),
                     pvt.VTensorOutOfMemoryError, "^reserve_slot: OutOfMemory: "),
                    (lambda: pvt.from_dense(rand([1, 2, 1, 4]), max_seq_len=2**50), pvt.VTensorOutOfMemoryError,
                     "^vtensor_from_dense: OutOfMemory: ")],
}
# Not reachable on a CPU build from Python: DriverError (a failing OS/CUDA call other than running
# out of memory), Unsupported (a GPU tensor without CUDA kernels), Conflict (the ops copy instead).
UNREACHABLE_ON_CPU = {"DriverError", "Unsupported", "Conflict"}


def test_the_docstring_table_is_the_table():
    rows = dict(_table_rows())
    assert set(rows) == {"(none)"} | set(errors.ERRORS)
    for code, names in rows.items():
        cls = errors.ERRORS.get(code)
        want = ["ValueError", "SlotError"] if cls is None else [cls.__name__]
        assert names == want, (code, names)
    assert set(PROVOKE) | UNREACHABLE_ON_CPU == set(rows)


@pytest.mark.parametrize("code, i", [(code, i) for code in sorted(PROVOKE) for i in range(len(PROVOKE[code]))])
def test_each_code_raises_its_class_from_a_real_call(code, i):
    call, cls, match = PROVOKE[code][i]
    with pytest.raises(Exception) as info:
        call()
    assert type(info.value) is cls, (code, type(info.value), str(info.value))
    assert re.search(match, str(info.value)), str(info.value)
    assert errors.ERRORS.get(code) in (None, cls)  # the row's class (None: the door's bad-input class)
    del info  # its traceback holds the caches
    assert pvt.memory_stats("cpu")["mapped_limit"] == 0


# ---- the README's table (mistake -> exception, one for the package), every row through real calls ----

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme_rows():
    """(mistake, exception class) of each row of README.md's "## Errors" table."""
    with open(os.path.join(ROOT, "README.md")) as f:
        section = f.read().split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("mistake", "---"):
            name = re.match(r"`([\w.]+)`", cells[2]).group(1)
            cls = getattr(pvt, name[4:]) if name.startswith("pvt.") else getattr(builtins, name)
            rows.append((cells[0], cls))
    return rows


def _grad_q():
    q = rand([2, 1, 3, 8])
    q.stop_gradient = False
    return q


def _tiny_llama():
    pytest.importorskip("paddlenlp.transformers.llama.modeling")
    from test_integration_eager import tiny_llama

    return tiny_llama()


_NO_FD_LEFT = """
import os, resource, sys
sys.path.insert(0, {root!r})
import paddle_vtensor as pvt
k = pvt.slot_cache(2, 16, 2, 8, chunk_bytes=4096)  # the first chunk of this process opens its memfd
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = []
try:
    while True:
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
try:
    pvt.reserve_slot(k, 0, 4)
except Exception as e:
    print("RAISED", type(e).__name__, e)
"""


def _no_file_descriptor_left():
    """reserve_slot in a child whose file descriptors are all taken: the memfd cannot be made."""
    proc = subprocess.run([sys.executable, "-c", _NO_FD_LEFT.format(root=ROOT)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RAISED"))
    raise getattr(pvt, line.split()[1])(line.split(" ", 2)[2])


# Each row's real calls (mistake -> calls); each must raise exactly the row's class.
README_CALLS = {
    "not a tensor; a float, bool or string where an int or a flag goes": [
        lambda: pvt.append(make_cache(), np.ones([2, 1, 3, 8], np.float32)),
        lambda: pvt.truncate(make_cache(), "3"),
        lambda: pvt.reserve_slot(_slot_cache(), 0, 2.9),
        lambda: pvt.slot_cache(True, 4, 2, 8),
        lambda: pvt.attention_with_kvcache(rand([1, 1, 8]), _slot_cache(), _slot_cache(), [0, 0], causal="no",
                                           cu_seqlens_q=[0, 1]),
        lambda: pvt.reserve_slot(np.zeros([2, 8, 1, 8]), 0, 1)],
    "a copy or pickle of a `SlotKVCache` / `LayerKV`": [
        lambda: copy.deepcopy(pvt.slot_kv_cache(1, 2, 8, 1, 8, chunk_bytes=4096)),
        lambda: pickle.dumps(pvt.slot_kv_cache(1, 2, 8, 1, 8, chunk_bytes=4096).k(0))],
    "a bad value at an op's entry (dtype, shape, place, range, scale; a slot cache to a seq-major op, an 8-bit cache "
    "to an op that takes none)": [
        lambda: pvt.truncate(make_cache(), -1),
        lambda: pvt.append(make_cache(), rand([2, 1, 3, 8], "float16")),
        lambda: pvt.from_dense(rand([1, 2, 1, 4]), max_seq_len=2**63),
        lambda: pvt.decode_attention(rand([2, 1, 2, 8]), pvt.slot_cache(2, 6, 2, 8), pvt.slot_cache(2, 6, 2, 8)),
        lambda: pvt.from_dense(rand([1, 2, 1, 4]), cache_dtype="float8_e4m3fn", scale=paddle.zeros([1])),
        lambda: pvt.from_dense(pvt.from_dense(rand([1, 2, 1, 4]), cache_dtype="int8"))],
    "an input that requires gradients while grad is on": [
        lambda: pvt.decode_attention(_grad_q(), make_cache(), make_cache()),
        lambda: pvt.attention_with_kvcache(_grad_q()[0], _slot_cache(), _slot_cache(), [0, 0], cu_seqlens_q=[0, 2])],
    "a token id outside the vocabulary": [
        lambda: pvt.generate_inflight(_tiny_llama(), [[3, 100]], 4, max_batch=1)],
    "a slot-API mistake: a view of the cache, a slot id or length out of range, a write into rows another slot "
    "shares": [
        lambda: pvt.reserve_slot(_slot_cache()[1:], 0, 5),
        _write_into_shared_rows,
        lambda: pvt.reserve_slot(_slot_cache(), 2**64, 5),
        lambda: pvt.attention_with_kvcache(rand([1, 1, 8]), _slot_cache(), _slot_cache(), [0, 0], cu_seqlens_q=[0, 1],
                                           slot_ids=[5])],
    "past the reservation (`max_seq_len`)": [
        lambda: pvt.reserve_slot(_slot_cache(), 0, 9),
        _past_reservation],
    "memory ran out, or past `pvt.set_mapped_limit`": [
        lambda: pvt.from_dense(rand([1, 2, 1, 4]), max_seq_len=2**50),
        _over_the_limit(lambda: pvt.reserve_slot(pvt.slot_cache(2, 4096, 1, 8, chunk_bytes=4096), 0, 4096))],
    "a model the plugin cannot serve": [
        lambda: pvt.SlotModelRunner(paddle.nn.Linear(2, 2), 2, 8)],
    "an OS or driver failure": [_no_file_descriptor_left],
}


def test_readme_table_rows_are_the_provoked_ones():
    assert [m for m, _ in _readme_rows()] == list(README_CALLS)


@pytest.mark.parametrize("mistake, i", [(m, i) for m, calls in README_CALLS.items() for i in range(len(calls))])
def test_readme_table_row_raises_its_class(mistake, i):
    cls = dict(_readme_rows())[mistake]
    with pytest.raises(Exception) as info:
        README_CALLS[mistake][i]()
    assert type(info.value) is cls, (mistake, type(info.value), str(info.value))
    del info  # its traceback holds the caches
