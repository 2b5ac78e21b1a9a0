"""The bench-host subcommand's arithmetic (the benchmark itself runs from the CLI, not in CI)."""
import numpy as np

from paddle_vtensor.bench import bench_host
from paddle_vtensor.bench.cli import COMMANDS, parser


def test_ratios_are_per_round_medians_against_the_named_baseline():
    cases = [bench_host.Case("base", None), bench_host.Case("floor", None),
             bench_host.Case("ours", None, baseline="base", floor="floor")]
    per_round = {"base": [4.0, 8.0, 4.0], "floor": [5.0, 5.0, 10.0], "ours": [2.0, 12.0, 8.0]}
    row = bench_host.summarise(cases, per_round, {})["ours"]
    assert row["ratio_vs_baseline"] == np.median([0.5, 1.5, 2.0]) == 1.5
    assert row["ok_vs_baseline"] is True  # 1.5 <= 1.5
    assert row["ratio_vs_floor"] == np.median([0.4, 2.4, 0.8]) == 0.8
    assert row["ok_vs_floor"] is True
    assert row["median_us"] == 8.0 and row["best_us"] == 2.0


def test_interleaved_times_every_case_every_round():
    calls = {"a": 0, "b": 0}

    def count(name):
        def fn():
            calls[name] += 1
        return fn

    cases = [bench_host.Case("a", count("a")), bench_host.Case("b", count("b"))]
    per_round, wall = bench_host.interleaved(cases, calls=7, rounds=4)
    assert wall.keys() == per_round.keys()
    assert {k: len(v) for k, v in per_round.items()} == {"a": 4, "b": 4}
    assert calls == {"a": 10 + 28, "b": 10 + 28}  # warm-up, then rounds x calls


def test_registered_on_the_command_line():
    assert "bench-host" in COMMANDS
    args = parser().parse_args(["bench-host", "--no-llama", "--calls", "3"])
    assert args.command == "bench-host" and args.no_llama and args.calls == 3
