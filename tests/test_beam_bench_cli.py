"""``python -m paddle_vtensor bench-prefix --beam --tiny`` end to end (CPU, seconds): the JSON's
structure and byte accounting against the tiny model's shape, equal ids, the plot. No timing checks."""
import json

from paddle_vtensor.bench.cli import main

# The tiny run: 2 layers, 2 kv heads of 16 dims, float32 (512-byte token rows), 2 beams, a 24-token
# prompt, 10 new tokens, 4 KiB chunks.
ROW, BEAMS, PROMPT, NEW = 2 * 2 * 2 * 16 * 4, 2, 24, 10


def test_bench_prefix_beam_tiny(tmp_path):
    status = main(["bench-prefix", "--beam", "--tiny", "--device", "cpu", "--no-progress", "--out", str(tmp_path)])
    assert status == 0
    with open(tmp_path / "bench_beam.json") as f:
        result = json.load(f)
    assert {"command", "date", "machine", "config", "results"} <= set(result)
    runs = result["results"]
    assert set(runs) == {"paddlenlp", "paddlenlp_applied", "slot_beam_search"}
    assert runs["slot_beam_search"]["ids_equal_paddlenlp"] and runs["paddlenlp_applied"]["ids_equal_paddlenlp"]
    # PaddleNLP's reorder (measured) index_selects every layer's whole K and V for every beam after
    # every step but the last: BEAMS x (PROMPT + step) rows.
    assert runs["paddlenlp"]["copied_bytes_per_step"] == [BEAMS * (PROMPT + s) * ROW for s in range(NEW - 1)]
    assert runs["paddlenlp_applied"]["migrations"] == 2 * 2 * (NEW - 1)
    ours = runs["slot_beam_search"]
    assert len(ours["copied_bytes_per_step"]) == NEW and ours["totals"]["copied_bytes"] == sum(ours["copied_bytes_per_step"])
    # step 0 forks the 24-row prompt (3 chunks of 8 rows, past the 2-chunk copy limit): mapped, not copied
    assert ours["mapped_chunks_per_step"][0] == 3 and ours["copied_bytes_per_step"][0] == 0
    assert ours["totals"]["copied_bytes"] < sum(runs["paddlenlp"]["copied_bytes_per_step"]) / 10
    assert (tmp_path / "bench_beam.png").stat().st_size > 1000
