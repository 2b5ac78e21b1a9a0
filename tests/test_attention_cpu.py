"""The CPU decode-attention kernel at long contexts and on every instruction-set build, against
numpy in float64 (tests/test_attention.py has the short shapes; tests/native/test_attention_cpu.cc
the variable-length fields and lse); and the bench-attention subcommand's JSON."""
import json
import os
import subprocess
import sys

import numpy as np
import paddle
import pytest

import paddle_vtensor as pvt
from paddle_vtensor import _ops
from paddle_vtensor.attention import decode_attention
from paddle_vtensor.bench.cli import main

from conftest import ROOT
from test_attention import ATOL, f64, make, ref_attention

# Every build of the inner loop; on a CPU without one, the kernel falls back to the best it has.
ISAS = ("scalar", "avx2", "avx512")

pytestmark = pytest.mark.skipif(paddle.is_compiled_with_cuda(), reason="the CPU kernel (a GPU build runs CUDA's)")


@pytest.fixture
def use_isa():
    """Runs the test body's calls on the asked build (process-wide), then the best build again."""
    yield _ops.c.set_cpu_attention_isa
    _ops.c.set_cpu_attention_isa(None)


def long_case(dtype, s_len, tq, b=1, hq=4, hkv=2, d=64, mask=None, seed=0):
    rng = np.random.default_rng(seed)
    # Scores large enough that the softmax is peaked: a wrong tile max or rescale shows.
    q = make([b, tq, hq, d], dtype, rng, 4.0)
    k, v = make([b, s_len, hkv, d], dtype, rng), make([b, s_len, hkv, d], dtype, rng)
    mask_t = None if mask is None else paddle.to_tensor(mask)
    out = decode_attention(q, pvt.from_dense(k), pvt.from_dense(v), mask_t)
    return f64(out), ref_attention(f64(q), f64(k), f64(v), mask)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_long_context_matches_numpy(isa, dtype, use_isa):
    # 16400 keys: 257 tiles of 64 keys (the last one partial), several chunks merged per entry.
    use_isa(isa)
    got, want = long_case(dtype, 16400, 1)
    np.testing.assert_allclose(got, want, atol=ATOL[dtype], rtol=0)


@pytest.mark.parametrize("isa", ISAS)
def test_long_context_speculative_and_gqa(isa, use_isa):
    # Tq = 3 causal queries at the end of 17000 keys, batch 2, 8 query heads on 2 kv heads.
    use_isa(isa)
    got, want = long_case("float32", 17000, 3, b=2, hq=8, hkv=2, d=32)
    np.testing.assert_allclose(got, want, atol=ATOL["float32"], rtol=0)


def test_long_context_mask_hides_all_but_early_keys():
    # A bool mask that keeps only the first 100 and one middle key of 16384: every other tile is
    # fully masked, so the online softmax must carry the max across masked tiles unchanged.
    s_len = 16384
    keep = np.zeros([1, 1, 1, s_len], dtype=bool)
    keep[..., :100] = True
    keep[..., 9000] = True
    got, want = long_case("float32", s_len, 1, mask=keep)
    np.testing.assert_allclose(got, want, atol=ATOL["float32"], rtol=0)


def test_odd_head_dim_long(use_isa):
    # D = 40: not a multiple of any vector width, so the converted-tile path runs.
    use_isa("avx512")
    got, want = long_case("bfloat16", 16384, 1, d=40)
    np.testing.assert_allclose(got, want, atol=ATOL["bfloat16"], rtol=0)


def test_isa_setter_and_environment_read_once():
    # The setter changes what the next call runs, never above what the CPU has, and refuses other
    # names; PADDLE_VTENSOR_CPU_ISA is the starting value, read once: setting it later does nothing.
    best = _ops.c.cpu_attention_isa()
    try:
        _ops.c.set_cpu_attention_isa("scalar")
        assert _ops.c.cpu_attention_isa() == "scalar"
        _ops.c.set_cpu_attention_isa("avx512")
        assert _ops.c.cpu_attention_isa() == best  # the best there is when the CPU lacks avx512
        with pytest.raises(ValueError, match="expected 'scalar'"):
            _ops.c.set_cpu_attention_isa("sse9")
        assert _ops.c.cpu_attention_isa() == best
    finally:
        _ops.c.set_cpu_attention_isa(None)
    code = ("import os, paddle_vtensor as pvt; from paddle_vtensor import _ops; a = _ops.c.cpu_attention_isa(); "
            "os.environ['PADDLE_VTENSOR_CPU_ISA'] = 'avx2'; print(a, _ops.c.cpu_attention_isa())")
    env = dict(os.environ, PADDLE_VTENSOR_CPU_ISA="scalar", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["scalar", "scalar"]


def test_bench_attention_json(tmp_path, capsys):
    _ops.load()  # a first load may print paddle's build messages on stdout; not part of the JSON
    capsys.readouterr()
    out = tmp_path / "attn.json"
    status = main(["bench-attention", "--device", "cpu", "--shape", "1,256,4,2,32", "--shape", "2,100,2,2,16",
                   "--cache-dtype", "float16", "--repeats", "2", "--out", str(out)])
    assert status == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    assert printed["kernel"]["isa"] in ISAS and printed["kernel"]["threads"] >= 1
    rows = printed["results"]
    assert [(r["batch"], r["kv_len"], r["q_heads"], r["kv_heads"], r["head_dim"]) for r in rows] == [
        (1, 256, 4, 2, 32), (2, 100, 2, 2, 16)]
    for r in rows:
        assert r["dtype"] == "float16"
        assert r["cache_bytes"] == 2 * r["batch"] * r["kv_len"] * r["kv_heads"] * r["head_dim"] * 2
        for name in ("ours", "numpy_einsum", "read_floor"):
            assert 0 < r[name]["best_s"] <= r[name]["median_s"]
        assert r["max_abs_diff_vs_numpy"] < 2e-3  # the kernel agrees with the einsum baseline


def test_bench_attention_rejects_bad_shape():
    with pytest.raises(ValueError, match="multiple of HKV"):
        main(["bench-attention", "--device", "cpu", "--shape", "1,16,3,2,8"])
