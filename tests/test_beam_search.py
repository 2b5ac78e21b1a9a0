"""beam_search and parallel_sample on the slot runner (issue 31 point 4), on unmodified tiny PaddleNLP
models (random weights, built as test_integration_eager builds them).

References: PaddleNLP 2.8.1's own ``generate(decode_strategy="beam_search")`` (ids and scores) for
beam search; PaddleNLP's own generation step (prepare_inputs_for_generation, dense caches) drawing
with the same seed for sampling, and its greedy generate() for temperature 0. Chunks of 4 KiB make
every run cross chunk boundaries (llama rows are 512 B: 8 tokens a chunk; qwen 1 KiB: 4)."""
import numpy as np
import pytest

import paddle
import paddle_vtensor as pvt

pytest.importorskip("paddlenlp.transformers.llama.modeling")
from test_integration_eager import prompts, tiny_llama, tiny_qwen  # noqa: E402

from paddle_vtensor.generation.sampling import sample_next  # noqa: E402

PAGE = 4096
MODELS = {"llama": tiny_llama, "qwen": tiny_qwen}
_built = {}


def model_of(name):
    if name not in _built:
        _built[name] = MODELS[name]()
    return _built[name]


def paddlenlp_beams(model, ids, mask, new, beams, **kw):
    out_ids, scores = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new,
                                     decode_strategy="beam_search", num_beams=beams, **kw)
    return out_ids.numpy(), scores.numpy()


# (prompt lengths, num_beams, new tokens, copy_max_chunks, generate() options). copy_max_chunks 0
# always remaps (share_prefix), 10**6 always copies tails, 1 mixes both.
CASES = {
    "one_prompt_2_beams_remap": ([7], 2, 14, 0, {}),
    "padded_batch_4_beams_remap": ([5, 12, 9], 4, 20, 0, {}),
    "padded_batch_4_beams_mixed": ([12, 3], 4, 20, 1, {}),
    "padded_batch_2_beams_copy": ([10, 6], 2, 18, 10**6, {}),
    "eos_length_penalty": ([6, 11], 4, 20, 1, {"length_penalty": 1.7, "num_return_sequences": 2}),
    "eos_early_stopping": ([6, 11], 4, 20, 0, {"early_stopping": True, "length_penalty": 0.5}),
}
# EOS ids that these prompts' beams reach (each model's own), so hypotheses end early.
EOS = {"llama": 95, "qwen": 98}


def options(name, case):
    kw = dict(CASES[case][4])
    if case.startswith("eos"):
        kw["eos_token_id"] = EOS[name]
    return kw


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_beam_search_equals_paddlenlp(name, case):
    lengths, beams, new, copy_max_chunks, _ = CASES[case]
    kw = options(name, case)
    model = model_of(name)
    ids, mask = prompts(lengths, seed=len(case))
    want_ids, want_scores = paddlenlp_beams(model, ids, mask, new, beams, **kw)
    got = pvt.beam_search(model, ids, mask, new, beams, copy_max_chunks=copy_max_chunks, chunk_bytes=PAGE, **kw)
    np.testing.assert_array_equal(got.ids.numpy(), want_ids)
    np.testing.assert_allclose(got.scores.numpy(), want_scores, rtol=1e-4, atol=1e-5)
    steps, totals, row, chunk = got.stats["steps"], got.stats["totals"], got.stats["row_bytes"], got.stats["chunk_bytes"]
    assert totals["reordered"] > 0
    if copy_max_chunks == 0:  # remaps only: at most one partial chunk copied per forked beam and step
        assert totals["copies"] == 0 and totals["mapped_chunks"] > 0
        assert all(s["copied_bytes"] <= s["reordered"] * chunk for s in steps)
    if copy_max_chunks == 10**6:  # copies only: the divergent tails, never a mapping
        assert totals["remaps"] == 0 and totals["mapped_chunks"] == 0
    assert all(s["copied_bytes"] < s["index_select_bytes"] for s in steps[1:])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_eos_cases_end_early(name):
    """The eos cases above exercise the hypotheses: PaddleNLP's own ids hold EOS (a beam that ended)."""
    for case in ("eos_length_penalty", "eos_early_stopping"):
        lengths, beams, new, _, _ = CASES[case]
        ids, mask = prompts(lengths, seed=len(case))
        want, _ = paddlenlp_beams(model_of(name), ids, mask, new, beams, **options(name, case))
        assert (want == EOS[name]).any()


def test_remap_shares_chunks_and_copy_does_not():
    model = model_of("llama")
    ids, mask = prompts([30], seed=3)  # 30 rows: 3 whole chunks of 8 and a partial one
    seen = {}
    for policy in (0, 10**6):
        steps = []
        pvt.beam_search(model, ids, mask, 6, 4, copy_max_chunks=policy, chunk_bytes=PAGE, on_step=steps.append)
        seen[policy] = steps
    assert seen[0][0]["shared_bytes"] == 3 * 3 * PAGE  # step 0: three beams map the prompt's whole chunks
    assert seen[0][0]["mapped_chunks"] == 9 and seen[0][0]["copied_bytes"] == 3 * 6 * 512
    assert seen[10**6][0]["shared_bytes"] == 0 and seen[10**6][0]["copied_bytes"] == 3 * 30 * 512


@pytest.mark.parametrize("bad, error, match", [
    ({"num_beams": 1}, ValueError, "num_beams"),
    ({"num_return_sequences": 5}, ValueError, "num_return_sequences"),
    ({"max_new_tokens": 0}, ValueError, "max_new_tokens"),
    ({"early_stopping": 1}, TypeError, "early_stopping"),
    ({"length_penalty": "1"}, TypeError, "length_penalty"),
    ({"eos_token_id": [1, 2]}, ValueError, "one eos_token_id"),
    ({"copy_max_chunks": -1}, ValueError, "copy_max_chunks"),
    ({"attention_mask": [[1, 1, 0]]}, ValueError, "left-padded"),
    ({"attention_mask": [[0, 2, 1]]}, ValueError, "0 .padding. and 1"),
    ({"attention_mask": [[0, 0, 0]]}, ValueError, "no token"),
    ({"attention_mask": [[1, 1]]}, ValueError, "shape"),
    ({"input_ids": [[1, 2, 300]]}, ValueError, "vocabulary"),
    ({"input_ids": [1, 2, 3]}, ValueError, r"\[batch, seq_len\]"),
])
def test_beam_search_bad_input(bad, error, match):
    args = {"input_ids": [[4, 5, 6]], "attention_mask": [[1, 1, 1]], "max_new_tokens": 3, "num_beams": 4, **bad}
    with pytest.raises(error, match=match):
        pvt.beam_search(model_of("llama"), **args)


# ---- parallel sampling ----

def paddlenlp_sample(model, prompt, new, seed, **sampling):
    """PaddleNLP's own generation step on dense caches, drawing with sample_next and the seed."""
    rng = np.random.default_rng(seed)
    ids = paddle.to_tensor([prompt], dtype="int64")
    kwargs = {"attention_mask": paddle.ones_like(ids), "use_cache": True}
    out = []
    with paddle.no_grad():
        for _ in range(new):
            outputs = model(**model.prepare_inputs_for_generation(ids, **kwargs))
            logits = outputs[0] if isinstance(outputs, tuple) else outputs.logits
            out.append(sample_next(logits[0, -1].astype("float32").numpy(), rng, **sampling))
            kwargs = model.update_model_kwargs_for_generation(outputs, kwargs)
            ids = paddle.concat([ids, paddle.to_tensor([[out[-1]]], dtype="int64")], axis=1)
    return out


@pytest.mark.parametrize("name", sorted(MODELS))
def test_parallel_sample_equals_solo_seeded_runs(name):
    model = model_of(name)
    prompt = np.random.default_rng(5).integers(3, 100, size=19).tolist()
    sampling = {"temperature": 0.8, "top_k": 20, "top_p": 0.9}
    seeds = [11, 12, 13, 14]
    got = pvt.parallel_sample(model, prompt, 4, 13, seeds=seeds, copy_max_chunks=0, chunk_bytes=PAGE, **sampling)
    want = [paddlenlp_sample(model, prompt, 13, s, **sampling) for s in seeds]
    assert got.sequences == want
    assert len({tuple(s) for s in want}) > 1  # the seeds drew different continuations
    rows_per_chunk = PAGE // got.stats["row_bytes"]
    whole = len(prompt) // rows_per_chunk
    assert got.stats["mapped_chunks"] == 3 * whole and got.stats["peak_shared_bytes"] == 3 * whole * PAGE


def test_parallel_sample_greedy_equals_generate():
    model = model_of("llama")
    prompt = np.random.default_rng(6).integers(3, 100, size=9).tolist()
    got = pvt.parallel_sample(model, prompt, 3, 11, temperature=0, chunk_bytes=PAGE)
    want = model.generate(input_ids=paddle.to_tensor([prompt]), attention_mask=paddle.ones([1, 9], "int64"),
                          max_new_tokens=11, decode_strategy="greedy_search")[0].numpy()[0].tolist()
    assert got.sequences == [want] * 3
    assert got.stats["copies"] == 2 and got.stats["copied_bytes"] == 2 * 9 * got.stats["row_bytes"]


def test_parallel_sample_eos_ends_one_continuation():
    model = model_of("llama")
    prompt = [4, 8, 15, 16, 23, 42]
    free = pvt.parallel_sample(model, prompt, 3, 12, seeds=[1, 2, 3], chunk_bytes=PAGE).sequences
    eos = free[0][4]
    got = pvt.parallel_sample(model, prompt, 3, 12, seeds=[1, 2, 3], eos_token_id=eos, chunk_bytes=PAGE).sequences
    for g, f in zip(got, free):
        end = f.index(eos) + 1 if eos in f else len(f)
        assert g == f[:end]


@pytest.mark.parametrize("bad, error, match", [
    ({"n": 0}, ValueError, "n must be"),
    ({"seeds": [1]}, ValueError, "seeds"),
    ({"temperature": -1.0}, ValueError, "temperature"),
    ({"top_p": 0.0}, ValueError, "top_p"),
    ({"top_k": 1.5}, TypeError, "top_k"),
    ({"prompt": []}, ValueError, "at least one token"),
    ({"prompt": "abc"}, TypeError, "list of token ids"),
])
def test_parallel_sample_bad_input(bad, error, match):
    args = {"prompt": [4, 5, 6], "n": 2, "max_new_tokens": 3, **bad}
    with pytest.raises(error, match=match):
        pvt.parallel_sample(model_of("llama"), **args)


def test_sample_next_rules():
    rng = np.random.default_rng(0)
    logits = np.array([0.0, 3.0, 1.0, 2.9])
    assert sample_next(logits, rng, temperature=0) == 1
    assert {sample_next(logits, rng, top_k=1) for _ in range(20)} == {1}
    assert {sample_next(logits, rng, top_k=2) for _ in range(200)} == {1, 3}
    # top_p: the smallest set reaching p; 3 and 1 carry ~0.94 at temperature 1
    assert {sample_next(logits, rng, top_p=0.5) for _ in range(50)} <= {1, 3}
