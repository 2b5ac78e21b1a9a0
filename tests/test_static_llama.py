"""PaddleNLP llama's decode step exported with paddle.jit.to_static / jit.save and run by
paddle.inference with vtensor_kv_cache_pass, against the same program without the pass and against
eager PaddleNLP (tiny random-weight model, fixed shapes)."""
import numpy as np
import paddle
import pytest

import paddle_vtensor as pvt
from paddle_vtensor import passes
from paddle_vtensor import static_export as se

B, S = 2, 16  # past length of the first exported step; the second takes S + 1


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from paddlenlp.transformers import LlamaConfig, LlamaForCausalLM

    paddle.disable_static()
    paddle.seed(0)
    # Grouped-query heads (4 query, 2 kv) so llama's repeat_kv is in the program too.
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         initializer_range=0.1)
    model = LlamaForCausalLM(config)
    model.eval()
    folder = tmp_path_factory.mktemp("llama_step")
    paths = {n: str(folder / f"past{n}") for n in (S, S + 1)}
    for past_len, path in paths.items():
        se.export_decode_step(model, path, B, past_len)
    return model, paths


def _inputs(past_len, seed):
    rng = np.random.default_rng(seed)
    ids = paddle.to_tensor(rng.integers(0, 128, [B, 1]), dtype="int64")
    pos = paddle.full([B, 1], past_len, "int64")
    mask = paddle.ones([B, past_len + 1], "int64")
    return ids, pos, mask


def _caches(model, past_len, seed):
    layers, kv_heads, head_dim = se.cache_geometry(model.config)
    rng = np.random.default_rng(seed)
    return [tuple(paddle.to_tensor(rng.standard_normal([B, past_len, kv_heads, head_dim]).astype("float32"))
                  for _ in range(2)) for _ in range(layers)]


def _eager(model, ids, pos, mask, caches):
    with paddle.no_grad():
        out = model(input_ids=ids, position_ids=pos, attention_mask=mask, past_key_values=caches,
                    use_cache=True, return_dict=False)
    return out[0], list(out[1])


def _close(a, b):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def test_decode_step_matches_the_program_without_the_pass_and_eager(tiny):
    model, paths = tiny
    ids, pos, mask = _inputs(S, seed=1)
    caches = _caches(model, S, seed=2)
    plain = se.create_predictor(paths[S], use_pass=False)
    ref_logits, ref_caches = se.run_decode_step(plain, ids, pos, mask, caches, storage_layout=False)
    eager_logits, _ = _eager(model, ids, pos, mask, caches)

    passed = se.create_predictor(paths[S])
    report = passes.last_report()
    assert report["appends"] == 4 and report["attentions"] == 2 and report["refused"] == []
    logits, new_caches = se.run_decode_step(passed, ids, pos, mask, caches)
    _close(logits, ref_logits)
    _close(logits, eager_logits)
    for (k, v), (rk, rv) in zip(new_caches, ref_caches):
        assert list(k.shape) == list(rk.shape)
        np.testing.assert_array_equal(k.numpy()[:, :S], rk.numpy()[:, :S])  # the past, untouched
        _close(k, rk)
        _close(v, rv)
        assert pvt.is_vtensor(k) and pvt.is_vtensor(v)


def _cache_sized(program, numel):
    """Ops that produce a tensor as large as a cache (rank >= 3), other than the plugin's append."""
    found = []
    for op in program.global_block().ops:
        if op.name() in ("custom_op.vtensor_append", "builtin.parameter", "pd_op.data", "pd_op.fetch"):
            continue
        for value in op.results():
            shape = list(value.shape) if value.initialized() and value.is_dense_tensor_type() else []
            if len(shape) >= 3 and all(d > 0 for d in shape) and int(np.prod(shape)) >= numel:
                found.append(op.name())
    return found


def test_passed_program_materialises_no_cache_sized_tensor(tiny):
    model, paths = tiny
    layers, kv_heads, head_dim = se.cache_geometry(model.config)
    numel = B * (S + 1) * kv_heads * head_dim
    paddle.enable_static()
    try:
        exe = paddle.static.Executor(paddle.CPUPlace())
        plain, _, _ = paddle.static.load_inference_model(paths[S], exe)
        copies = _cache_sized(plain, numel)
        # The check can fail: PaddleNLP's program concatenates, repeats and transposes every cache.
        assert {"pd_op.concat", "pd_op.transpose", "pd_op.tile"} <= set(copies)

        program, _, _ = paddle.static.load_inference_model(paths[S], exe)
        assert passes.apply(program) == 2 * layers
        assert _cache_sized(program, numel) == []
        assert passes.last_report()["copies"] == []
        names = [op.name() for op in program.global_block().ops]
        assert names.count("custom_op.vtensor_decode_attention") == layers
        assert "pd_op.assign" not in names
    finally:
        paddle.disable_static()


def test_two_steps_append_in_place_across_two_programs(tiny):
    model, paths = tiny
    caches = _caches(model, S, seed=3)
    first, second = se.create_predictor(paths[S]), se.create_predictor(paths[S + 1])
    ids, pos, mask = _inputs(S, seed=4)
    logits1, caches1 = se.run_decode_step(first, ids, pos, mask, caches)  # migrates once
    eager1, eager_caches1 = _eager(model, ids, pos, mask, caches)
    _close(logits1, eager1)

    stats = pvt.memory_stats("cpu")
    pointers = [t.data_ptr() for pair in caches1 for t in pair]
    ids, pos, mask = _inputs(S + 1, seed=5)
    logits2, caches2 = se.run_decode_step(second, ids, pos, mask, caches1)
    eager2, _ = _eager(model, ids, pos, mask, eager_caches1)
    _close(logits2, eager2)
    # Step two wrote one token into each cache where it lies: same memory, no new cache.
    assert [t.data_ptr() for pair in caches2 for t in pair] == pointers
    after = pvt.memory_stats("cpu")
    assert after["live_regions"] == stats["live_regions"] == 2 * len(caches)
    assert after["map_calls"] == stats["map_calls"]


def test_export_rejects_an_empty_past(tiny, tmp_path):
    model, _ = tiny
    with pytest.raises(ValueError, match="past_len must be >= 1"):
        se.export_decode_step(model, str(tmp_path / "x"), B, 0)


def test_create_predictor_says_when_the_pass_finds_no_cache(tmp_path):
    class Double(paddle.nn.Layer):
        def forward(self, x):
            return x * 2.0

    spec = [paddle.static.InputSpec([B, 4], "float32", "x")]
    path = str(tmp_path / "double")
    paddle.jit.save(paddle.jit.to_static(Double(), input_spec=spec, full_graph=True), path, input_spec=spec)
    with pytest.raises(RuntimeError, match="did not rewrite .*no concat appends along axis 1"):
        se.create_predictor(path)
    assert se.create_predictor(path, use_pass=False) is not None


# ---- dynamic lengths: one program for every past length (PaddleNLP 3.0.0b4) ----

def _paddlenlp_major() -> int:
    import paddlenlp

    return int(paddlenlp.__version__.split(".")[0])


needs_paddlenlp3 = pytest.mark.skipif(
    "_paddlenlp_major() < 3", reason="PaddleNLP 2.x's llama does not trace with a dynamic sequence length "
                                     "(test_dynamic_past_length_is_refused_clearly_before_paddlenlp3)")


@pytest.mark.skipif("_paddlenlp_major() >= 3", reason="PaddleNLP 3 traces it")
def test_dynamic_past_length_is_refused_clearly_before_paddlenlp3(tiny, tmp_path):
    model, _ = tiny
    with pytest.raises(RuntimeError, match=r"does not trace with a dynamic past length: .*attn_weights.shape"):
        se.export_decode_step(model, str(tmp_path / "dyn"), B, None)


@needs_paddlenlp3
def test_one_decode_step_program_for_every_past_length(tiny, tmp_path):
    model, _ = tiny
    path = str(tmp_path / "dyn")
    se.export_decode_step(model, path, B, None)
    predictor = se.create_predictor(path)
    report = passes.last_report()
    assert report["appends"] == 4 and report["attentions"] == 2 and report["copies"] == []
    caches = _caches(model, 5, seed=6)
    eager_caches = caches
    pointers = None
    for past_len in (5, 6, 7):  # the same program for each length, appending in place
        ids, pos, mask = _inputs(past_len, seed=past_len)
        logits, caches = se.run_decode_step(predictor, ids, pos, mask, caches)
        eager, eager_caches = _eager(model, ids, pos, mask, eager_caches)
        _close(logits, eager)
        assert caches[0][0].shape[1] == past_len + 1
        now = [t.data_ptr() for pair in caches for t in pair]
        assert pointers is None or now == pointers
        pointers = now


@needs_paddlenlp3
@pytest.mark.parametrize("kv_heads", [2], ids=["gqa"])
def test_generation_loop_with_dynamic_lengths(tmp_path, kv_heads):
    from paddlenlp.transformers import LlamaConfig, LlamaForCausalLM

    paddle.disable_static()
    paddle.seed(0)
    config = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=256,
                         initializer_range=0.1, eos_token_id=None, bos_token_id=1, pad_token_id=0)
    model = LlamaForCausalLM(config)
    model.eval()
    path = str(tmp_path / "gen")
    se.export_generation(model, path)
    plain = se.create_predictor(path, use_pass=False)
    passed = se.create_predictor(path)
    report = passes.last_report()
    # Every append in the loop is in place and every decode attention reads the caches in place
    # (GQA included); what is left is the prefill cache's one migration per run.
    assert report["appends"] == 2 * 2 and report["attentions"] == 2 and report["refused"] == []
    assert all("computed before the loop" in c for c in report["copies"]), report["copies"]
    rng = np.random.default_rng(0)
    # One program, several prompt lengths and output lengths: the same tokens as eager greedy.
    for width, new in ((7, 9), (12, 4)):
        ids = paddle.to_tensor(rng.integers(3, 100, size=(2, width)), dtype="int64")
        mask = paddle.ones([2, width], "int64")
        want = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new,
                              decode_strategy="greedy_search")[0].numpy()
        got = se.run_generation(passed, ids, mask, new).numpy()
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(se.run_generation(plain, ids, mask, new).numpy(), want)
