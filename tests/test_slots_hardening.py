"""Issue 25, the Python half (and issue 30 point 4 on the CPU): reading a slot cache with ordinary
Paddle operations reads zeros where nothing was written; the plugin's own objects print a summary and
refuse to be copied or pickled; every integer argument is checked before any cast; gradients are
refused; and every refusal leaves the cache byte-identical.

The operations that killed the process run in a child each (tests/test_slots_hardening_native.py, from
the C++ half, has the children for views, seq-major ops, overflow and threads).
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import paddle
import paddle_vtensor as pvt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLOTS, S, HKV, HQ, D = 3, 16, 2, 4, 8


def run_child(code: str) -> str:
    """Runs ``code`` in a fresh process; it must exit by itself (no signal) with status 0."""
    prelude = f"import sys\nsys.path.insert(0, {ROOT!r})\nimport numpy as np, paddle, paddle_vtensor as pvt\n"
    proc = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"child failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


# ---- reading a slot cache on the CPU: zeros where nothing was written, the written rows as written

# The child writes rows 0..4 of slot 1 (values 1..80) and expects exactly those, zeros elsewhere.
READ_PRELUDE = """
paddle.set_device("cpu")
k = pvt.slot_cache(3, 5000, 2, 8, chunk_bytes=4096); v = pvt.slot_cache(3, 5000, 2, 8, chunk_bytes=4096)
rows = np.arange(1, 81, dtype=np.float32).reshape(5, 2, 8)
for c in (k, v):
    pvt.reserve_slot(c, 1, 5)
pvt.attention_with_kvcache(paddle.ones([5, 2, 8]), k, v, paddle.zeros([3], "int32"), k_new=paddle.to_tensor(rows),
                           v_new=paddle.to_tensor(rows), cu_seqlens_q=[0, 5], slot_ids=[1])
want = np.zeros(k.shape, np.float32)  # [3, rows, 2, 8]: rows = 5000 padded to whole chunks
want[1, :5] = rows
def same(got, ref):
    assert np.array_equal(np.asarray(got), ref), "differs from zeros + the written rows"
    print("SAME")
"""

READS = {
    "print": "print(k); s = str(k); assert s.startswith(f'Tensor(shape={list(k.shape)}'), s[:80]; print('SAME')",
    "numpy": "same(k.numpy(), want)",
    "slice_numpy": "same(paddle.slice(k, [0, 1], [1, 0], [2, 7]).numpy(), want[1:2, 0:7]); same(k[2, 4990:].numpy(), want[2, 4990:])",
    "sum": "assert float(paddle.sum(k)) == float(want.sum()) == 3240.0; print('SAME')",
    "clone": "same(k.clone().numpy(), want)",
    "deepcopy": "import copy; same(copy.deepcopy(k).numpy(), want)",
    "paddle_save": "import tempfile, os; p = os.path.join(tempfile.mkdtemp(), 'k.pd'); paddle.save(k, p); same(paddle.load(p).numpy(), want)",
}


@pytest.mark.parametrize("name", sorted(READS))
def test_reading_a_slot_cache_reads_zeros_and_the_written_rows(name):
    assert "SAME" in run_child(READ_PRELUDE + READS[name])


# ---- the plugin's own objects: a summary, never the storage; no copy, no pickle


def test_slot_objects_print_a_summary_and_refuse_copies():
    out = run_child("""
        import copy, pickle, tempfile, os
        paddle.set_device("cpu")
        cache = pvt.slot_kv_cache(2, 3, 16, 2, 8, chunk_bytes=4096)
        pvt.reserve_slot(cache, 1, 5)
        print(repr(cache)); print(repr(cache.k(1))); print(cache.v(0))
        refusals = {"deepcopy": lambda x: copy.deepcopy(x), "pickle": lambda x: pickle.dumps(x),
                    "paddle_save": lambda x: paddle.save(x, os.path.join(tempfile.mkdtemp(), "c.pd"))}
        for obj in (cache, cache.k(1)):
            for name, call in refusals.items():
                try:
                    call(obj)
                except TypeError as e:
                    assert "read_slot" in str(e), str(e)
                    print("REFUSED", type(obj).__name__, name)
                else:
                    raise AssertionError(f"{name} of {type(obj).__name__} was not refused")
        layer = cache.k(1)
        assert copy.copy(layer) is layer and copy.copy(cache) is cache  # shallow: the one cache, harmless
    """)
    lines = [ln for ln in out.splitlines() if ln.startswith(("SlotKVCache(", "LayerKV(", "REFUSED"))]
    row = 2 * 2 * 2 * 8 * 4  # layers x K/V x heads x head_dim x 4 bytes
    mapped = f"tokens mapped 5, mapped_bytes {-(-5 * row // 4096) * 4096}"
    assert lines[0] == ("SlotKVCache(num_slots 3, max_seq_len 16, num_layers 2, num_kv_heads 2, head_dim 8, "
                        f"dtype float32, place Place(cpu), {mapped})")
    assert lines[1].startswith("LayerKV(layer 1, K, num_slots 3,") and lines[1].endswith(f"{mapped})")
    assert lines[2].startswith("LayerKV(layer 0, V, ")
    assert all(len(ln) < 200 for ln in lines[:3])  # never the storage tensor's values
    assert sum(ln.startswith("REFUSED") for ln in lines) == 6


# ---- every integer argument checked before any cast; the cache byte-identical after each refusal


def make_caches():
    k = pvt.slot_cache(SLOTS, S, HKV, D, chunk_bytes=4096)
    v = pvt.slot_cache(SLOTS, S, HKV, D, chunk_bytes=4096)
    for c in (k, v):
        pvt.reserve_slot(c, 0, 6)
        pvt.reserve_slot(c, 1, 4)
    rng = np.random.default_rng(5)
    kn = paddle.to_tensor(rng.standard_normal([9, HKV, D]).astype(np.float32))
    pvt.attention_with_kvcache(paddle.ones([9, HQ, D]), k, v, paddle.zeros([SLOTS], "int32"), k_new=kn, v_new=kn * 2,
                               cu_seqlens_q=[0, 5, 9], slot_ids=[0, 1])
    return k, v


def snapshot(k, v):
    mapped = [pvt.slot_info(c)["mapped_tokens"].tolist() for c in (k, v)]
    rows = [pvt.read_slot(c, s, m[s]).numpy().tobytes() for c, m in zip((k, v), mapped) for s in range(SLOTS)]
    return mapped, rows, [pvt.slot_info(c)["mapped_bytes"] for c in (k, v)]


def attend(k, v, lens=(5, 4, 0), slot_ids=(1,), cu=(0, 1), new=True, total=1, **kw):
    one = paddle.full([total, HKV, D], 3.0)
    return pvt.attention_with_kvcache(paddle.ones([total, HQ, D]), k, v, lens, k_new=one if new else None,
                                      v_new=one if new else None, cu_seqlens_q=cu, slot_ids=slot_ids, **kw)


BAD = [
    # (call, exception class, message)
    (lambda k, v: pvt.slot_cache(2.9, 4, 2, 8), TypeError, "num_slots must be an int, got float 2.9"),
    (lambda k, v: pvt.slot_cache(True, 4, 2, 8), TypeError, "num_slots must be an int, got bool"),
    (lambda k, v: pvt.slot_cache(2, 4, 2, 8, chunk_bytes=4096.0), TypeError, "chunk_bytes must be an int"),
    (lambda k, v: pvt.slot_cache(2, 0, 2, 8), pvt.SlotError, r"max_seq_len must be in \[1, "),
    (lambda k, v: pvt.slot_kv_cache(2, 3, 16, 2, np.float32(8)), TypeError, "head_dim must be an int"),
    (lambda k, v: pvt.reserve_slot(k, 0, 2.9), TypeError, "tokens must be an int, got float 2.9"),
    (lambda k, v: pvt.reserve_slot(k, 2**64, 5), pvt.SlotError, "slot=18446744073709551616 does not fit in 64 bits"),
    (lambda k, v: pvt.reserve_slot(k, paddle.to_tensor(1.0), 5), TypeError, "slot must be an int, got a paddle.float32"),
    (lambda k, v: pvt.reserve_slot(k, np.bool_(True), 5), TypeError, "slot must be an int, got bool"),
    (lambda k, v: pvt.reserve_slot(k.reshape([SLOTS * 2, k.shape[1] // 2, HKV, D]), 0, 5), pvt.SlotError,
     r"is a view of a slot cache .* not a slot cache itself"),
    (lambda k, v: pvt.reserve_slot(k[1:], 0, 5), pvt.SlotError, "not a slot cache"),
    (lambda k, v: pvt.reserve_slot(paddle.zeros([SLOTS, S, HKV, D]), 0, 5), pvt.SlotError, "is not a slot cache"),
    (lambda k, v: pvt.reserve_slot(k.numpy(), 0, 5), TypeError, "expected a slot cache"),
    (lambda k, v: pvt.release_slot(k, 2**64 + 1), pvt.SlotError, "does not fit in 64 bits"),
    (lambda k, v: pvt.release_slot(k, True), TypeError, "slot must be an int, got bool"),
    (lambda k, v: pvt.read_slot(k, 0, 2.5), TypeError, "tokens must be an int"),
    (lambda k, v: pvt.slot_info(k.reshape([SLOTS, k.shape[1] * HKV, D])), pvt.SlotError, "not a slot cache itself"),
    (lambda k, v: attend(k, v, slot_ids=np.array([2**32 + 1])), pvt.SlotError,
     r"slot_ids must be in \[-2147483648, 2147483647\] \(int32\), got 4294967297"),
    (lambda k, v: attend(k, v, slot_ids=[2**70]), pvt.SlotError, "slot_ids must be in"),
    (lambda k, v: attend(k, v, slot_ids=[1.0]), TypeError, "slot_ids must hold integers, got float64"),
    (lambda k, v: attend(k, v, slot_ids=[True]), TypeError, "slot_ids must hold integers, got bool"),
    (lambda k, v: attend(k, v, cu=np.array([0, 2**32 + 1])), pvt.SlotError, "cu_seqlens_q must be in"),
    (lambda k, v: attend(k, v, lens=np.array([5, 2**31 + 4, 0])), pvt.SlotError, "cache_seqlens must be in"),
    (lambda k, v: attend(k, v, causal="no"), TypeError, "causal must be a bool, got str"),
    (lambda k, v: attend(k, v, causal=1), TypeError, "causal must be a bool, got int"),
    (lambda k, v: attend(k, v, max_seqlen_q=10**20), pvt.SlotError, r"max_seqlen_q must be in \[0, 2147483647\]"),
    (lambda k, v: attend(k, v, max_seqlen_k=2.5), TypeError, "max_seqlen_k must be an int"),
    (lambda k, v: attend(k, v, softmax_scale=1e39), pvt.SlotError, "softmax_scale must be finite in float32"),
    (lambda k, v: attend(k, v, softmax_scale="0.3"), TypeError, "softmax_scale must be a float"),
    (lambda k, v: attend(k, v, slot_ids=[7], new=False), pvt.SlotError, r"slot id 7 is out of range \[0, 3\)"),
]


@pytest.mark.parametrize("i", range(len(BAD)))
def test_bad_argument_is_refused_and_cache_kept(i):
    call, cls, match = BAD[i]
    k, v = make_caches()
    before = snapshot(k, v)
    with pytest.raises(cls, match=match):
        call(k, v)
    assert snapshot(k, v) == before


def test_snapshot_sees_a_write():
    """The check above can fail: a valid call (slot 1, one new token) changes the snapshot."""
    k, v = make_caches()
    before = snapshot(k, v)
    pvt.reserve_slot(k, 1, 5)
    pvt.reserve_slot(v, 1, 5)
    attend(k, v)
    assert snapshot(k, v) != before


def test_a_cache_reshaped_in_place_is_refused_after_it_was_accepted():
    """The slot functions remember the tensors they checked (the check costs a C lookup); a tensor
    reshaped in place afterwards is checked again, and refused."""
    k = pvt.slot_cache(SLOTS, S, HKV, D, chunk_bytes=4096)
    pvt.reserve_slot(k, 1, 3)
    rows = k.shape[1]
    k.reshape_([SLOTS * 2, rows // 2, HKV, D])
    with pytest.raises(pvt.SlotError, match=rf"the tensor \(shape \[6, {rows // 2}, 2, 8\]\) is a view of a slot cache"):
        pvt.reserve_slot(k, 0, 1)
    k.reshape_([SLOTS, rows, HKV, D])
    pvt.reserve_slot(k, 0, 1)
    assert pvt.slot_info(k)["mapped_tokens"].tolist() == [1, 3, 0]


def test_numpy_and_tensor_integers_are_ints():
    k, v = make_caches()
    pvt.reserve_slot(k, np.int64(2), paddle.to_tensor(3))
    assert pvt.slot_info(k)["mapped_tokens"].tolist() == [6, 4, 3]
    assert pvt.read_slot(k, np.int32(2), np.uint8(3)).shape == [3, HKV, D]


def test_layer_kv_checks_its_layer():
    cache = pvt.slot_kv_cache(2, SLOTS, S, HKV, D, chunk_bytes=4096)
    with pytest.raises(TypeError, match="layer must be an int, got float"):
        cache.k(1.5)
    with pytest.raises(pvt.SlotError, match=r"layer must be in \[0, 1\], got 2"):
        cache.v(2)
    with pytest.raises(pvt.SlotError, match="storage must be a SlotKVCache's storage"):
        pvt.LayerKV(pvt.slot_cache(SLOTS, S, HKV, D), 0, 0)
    with pytest.raises(pvt.SlotError, match=r"SlotKVCache: the storage must be a slot cache .* got shape \[3, \d+, 2, 8\]"):
        pvt.SlotKVCache(pvt.slot_cache(SLOTS, S, HKV, D))
    with pytest.raises(pvt.SlotError, match="SlotKVCache: the tensor is not a slot cache"):
        pvt.SlotKVCache(paddle.zeros([SLOTS, S, 2, 2, HKV, D]))


# ---- gradients: refused like decode_attention's, accepted under no_grad


def test_attention_with_kvcache_refuses_gradients():
    k, v = make_caches()
    before = snapshot(k, v)
    for name in ("q", "k_new"):
        q, kn = paddle.ones([1, HQ, D]), paddle.full([1, HKV, D], 3.0)
        (q if name == "q" else kn).stop_gradient = False
        with pytest.raises(ValueError, match=r"requires gradients \(stop_gradient=False\)"):
            pvt.attention_with_kvcache(q, k, v, [5, 4, 0], k_new=kn, v_new=kn, cu_seqlens_q=[0, 1], slot_ids=[2])
        assert snapshot(k, v) == before
    with paddle.no_grad():
        out = pvt.attention_with_kvcache(q, k, v, [5, 4, 0], k_new=kn, v_new=kn, cu_seqlens_q=[0, 1], slot_ids=[0])
    assert out.shape == [1, HQ, D]


def test_merge_refuses_gradients():
    outs, lses = [paddle.ones([2, 3, 4]) for _ in range(2)], [paddle.zeros([2, 3]) for _ in range(2)]
    lses[1].stop_gradient = False
    with pytest.raises(ValueError, match=r"merge_attention_states: an input requires gradients"):
        pvt.merge_attention_states(outs, lses)
    with paddle.no_grad():
        out, lse = pvt.merge_attention_states(outs, lses)
    np.testing.assert_allclose(out.numpy(), 1.0)
    np.testing.assert_allclose(lse.numpy(), np.log(2.0), rtol=1e-6)
