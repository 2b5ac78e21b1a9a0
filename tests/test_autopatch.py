"""PADDLE_VTENSOR_AUTOPATCH (issue 26): unmodified scripts (tests/unmodified/, no paddle_vtensor
import) run in subprocesses with and without the variable must print the same tokens, and the
PADDLE_VTENSOR_REPORT=1 lines must show the plugin engaged only with it.

The dev checkout has no installed .pth, so each subprocess gets a sitecustomize.py that puts the
repository first on sys.path and calls site.addsitedir(<repo root>): Python then processes the repository's own
paddle_vtensor_autopatch.pth exactly as it would in site-packages. Runs under PaddleNLP 2.8.1 and
3.0.0b4 (scripts/test.sh --paddlenlp3)."""
import json
import os
import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT

pytest.importorskip("paddlenlp")
import paddlenlp  # noqa: E402

PADDLENLP3 = int(paddlenlp.__version__.split(".")[0]) >= 3


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("site")
    # First on sys.path (an installed paddle_vtensor must not win), and its .pth files processed.
    (d / "sitecustomize.py").write_text(f"import site, sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                                        f"site.addsitedir({str(ROOT)!r})\n")
    return str(d)


def side_by_side(jobs, timeout, cwd=None):
    """(argv, env) jobs run as subprocesses at once (each is mostly imports); their CompletedProcess results in
    order."""
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
             for argv, env in jobs]
    outs = [p.communicate(timeout=timeout) for p in procs]
    return [subprocess.CompletedProcess(p.args, p.returncode, *out) for p, out in zip(procs, outs)]


def run_all(site_dir, script, *autopatch):
    """The script once for each value of the variable, side by side: each run's printed tokens and its
    paddle_vtensor report lines, in that order."""
    jobs = []
    for value in autopatch:
        env = dict(os.environ, PYTHONPATH=site_dir, PADDLE_VTENSOR_REPORT="1")
        env.pop("PADDLE_VTENSOR_AUTOPATCH", None)
        if value is not None:
            env["PADDLE_VTENSOR_AUTOPATCH"] = value
        jobs.append(([sys.executable, os.path.join(ROOT, "tests", "unmodified", script)], env))
    results = []
    for proc in side_by_side(jobs, timeout=900, cwd=site_dir):
        assert proc.returncode == 0, proc.stderr[-4000:]
        tokens = [line for line in proc.stdout.splitlines() if line.startswith("TOKENS ")]
        assert len(tokens) == 1, proc.stdout[-2000:]
        report = [line for line in proc.stderr.splitlines() if line.startswith("paddle_vtensor")]
        results.append((json.loads(tokens[0][len("TOKENS "):]), report))
    return results


def test_the_scripts_import_no_paddle_vtensor():
    for name in ("eager_generate.py", "static_predictor.py"):
        with open(os.path.join(ROOT, "tests", "unmodified", name)) as f:
            assert "paddle_vtensor" not in f.read().replace("no paddle_vtensor", ""), name


def test_eager_generate_same_tokens_and_engaged(site_dir):
    (want, off), (zero, off0), (got, on) = run_all(site_dir, "eager_generate.py", None, "0", "1")
    assert got == want == zero  # greedy, sampling, beam, and the qwen model after the llama one was collected
    for lines in (off, off0):
        assert lines == ["paddle_vtensor report: autopatch off (PADDLE_VTENSOR_AUTOPATCH is not 1 and "
                         "paddle_vtensor.autopatch() was not called): nothing applied"], lines
    models = [line for line in on if " model " in line]
    assert len(models) == 2 and all(": applied (family " in line for line in models), on
    for line in models:  # each model's decode steps appended in place
        assert int(line.split("appends in place ")[1].split(",")[0]) > 0, line
    assert not [line for line in on if line.startswith("paddle_vtensor autopatch:")], on  # no warning


def test_static_predictor_same_tokens_and_engaged_or_left_alone(site_dir):
    (want, off), (got, on) = run_all(site_dir, "static_predictor.py", None, "1")
    assert got == want
    assert off[0].startswith("paddle_vtensor report: autopatch off"), off
    predictors = [line for line in on if " predictor " in line and line.startswith("paddle_vtensor report")]
    assert len(predictors) == 1, on
    if PADDLENLP3:  # the whole generation loop: its caches never cross the boundary
        assert ": applied (vtensor_kv_cache_pass: 4 appends and 2 attentions in place" in predictors[0], on
    else:  # a decode step: the pass would change the cache inputs' layout, so it is left alone
        assert ": not applied (" in predictors[0] and "storage layout" in predictors[0], on
        warnings = [line for line in on if line.startswith("paddle_vtensor autopatch: predictor")]
        assert len(warnings) == 1, on


def test_a_refused_model_warns_once_and_runs_paddlenlps_path(site_dir, tmp_path):
    script = tmp_path / "gpt.py"
    script.write_text(
        "import paddle\nfrom paddlenlp.transformers import GPTConfig, GPTForCausalLM\n"
        "paddle.seed(0)\nm = GPTForCausalLM(GPTConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, "
        "num_attention_heads=2, intermediate_size=64))\nm.eval()\nids = paddle.to_tensor([[5, 6, 7]])\n"
        "for _ in range(2):\n    out = m.generate(input_ids=ids, max_new_tokens=4, decode_strategy='greedy_search')\n"
        "print('TOKENS ' + str(out[0].numpy().tolist()).replace(' ', ''))\n")
    env = dict(os.environ, PYTHONPATH=site_dir, PADDLE_VTENSOR_REPORT="1")
    procs = side_by_side([([sys.executable, str(script)], dict(env, PADDLE_VTENSOR_AUTOPATCH=on)) for on in ("0", "1")],
                         timeout=600)
    results = dict(zip(("0", "1"), procs))
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert results["0"].stdout.splitlines()[-1] == results["1"].stdout.splitlines()[-1]
    warnings = [line for line in results["1"].stderr.splitlines() if line.startswith("paddle_vtensor autopatch:")]
    assert len(warnings) == 1 and "GPTForCausalLM#1 runs on PaddleNLP's own path: UnsupportedModelError" in warnings[0]


def test_autopatch_from_python_after_paddlenlp_was_imported(site_dir):
    code = ("import os, runpy, paddlenlp.generation.utils as u, paddle.inference\n"
            "import paddle_vtensor\nassert not hasattr(u.GenerationMixin.generate, '__paddle_vtensor_autopatch__')\n"
            "paddle_vtensor.autopatch()\n"
            "assert hasattr(u.GenerationMixin.generate, '__paddle_vtensor_autopatch__')\n"
            "assert hasattr(paddle.inference.create_predictor, '__paddle_vtensor_autopatch__')\n"
            f"runpy.run_path({os.path.join(ROOT, 'tests', 'unmodified', 'eager_generate.py')!r}, run_name='__main__')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)]), PADDLE_VTENSOR_REPORT="1")
    env.pop("PADDLE_VTENSOR_AUTOPATCH", None)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len([line for line in proc.stderr.splitlines() if ": applied (family " in line]) == 2, proc.stderr[-3000:]


def test_without_the_variable_importing_changes_nothing(site_dir):
    code = ("import sys, paddle, paddle.inference, paddlenlp.generation.utils as u\n"
            "import paddle_vtensor_autopatch as h\n"
            "assert not h.installed()\n"
            "assert not hasattr(u.GenerationMixin.generate, '__paddle_vtensor_autopatch__')\n"
            "assert not hasattr(paddle.inference.create_predictor, '__paddle_vtensor_autopatch__')\n"
            "assert not [f for f in sys.meta_path if type(f).__module__ == 'paddle_vtensor_autopatch']\n"
            "assert 'paddle_vtensor' not in sys.modules\n")
    jobs = []
    for value in (None, "0", ""):
        env = dict(os.environ, PYTHONPATH=site_dir)
        env.pop("PADDLE_VTENSOR_AUTOPATCH", None)
        if value is not None:
            env["PADDLE_VTENSOR_AUTOPATCH"] = value
        jobs.append(([sys.executable, "-c", code], env))
    for value, proc in zip((None, "0", ""), side_by_side(jobs, timeout=300)):
        assert proc.returncode == 0, (value, proc.stderr[-3000:])


def test_the_hook_imports_nothing_heavy_at_start(site_dir):
    code = "import sys; assert 'paddle_vtensor_autopatch' in sys.modules; print(sorted(m for m in sys.modules if m.startswith(('paddle', 'numpy'))))"
    env = dict(os.environ, PYTHONPATH=site_dir, PADDLE_VTENSOR_AUTOPATCH="1")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['paddle_vtensor_autopatch']"


def test_the_wheel_installs_the_pth_hook(tmp_path):
    """bdist_wheel with the ops build replaced by nothing (the ops are not what is checked here):
    the hook module and its .pth lie at the wheel's root, i.e. in site-packages once installed."""
    pytest.importorskip("wheel")
    # A fresh build folder: build/lib of an earlier build must not supply the files checked.
    code = ("import sys; sys.argv = ['setup.py', '-q', 'build', '--build-base', sys.argv[2], 'bdist_wheel', "
            "'--dist-dir', sys.argv[1]]\n"
            "from paddle_vtensor import _packaged\n"
            "_packaged.build_into = lambda out, objects: {'paddle': '-', 'cuda': False}\n"
            "exec(compile(open('setup.py').read(), 'setup.py', 'exec'), {'__file__': 'setup.py', '__name__': '__main__'})\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "dist"), str(tmp_path / "build")], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").iterdir()
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert z.read("paddle_vtensor_autopatch.pth").decode().strip() == "import paddle_vtensor_autopatch"
    assert {"paddle_vtensor_autopatch.py", "paddle_vtensor/_autopatch.py"} <= names
