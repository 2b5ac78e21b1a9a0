"""paddle_vtensor.integration on unmodified PaddleNLP models (tiny, random weights, built locally).

Runs under PaddleNLP 2.8.1 (.venv) and 3.0.0b4 (.venv-paddlenlp3; scripts/test.sh --paddlenlp3).
References are the same model without the plugin: same greedy tokens, close logits. The copy test
profiles one decode step and fails on any allocation as large as one layer's K cache; it is shown
to fail on the unpatched model.
"""
import copy
import dataclasses
import gc
import inspect

import numpy as np
import paddle
import paddle.profiler as profiler
import pytest

import paddle_vtensor as pvt
from paddle_vtensor import integration as pi

llama_modeling = pytest.importorskip("paddlenlp.transformers.llama.modeling")
qwen_modeling = pytest.importorskip("paddlenlp.transformers.qwen.modeling")
from paddlenlp.transformers import (  # noqa: E402
    GPTConfig, GPTForCausalLM, LlamaConfig, LlamaForCausalLM, QWenConfig, QWenForCausalLM,
)

VOCAB = 100


def tiny_llama(kv_heads=2, dtype="float32", seed=0):
    paddle.seed(seed)
    # initializer_range 0.1: sharper attention than the 0.02 default, so tokens depend on context.
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=256,
                         initializer_range=0.1, eos_token_id=None, bos_token_id=1, pad_token_id=0)
    model = LlamaForCausalLM(config)
    model.eval()
    if dtype != "float32":
        model.to(dtype=dtype)
    return model


def tiny_qwen(seed=0):
    paddle.seed(seed)
    config = QWenConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, kv_channels=16,
                        intermediate_size=256, max_position_embeddings=256, seq_length=256, initializer_range=0.1,
                        eos_token_id=None, pad_token_id=0)
    model = QWenForCausalLM(config)
    model.eval()
    return model


MODELS = {"llama_gqa": lambda: tiny_llama(kv_heads=2), "llama_mqa": lambda: tiny_llama(kv_heads=1),
          "llama_mha": lambda: tiny_llama(kv_heads=4), "qwen": tiny_qwen}


def prompts(lengths, seed=0):
    """Left-padded prompts of the given lengths: (input_ids, attention_mask) [B, max(lengths)]."""
    rng = np.random.default_rng(seed)
    width = max(lengths)
    ids = np.zeros((len(lengths), width), dtype=np.int64)
    for row, n in enumerate(lengths):
        ids[row, width - n:] = rng.integers(3, VOCAB, size=n)
    return paddle.to_tensor(ids), paddle.to_tensor((ids != 0).astype(np.int64))


def greedy(model, ids, mask, new_tokens=32):
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, decode_strategy="greedy_search")
    return out[0].numpy()


def cpu_runs(dtype) -> bool:
    try:
        paddle.matmul(paddle.ones([2, 2], dtype=dtype), paddle.ones([2, 2], dtype=dtype))
        return True
    except Exception:
        return False


# ---- same tokens ----

@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("lengths", [[7], [5, 12, 9], [3, 3, 16, 8]], ids=["b1", "b3_padded", "b4_padded"])
def test_same_greedy_tokens(name, lengths):
    model = MODELS[name]()
    ids, mask = prompts(lengths)
    want = greedy(model, ids, mask)
    with pi.applied(model):
        got = greedy(model, ids, mask)
        stats = pi.stats(model)
    np.testing.assert_array_equal(got, want)
    layers = model.config.num_hidden_layers
    # The plugin path was taken: one migration per cache, then every step in place.
    assert stats["migrations"] == 2 * layers
    assert stats["appends_in_place"] == 2 * layers * 30 and stats["appends_copied"] == 0
    assert stats["attention_calls"] == layers * 31


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_same_greedy_tokens_low_precision(dtype):
    if not cpu_runs(dtype):
        pytest.skip(f"this paddle build has no CPU matmul for {dtype}")
    model = tiny_llama(dtype=dtype)
    ids, mask = prompts([5, 12, 9])
    want = greedy(model, ids, mask)
    with pi.applied(model):
        got = greedy(model, ids, mask)
    np.testing.assert_array_equal(got, want)


def decode_logits(model, ids, mask, steps):
    """Prefill, then `steps` greedy decode steps by hand; the logits of every step [steps+1, B, V]."""
    out = model(input_ids=ids, attention_mask=mask, use_cache=True, return_dict=True)
    logits = [out.logits[:, -1].numpy()]
    past, width = out.past_key_values, ids.shape[1]
    for i in range(steps):
        nxt = out.logits[:, -1].argmax(-1).unsqueeze(-1)
        mask = paddle.concat([mask, paddle.ones([mask.shape[0], 1], dtype=mask.dtype)], axis=-1)
        pos = paddle.full([ids.shape[0], 1], width + i, dtype="int64")
        out = model(input_ids=nxt, attention_mask=mask, position_ids=pos, past_key_values=past, use_cache=True,
                    return_dict=True)
        past = out.past_key_values
        logits.append(out.logits[:, -1].numpy())
    return np.stack(logits)


@pytest.mark.parametrize("name", ["llama_gqa", "qwen"])
def test_logits_close(name):
    model = MODELS[name]()
    ids, mask = prompts([5, 12, 9])
    with paddle.no_grad():
        want = decode_logits(model, ids, mask, 8)
        with pi.applied(model):
            got = decode_logits(model, ids, mask, 8)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)
    assert not np.array_equal(got[0], got[-1])  # the steps really differ


def test_beam_search_same_tokens():
    # Beam search reorders the caches with index_select (a dense copy), so each step migrates
    # again: correct, but not the zero-copy path.
    model = tiny_llama()
    ids, mask = prompts([5, 12, 9])
    kwargs = dict(input_ids=ids, attention_mask=mask, max_new_tokens=6, decode_strategy="beam_search", num_beams=2)
    want = model.generate(**kwargs)[0].numpy()
    with pi.applied(model):
        got = model.generate(**kwargs)[0].numpy()
    np.testing.assert_array_equal(got, want)


# ---- zero whole-cache copies per decode step ----

def big_allocations(fn, threshold):
    """(result of fn(), [(op, bytes)] of every Paddle allocation of >= threshold bytes during fn())."""
    found = []

    def walk(node, op):
        for event in getattr(node, "mem_node", []):
            if event.type == paddle.base.core.TracerMemEventType.Allocate and event.increase_bytes >= threshold:
                found.append((op, event.increase_bytes))
        for child in list(node.children_node) + list(getattr(node, "runtime_node", [])):
            walk(child, node.name)

    prof = profiler.Profiler(targets=[profiler.ProfilerTarget.CPU], profile_memory=True,
                             on_trace_ready=lambda p: None)
    prof.start()
    try:
        result = fn()
    finally:
        prof.stop()
    for root in prof.profiler_result.get_data().values():
        walk(root, "root")
    return result, found


def profile_decode_step(model, warm_steps=3):
    """Prefill a 3 x 40 prompt, decode `warm_steps` steps, then profile one more decode step.
    Returns (allocations >= one layer's K cache, that threshold, VTensor bytes reserved before and
    after the step)."""
    ids, mask = prompts([40, 33, 37])
    b = ids.shape[0]
    with paddle.no_grad():
        out = model(input_ids=ids, attention_mask=mask, use_cache=True, return_dict=True)
        past, width = out.past_key_values, ids.shape[1]
        for i in range(warm_steps + 1):
            nxt = out.logits[:, -1].argmax(-1).unsqueeze(-1)
            mask = paddle.concat([mask, paddle.ones([b, 1], dtype="int64")], axis=-1)
            pos = paddle.full([b, 1], width + i, dtype="int64")

            def step():
                return model(input_ids=nxt, attention_mask=mask, position_ids=pos, past_key_values=past,
                             use_cache=True, return_dict=True)

            if i < warm_steps:
                out = step()
                past = out.past_key_values
                continue
            k = past[0][0]
            threshold = int(np.prod(k.shape)) * k.element_size()  # one layer's K cache, in bytes
            before = pvt.memory_stats("cpu")["reserved_bytes"]
            out, found = big_allocations(step, threshold)
            after = pvt.memory_stats("cpu")["reserved_bytes"]
            assert out.past_key_values[0][0].shape[1] == k.shape[1] + 1
            return found, threshold, before, after


@pytest.mark.parametrize("name", ["llama_gqa", "qwen"])
def test_decode_step_copies_no_cache(name):
    model = MODELS[name]()
    with pi.applied(model):
        found, threshold, before, after = profile_decode_step(model)
        stats = pi.stats(model)
    assert found == [], f"cache-sized allocations (>= {threshold} bytes) in a decode step: {found}"
    assert after == before, "a decode step created a new VTensor cache (a migration or copy-on-write)"
    assert stats["appends_copied"] == 0 and stats["attention_calls"] > 0


@pytest.mark.parametrize("name", ["llama_gqa", "qwen"])
def test_copy_probe_fails_on_unpatched_model(name):
    # The same probe on PaddleNLP's own path finds the per-step copies (concat, and for llama the
    # repeat_kv tile and the matmul's contiguous K/V).
    found, threshold, _, _ = profile_decode_step(MODELS[name]())
    ops = {op for op, _ in found}
    assert any("concat" in op for op in ops), found
    assert len(found) >= 2 * 2  # K and V of each of the 2 layers


# ---- speculative-style: append k, truncate back, re-append ----

def test_speculative_truncate_and_reappend_matches_fresh_run():
    model = tiny_llama()
    ids, mask = prompts([9, 14])
    b, width = ids.shape
    rng = np.random.default_rng(7)
    t0 = paddle.to_tensor(rng.integers(3, VOCAB, size=(b, 1)))
    drafts = paddle.to_tensor(rng.integers(3, VOCAB, size=(b, 3)))  # k = 3 draft tokens
    y = paddle.to_tensor(rng.integers(3, VOCAB, size=(b, 1)))

    def ones(n):
        return paddle.ones([b, n], dtype="int64")

    def positions(start, n):
        return paddle.arange(start, start + n, dtype="int64").expand([b, n])

    with paddle.no_grad(), pi.applied(model):
        out = model(input_ids=ids, attention_mask=mask, use_cache=True, return_dict=True)
        m1 = paddle.concat([mask, ones(1)], axis=-1)
        out = model(input_ids=t0, attention_mask=m1, position_ids=positions(width, 1),
                    past_key_values=out.past_key_values, use_cache=True, return_dict=True)
        past = out.past_key_values
        assert all(pvt.is_vtensor(k) and pvt.is_vtensor(v) for k, v in past)
        # Verify 3 drafts in one step (Tq = 3 on the VTensor path), accept 1, drop 2.
        m4 = paddle.concat([m1, ones(3)], axis=-1)
        spec = model(input_ids=drafts, attention_mask=m4, position_ids=positions(width + 1, 3),
                     past_key_values=past, use_cache=True, return_dict=True)
        spec_logits = spec.logits.numpy()
        accepted = [(pvt.truncate(k, width + 2), pvt.truncate(v, width + 2)) for k, v in spec.past_key_values]
        # Re-append y while the longer views are alive (copy-on-write), then again without them.
        m3 = paddle.concat([m1, ones(2)], axis=-1)
        after_cow = model(input_ids=y, attention_mask=m3, position_ids=positions(width + 2, 1),
                          past_key_values=accepted, use_cache=True, return_dict=True).logits.numpy()
        copied = pi.stats(model)["appends_copied"]
        del spec
        in_place_before = pi.stats(model)["appends_in_place"]
        after_drop = model(input_ids=y, attention_mask=m3, position_ids=positions(width + 2, 1),
                           past_key_values=accepted, use_cache=True, return_dict=True).logits.numpy()
        in_place = pi.stats(model)["appends_in_place"] - in_place_before
        del accepted, past, out

    assert copied == 2 * 2  # K and V of 2 layers: the truncated views were shorter than live ones
    assert in_place == 2 * 2  # once the longer views died, the same append went in place

    # Fresh runs on PaddleNLP's own path: the whole sequence in one prefill.
    with paddle.no_grad():
        full = paddle.concat([ids, t0, drafts[:, :1], y], axis=-1)
        fresh = model(input_ids=full, attention_mask=paddle.concat([m1, ones(2)], axis=-1),
                      use_cache=False, return_dict=True).logits.numpy()
        fresh_spec = model(input_ids=paddle.concat([ids, t0, drafts], axis=-1), attention_mask=m4, use_cache=False,
                           return_dict=True).logits.numpy()
    np.testing.assert_allclose(spec_logits, fresh_spec[:, -3:], atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(after_cow[:, -1], fresh[:, -1], atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(after_drop[:, -1], fresh[:, -1], atol=2e-5, rtol=1e-5)
    np.testing.assert_array_equal(after_drop[:, -1].argmax(-1), fresh[:, -1].argmax(-1))


# ---- apply / remove ----

def hooked_objects():
    return (llama_modeling.paddle, llama_modeling.scaled_dot_product_attention, llama_modeling.repeat_kv,
            qwen_modeling.paddle, qwen_modeling.QWenAttention.__dict__["_attn"])


def touched(model):
    """Everything apply() may change: PaddleNLP's hooked objects, the model's instance attributes,
    and the functions each attention layer binds for itself (3.0.0b4's attn_func)."""
    layers = [layer for layer in model.sublayers()
              if isinstance(layer, (llama_modeling.LlamaAttention, qwen_modeling.QWenAttention))]
    return (hooked_objects(), {k: v for k, v in model.__dict__.items() if k in ("forward", "__deepcopy__")},
            [layer.__dict__.get("attn_func") for layer in layers])


def assert_untouched(model, before):
    now = touched(model)
    assert all(a is b for a, b in zip(now[0], before[0]))
    assert now[1] == before[1] == {}
    assert all(a is b for a, b in zip(now[2], before[2]))


def test_remove_restores_exactly():
    model = tiny_llama()
    ids, mask = prompts([5, 12, 9])
    originals = hooked_objects()
    before = touched(model)
    assert "forward" not in model.__dict__
    want = greedy(model, ids, mask, 8)
    pi.apply(model)
    assert pi.is_applied(model)
    assert llama_modeling.paddle is not originals[0] and llama_modeling.repeat_kv is not originals[2]
    assert "forward" in model.__dict__
    pi.remove(model)
    assert not pi.is_applied(model)
    assert all(now is before for now, before in zip(hooked_objects(), originals))
    assert "forward" not in model.__dict__
    assert_untouched(model, before)
    maps = pvt.memory_stats("cpu")["map_calls"]
    np.testing.assert_array_equal(greedy(model, ids, mask, 8), want)
    assert pvt.memory_stats("cpu")["map_calls"] == maps  # no VTensor was made after remove()


def test_context_manager_removes_on_error():
    model = tiny_qwen()
    originals = hooked_objects()
    with pytest.raises(RuntimeError, match="boom"):
        with pi.applied(model):
            assert qwen_modeling.QWenAttention.__dict__["_attn"] is not originals[4]
            raise RuntimeError("boom")
    assert not pi.is_applied(model)
    assert all(now is before for now, before in zip(hooked_objects(), originals))


def test_hooks_stay_until_last_model_removed_and_spare_other_models():
    a, b, other = tiny_llama(seed=1), tiny_llama(seed=2), tiny_llama(seed=3)
    ids, mask = prompts([6, 4])
    want_b, want_other = greedy(b, ids, mask, 6), greedy(other, ids, mask, 6)
    originals = hooked_objects()
    pi.apply(a)
    pi.apply(b)
    assert pi.installed_count("llama") == 2
    pi.remove(a)
    assert llama_modeling.repeat_kv is not originals[2]  # b still applied
    maps = pvt.memory_stats("cpu")["map_calls"]
    np.testing.assert_array_equal(greedy(other, ids, mask, 6), want_other)  # never applied
    assert pvt.memory_stats("cpu")["map_calls"] == maps  # ...so it made no VTensor
    np.testing.assert_array_equal(greedy(b, ids, mask, 6), want_b)
    assert pi.stats(b)["attention_calls"] > 0
    pi.remove(b)
    assert pi.installed_count("llama") == 0
    assert all(now is before for now, before in zip(hooked_objects(), originals))


# ---- errors ----

def test_unsupported_model_is_refused_and_left_alone():
    paddle.seed(0)
    gpt = GPTForCausalLM(GPTConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=64, max_position_embeddings=64))
    with pytest.raises(pi.UnsupportedModelError, match=r"GPTForCausalLM is not supported: no attention layer of a "
                                                        r"supported family \(llama \(LlamaAttention\), qwen"):
        pi.apply(gpt)
    assert not pi.is_applied(gpt) and "forward" not in gpt.__dict__
    with pytest.raises(pi.UnsupportedModelError, match="expected a paddle.nn.Layer, got str"):
        pi.apply("llama")


def test_unsupported_configuration_is_refused():
    model = tiny_llama()
    model.config.alibi = True
    originals = hooked_objects()
    with pytest.raises(pi.UnsupportedModelError, match="llama with alibi is not supported"):
        pi.apply(model)
    assert not pi.is_applied(model) and hooked_objects() == originals


def test_output_attentions_is_refused():
    model = tiny_llama()
    ids, mask = prompts([4])
    with pi.applied(model), paddle.no_grad():
        with pytest.raises(pi.UnsupportedModelError, match="output_attentions=True is not supported"):
            model(input_ids=ids, attention_mask=mask, output_attentions=True)


def test_gradients_through_the_cache_are_refused():
    model = tiny_llama()
    ids, mask = prompts([4])
    with pi.applied(model):
        out = model(input_ids=ids, attention_mask=mask, use_cache=True, return_dict=True)  # grads on
        with pytest.raises(pi.UnsupportedModelError, match="VTensor caches carry no gradients"):
            model(input_ids=ids[:, -1:], attention_mask=paddle.concat([mask, mask[:, -1:]], axis=-1),
                  past_key_values=out.past_key_values, use_cache=True)


def test_apply_twice_and_remove_unapplied():
    model = tiny_llama()
    with pi.applied(model):
        with pytest.raises(ValueError, match="LlamaForCausalLM is already applied; call remove\\(\\) first"):
            pi.apply(model)
    with pytest.raises(ValueError, match="LlamaForCausalLM is not applied"):
        pi.remove(model)
    with pytest.raises(ValueError, match="max_seq_len must be positive, got 0"):
        pi.apply(model, max_seq_len=0)
    assert not pi.is_applied(model)


def test_generating_past_the_reservation_is_a_clear_error():
    model = tiny_llama()
    ids, mask = prompts([6])
    with pi.applied(model, max_seq_len=10):
        with pytest.raises(RuntimeError, match=r"the KV cache is full \(10 tokens \+ 1 new; 10 reserved\): pass a "
                                               r"larger max_seq_len to paddle_vtensor.apply\(\)"):
            greedy(model, ids, mask, 8)


# ---- apply() cannot silently miss; all or nothing ----

def without_attention_hooks():
    """The supported families with no attention hook at all (only the cache-append proxy): what
    a plugin that looks in the wrong place for the attention amounts to."""
    return tuple(dataclasses.replace(f, module_hooks=(), class_hooks=(), instance_hooks=()) for f in pi.FAMILIES)


@pytest.mark.parametrize("name", ["llama_gqa", "llama_mha", "qwen"])
def test_apply_refuses_when_the_attention_is_not_reached(name, monkeypatch):
    model = MODELS[name]()
    before = touched(model)
    monkeypatch.setattr(pi, "FAMILIES", without_attention_hooks())
    with pytest.raises(pi.UnsupportedModelError, match=r"the hooks are not reached on .*'migrations': 4, "
                                                        r"'appends_in_place': 4, 'appends_copied': 0, "
                                                        r"'attention_calls': 0\}"):
        pi.apply(model)
    assert not pi.is_applied(model) and pi.installed_count(name.split("_")[0]) == 0
    assert_untouched(model, before)


def test_apply_refuses_when_the_cache_append_is_not_reached(monkeypatch):
    from paddle_vtensor.integration import _hooks

    model = tiny_llama()
    before = touched(model)
    monkeypatch.setattr(_hooks.PaddleProxy, "concat", lambda self, x, axis=0, name=None: self._real.concat(x, axis))
    with pytest.raises(pi.UnsupportedModelError, match=r"found \{'migrations': 0, 'appends_in_place': 0, "
                                                        r"'appends_copied': 0, 'attention_calls': 0\}"):
        pi.apply(model)
    assert not pi.is_applied(model)
    assert_untouched(model, before)


@pytest.mark.parametrize("name", ["llama_gqa", "qwen"])
def test_apply_refuses_a_plugin_path_that_computes_differently(name, monkeypatch):
    from paddle_vtensor.integration import _hooks

    model = MODELS[name]()
    before = touched(model)
    real = _hooks.run_decode_attention
    monkeypatch.setattr(_hooks, "run_decode_attention", lambda *a: real(*a) * 2.0)
    with pytest.raises(pi.UnsupportedModelError, match="the plugin path differs from PaddleNLP's at probe step 1"):
        pi.apply(model)
    assert_untouched(model, before)


def test_options_the_plugin_cannot_honour_are_refused():
    for option, value, says in [("immediate_clear_past_key_value", True, "immediate_clear_past_key_value=True"),
                                ("context_parallel_degree", 2, "context parallel llama")]:
        model = tiny_llama()
        before = touched(model)
        setattr(model.config, option, value)
        with pytest.raises(pi.UnsupportedModelError, match=says):
            pi.apply(model)
        assert_untouched(model, before)
    # ...also when set after apply(): checked on every forward.
    model = tiny_llama()
    ids, mask = prompts([5])
    with pi.applied(model):
        model.config.immediate_clear_past_key_value = True
        with pytest.raises(pi.UnsupportedModelError, match="immediate_clear_past_key_value=True"):
            greedy(model, ids, mask, 2)


def test_attn_mask_startend_row_indices_is_refused():
    model = tiny_llama()
    if "attn_mask_startend_row_indices" not in inspect.signature(model.forward).parameters:
        pytest.skip("this PaddleNLP's llama has no attn_mask_startend_row_indices")
    ids, mask = prompts([5])
    with pi.applied(model), paddle.no_grad():
        with pytest.raises(pi.UnsupportedModelError, match="attn_mask_startend_row_indices is not supported"):
            model(input_ids=ids, attn_mask_startend_row_indices=paddle.zeros([1, 1, 5, 1], dtype="int32"))


# ---- lifetimes ----

def test_hooks_go_when_the_last_applied_model_is_collected():
    originals = hooked_objects()
    a, b = tiny_llama(seed=1), tiny_qwen(seed=2)
    pi.apply(a)
    pi.apply(b)
    assert pi.installed_count("llama") == 1 and pi.installed_count("qwen") == 1
    del a
    gc.collect()
    assert pi.installed_count("llama") == 0 and pi.installed_count("qwen") == 1
    del b
    gc.collect()
    assert pi.installed_count("qwen") == 0
    assert all(now is before for now, before in zip(hooked_objects(), originals))


@pytest.mark.parametrize("name", ["llama_gqa", "qwen"])
def test_deepcopy_of_an_applied_model_is_unapplied_and_computes_with_its_own_weights(name):
    model, other = MODELS[name](), MODELS[name]()
    paddle.seed(11)
    other = type(other)(other.config)  # different random weights, same shapes
    other.eval()
    ids, mask = prompts([5, 9])
    want, want_other = greedy(model, ids, mask, 6), greedy(other, ids, mask, 6)
    assert not np.array_equal(want, want_other)
    before_apply = touched(model)
    pi.apply(model)
    twin = copy.deepcopy(model)
    assert not pi.is_applied(twin)
    assert_untouched(twin, touched(MODELS[name]()))  # no hook of the original's came along
    twin.set_state_dict(other.state_dict())
    maps = pvt.memory_stats("cpu")["map_calls"]
    np.testing.assert_array_equal(greedy(twin, ids, mask, 6), want_other)  # its own weights...
    assert pvt.memory_stats("cpu")["map_calls"] == maps  # ...on PaddleNLP's own path
    np.testing.assert_array_equal(greedy(model, ids, mask, 6), want)  # the original: still applied
    assert pi.stats(model)["attention_calls"] > 0
    pi.remove(model)
    assert_untouched(model, before_apply)
