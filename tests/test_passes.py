"""vtensor_kv_cache_pass on small static programs, each checked against the same program run
without the pass (an independent reference: Paddle's own concat)."""
import logging

import numpy as np
import paddle
import pytest

import paddle_vtensor as pvt
from paddle_vtensor import passes

B, S, H, D = 2, 3, 2, 4


@pytest.fixture(autouse=True)
def _static_mode():
    passes.load()
    paddle.enable_static()
    yield
    paddle.disable_static()


def _fetch(value, name, col):
    paddle._pir_ops.fetch(value, name, col)


def _step_program(past_computed=False, second_cache=None):
    """A decode step in miniature: k [B,S,H,D] + x [B,1,H,D] -> concat (returned), a rotate-half
    style concat on the last axis, the cache's length read through shape, an attention-style
    transpose of the new cache."""
    main = paddle.static.Program()
    with paddle.static.program_guard(main):
        k = paddle.static.data("k", [B, S, H, D], "float32")
        x = paddle.static.data("x", [B, 1, H, D], "float32")
        past = k * 2.0 if past_computed else k
        k2 = paddle.concat([past, x], axis=1)
        rotated = paddle.concat([-x[..., D // 2:], x[..., : D // 2]], axis=-1)
        length = paddle.shape(k)[1]
        scores = paddle.transpose(k2, [0, 2, 1, 3]) * 2.0
        _fetch(k2, "k_out", 0)
        _fetch(rotated, "rotated", 1)
        _fetch(length, "length", 2)
        _fetch(scores, "scores", 3)
        if second_cache is not None:
            v = paddle.static.data("v", [B, S, H, D], "float32")
            v_past = v * 1.0 if second_cache == "computed" else v
            _fetch(paddle.concat([v_past, x], axis=1), "v_out", 4)
    return main


def _run(program, feed):
    exe = paddle.static.Executor(paddle.CPUPlace())
    return exe.run(program, feed=feed, fetch_list=[])


def _op_names(program):
    return [op.name() for op in program.global_block().ops]


def _storage(a):
    return np.ascontiguousarray(a.transpose(1, 0, 2, 3))


def test_append_is_rewritten_and_matches_the_program_without_the_pass():
    rng = np.random.default_rng(0)
    k = rng.standard_normal([B, S, H, D]).astype("float32")
    x = rng.standard_normal([B, 1, H, D]).astype("float32")
    ref = _run(_step_program(), {"k": k, "x": x})

    program = _step_program()
    assert passes.apply(program) == 1
    names = _op_names(program)
    assert names.count("custom_op.vtensor_append") == 1
    assert names.count("pd_op.concat") == 1  # the rotate-half concat is left alone
    report = passes.last_report()
    assert report["storage_inputs"] == ["k"]
    assert report["storage_outputs"] == ["pd_op.fetch 'k_out'"]

    out = _run(program, {"k": _storage(k), "x": x})
    np.testing.assert_array_equal(out[0], _storage(ref[0]))  # the cache comes back as [S, B, H, D]
    np.testing.assert_array_equal(out[1], ref[1])
    assert int(out[2]) == int(ref[2]) == S
    np.testing.assert_array_equal(out[3], ref[3])


def test_max_seq_len_and_chunk_bytes_reach_the_op():
    program = _step_program()
    passes.apply(program, max_seq_len=64, chunk_bytes=1 << 16)
    (append,) = [op for op in program.global_block().ops if op.name() == "custom_op.vtensor_append"]
    assert append.attrs()["max_seq_len"] == 64
    assert append.attrs()["chunk_bytes"] == 1 << 16


def test_bad_pass_attributes_are_rejected():
    with pytest.raises(ValueError, match="max_seq_len must be positive"):
        passes.apply(_step_program(), max_seq_len=0)


def test_a_program_without_a_cache_append_is_left_unchanged():
    main = paddle.static.Program()
    with paddle.static.program_guard(main):
        x = paddle.static.data("x", [B, 1, H, D], "float32")
        _fetch(paddle.concat([x, x], axis=-1), "rotated", 0)
        k = paddle.static.data("k", [B, S, H, D], "float32")
        _fetch(paddle.concat([k, x], axis=1).sum(), "not_a_cache", 1)  # only a reduction is returned
    before = str(main)
    assert passes.apply(main) == 0
    assert str(main) == before


def test_a_computed_past_leaves_the_program_unchanged_and_says_why(caplog):
    program = _step_program(past_computed=True)
    before = str(program)
    with caplog.at_level(logging.WARNING, logger="paddle_vtensor.passes"):
        assert passes.apply(program) == 0
    assert str(program) == before
    assert "returned as pd_op.fetch 'k_out'" in caplog.text
    assert "computed inside the program by pd_op.scale" in caplog.text
    assert passes.last_report()["refused"]


def test_one_refused_cache_leaves_every_cache_unchanged():
    program = _step_program(second_cache="computed")
    before = str(program)
    assert passes.apply(program) == 0
    assert str(program) == before
    (why,) = passes.last_report()["refused"]
    assert "returned as pd_op.fetch 'v_out'" in why


def test_new_tokens_that_are_themselves_a_cache_input_still_read_logically():
    # concat([x, x], axis=1) appends x to itself: x becomes a storage input, and the tokens operand
    # must get x back in logical layout.
    main = paddle.static.Program()
    with paddle.static.program_guard(main):
        x = paddle.static.data("x", [B, 1, H, D], "float32")
        _fetch(paddle.concat([x, x], axis=1), "xx", 0)
    x = np.random.default_rng(2).standard_normal([B, 1, H, D]).astype("float32")
    assert passes.apply(main) == 1
    (copy,) = passes.last_report()["copies"]
    assert copy.startswith("custom_op.vtensor_append reads the cache in logical")
    (out,) = _run(main, {"x": _storage(x)})
    np.testing.assert_array_equal(out, _storage(np.concatenate([x, x], axis=1)))


def _loop_program(variant, steps=4):
    """A generation loop in miniature: the cache is carried through a while loop, one token per
    iteration. variant: 'fed' (the initial cache is an input), 'assign' (the body returns a copy of
    the new cache, as a carried value may be), 'computed' (the initial cache is computed)."""
    main = paddle.static.Program()
    with paddle.static.program_guard(main):
        k = paddle.static.data("k", [B, S, H, D], "float32")
        x = paddle.static.data("x", [B, 1, H, D], "float32")
        n = paddle.full([], steps, "int64")
        i = paddle.full([], 0, "int64")
        k0 = k * 1.0 if variant == "computed" else k

        def cond(i, cache, token):
            return i < n

        def body(i, cache, token):
            cache = paddle.concat([cache, token], axis=1)
            if variant == "assign":
                cache = paddle.assign(cache)
            return i + 1, cache, token + 1.0

        _, final, _ = paddle.static.nn.while_loop(cond, body, [i, k0, x])
        _fetch(final, "k_out", 0)
        _fetch(paddle.shape(final), "shape", 1)
    return main


def _while_body_ops(program):
    (loop,) = [op for op in program.global_block().ops if op.name() == "pd_op.while"]
    return [op.name() for op in loop.as_while_op().body().ops]


@pytest.mark.parametrize("variant", ["fed", "assign", "computed"])
def test_loop_carried_cache_is_appended_in_place(variant):
    steps = 4
    rng = np.random.default_rng(1)
    k = rng.standard_normal([B, S, H, D]).astype("float32")
    x = rng.standard_normal([B, 1, H, D]).astype("float32")
    ref = _run(_loop_program(variant, steps), {"k": k, "x": x})

    program = _loop_program(variant, steps)
    assert passes.apply(program) == 1
    body = _while_body_ops(program)
    assert "custom_op.vtensor_append" in body
    assert "pd_op.concat" not in body and "pd_op.assign" not in body
    report = passes.last_report()
    assert report["assigns_removed"] == (1 if variant == "assign" else 0)
    assert any("vtensor_from_dense" in c for c in report["copies"]) == (variant == "computed")

    before = pvt.memory_stats("cpu")["map_calls"]
    out = _run(program, {"k": k if variant == "computed" else _storage(k), "x": x})
    # One cache for the whole loop: the first append (or from_dense) maps one chunk, the other
    # steps write in place. A copy per step would map one per step.
    assert pvt.memory_stats("cpu")["map_calls"] - before == 1
    np.testing.assert_array_equal(out[0], _storage(ref[0]))
    np.testing.assert_array_equal(out[1], ref[1])
    assert list(out[1]) == [B, S + steps, H, D]


def test_the_pass_is_registered_by_name():
    program = _step_program()
    manager = paddle.pir.PassManager()
    manager.add_pass(passes.PASS_NAME, {})
    manager.run(program)
    assert "custom_op.vtensor_append" in _op_names(program)
