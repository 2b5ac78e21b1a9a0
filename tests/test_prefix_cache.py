"""generate_inflight's prefix cache (issue 31): prompts that share whole chunks' worth of a prefix
with a live or kept slot map its chunks instead of computing them, and every prompt's ids still
equal the model's own greedy generate() on that prompt alone; and PrefixCache.match against a
brute-force search over what each slot holds."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import paddle_vtensor as pvt
from paddle_vtensor.generation.prefix_cache import PrefixCache, block_tokens

pytest.importorskip("paddlenlp.transformers.llama.modeling")
from test_inflight import random_prompts, solo_generate  # noqa: E402
from test_integration_eager import tiny_llama, tiny_qwen  # noqa: E402

# A tiny llama token row is 2 layers x K,V x 2 heads x 16 x 4 bytes = 512 bytes: 4 KiB chunks hold
# 8 tokens (qwen: 4 heads, 1 KiB rows, 4 tokens), so short prompts span several whole chunks.
CHUNK = 4096
MODELS = {"llama": tiny_llama, "qwen": tiny_qwen}


def shared_prefix_workload(seed=5):
    """A long common system prefix with different tails, identical prompts, a prompt that is a prefix
    of another, one unrelated prompt; budgets uneven so requests arrive while others run."""
    system = random_prompts([37], seed=seed)[0]
    tails = random_prompts([5, 12, 1, 20, 9], seed=seed + 1)
    prompts = [system + t for t in tails]
    # One that leaves the system prompt exactly at a block boundary (16 tokens: 2 blocks of 8, 4 of 4):
    # reusing one row more than the common prefix would use the system prompt's row 16.
    fork = [3 if system[16] != 3 else 4] + random_prompts([6], seed=seed + 3)[0]
    prompts += [prompts[1], system[:21], prompts[0] + [7, 8, 9], random_prompts([14], seed=seed + 2)[0], prompts[3],
                system[:16] + fork]
    budgets = [6, 3, 9, 4, 5, 7, 4, 5, 2, 6, 5]
    return prompts, budgets


@pytest.mark.parametrize("name", sorted(MODELS))
def test_prefix_cache_ids_equal_solo_generate(name):
    model = MODELS[name]()
    prompts, budgets = shared_prefix_workload()
    steps = []
    got = pvt.generate_inflight(model, prompts, budgets, max_batch=3, chunk_bytes=CHUNK, on_step=steps.append)
    off = pvt.generate_inflight(model, prompts, budgets, max_batch=3, chunk_bytes=CHUNK, prefix_cache=False)
    want = [solo_generate(model, p, m) for p, m in zip(prompts, budgets)]
    assert got == want
    assert off == want
    s, o = got.stats, off.stats
    total = sum(len(p) for p in prompts)
    assert s["prompt_tokens"] == o["prompt_tokens"] == total
    assert o["prefix_hit_tokens"] == 0 and o["prefill_tokens"] == total and o["shared_bytes_peak"] == 0
    assert s["prefix_hit_tokens"] + s["prefill_tokens"] == total
    assert s["prefix_hit_tokens"] >= 4 * 32  # at least four prompts reuse the system prefix's whole blocks
    assert s["prefix_hit_tokens"] % s["block_tokens"] == 0
    assert sum(x["prefill_tokens"] for x in steps) == s["prefill_tokens"]
    assert sum(x["prefix_hit_tokens"] for x in steps) == s["prefix_hit_tokens"]
    assert s["decode_tokens"] == o["decode_tokens"] == sum(b - 1 for b in budgets)
    assert s["shared_bytes_peak"] > 0 and s["mapped_bytes_peak"] < o["mapped_bytes_peak"]
    assert s["deferred"] >= 1  # prompts admitted in the first step wait for the first prefill


def test_sequential_requests_reuse_the_previous_sequence():
    """One slot, one request at a time: each prompt takes over the previous sequence's slot and
    reuses exactly its common prefix with what that slot holds (prompt + generated ids but the
    last, floored to whole blocks, never the prompt's last token)."""
    model = tiny_llama()
    prompts, budgets = shared_prefix_workload(seed=9)
    steps = []
    got = pvt.generate_inflight(model, prompts, budgets, max_batch=1, chunk_bytes=CHUNK, on_step=steps.append)
    want = [solo_generate(model, p, m) for p, m in zip(prompts, budgets)]
    assert got == want
    b = got.stats["block_tokens"]
    assert b == 8
    expected, held = [], []
    for p, out in zip(prompts, want):
        common = next((i for i, (x, y) in enumerate(zip(held, p)) if x != y), min(len(held), len(p)))
        expected.append(min(common, len(p) - 1) // b * b)
        held = p + out[:-1]
    hits = [x["prefix_hit_tokens"] for x in steps if x["prefix_hit_tokens"] or x["prefill_tokens"]]
    assert hits == expected
    assert sum(expected) > 0


def test_byte_budget_zero_keeps_nothing_and_spare_slots_keep_more():
    model = tiny_llama()
    prompts, budgets = shared_prefix_workload(seed=9)
    want = [solo_generate(model, p, m) for p, m in zip(prompts, budgets)]
    none = pvt.generate_inflight(model, prompts, budgets, max_batch=1, chunk_bytes=CHUNK, prefix_cache_bytes=0)
    assert none == want
    assert none.stats["prefix_hit_tokens"] == 0 and none.stats["kept_evicted"] == len(prompts)
    # Eight spare slots keep every finished sequence: each prompt reuses the best of all before it.
    runner = pvt.SlotModelRunner(model, num_slots=len(prompts), max_seq_len=64, chunk_bytes=CHUNK)
    more = pvt.generate_inflight(model, prompts, budgets, max_batch=1, runner=runner)
    one = pvt.generate_inflight(model, prompts, budgets, max_batch=1, chunk_bytes=CHUNK)
    assert more == want and one == want
    assert more.stats["kept_evicted"] == 0
    assert more.stats["prefix_hit_tokens"] > one.stats["prefix_hit_tokens"]
    assert not runner.host_lens.any() and pvt.slot_info(runner.cache)["mapped_bytes"] == 0  # reset after the run


def test_prefix_cache_bad_arguments():
    model = tiny_llama()
    with pytest.raises(TypeError, match="prefix_cache must be True or False"):
        pvt.generate_inflight(model, [[3, 4]], 2, max_batch=1, prefix_cache=1)
    with pytest.raises(ValueError, match="prefix_cache_bytes"):
        pvt.generate_inflight(model, [[3, 4]], 2, max_batch=1, prefix_cache_bytes=-1)
    with pytest.raises(TypeError, match="prefix_cache_bytes"):
        pvt.generate_inflight(model, [[3, 4]], 2, max_batch=1, prefix_cache_bytes=1.5)


def test_block_tokens():
    assert block_tokens(4096, 512) == 8
    assert block_tokens(2 << 20, 128 << 10) == 16  # Llama-3-8B token rows in 2 MiB chunks
    assert block_tokens(4096, 384) == 32  # rows that straddle chunks: 32 rows end on one


# ---- PrefixCache.match against a brute-force search ----

def _lcp(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


slots_st = st.lists(st.tuples(st.lists(st.integers(0, 2), max_size=14), st.integers(0, 14)), max_size=5)


@settings(max_examples=300, deadline=None)
@given(slots=slots_st, prompt=st.lists(st.integers(0, 2), min_size=1, max_size=14), block=st.integers(1, 4),
       dropped=st.sets(st.integers(0, 4)))
def test_match_equals_brute_force(slots, prompt, block, dropped):
    pc = PrefixCache(block)
    for slot, (ids, written) in enumerate(slots):
        pc.start(slot, ids[:3], written=0)
        pc.feed(slot, ids[3:])  # fed later, as decodes are
        pc.wrote(slot, written)
    for slot in dropped:
        pc.drop(slot)
    held = {s: (ids, min(w, len(ids))) for s, (ids, w) in enumerate(slots) if s not in dropped}
    limit = len(prompt) - 1

    def best(rows):
        return max([min(_lcp(ids, prompt), rows(s), limit) // block * block for s, ids in
                    ((s, v[0]) for s, v in held.items())] or [0])

    m = pc.match(prompt)
    assert m.tokens == best(lambda s: held[s][1])
    assert m.pending == max(m.tokens, best(lambda s: len(held[s][0])))
    if m.tokens:
        ids, written = held[m.slot]
        assert written >= m.tokens and ids[:m.tokens] == prompt[:m.tokens]
    else:
        assert m.slot is None


def test_keep_evicts_least_recently_used_over_the_budget():
    pc = PrefixCache(2, budget_bytes=250)
    for slot in range(3):
        pc.start(slot, [slot, 9, 9], written=3)
    assert pc.keep(0, 100) == [] and pc.keep(1, 100) == []
    pc.touch(0)  # used: slot 1 is now the least recently used
    assert pc.keep(2, 100) == [1]
    assert list(pc.kept) == [0, 2] and pc.match([1, 9, 9]).slot is None
    assert pc.victim(spare=0) == 2 and pc.victim(spare=0) is None and pc.evicted == 2
    assert pc.match([0, 9, 5]).slot == 0 and pc.match([0, 9, 5]).tokens == 2


def test_bench_prefix_cli_tiny(tmp_path):
    """bench-prefix end to end on a tiny workload: 4 requests sharing a 24-token system prompt (three
    8-token blocks of 512-byte rows in 4 KiB chunks): the first computes it, the other three map it."""
    import json

    from paddle_vtensor.bench import cli

    assert cli.main(["bench-prefix", "--requests", "4", "--system-len", "24", "--own-min", "2", "--own-max", "6",
                     "--new-tokens", "2", "--max-batch", "4", "--hidden-size", "64", "--layers", "2", "--heads", "4",
                     "--kv-heads", "2", "--vocab", "100", "--chunk-kib", "4", "--repeats", "1", "--no-progress",
                     "--device", "cpu", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "bench_prefix.json").read_text())
    a = result["shared-prompt"]
    assert result["config"]["parts"] == ["shared-prompt"]
    assert a["ids_equal_with_and_without"] is True
    assert a["row_bytes"] == 512 and a["block_tokens"] == 8
    shared, unshared = a["stats"]["shared"], a["stats"]["unshared"]
    assert shared["prefix_hit_tokens"] == 3 * 24
    assert shared["prefill_tokens"] == a["prompt_tokens"] - 3 * 24 and unshared["prefill_tokens"] == a["prompt_tokens"]
    assert a["mapped_bytes_peak"]["shared"] < a["mapped_bytes_peak"]["unshared"]
    assert a["shared_over_formula"] <= 1.0  # own rows in whole chunks: at most one partial chunk per slot
    assert (tmp_path / "bench_prefix.png").stat().st_size > 0


def test_int8_cache_shares_its_scales_with_the_codes():
    """An int8 slot cache keeps per-token scales in a second slot cache: the prefix cache must map
    (and copy-on-write) those rows with the codes, so reused rows dequantize exactly as if computed.
    With the prefix cache on the ids equal the same int8 run with it off, and rows were reused."""
    model = tiny_llama()
    prompts, budgets = shared_prefix_workload(seed=11)
    on = pvt.generate_inflight(model, prompts, budgets, max_batch=3, chunk_bytes=CHUNK, cache_dtype="int8")
    off = pvt.generate_inflight(model, prompts, budgets, max_batch=3, chunk_bytes=CHUNK, cache_dtype="int8",
                                prefix_cache=False)
    assert on.stats["prefix_hit_tokens"] > 0
    assert on == off
