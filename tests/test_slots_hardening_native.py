"""Issue 25, the C++ half: the slot ops and the seq-major ops refuse what would crash or corrupt.

Each process-killing class runs in a child process (a crash there fails the test instead of killing
pytest): the child must exit normally, having caught the expected error. The refusals that could
change a cache are checked in process: the cache's mapped rows are byte-identical afterwards.
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
SLOTS, S, HKV, HQ, D = 4, 64, 2, 4, 8

PRELUDE = f"""
import sys
sys.path.insert(0, {ROOT!r})
import numpy as np
import paddle
import paddle_vtensor as pvt
paddle.set_device("cpu")

def refused(call, *texts):
    try:
        call()
    except Exception as e:
        missing = [t for t in texts if t not in str(e)]
        assert not missing, f"{{type(e).__name__}}: {{e}} lacks {{missing}}"
        print("REFUSED", type(e).__name__)
        return
    raise AssertionError("not refused")
"""


def run_child(code: str, timeout: int = 300) -> str:
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    assert proc.returncode >= 0, f"child killed by signal {-proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"child failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


# ---- process-killing classes, one child each

CRASHES = {
    # The op took the slot layout from the view's dims: SIGSEGV in append_varlen_cpu.
    "view_2x128": ("""
        k = pvt.slot_cache(4, 64, 2, 8, chunk_bytes=4096); v = pvt.slot_cache(4, 64, 2, 8, chunk_bytes=4096)
        for c in (k, v): pvt.reserve_slot(c, 1, 64)
        one = paddle.ones([1, 2, 8])
        refused(lambda: pvt.attention_with_kvcache(one, k.reshape([2, 128, 2, 8]), v.reshape([2, 128, 2, 8]),
                paddle.zeros([2], "int32"), k_new=one, v_new=one, cu_seqlens_q=[0, 1], slot_ids=[1]),
                "vtensor_slot_attention: k_cache is a view of a slot cache", "shape [2, 128, 2, 8]")
    """, "SlotError"),
    "decode_attention": ("""
        refused(lambda: pvt.decode_attention(paddle.ones([2, 1, 2, 8]), pvt.slot_cache(2, 6, 2, 8),
                pvt.slot_cache(2, 6, 2, 8)), "vtensor_decode_attention: the key cache is a slot cache")
    """, "ValueError"),
    "decode_attention_lse": ("""
        refused(lambda: pvt.decode_attention(paddle.ones([2, 1, 2, 8]), pvt.slot_cache(2, 6, 2, 8),
                pvt.slot_cache(2, 6, 2, 8), return_lse=True), "is a slot cache")
    """, "ValueError"),
    "append": ("""
        refused(lambda: pvt.append(pvt.slot_cache(2, 6, 2, 8), paddle.ones([2, 1, 2, 8])),
                "vtensor_append: the cache is a slot cache")
    """, "ValueError"),
    "reserve_one_token": ("""
        refused(lambda: pvt.reserve_one_token(pvt.slot_cache(2, 6, 2, 8), paddle.ones([2, 1, 2, 8])),
                "vtensor_reserve_one_token: the cache is a slot cache")
    """, "ValueError"),
    "append_tokens_in_slot_cache": ("""
        refused(lambda: pvt.append(paddle.ones([2, 3, 2, 8]), pvt.slot_cache(2, 1, 2, 8)),
                "tokens is a slot cache")
    """, "ValueError"),
    "from_dense": ("""
        refused(lambda: pvt.from_dense(pvt.slot_cache(2, 6, 2, 8)), "vtensor_from_dense: x is a slot cache")
    """, "ValueError"),
    "truncate": ("""
        refused(lambda: pvt.truncate(pvt.slot_cache(2, 6, 2, 8), 1), "vtensor_truncate: the cache is a slot cache")
    """, "ValueError"),
    # The slot size wrapped to 0 and was divided by: SIGFPE.
    "size_overflow": ("""
        refused(lambda: pvt.slot_cache(1, 2**30, 65536, 65536), "InvalidArgument", "is too large")
        refused(lambda: pvt.slot_kv_cache(2**31, 1, 8, 2**31, 2**31), "a token row of shape", "too large")
    """, None),
}


@pytest.mark.parametrize("name", sorted(CRASHES))
def test_no_crash_in_child(name):
    code, error = CRASHES[name]
    out = run_child(code)
    assert "REFUSED" in out
    if error:
        assert f"REFUSED {error}" in out


# ---- refusals that must leave the cache byte-identical


def make_caches():
    """k, v with slots 0 and 1 reserved and written (values distinct per row)."""
    k = pvt.slot_cache(SLOTS, S, HKV, D, chunk_bytes=4096)
    v = pvt.slot_cache(SLOTS, S, HKV, D, chunk_bytes=4096)
    for c in (k, v):
        pvt.reserve_slot(c, 0, S)
        pvt.reserve_slot(c, 1, 20)
    rng = np.random.default_rng(25)
    for slot, n in ((0, S), (1, 20)):
        kn = paddle.to_tensor(rng.standard_normal([n, HKV, D]).astype(np.float32))
        vn = paddle.to_tensor(rng.standard_normal([n, HKV, D]).astype(np.float32))
        pvt.attention_with_kvcache(paddle.ones([n, HQ, D]), k, v, paddle.zeros([SLOTS], "int32"), k_new=kn,
                                   v_new=vn, cu_seqlens_q=[0, n], slot_ids=[slot])
    return k, v


def snapshot(k, v):
    mapped = [pvt.slot_info(c)["mapped_tokens"].tolist() for c in (k, v)]
    rows = [pvt.read_slot(c, s, m[s]).numpy().tobytes() for c, m in zip((k, v), mapped) for s in range(SLOTS)]
    return mapped, rows


def attend(k_cache, v_cache, lens, slot=2, **kw):
    new = paddle.full([3, HKV, D], 7.0)
    return pvt.attention_with_kvcache(paddle.ones([3, HQ, D]), k_cache, v_cache, paddle.to_tensor(lens, "int32"),
                                      k_new=new, v_new=new, cu_seqlens_q=[0, 3], slot_ids=[slot], **kw)


REFUSALS = {
    # Slot 2 of the view [8, 32, ...] is rows 0..31 of slot 1 of the cache: written silently before.
    "view_8x32": (lambda k, v: attend(k.reshape([8, 32, HKV, D]), v.reshape([8, 32, HKV, D]), [0] * 8),
                  r"k_cache is a view of a slot cache \(shape \[8, 32, 2, 8\]"),
    "view_slice_offset": (lambda k, v: attend(k[1:], v[1:], [0] * 3, slot=0), "is a view of a slot cache"),
    "view_slice_prefix": (lambda k, v: attend(k[:2], v[:2], [0] * 2, slot=0), "is a view of a slot cache"),
    # 1e39 is finite in Python, inf as the op's float32 attribute: was refused after the append.
    "scale_inf_in_float32": (lambda k, v: attend(k, v, [0] * SLOTS, slot=0, softmax_scale=1e39),
                             "softmax_scale must be finite in float32"),
    "max_seqlen_q_past_int64": (lambda k, v: attend(k, v, [0] * SLOTS, slot=0, max_seqlen_q=10**20),
                                "max_seqlen_q"),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusal_leaves_cache_identical(name):
    k, v = make_caches()
    call, match = REFUSALS[name]
    before = snapshot(k, v)
    with pytest.raises(Exception, match=match) as info:
        call(k, v)
    assert isinstance(info.value, (pvt.SlotError, ValueError)), type(info.value)
    after = snapshot(k, v)
    assert after[0] == before[0]
    assert after[1] == before[1]


def test_refusal_snapshot_sees_a_write():
    """The snapshot used above tells a changed cache: a valid call on slot 1 changes it."""
    k, v = make_caches()
    before = snapshot(k, v)
    attend(k, v, [5, 5, 0, 0], slot=1)
    assert snapshot(k, v)[1] != before[1]


# ---- the C entry points: one code per mistake, one prefix, sane numbers


def test_reserve_release_codes_and_messages():
    k = pvt.slot_cache(SLOTS, S, HKV, D, chunk_bytes=4096)
    with pytest.raises(pvt.SlotError) as bad_slot:
        pvt.reserve_slot(k, 9, 5)
    assert str(bad_slot.value) == "reserve_slot: InvalidArgument: slot 9 is out of range [0, 4)"
    with pytest.raises(pvt.SlotError) as bad_release:
        pvt.release_slot(k, -1)
    assert str(bad_release.value) == "release_slot: InvalidArgument: slot -1 is out of range [0, 4)"
    with pytest.raises(pvt.SlotError, match=r"^reserve_slot: InvalidArgument: tokens must be in \[0, max_seq_len=64\], got -3$"):
        pvt.reserve_slot(k, 0, -3)
    with pytest.raises(pvt.ReservationFullError) as past:
        pvt.reserve_slot(k, 0, S + 1)
    assert str(past.value).count("reserve_slot") == 1 and "OutOfRange: slot 0: 65 tokens is past max_seq_len=64" in str(past.value)
    assert pvt.slot_info(k)["mapped_bytes"] == 0


def test_view_pointer_refused_by_entry_points():
    k = pvt.slot_cache(SLOTS, S, HKV, D, chunk_bytes=4096)
    with pytest.raises(ValueError, match="a view inside a slot cache, not the cache itself"):
        pvt.reserve_slot(k[1:], 0, 5)  # its data pointer is slot 1's first row, not the cache's base
    assert pvt.slot_info(k)["mapped_tokens"].tolist() == [0] * SLOTS


def test_reservation_past_address_space_is_out_of_memory():
    with pytest.raises(Exception, match="vtensor_slot_cache: OutOfMemory: mmap"):
        pvt.slot_cache(1, 2**31 - 1, 2**20, 64)


def test_merge_zero_size_parts():
    with pytest.raises(Exception, match=r"vtensor_merge_attention_states: outputs must not be empty .*got shape \[0, 2, 8\]"):
        pvt.merge_attention_states([paddle.ones([0, 2, 8])] * 2, [paddle.ones([0, 2])] * 2)


def test_merge_refuses_slot_cache_parts():
    k = pvt.slot_cache(2, 6, 2, 8)
    lse = paddle.zeros(list(k.shape[:3]))  # [2, padded rows, 2]: the shape check passes, the slot check refuses
    with pytest.raises(Exception, match="an output is a slot cache"):
        pvt.merge_attention_states([k, k], [lse, lse])


# ---- threads: attention on slot 0 while another thread reserves and releases it

# Before the fix (the op read mapped_tokens, then wrote and read while release unmapped): a SIGSEGV
# in most runs, else outputs that were not their V value (145 of 186 in one run).
THREADS = """
import threading, time
T, ITER = 256, {iterations}
k = pvt.slot_cache(2, 1024, 2, 64, chunk_bytes=4096); v = pvt.slot_cache(2, 1024, 2, 64, chunk_bytes=4096)
stop = threading.Event()
counts = {{"attended": 0, "refused": 0}}
wrong = []

def churn():
    i = 0
    while not stop.is_set():
        for c in (k, v):
            pvt.reserve_slot(c, 0, T + i % 5)
        time.sleep(0.0005 * (i % 4))  # mapped for about an attention call, sometimes not at all
        for c in (k, v):
            pvt.release_slot(c, 0)
        i += 1

def attend():
    q, kn = paddle.ones([T, 4, 64]), paddle.full([T, 2, 64], 0.5)
    for i in range(ITER):
        c = float(i % 13)
        try:
            out = pvt.attention_with_kvcache(q, k, v, paddle.zeros([2], "int32"), k_new=kn,
                                             v_new=paddle.full([T, 2, 64], c), cu_seqlens_q=[0, T], slot_ids=[0])
        except pvt.SlotError as e:
            assert "are mapped" in str(e), str(e)
            counts["refused"] += 1
            continue
        counts["attended"] += 1
        if not np.allclose(out.numpy(), c, rtol=1e-5, atol=1e-5):  # every V row is c: so is the output
            wrong.append(i)

th = threading.Thread(target=churn)
th.start()
try:
    attend()
finally:
    stop.set()
    th.join()
for c in (k, v):
    pvt.release_slot(c, 0)
assert not wrong, f"{{len(wrong)}} outputs differ from their V value"
print("COUNTS", counts["attended"], counts["refused"], pvt.slot_info(k)["mapped_bytes"])
"""


def test_threads_attend_while_reserving_and_releasing():
    out = run_child(THREADS.format(iterations=300), timeout=600)
    line = next(ln for ln in out.splitlines() if ln.startswith("COUNTS"))
    attended, refused, mapped = (int(x) for x in line.split()[1:])
    assert attended + refused == 300 and attended > 0
    assert mapped == 0
