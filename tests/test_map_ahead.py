"""Mapping ahead in the background (issue 30 point 2, paddle_vtensor/map_ahead.py) on the host:
a seeded sequence of batches queued with reserve_slots_async, mixed with releases, equals the same
reservations made synchronously on a twin cache (mapped tokens and mapped bytes) after every step;
a batch that passes the mapped limit halfway raises at wait() with every slot as before; bad input
is refused at the call and queues nothing (tests/test_inflight.py runs generate_inflight, which
queues every next step on the mapper, against solo greedy runs); and (issue 30 point 4 on the CPU) ordinary Paddle reads of a
VTensor in a child process either work (the written values) or raise, never kill the process.
"""
import random

import numpy as np
import paddle
import pytest

import paddle_vtensor as pvt
from paddle_vtensor.map_ahead import pending_tickets
from test_slots_hardening import run_child

SLOTS, MAX, H, D = 6, 300, 2, 8


def _cache():
    return pvt.slot_cache(SLOTS, MAX, H, D, chunk_bytes=4096, place="cpu")


def _state(c):
    info = pvt.slot_info(c)
    return info["mapped_tokens"].tolist(), info["mapped_bytes"]


@pytest.mark.parametrize("prefetch", [False, True])
def test_batches_equal_synchronous_reservations(prefetch):
    a, b = _cache(), _cache()
    rng = random.Random(3)
    model = [0] * SLOTS
    for step in range(150):
        slots = [rng.randrange(SLOTS) for _ in range(rng.randint(1, 5))]
        lengths = [rng.randint(0, MAX) for _ in slots]
        ticket = pvt.reserve_slots_async(a, slots, lengths, prefetch=prefetch)
        for s, n in zip(slots, lengths):
            pvt.reserve_slot(b, s, n)
            model[s] = max(model[s], n)
        if step % 4 == 0:  # a release queued right after the batch runs after it
            s = rng.randrange(SLOTS)
            pvt.release_slot(a, s)
            pvt.release_slot(b, s)
            model[s] = 0
        if step % 2 == 0 or prefetch:  # a prefetch is waited for by release and share only
            ticket.wait()
        else:
            del ticket  # never waited for: dropped, the batch still runs before the next call
        pvt.reserve_slot(a, 0, 0)  # any later call on the cache sees the batch done
        assert _state(a) == _state(b), step
        assert _state(a)[0] == model, step
    assert pending_tickets() == 0


def test_a_failed_batch_raises_at_wait_and_changes_nothing():
    c = _cache()
    pvt.reserve_slot(c, 1, 10)
    before = _state(c)
    mapped = pvt.memory_stats("cpu")["mapped_bytes"]
    pvt.set_mapped_limit(mapped + 3 * 4096, "cpu")  # 64-byte rows: slot 1 needs 1 more page, slot 2 four
    try:
        ticket = pvt.reserve_slots_async(c, [1, 2, 4], [100, 250, 300])  # slot 2 passes the limit
        with pytest.raises(pvt.VTensorOutOfMemoryError, match="limit"):
            ticket.wait()
    finally:
        pvt.set_mapped_limit(0, "cpu")
    assert _state(c) == before
    assert pvt.memory_stats("cpu")["mapped_bytes"] == mapped
    ticket.wait()  # a second wait returns at once
    assert ticket.done()


def test_a_failed_prefetch_keeps_the_slots_before_the_failure():
    c = _cache()
    pvt.reserve_slot(c, 1, 10)
    mapped = pvt.memory_stats("cpu")["mapped_bytes"]
    pvt.set_mapped_limit(mapped + 3 * 4096, "cpu")  # slot 1 needs 1 more page, slot 2 four: it fails
    try:
        ticket = pvt.reserve_slots_async(c, [1, 2, 4], [100, 250, 300], prefetch=True)
        with pytest.raises(pvt.VTensorOutOfMemoryError, match="limit"):
            ticket.wait()
    finally:
        pvt.set_mapped_limit(0, "cpu")
    assert _state(c)[0] == [0, 100, 0, 0, 0, 0]  # slot 1 mapped ahead, 2 as before, 4 not reached
    assert pvt.memory_stats("cpu")["mapped_bytes"] == mapped + 4096


@pytest.mark.parametrize("slots, lengths, error, match", [
    ([6], [1], pvt.SlotError, "out of range"),
    ([-1], [1], pvt.SlotError, "out of range"),
    ([0], [-1], pvt.SlotError, "tokens must be"),
    ([0], [MAX + 1], pvt.ReservationFullError, "max_seq_len"),
    ([0, 1], [1], pvt.SlotError, "one length per slot"),
    ([0], [1.5], TypeError, "must be an int"),
])
def test_bad_batches_are_refused_at_the_call(slots, lengths, error, match):
    c = _cache()
    with pytest.raises(error, match=match):
        pvt.reserve_slots_async(c, slots, lengths)
    assert _state(c) == ([0] * SLOTS, 0)
    assert pending_tickets() == 0


def test_prefetch_must_be_a_bool():
    c = _cache()
    with pytest.raises(TypeError, match="prefetch must be True or False"):
        pvt.reserve_slots_async(c, [0], [1], prefetch="no")  # truthy: would have queued a prefetch
    assert _state(c) == ([0] * SLOTS, 0)
    assert pending_tickets() == 0


def test_not_a_slot_cache_is_refused():
    with pytest.raises(TypeError, match="slot cache"):
        pvt.reserve_slots_async(np.zeros(3), [0], [1])


# ---- a VTensor read by ordinary Paddle operations (issue 30 point 4, CPU): works or raises, no signal

VT_PRELUDE = """
paddle.set_device("cpu")
x = np.arange(2 * 5 * 2 * 4, dtype=np.float32).reshape(2, 5, 2, 4)
k = pvt.from_dense(paddle.to_tensor(x), max_seq_len=100000)
k = pvt.reserve_one_token(k, paddle.full([2, 1, 2, 4], 7.0))
want = np.concatenate([x, np.full((2, 1, 2, 4), 7.0, np.float32)], axis=1)
def same(fn, ref):
    try:
        got = fn()
    except Exception as e:  # a refusal is fine; a wrong value or a signal is not
        print("RAISED", type(e).__name__)
        return
    assert np.array_equal(np.asarray(got), ref), "differs from the written values"
    print("SAME")
"""

VT_READS = {
    "print": "print(k); print('SAME')",
    "numpy": "same(lambda: k.numpy(), want)",
    "slice": "same(lambda: k[:, 2:6].numpy(), want[:, 2:6])",
    "sum": "same(lambda: float(paddle.sum(k)), want.sum())",
    "clone": "same(lambda: k.clone().numpy(), want)",
}


@pytest.mark.parametrize("name", sorted(VT_READS))
def test_reading_a_vtensor_works_or_raises(name):
    out = run_child(VT_PRELUDE + VT_READS[name])
    assert "SAME" in out or "RAISED" in out


def test_zero_reads_knob_on_the_host():
    assert pvt.zero_reads("cpu") == 0  # the host reads zeros without a cover
    pvt.set_zero_reads(64 << 20, "cpu")  # accepted and ignored
    assert pvt.zero_reads("cpu") == 0
    with pytest.raises(ValueError, match=">= 0"):
        pvt.set_zero_reads(-1, "cpu")
