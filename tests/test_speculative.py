"""speculative_generate on unmodified tiny PaddleNLP llamas (random weights, built locally): ids equal
the target's own greedy generate() (left-padded batches included) whatever the draft; draft == target
accepts every draft token; the accept/advance op is what ran (launch counter), and the host path
(accept_on_device=False) gives the same result; bad inputs fail before anything is allocated."""
import numpy as np
import pytest

import paddle
import paddle_vtensor as pvt
from paddle_vtensor.generation.speculative import speculative_generate
from paddle_vtensor.generation.speculative_accept import accept_launches

pytest.importorskip("paddlenlp.transformers.llama.modeling")
from test_integration_eager import VOCAB, tiny_llama, tiny_qwen  # noqa: E402

from paddle_vtensor.bench.draft_model import draft_from_target  # noqa: E402

_MODELS = {}


def model(name):
    """Built once per session (the slow part of these tests); none of them is modified."""
    if name not in _MODELS:
        target = _MODELS.setdefault("target", tiny_llama())
        _MODELS[name] = {"target": lambda: target, "perturbed": lambda: draft_from_target(target, noise=0.05),
                         "one_layer": lambda: draft_from_target(target, layers=1),
                         "unrelated": lambda: tiny_llama(kv_heads=1, seed=7)}[name]()
    return _MODELS[name]


def prompts(lengths, width=None, seed=0):
    """Left-padded ids and mask, as a tokenizer pads for generate()."""
    width = width or max(lengths)
    rng = np.random.default_rng(seed)
    ids = np.zeros([len(lengths), width], np.int64)
    mask = np.zeros([len(lengths), width], np.int64)
    for i, n in enumerate(lengths):
        ids[i, width - n:] = rng.integers(2, VOCAB, n)
        mask[i, width - n:] = 1
    return paddle.to_tensor(ids), paddle.to_tensor(mask)


def greedy(target, ids, mask, new):
    return target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new,
                           decode_strategy="greedy_search")[0].numpy()


@pytest.mark.parametrize("lengths", [[7], [5, 12, 1, 9]], ids=["batch1", "batch4_left_padded"])
def test_draft_equal_to_target_accepts_everything(lengths):
    target = model("target")
    ids, mask = prompts(lengths, seed=len(lengths))
    got, stats = speculative_generate(target, target, ids, mask, max_new_tokens=14, num_speculative_tokens=4)
    np.testing.assert_array_equal(got.numpy(), greedy(target, ids, mask, 14))
    assert stats["acceptance_rate"] == 1.0
    assert stats["accepted"] == stats["proposed"] > 0
    # 1 token from the prefill, then k + 1 = 5 a step: ceil(13 / 5) = 3 steps
    assert stats["steps"] == 3 and stats["target_forwards"] == 4 and stats["draft_forwards"] == 1 + 3 * 4


@pytest.mark.parametrize("draft_name", ["perturbed", "one_layer", "unrelated"])
def test_disagreeing_draft_gives_the_targets_greedy_tokens(draft_name):
    target, draft = model("target"), model(draft_name)
    ids, mask = prompts([6, 11, 3], seed=3)
    got, stats = speculative_generate(target, draft, ids, mask, max_new_tokens=16, num_speculative_tokens=3)
    np.testing.assert_array_equal(got.numpy(), greedy(target, ids, mask, 16))
    assert 0.0 <= stats["acceptance_rate"] < 1.0
    assert stats["accepted"] < stats["proposed"] <= 3 * 3 * stats["steps"]


def test_device_path_ran_and_host_path_agrees():
    target, draft = model("target"), model("perturbed")
    ids, mask = prompts([4, 10], seed=5)
    before = accept_launches("cpu")
    got, stats = speculative_generate(target, draft, ids, mask, max_new_tokens=12, num_speculative_tokens=4)
    assert accept_launches("cpu") - before == stats["steps"] > 0  # one op launch per step
    mid = accept_launches("cpu")
    host, host_stats = speculative_generate(target, draft, ids, mask, max_new_tokens=12, num_speculative_tokens=4,
                                            accept_on_device=False)
    assert accept_launches("cpu") == mid  # the host path never launched the op
    np.testing.assert_array_equal(got.numpy(), host.numpy())
    np.testing.assert_array_equal(got.numpy(), greedy(target, ids, mask, 12))
    assert stats == host_stats
    assert 0.0 < stats["acceptance_rate"] < 1.0


def test_one_host_read_per_step(monkeypatch):
    """The device path reads back only at the finished-sequence check (plus the final results)."""
    target, draft = model("target"), model("perturbed")
    ids, mask = (t.numpy() for t in prompts([8, 3], seed=6))  # inputs given as numpy: not a read of the loop
    reads = []
    real = paddle.Tensor.numpy

    def counting(self, *a, **kw):
        reads.append(tuple(self.shape))
        return real(self, *a, **kw)

    monkeypatch.setattr(paddle.Tensor, "numpy", counting)
    _, stats = speculative_generate(target, draft, ids, mask, max_new_tokens=12)
    monkeypatch.setattr(paddle.Tensor, "numpy", real)
    assert stats["host_reads"] == stats["steps"] + 1 + 2  # a check per step and after the last; 2 cache flags
    assert len(reads) == stats["host_reads"] + 3, reads  # + accepted total, ids, lengths at the end


def test_eos_ends_sequences_like_generate():
    target = model("target")
    ids, mask = prompts([5, 9, 2], seed=8)
    free = greedy(target, ids, mask, 12)
    eos = int(free[1, 4])  # the second prompt produces it at step 5
    old = (target.config.eos_token_id, target.generation_config.eos_token_id)
    target.config.eos_token_id = target.generation_config.eos_token_id = eos
    try:
        want = greedy(target, ids, mask, 12)
        for draft in (target, model("perturbed")):
            got, _ = speculative_generate(target, draft, ids, mask, max_new_tokens=12, num_speculative_tokens=3)
            np.testing.assert_array_equal(got.numpy(), want)
    finally:
        target.config.eos_token_id, target.generation_config.eos_token_id = old


def test_single_token_budget_and_k1():
    target, draft = model("target"), model("one_layer")
    ids, mask = prompts([3, 6], seed=9)
    for new, k in ((1, 4), (9, 1)):
        got, stats = speculative_generate(target, draft, ids, mask, max_new_tokens=new, num_speculative_tokens=k)
        np.testing.assert_array_equal(got.numpy(), greedy(target, ids, mask, new))


def _wrong_batch_mask():
    ids, mask = prompts([3, 4])
    return ids, mask[:1]


def _right_padded():
    ids, mask = prompts([3, 4])
    return ids, paddle.to_tensor(mask.numpy()[:, ::-1].copy())


def _all_pad():
    ids, mask = prompts([3, 4])
    m = mask.numpy()
    m[0] = 0
    return ids, paddle.to_tensor(m)


def _id_past_vocab():
    ids, mask = prompts([3, 5])
    ids[1, -1] = VOCAB  # the second sequence's last real token
    return ids, mask


BAD = [
    ("vocab", lambda: tiny_llama_vocab(120), lambda: prompts([3]), {}, ValueError, "share the vocabulary.*100.*120"),
    ("k0", lambda: model("target"), lambda: prompts([3]), {"num_speculative_tokens": 0}, ValueError,
     "num_speculative_tokens must be an int >= 1"),
    ("qwen", tiny_qwen, lambda: prompts([3]), {}, pvt.UnsupportedModelError, "draft must be a PaddleNLP LlamaForCausalLM"),
    ("batch", lambda: model("target"), _wrong_batch_mask, {}, ValueError, "batch mismatch"),
    ("right_padded", lambda: model("target"), _right_padded, {}, ValueError, "left-padded"),
    ("all_pad", lambda: model("target"), _all_pad, {}, ValueError, "sequence 0 has no tokens"),
    ("positions", lambda: model("target"), lambda: prompts([3]), {"max_new_tokens": 260}, ValueError,
     "max_position_embeddings"),
    ("budget", lambda: model("target"), lambda: prompts([3]), {"max_new_tokens": 0}, ValueError, r"max_new_tokens must be in \[1, "),
    ("budget_float", lambda: model("target"), lambda: prompts([3]), {"max_new_tokens": 2.5}, TypeError,
     "max_new_tokens must be an int, got float"),
    ("id_past_vocab", lambda: model("target"), _id_past_vocab, {}, ValueError,
     rf"token id {VOCAB} is outside the vocabulary \[0, {VOCAB}\)"),
    ("k_max_negative", lambda: model("target"), lambda: prompts([3]), {"num_speculative_tokens": -1, "adaptive": True},
     ValueError, "num_speculative_tokens must be an int >= 1, got -1"),
    ("k_auto", lambda: model("target"), lambda: prompts([3]), {"num_speculative_tokens": "auto"}, TypeError,
     "num_speculative_tokens must be an int, got str .for a k chosen each step pass adaptive=True"),
    ("k_float", lambda: model("target"), lambda: prompts([3]), {"num_speculative_tokens": 2.0, "adaptive": True},
     TypeError, "num_speculative_tokens must be an int, got float"),
    ("adaptive_str", lambda: model("target"), lambda: prompts([3]), {"adaptive": "yes"}, TypeError,
     "adaptive must be a bool or an AdaptiveSpeculation, got str"),
    ("adaptive_int", lambda: model("target"), lambda: prompts([3]), {"adaptive": 1}, TypeError,
     "adaptive must be a bool or an AdaptiveSpeculation, got int"),
]



def tiny_llama_vocab(vocab):
    from paddlenlp.transformers import LlamaConfig, LlamaForCausalLM

    m = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256))
    m.eval()
    return m


@pytest.mark.parametrize("name,make_draft,make_inputs,kw,exc,match", BAD, ids=[b[0] for b in BAD])
def test_bad_inputs_fail_before_anything_changes(name, make_draft, make_inputs, kw, exc, match):
    target, draft = model("target"), make_draft()
    ids, mask = make_inputs()
    before = pvt.memory_stats("cpu")
    args = {"max_new_tokens": 5, "num_speculative_tokens": 2, **kw}
    with pytest.raises(exc, match=match):
        speculative_generate(target, draft, ids, mask, **args)
    after = pvt.memory_stats("cpu")
    for key in ("reserved_bytes", "mapped_bytes", "live_regions"):
        assert after[key] == before[key], key


def expected_accepted(table, truth, max_new, k):
    """Accepted drafts of each sequence, by the rule on the host: from output position o, the leading
    proposals table[o + j] equal to the target's greedy truth[o + j]; then a + 1 tokens are emitted
    (fewer at max_new). An independent count to hold the loop's stats against."""
    total = []
    for row, ref in zip(table, truth):
        o, acc = 1, 0  # the prefill emits the first token
        while o < max_new:
            a = 0
            while a < k and row[o + a] == ref[o + a]:
                a += 1
            acc += a
            o += min(a + 1, max_new - o)
        total.append(acc)
    return total


@pytest.mark.parametrize("p", [0.0, 0.6, 1.0])
def test_oracle_proposals_set_acceptance_and_keep_the_ids(p):
    """The acceptance-controlled benchmark's oracle: proposals from a table (the target's own greedy token
    with probability p, else another), the draft model still running; ids stay the target's greedy ids."""
    target, draft = model("target"), model("one_layer")
    ids, mask = prompts([5, 9, 3, 7], seed=11)
    new, k = 15, 3
    truth = greedy(target, ids, mask, new + k)  # the target's tokens past max_new too: proposals reach them
    rng = np.random.default_rng(3)
    coin = rng.random(truth.shape) < p
    table = np.where(coin, truth, (truth + rng.integers(1, VOCAB, truth.shape)) % VOCAB)
    got, stats = speculative_generate(target, draft, ids, mask, max_new_tokens=new, num_speculative_tokens=k,
                                      oracle_proposals=table)
    np.testing.assert_array_equal(got.numpy(), truth[:, :new])
    assert stats["accepted"] == sum(expected_accepted(table, truth, new, k))
    if p == 1.0:
        assert stats["acceptance_rate"] == 1.0
    if p == 0.0:
        assert stats["accepted"] == 0


def test_oracle_proposals_of_a_wrong_shape_or_vocabulary_are_refused():
    target = model("target")
    ids, mask = prompts([4, 6], seed=2)
    with pytest.raises(ValueError, match=r"oracle_proposals must be integer \[batch, max_new_tokens"):
        speculative_generate(target, target, ids, mask, max_new_tokens=5, num_speculative_tokens=2,
                             oracle_proposals=np.zeros([2, 6], np.int64))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        speculative_generate(target, target, ids, mask, max_new_tokens=5, num_speculative_tokens=2,
                             oracle_proposals=np.full([2, 7], VOCAB, np.int64))


def expected_accepted_by_step(table, truth, max_new, ks):
    """Accepted drafts of the whole batch when step s drafts ks[s] tokens for every sequence still running
    (the rule on the host, as expected_accepted, in lockstep)."""
    o = np.ones(len(table), dtype=int)
    acc = 0
    for k in ks:
        for i in np.nonzero(o < max_new)[0]:
            a = 0
            while a < k and table[i, o[i] + a] == truth[i, o[i] + a]:
                a += 1
            acc += a
            o[i] += min(a + 1, max_new - o[i])
    assert (o == max_new).all()  # the loop's steps were exactly enough
    return acc


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0])
def test_adaptive_k_keeps_the_ids(p):
    """adaptive=True (timed: whatever k each step picks, plain steps included): ids equal generate()'s and
    the accepted count equals the rule replayed on the host with the k of each step."""
    target, draft = model("target"), model("one_layer")
    ids, mask = prompts([5, 9, 3, 7], seed=12)
    new, k = 15, 3
    truth = greedy(target, ids, mask, new + k)
    rng = np.random.default_rng(4)
    table = np.where(rng.random(truth.shape) < p, truth, (truth + rng.integers(1, VOCAB, truth.shape)) % VOCAB)
    got, stats = speculative_generate(target, draft, ids, mask, max_new_tokens=new, num_speculative_tokens=k,
                                      adaptive=True, oracle_proposals=table)
    np.testing.assert_array_equal(got.numpy(), truth[:, :new])
    ks = stats["k_per_step"]
    assert len(ks) == stats["steps"] and all(0 <= s <= k for s in ks) and ks[0] == k  # the first step times k_max
    assert stats["accepted"] == expected_accepted_by_step(table, truth, new, ks)
    assert stats["draft_forwards"] == 1 + sum(ks) and stats["target_forwards"] == 1 + len(ks)


def test_plain_steps_then_drafting_catch_the_draft_up():
    """Fixed costs that make plain steps win but for a probe (k = 4) every third step: the draft misses the
    plain steps' tokens and feeds them before drafting. With draft == target every draft must still be
    accepted, which only holds if the catch-up fed the right tokens at the right positions."""
    target = model("target")
    ids, mask = prompts([5, 12, 1, 9], seed=13)
    settings = pvt.AdaptiveSpeculation(probe_every=2, costs=pvt.StepCosts((1.0, 5.0, 5.0, 5.0, 5.0),
                                                                           (0.01, 0.02, 0.03, 0.04), 0.0))
    runs = [speculative_generate(target, target, ids, mask, max_new_tokens=20, num_speculative_tokens=4,
                                 adaptive=settings, accept_on_device=on_device) for on_device in (True, False)]
    for got, stats in runs:
        np.testing.assert_array_equal(got.numpy(), greedy(target, ids, mask, 20))
        assert stats["acceptance_rate"] == 1.0
        assert stats["k_per_step"][:6] == [0, 0, 4, 0, 0, 4]
    assert runs[0][1] == runs[1][1]
