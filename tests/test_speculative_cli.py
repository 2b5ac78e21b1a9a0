"""bench-speculative end to end on a tiny random llama (CPU, seconds): what it writes (JSON keys,
consistent counts, a PNG), the ids check, and its argument errors. No timing assertions."""
import json
import os

import pytest

from paddle_vtensor.bench.cli import main

TINY = ["--hidden-size", "64", "--layers", "3", "--heads", "4", "--kv-heads", "2", "--vocab", "128",
        "--draft-layers", "1", "--batch", "2", "--input-len", "6", "--output-len", "9", "--k", "3",
        "--repeats", "1", "--device", "cpu"]


def test_bench_speculative_writes_json_and_png(tmp_path):
    assert main(["bench-speculative", *TINY, "--out", str(tmp_path)]) == 0
    with open(tmp_path / "bench_speculative.json") as f:
        result = json.load(f)
    assert result["command"].startswith("python -m paddle_vtensor bench-speculative --hidden-size 64")
    assert result["ids_identical_to_generate"] is True
    assert set(result["tokens_per_s"]) == {"generate", "slot_greedy", "speculative"}
    stats = result["speculative_stats"]
    assert stats["draft_forwards"] == 1 + 3 * stats["steps"] and stats["target_forwards"] == 1 + stats["steps"]
    assert stats["proposed"] <= 3 * 2 * stats["steps"] and 0 <= result["acceptance_rate"] <= 1
    assert set(result["speculative_step_ms"]) == {"draft", "verify", "accept", "check"}
    assert result["draft"]["layers"] == 1 and result["target"]["layers"] == 3
    assert os.path.getsize(tmp_path / "bench_speculative.png") > 1000


def test_bench_speculative_table_rows_follow_the_oracle(tmp_path):
    """--table: one row per (k, p); p = 1 accepts every proposal, p = 0 none; the ids stay generate()'s."""
    assert main(["bench-speculative", *TINY, "--table", "--ps", "0,1", "--ks", "2,3", "--out", str(tmp_path)]) == 0
    with open(tmp_path / "bench_speculative_table.json") as f:
        result = json.load(f)
    assert result["ids_identical_to_generate"] is True
    assert [(r["k"], r["p"]) for r in result["rows"]] == [(2, 0.0), (2, 1.0), (3, 0.0), (3, 1.0)]
    for r in result["rows"]:
        assert r["acceptance_rate"] == r["p"]
        assert r["mean_accepted_per_step"] == (r["k"] if r["p"] == 1.0 else 0)
        assert r["tokens_per_s"] > 0 and r["slot_greedy_tokens_per_s"] > 0
    with pytest.raises(ValueError, match="--ps must be probabilities"):
        main(["bench-speculative", *TINY, "--table", "--ps", "1.5", "--out", str(tmp_path)])


def test_bench_speculative_table_adaptive_rows(tmp_path):
    """--adaptive adds one row per p drafting 0..max(--ks) tokens a step; its ids are generate()'s too and
    its steps' k add up (p = 0: nothing accepted; p = 1: everything)."""
    assert main(["bench-speculative", *TINY, "--table", "--adaptive", "--ps", "0,1", "--ks", "2", "--out",
                 str(tmp_path)]) == 0
    with open(tmp_path / "bench_speculative_table.json") as f:
        result = json.load(f)
    assert result["ids_identical_to_generate"] is True
    assert [(r["k"], r["p"]) for r in result["rows"]] == [(2, 0.0), (2, 1.0), ("adaptive", 0.0), ("adaptive", 1.0)]
    for r in result["rows"][2:]:
        assert r["k_max"] == 2 and sum(r["k_counts"].values()) == r["steps"]
        assert set(r["k_counts"]) <= {"0", "1", "2"} and r["mean_accepted_per_step"] is None
        assert r["acceptance_rate"] == r["p"]


def test_bench_speculative_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="--k must be >= 1"):
        main(["bench-speculative", *TINY, "--k", "0", "--out", str(tmp_path)])
    with pytest.raises(ValueError, match="layers must be in"):
        main(["bench-speculative", *TINY, "--draft-layers", "4", "--out", str(tmp_path)])


def test_docs_speculative_example_runs():
    """docs/API.md's speculative-decoding example, executed as written (it asserts its own claims)."""
    from conftest import ROOT

    with open(os.path.join(ROOT, "docs", "API.md")) as f:
        text = f.read()
    section = text.split("## Speculative decoding", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "speculative_generate" in code and "assert" in code
    exec(compile(code, "docs/API.md#speculative-decoding", "exec"), {})
