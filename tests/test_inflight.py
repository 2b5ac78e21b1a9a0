"""generate_inflight and SlotModelRunner on unmodified tiny PaddleNLP models (random weights, built
locally): every prompt's ids equal the model's own greedy generate() on that prompt alone."""
import numpy as np
import pytest

import paddle
import paddle_vtensor as pvt

pytest.importorskip("paddlenlp.transformers.llama.modeling")
from test_integration_eager import VOCAB, tiny_llama, tiny_qwen  # noqa: E402

MODELS = {"llama_gqa": lambda: tiny_llama(kv_heads=2), "llama_mqa": lambda: tiny_llama(kv_heads=1), "qwen": tiny_qwen}


def random_prompts(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, VOCAB, size=n).tolist() for n in lengths]


def solo_generate(model, prompt, new_tokens, eos=None):
    ids = paddle.to_tensor([prompt], dtype="int64")
    kwargs = {} if eos is None else {"eos_token_id": eos}
    mask = paddle.ones_like(ids)
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, decode_strategy="greedy_search", **kwargs)
    return out[0].numpy()[0].tolist()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_inflight_equals_solo_generate(name):
    model = MODELS[name]()
    lengths = [5, 17, 2, 30, 9, 3, 12]
    budgets = [6, 3, 12, 4, 1, 9, 5]  # uneven: slots free up at different steps and are refilled
    prompts = random_prompts(lengths, seed=1)
    steps = []
    got = pvt.generate_inflight(model, prompts, budgets, max_batch=3, on_step=steps.append)
    want = [solo_generate(model, p, m) for p, m in zip(prompts, budgets)]
    assert got == want
    assert max(s["live"] for s in steps) == 3
    # a prefill shared a step with decodes: some step fed more tokens than it had live sequences
    assert any(s["tokens"] > s["live"] > 1 for s in steps[1:])


def test_inflight_eos_and_int_budget():
    model = tiny_llama()
    prompts = random_prompts([4, 11, 7, 6], seed=2)
    free_run = [solo_generate(model, p, 10) for p in prompts]
    stop = next(i for i in range(2, 10) if free_run[1][i] not in free_run[1][:i])
    eos = free_run[1][stop]  # first produced by the second prompt at step stop + 1
    got = pvt.generate_inflight(model, prompts, 10, max_batch=2, eos_token_id=eos)
    want = [solo_generate(model, p, 10, eos=eos) for p in prompts]
    want = [w[:w.index(eos) + 1] if eos in w else w for w in want]  # generate() pads after EOS
    assert got == want
    assert got[1][-1] == eos and len(got[1]) == stop + 1


def test_runner_logits_match_model_forward():
    """One packed forward of two prompts in two slots against the model's own forward on each."""
    model = tiny_llama()
    prompts = random_prompts([7, 4], seed=3)
    runner = pvt.SlotModelRunner(model, num_slots=4, max_seq_len=32)
    for slot, p in zip((3, 1), prompts):
        runner.reserve(slot, len(p))
    logits = runner.forward(np.concatenate(prompts), [0, 7, 11], [3, 1])
    runner.advance([3, 1], [7, 4])
    assert list(runner.host_lens) == [0, 4, 0, 7]
    assert runner.cache_seqlens.numpy().tolist() == [0, 4, 0, 7]
    for p, rows in zip(prompts, (slice(0, 7), slice(7, 11))):
        ids = paddle.to_tensor([p])
        out = model(ids, attention_mask=paddle.ones_like(ids), return_dict=True)
        ref = out.logits[0]
        np.testing.assert_allclose(logits[rows].numpy(), ref.astype("float32").numpy(), rtol=1e-4, atol=1e-4)
    runner.release(3)
    assert runner.cache_seqlens.numpy().tolist() == [0, 4, 0, 0] and runner.host_lens[3] == 0


def test_runner_custom_attention_hook():
    """The attention hook sees packed q/k/v per layer; returning the default's output keeps the ids."""
    model = tiny_llama()
    calls = []
    runner = pvt.SlotModelRunner(model, 2, 32)

    def attention(layer, q, k_new, v_new, ctx):
        calls.append((layer, q.shape, k_new.shape))
        return runner._default_attention(layer, q, k_new, v_new, ctx)

    runner.attention = attention
    prompt = random_prompts([6], seed=4)[0]
    got = pvt.generate_inflight(model, [prompt], 5, max_batch=2, runner=runner)
    assert got == [solo_generate(model, prompt, 5)]
    assert calls[0] == (0, [6, 4, 16], [6, 2, 16]) and calls[2] == (0, [1, 4, 16], [1, 2, 16])


def test_bad_arguments():
    model = tiny_llama()
    with pytest.raises(ValueError, match="max_new_tokens has 1 entries for 2 prompts"):
        pvt.generate_inflight(model, [[3, 4], [5]], [2], max_batch=2)
    with pytest.raises(ValueError, match="at least one token"):
        pvt.generate_inflight(model, [[]], 2, max_batch=2)
    with pytest.raises(pvt.UnsupportedModelError):
        pvt.SlotModelRunner(paddle.nn.Linear(2, 2), 2, 8)


def test_bad_arguments_are_refused_before_the_first_step():
    model = tiny_llama()
    for kwargs, cls, match in [({"max_batch": 1.5}, TypeError, "max_batch must be an int, got float"),
                               ({"max_batch": True}, TypeError, "max_batch must be an int, got bool"),
                               ({"max_batch": 0}, ValueError, r"max_batch must be in \[1, "),
                               ({"max_new_tokens": 2.5}, TypeError, "max_new_tokens must be an int"),
                               ({"max_new_tokens": [2, -1]}, ValueError, r"max_new_tokens must be in \[0, "),
                               ({"eos_token_id": 2.0}, TypeError, "eos_token_id must be an int"),
                               ({"prompts": [[3, 4.5], [5]]}, TypeError, "a token id must be an int, got float"),
                               ({"prompts": [[3, 4], [5, -1]]}, ValueError, r"token id -1 is outside the vocabulary"),
                               ({"prompts": [[3, 4], [5, 2**64]]}, ValueError, "does not fit in 64 bits")]:
        args = {"prompts": [[3, 4], [5]], "max_new_tokens": 2, "max_batch": 2, **kwargs}
        with pytest.raises(cls, match=match):
            pvt.generate_inflight(model, **args)


def test_runner_is_reusable_after_a_failed_run():
    """Issue 25: a runner reused after a failed generate_inflight gave other ids on the next, valid
    call. Now a prompt id past the vocabulary is refused before the first step (even when its prompt
    would be admitted late), and a run that fails mid-way resets the runner."""
    model = tiny_llama()
    prompts = random_prompts([5, 9, 4], seed=6)
    want = pvt.generate_inflight(model, prompts, 6, max_batch=2, runner=pvt.SlotModelRunner(model, 2, 32))
    runner = pvt.SlotModelRunner(model, 2, 32)

    def clean():
        assert not runner.host_lens.any() and not runner.cache_seqlens.numpy().any()
        assert pvt.slot_info(runner.cache)["mapped_bytes"] == 0

    late = prompts[:2] + [[3, VOCAB]]  # the third prompt is admitted only once a slot frees up
    with pytest.raises(ValueError, match=rf"generate_inflight: token id {VOCAB} is outside the vocabulary \[0, {VOCAB}\)"):
        pvt.generate_inflight(model, late, 6, max_batch=2, runner=runner)
    clean()

    def fail_at_step_3(info):
        if info["step"] == 3:  # two sequences live, their slots mapped and lengths advanced
            assert runner.host_lens.any()
            raise RuntimeError("stopped by on_step")

    with pytest.raises(RuntimeError, match="stopped by on_step"):
        pvt.generate_inflight(model, prompts, 6, max_batch=2, runner=runner, on_step=fail_at_step_3)
    clean()
    assert pvt.generate_inflight(model, prompts, 6, max_batch=2, runner=runner) == want

    runner.reserve(0, 3)
    runner.advance([0], [3])  # the caller's own use of the runner: not silently reset
    with pytest.raises(ValueError, match=r"the runner has live slots .* call runner.reset\(\) first"):
        pvt.generate_inflight(model, prompts, 6, max_batch=2, runner=runner)
    runner.reset()
    clean()


def test_bench_inflight_cli_tiny(tmp_path):
    """The benchmark command end to end on a tiny workload: JSON keys, the plot, and its own check that
    generate_inflight's ids equal generate() on each prompt alone."""
    import json

    from paddle_vtensor.bench import cli

    assert cli.main(["bench-inflight", "--requests", "3", "--prompt-min", "4", "--prompt-max", "12", "--output-min", "2",
                     "--output-max", "6", "--max-batch", "2", "--hidden-size", "64", "--layers", "2", "--vocab", "100",
                     "--repeats", "1", "--verify", "--no-progress", "--device", "cpu", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "bench_inflight.json").read_text())
    assert result["inflight_ids_equal_solo_generate"] == 3
    assert set(result["tokens_per_s"]) == {"padded_generate", "padded_generate_applied", "inflight"}
    assert result["workload"]["generated_tokens"] == sum(result["workload"]["output_lens"])
    assert result["kv_peak_bytes"]["inflight_mapped_measured"] > 0
    assert (tmp_path / "bench_inflight.png").stat().st_size > 0


def test_bench_inflight_layout_tiny(tmp_path):
    from paddle_vtensor.bench import cli

    assert cli.main(["bench-inflight", "--layout", "--layout-slots", "2", "--device", "cpu", "--out", str(tmp_path)]) == 0
    import json

    cases = json.loads((tmp_path / "layout.json").read_text())["cases"]
    for case in cases.values():
        assert case["token_rows_waste"] < 2 * (2 << 20)  # at most one 2 MiB chunk per slot
        assert case["per_layer_mapped"] >= case["token_rows_mapped"] >= case["needed_bytes"]
