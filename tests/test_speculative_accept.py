"""The accept/advance op against a numpy reference written from the rule, not from the kernel:
random batches (hypothesis, derandomized), eos and budget edges, and every bad input (a typed error
naming it, every tensor unchanged)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import paddle
import paddle_vtensor as pvt
from paddle_vtensor.generation.speculative_accept import accept_launches, speculative_accept

NUM_SLOTS = 6
CAPACITY = 64


def reference(draft, target, slots, tlen, dlen, out, out_len, finished, *, t_adv, d_adv, eos, pad):
    """What one step must do, sequence by sequence (numpy copies in, new arrays out)."""
    tlen, dlen, out, out_len, finished = tlen.copy(), dlen.copy(), out.copy(), out_len.copy(), finished.copy()
    n, k = draft.shape
    accepted = np.zeros(n, np.int32)
    nxt = np.full(n, pad, np.int64)
    for i in range(n):
        if finished[i]:
            continue
        a = 0
        for j in range(k):
            if draft[i, j] != target[i, j]:
                break
            a += 1
        emit = list(target[i, : a + 1])
        if eos is not None and eos in emit:
            emit = emit[: emit.index(eos) + 1]
            finished[i] = 1
        room = out.shape[1] - out_len[i]
        emit = emit[:room]
        out[i, out_len[i]: out_len[i] + len(emit)] = emit
        out_len[i] += len(emit)
        if out_len[i] == out.shape[1]:
            finished[i] = 1
        tlen[slots[i]] += a + t_adv
        dlen[slots[i]] += a + d_adv
        accepted[i] = a
        nxt[i] = target[i, a]
    return tlen, dlen, out, out_len, finished, accepted, nxt


def make_state(rng, n, k, max_new, vocab, agree):
    slots = rng.permutation(NUM_SLOTS)[:n].astype(np.int32)
    target = rng.integers(0, vocab, [n, k + 1]).astype(np.int64)
    draft = target[:, :k].copy()
    # Each sequence disagrees first at a random position (or never): per-sequence acceptance.
    for i in range(n):
        first_bad = rng.integers(0, k + 1) if not agree else k
        for j in range(first_bad, k):
            if rng.random() < 0.7 or j == first_bad:
                draft[i, j] = (target[i, j] + 1 + rng.integers(0, vocab - 1)) % vocab
    tlen = rng.integers(k + 2, 40, NUM_SLOTS).astype(np.int32)
    dlen = (tlen + k).astype(np.int32)  # the loop drafted k + 1 past (target length - 1)
    out_len = rng.integers(0, max_new, n).astype(np.int32)
    out = np.where(np.arange(max_new)[None, :] < out_len[:, None], rng.integers(0, vocab, [n, max_new]), 0)
    finished = (rng.random(n) < 0.2).astype(np.int32)
    return draft, target, slots, tlen, dlen, out.astype(np.int64), out_len, finished


def run_op(state, *, t_adv=1, d_adv=None, eos=None, pad=0, capacity=CAPACITY):
    draft, target, slots, tlen, dlen, out, out_len, finished = state
    k = draft.shape[1]
    d_adv = -k if d_adv is None else d_adv
    t = [paddle.to_tensor(x) for x in (draft, target, slots, tlen, dlen, out, out_len, finished)]
    n = draft.shape[0]
    accepted = paddle.full([n], -7, "int32")
    nxt = paddle.full([n], -7, "int64")
    flag = paddle.zeros([1], "int32")
    speculative_accept(*t, accepted, nxt, flag, target_capacity=capacity, draft_capacity=capacity,
                       target_advance=t_adv, draft_advance=d_adv, eos_token_id=eos, pad_token_id=pad)
    got = [x.numpy() for x in t[3:]] + [accepted.numpy(), nxt.numpy()]
    want = reference(draft, target, slots, tlen, dlen, out, out_len, finished, t_adv=t_adv, d_adv=d_adv,
                     eos=eos, pad=pad)
    return got, want, flag.numpy()


NAMES = ("target_seqlens", "draft_seqlens", "out_ids", "out_len", "finished", "accepted", "next_tokens")


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, NUM_SLOTS), k=st.integers(1, 6), max_new=st.integers(1, 12), vocab=st.integers(2, 9),
       agree=st.booleans(), eos=st.one_of(st.none(), st.integers(0, 8)), seed=st.integers(0, 2**16))
def test_random_steps_match_numpy(n, k, max_new, vocab, agree, eos, seed):
    rng = np.random.default_rng(seed)
    got, want, flag = run_op(make_state(rng, n, k, max_new, vocab, agree), eos=eos, pad=vocab)
    for name, g, w in zip(NAMES, got, want):
        np.testing.assert_array_equal(g, w, err_msg=name)
    assert flag[0] == 0


def test_per_sequence_acceptance_and_lengths():
    # Three sequences accept 4, 1 and 0 of k = 4 drafts in one step.
    draft = np.array([[1, 2, 3, 4], [1, 2, 3, 4], [5, 5, 5, 5]], np.int64)
    target = np.array([[1, 2, 3, 4, 9], [1, 7, 3, 4, 9], [6, 5, 5, 5, 5]], np.int64)
    slots = np.array([2, 0, 1], np.int32)
    tlen = np.array([10, 20, 30, 0, 0, 0], np.int32)
    dlen = tlen + 4
    state = (draft, target, slots, tlen, dlen, np.zeros([3, 8], np.int64), np.zeros(3, np.int32),
             np.zeros(3, np.int32))
    (t, d, out, out_len, fin, acc, nxt), _, _ = run_op(state, d_adv=-4)
    np.testing.assert_array_equal(acc, [4, 1, 0])
    np.testing.assert_array_equal(t[:3], [10 + 1 + 1, 20 + 0 + 1, 30 + 4 + 1])
    np.testing.assert_array_equal(d[:3], [14 + 1 - 4, 24 + 0 - 4, 34 + 4 - 4])
    np.testing.assert_array_equal(out_len, [5, 2, 1])
    np.testing.assert_array_equal(out[0, :5], [1, 2, 3, 4, 9])
    np.testing.assert_array_equal(out[1, :2], [1, 7])
    np.testing.assert_array_equal(out[2, :1], [6])
    np.testing.assert_array_equal(nxt, [9, 7, 6])


def test_eos_stops_emission_and_budget_caps_it():
    draft = np.array([[3, 4, 5], [3, 4, 5]], np.int64)
    target = np.array([[3, 4, 5, 6], [3, 4, 5, 6]], np.int64)
    state = (draft, target, np.array([0, 1], np.int32), np.array([5, 5], np.int32), np.array([7, 7], np.int32),
             np.zeros([2, 3], np.int64), np.array([0, 1], np.int32), np.zeros(2, np.int32))
    (t, d, out, out_len, fin, acc, nxt), _, _ = run_op(state, eos=4, d_adv=-3)
    np.testing.assert_array_equal(out_len, [2, 3])  # seq 0 stops after eos 4; seq 1 fills its budget of 3
    np.testing.assert_array_equal(out[0], [3, 4, 0])
    np.testing.assert_array_equal(out[1], [0, 3, 4])
    np.testing.assert_array_equal(fin, [1, 1])
    np.testing.assert_array_equal(acc, [3, 3])  # acceptance counts the drafts, not the budget


def test_launch_counter_counts_host_launches():
    before = accept_launches("cpu")
    run_op(make_state(np.random.default_rng(0), 2, 3, 5, 7, False))
    assert accept_launches("cpu") == before + 1
    assert accept_launches("gpu") == 0


def _bad(state, **kw):
    return state, kw


def _good_state():
    return make_state(np.random.default_rng(3), 3, 4, 6, 5, False)


def _with(i, value):
    s = list(_good_state())
    s[i] = value
    s[7] = np.zeros_like(s[7])  # no finished sequences: each is checked
    return tuple(s)


BAD = [
    (lambda: _with(2, np.array([0, 1, NUM_SLOTS], np.int32)), {}, "slot 6.*outside"),
    (lambda: _with(2, np.array([0, -1, 2], np.int32)), {}, r"slot -1.*outside"),
    (lambda: _with(2, np.array([0, 2, 2], np.int32)), {}, "same slot"),
    (lambda: _with(3, np.full(NUM_SLOTS, CAPACITY, np.int32)), {}, "OutOfRange.*target slot's new length"),
    (lambda: _with(4, np.zeros(NUM_SLOTS, np.int32)), {"d_adv": -6}, "OutOfRange.*draft slot's new length"),
    (lambda: _with(6, np.array([0, 7, 0], np.int32)), {}, "out_len is outside"),
    (lambda: _with(2, np.array([0, 1, 2], np.int64)), {}, "slot_ids must be int32, got int64"),
    (lambda: _with(1, np.zeros([3, 4], np.int64)), {}, r"target_tokens must have shape \[3, 5\]"),
    (lambda: _with(6, np.zeros(2, np.int32)), {}, r"out_len must have shape \[3\]"),
    (lambda: _with(0, np.zeros([3, 0], np.int64)), {}, r"draft_tokens must be \[batch, k\] with batch, k >= 1"),
]


@pytest.mark.parametrize("make,kw,match", BAD)
def test_bad_inputs_raise_and_change_nothing(make, kw, match):
    state = make()
    draft, target, slots, tlen, dlen, out, out_len, finished = state
    t = [paddle.to_tensor(x) for x in state]
    n = draft.shape[0]
    accepted, nxt, flag = paddle.full([n], -7, "int32"), paddle.full([n], -7, "int64"), paddle.zeros([1], "int32")
    k = max(draft.shape[1], 1)
    # The one error table (paddle_vtensor.errors): a length past a cache's capacity is ReservationFullError,
    # every other refusal a bad input (ValueError).
    with pytest.raises(pvt.ReservationFullError if "OutOfRange" in match else ValueError, match=match):
        speculative_accept(*t, accepted, nxt, flag, target_capacity=CAPACITY, draft_capacity=CAPACITY,
                           target_advance=1, draft_advance=kw.get("d_adv", -k))
    for got, want in zip(t + [accepted, nxt, flag], list(state) + [np.full(n, -7), np.full(n, -7), [0]]):
        np.testing.assert_array_equal(got.numpy(), want)
