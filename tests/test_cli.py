"""The demo and the benchmark, end to end on a tiny random llama (CPU, seconds). No timing
assertions: what is checked is the structure of what they write, the token comparison, and the
cache-byte and memory accounting against what the model shape implies."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT

from paddle_vtensor.bench.cli import main

# batch 2, 2 layers, 2 kv heads of 16 dims, float32: one token of K (or V) in one layer is 256 bytes.
TINY = ["--hidden-size", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--vocab", "128",
        "--batch", "2", "--input-len", "12", "--output-len", "6", "--device", "cpu", "--no-progress"]
LAYERS, TOKEN_BYTES, INPUT_LEN, OUTPUT_LEN = 2, 2 * 2 * 16 * 4, 12, 6
RUN_KEYS = {"generate_s", "prefill_ms", "decode_ms_per_token_median", "decode_ms_per_token_mean",
            "decode_cache_bytes_per_step", "first_decode_step_cache_bytes",
            "later_decode_steps_cache_bytes_per_step", "plugin_counters", "decode_usage", "cache_in_vtensors",
            "peak_bytes_first_decode_step", "peak_bytes_later_decode_steps", "peak_bytes_whole_generate",
            "steps"}
PEAK_KEYS = {"paddle_allocated", "vtensor_mapped", "paddle_plus_vtensor", "process_rss"}


@pytest.fixture(scope="module")
def bench_result(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    status = main(["bench", *TINY, "--out", str(out), "--repeats", "2"])
    with open(out / "bench.json") as f:
        return status, json.load(f), out


def test_bench_writes_json_with_every_key(bench_result):
    _, result, _ = bench_result
    assert {"command", "date", "machine", "config", "tokens_identical", "baseline", "plugin"} <= result.keys()
    assert result["config"]["input_len"] == INPUT_LEN and result["config"]["output_len"] == OUTPUT_LEN
    assert result["config"]["repeats"] == 2
    assert result["command"].startswith("python -m paddle_vtensor bench --hidden-size 64")
    assert set(result["baseline"]["decode_usage"]) == {"minor_faults", "user_s", "sys_s"}
    assert set(result["baseline"]) == RUN_KEYS
    for phase in ("peak_bytes_first_decode_step", "peak_bytes_later_decode_steps", "peak_bytes_whole_generate"):
        assert set(result["baseline"][phase]) == PEAK_KEYS


def test_bench_records_one_step_per_generated_token(bench_result):
    _, result, _ = bench_result
    steps = result["baseline"]["steps"]
    # generate() makes one forward call per new token: the prefill, then one decode step each.
    assert steps["new_tokens"] == [INPUT_LEN] + [1] * (OUTPUT_LEN - 1)
    assert steps["context_len"] == list(range(INPUT_LEN, INPUT_LEN + OUTPUT_LEN))
    assert len(steps["ms"]) == OUTPUT_LEN and all(ms > 0 for ms in steps["ms"])


def test_bench_baseline_rewrites_whole_cache_each_step(bench_result):
    _, result, _ = bench_result
    steps = result["baseline"]["steps"]
    expected = [2 * LAYERS * TOKEN_BYTES * ctx for ctx in steps["context_len"]]
    assert steps["cache_bytes_written"] == expected
    assert result["concat_bytes_per_step_from_shape"] == pytest.approx(np.mean(expected[1:]))
    assert result["baseline"]["first_decode_step_cache_bytes"] == expected[1]
    assert result["baseline"]["later_decode_steps_cache_bytes_per_step"] == pytest.approx(np.mean(expected[2:]))
    assert result["baseline"]["cache_in_vtensors"] is False
    assert steps["cache_bytes_counted_by_ops"] == [0] * OUTPUT_LEN  # no paddle_vtensor op ran
    # The baseline's cache lives in paddle tensors: the decode peak holds at least the final cache.
    peak = result["baseline"]["peak_bytes_later_decode_steps"]
    assert peak["paddle_allocated"] >= expected[-1]
    assert peak["vtensor_mapped"] == 0


def test_bench_writes_a_plot(bench_result):
    import matplotlib.image

    _, _, out = bench_result
    image = matplotlib.image.imread(os.path.join(out, "bench.png"))
    assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 200


def test_bench_plugin_writes_one_token_per_step_and_same_tokens(bench_result):
    status, result, _ = bench_result
    assert status == 0
    assert result["tokens_identical"] is True
    plugin = result["plugin"]
    assert set(plugin) == RUN_KEYS
    assert plugin["cache_in_vtensors"] is True
    # Counted by the ops' kernels (memory_stats()["bytes_written"]), checked against the shape.
    counted = plugin["steps"]["cache_bytes_counted_by_ops"]
    written = plugin["steps"]["cache_bytes_written"]
    one_token = 2 * LAYERS * TOKEN_BYTES
    # The prefill is PaddleNLP's own (no op runs); the first decode step moves the prefill's cache
    # into VTensors (INPUT_LEN tokens) and appends the new token; every later step writes one token.
    assert counted == [0, one_token * (INPUT_LEN + 1)] + [one_token] * (OUTPUT_LEN - 2)
    assert written[1:] == counted[1:]
    assert plugin["first_decode_step_cache_bytes"] == one_token * (INPUT_LEN + 1)
    assert plugin["later_decode_steps_cache_bytes_per_step"] == one_token
    # The integration's own counters agree: one migration per layer and K/V, then only in-place
    # appends, no copy-on-write, attention on the VTensors at every decode step.
    assert plugin["plugin_counters"] == {"migrations": 2 * LAYERS, "appends_in_place": 2 * LAYERS * (OUTPUT_LEN - 2),
                                         "appends_copied": 0, "attention_calls": LAYERS * (OUTPUT_LEN - 1)}
    final_cache = 2 * LAYERS * TOKEN_BYTES * (INPUT_LEN + OUTPUT_LEN - 1)
    assert plugin["peak_bytes_later_decode_steps"]["vtensor_mapped"] >= final_cache


def test_bench_baseline_only_skips_the_plugin(tmp_path):
    status = main(["bench", *TINY, "--out", str(tmp_path), "--baseline-only"])
    with open(tmp_path / "bench.json") as f:
        result = json.load(f)
    assert status == 0
    assert result["plugin"] is None and result["tokens_identical"] is None
    assert "--baseline-only" in result["plugin_missing"]


def test_bench_rejects_heads_that_do_not_divide_hidden(tmp_path):
    with pytest.raises(ValueError, match="multiple of --heads"):
        main(["bench", *TINY, "--heads", "3", "--out", str(tmp_path)])


def test_bench_rejects_too_few_output_tokens(tmp_path):
    with pytest.raises(ValueError, match="--output-len"):
        main(["bench", *TINY, "--output-len", "2", "--out", str(tmp_path)])


def test_bench_rejects_half_precision_on_cpu(tmp_path):
    with pytest.raises(ValueError, match="--dtype bfloat16 needs --device gpu"):
        main(["bench", *TINY, "--dtype", "bfloat16", "--out", str(tmp_path)])


def test_demo_tiny_reports_its_comparison(tmp_path):
    path = tmp_path / "demo.json"
    status = main(["demo", "--tiny", "--device", "cpu", "--json", str(path)])
    with open(path) as f:
        result = json.load(f)
    assert set(result["baseline"]) == RUN_KEYS
    assert status == 0 and result["plugin_missing"] is None
    assert result["tokens_identical"] is True
    assert result["plugin"]["cache_in_vtensors"] is True


def test_demo_runs_as_a_module():
    """``python -m paddle_vtensor demo --tiny`` in a fresh process: the entry point, the printed
    table, and the exit status."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-m", "paddle_vtensor", "demo", "--tiny", "--device", "cpu"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert "decode ms/token, median" in done.stdout, done.stderr[-2000:]
    assert "cache written/step, later steps" in done.stdout
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "tokens identical: yes" in done.stdout
