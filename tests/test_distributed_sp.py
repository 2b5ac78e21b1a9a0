"""Sequence-parallel decode across 2 and 4 CPU processes (paddle.distributed, gloo): every step's
merged output equals attention over the whole cache in one process; one packed all-gather per layer
(per micro-batch when the batch is split to overlap it), counted by wrapping paddle.distributed's
collectives; bad calls fail on every rank alike and change nothing. The ranks run
tests/distributed_sp_worker.py and tests/distributed_sp_overlap_worker.py."""
import json
import os
import subprocess
import sys

import numpy as np
import paddle
import pytest

import paddle_vtensor as pvt
from paddle_vtensor.bench import sp_decode
from paddle_vtensor.generation.distributed import balanced_split
from paddle_vtensor.generation.sp_exchange import HEADER_BYTES, payload_bytes

HERE = os.path.dirname(os.path.abspath(__file__))


def test_balanced_split_gives_each_token_to_the_rank_with_fewest():
    assert balanced_split([0, 0], 5).tolist() == [3, 2]
    assert balanced_split([4, 1, 2], 1).tolist() == [0, 1, 0]
    assert balanced_split([4, 1, 2], 4).tolist() == [0, 3, 1]  # 4, 4, 3 after
    assert balanced_split([3, 3], 1).tolist() == [1, 0]       # a tie goes to the lowest rank
    rng = np.random.default_rng(0)
    tokens = np.zeros(3, np.int64)
    for n in rng.integers(1, 9, size=50):
        tokens += balanced_split(tokens, n)
        assert tokens.max() - tokens.min() <= 1


def launch(tmp_path, *args, worker="distributed_sp_worker.py", nproc=2):
    env = sp_decode.rank_env()  # the source tree's package; Paddle's store as sp-decode starts it
    cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(nproc), "--log_dir",
           str(tmp_path / "log"), os.path.join(HERE, worker), str(tmp_path), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    logs = "".join(p.read_text()[-3000:] for p in sorted((tmp_path / "log").glob("workerlog.*")))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:] + logs
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(nproc)]


def test_two_ranks_match_one_process_every_step(tmp_path):
    pvt._ops.load()  # build once here, not in both ranks at once
    dtypes = ["float32", "bfloat16"]
    ranks = launch(tmp_path, *dtypes)  # one launch, both dtypes: process start-up dominates
    for r, dtype in [(r, d) for r in range(2) for d in dtypes]:
        rec = ranks[r][dtype]
        assert rec["checked"] == 2 * 2 * 33, rec  # two runs x 2 layers x 33 steps
        assert rec["ranks_agree"], rec
        assert rec["max_err_vs_op"] <= rec["atol"], rec
        assert rec["max_err_vs_numpy"] <= rec["atol"], rec
        st = rec["stats"]
        assert st["rank"] == r and st["world"] == 2
        assert sum(st["tokens_per_rank"]) == st["length"] == 2 * (5 + 14 + 3 + 10 + 4 + 6)
        assert abs(st["tokens_per_rank"][0] - st["tokens_per_rank"][1]) <= 1  # balanced
        assert st["tokens"] == st["tokens_per_rank"][r] and st["mapped_bytes"] > 0
        errors = rec["errors"]
        assert "world_size=3 but the group has 2 ranks" in errors["world_size"]
        for case in ("heads_mismatch", "q_heads_mismatch", "dim_mismatch", "bad_layer_one_rank", "heads_vs_cache"):
            assert "no cache changed" in errors[case], (case, errors[case])
            assert errors[case + "_unchanged"], case
        assert "disagree: q_heads per rank [4, 8]" in errors["q_heads_mismatch"]
        assert "rank(s) [1] refused" in errors["bad_layer_one_rank"] or r == 1
        # Each rank maps only its own part: its tokens' rows, in whole 4 KiB chunks, per K/V and layer.
        row_bytes = 2 * 2 * 16 * {"float32": 4, "bfloat16": 2}[dtype]  # B x Hkv x D x element
        assert st["mapped_bytes"] == 2 * 2 * -(-st["tokens"] * row_bytes // 4096) * 4096, st
        assert st["tokens"] < st["length"]
        # One packed all-gather per layer call: 2 runs x 33 steps x 2 layers, the 5 refused calls, and a
        # handshake on the first layer of each multi-token step (5, 3 and 4 new tokens; twice).
        assert st["collectives"] == 2 * 33 * 2 + 5 + 2 * 3, st
        token = 2 * 4 * (4 + 16 * {"float32": 4, "bfloat16": 2}[dtype])  # B x Hq rows of one token: lse + out
        payloads = 2 * (2 * 33 * HEADER_BYTES + 2 * token * 42)  # padded to each step's new tokens (42 a run)
        handshakes = HEADER_BYTES + 5 * (HEADER_BYTES + token)  # the first one before any layout is agreed
        assert st["collective_bytes_sent"] == payloads + 5 * (HEADER_BYTES + token) + handshakes, st


def test_ranks_get_this_package_and_paddles_store_without_libuv_unless_the_caller_chose(monkeypatch):
    """The launches here and sp-decode's start their ranks with rank_env(): Paddle 3.3's libuv store now
    and then killed rank 0 at exit (sp_decode.PADDLE_STORE_FLAG says when)."""
    flag, off = sp_decode.PADDLE_STORE_FLAG
    monkeypatch.delenv(flag, raising=False)
    env = sp_decode.rank_env()
    assert env[flag] == off == "0"
    assert os.path.isfile(os.path.join(env["PYTHONPATH"].split(os.pathsep)[0], "paddle_vtensor", "__init__.py"))
    monkeypatch.setenv(flag, "1")
    assert sp_decode.rank_env()[flag] == "1"


def test_llama_across_two_ranks_gives_the_one_process_tokens(tmp_path):
    """A tiny PaddleNLP llama decoding with its cache split over 2 processes: greedy tokens identical
    to PaddleNLP's own generate() in one process; the cache balanced across the ranks."""
    out = tmp_path / "sp.json"
    proc = subprocess.run([sys.executable, "-m", "paddle_vtensor", "sp-decode", "--tiny", "--device", "cpu",
                           "--json", str(out)], env=sp_decode.rank_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["tokens_identical"] and result["ranks_agree"]
    per_rank = result["per_rank"]
    assert [r["rank"] for r in per_rank] == [0, 1]
    assert sum(r["cache_tokens"] for r in per_rank) == result["cache_tokens_total"] == 13 + 24 - 1
    assert abs(per_rank[0]["cache_tokens"] - per_rank[1]["cache_tokens"]) <= 1
    # Memory follows each rank's own part: what its tokens need, rounded up to whole chunks per cache.
    c = result["config"]
    layers, chunk = c["shape"]["layers"], c["chunk_bytes"]
    token_bytes = c["batch"] * c["shape"]["kv_heads"] * (c["shape"]["hidden_size"] // c["shape"]["heads"]) * 4
    for r in per_rank:
        need = r["cache_tokens"] * token_bytes
        assert r["mapped_bytes"] == 2 * layers * (-(-need // chunk) * chunk), r


@pytest.mark.parametrize("nproc", [2, 4])
def test_one_packed_gather_per_layer_and_micro_batch_exact_and_refusals_everywhere(tmp_path, nproc):
    """A small decoder over B=4 sequences, its caches split over 2 / 4 processes, unsplit and as two
    micro-batches with overlapped gathers: every step equals one process; the collectives counted by
    wrapping paddle.distributed are one all-gather per layer and micro-batch (plus one handshake per
    micro-batch on the first, 5-token step) of exactly the packed size; bad input raises everywhere."""
    pvt._ops.load()
    layers, heads, dim, decode_steps = 3, 4, 16, 12
    ranks = launch(tmp_path, worker="distributed_sp_overlap_worker.py", nproc=nproc)
    for r, rec in enumerate(ranks):
        for micro in (1, 2):
            m = rec["exact"][f"micro_batches_{micro}"]
            assert m["collectives_per_step"] == [layers * micro + micro] + [layers * micro] * decode_steps, m
            assert m["functions"] == ["paddle.distributed.stream.all_gather"], m
            sizes = {payload_bytes(rows, heads, dim, paddle.float32) for rows in m["rows_per_micro_batch"]}
            assert m["bytes_per_decode_collective"] == sorted(sizes), m
            assert m["max_err_vs_one_process"] <= 2e-5 and m["ranks_agree"], m
            for st in m["stats"]:
                assert st["world"] == nproc and st["length"] == 5 + decode_steps
                assert max(st["tokens_per_rank"]) - min(st["tokens_per_rank"]) <= 1
        bad = rec["bad"]
        heads_per_rank = [2 * heads] + [heads] * (nproc - 1)
        assert f"the ranks disagree: q_heads per rank {heads_per_rank}" in bad["split_step"], bad
        assert "no cache changed" in bad["split_step"]
        assert bad["split_layer1_unchanged"] and bad["split_pending_drained"], bad
        assert "rank(s) [0] refused the call" in bad["append_fails"], bad
        assert ("ReservationFullError" in bad["append_fails"]) == (r == 0), bad
        assert bad["append_fails_unchanged"], bad
