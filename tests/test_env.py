"""One env-var prefix, one list (issue 24 point 3): every PADDLE_VTENSOR_* name the repository's
code spells is in paddle_vtensor/_env.py's table, nothing reads a PVT_* variable from Python or
the scripts, and the Python knobs do what the table says."""
import glob
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT

from paddle_vtensor import _env

CODE_ROOTS = ["paddle_vtensor", "custom_ops", "passes", "scripts", "tests", ".ci"]
CODE_FILES = ["setup.py", "setup_ops.py", "pyproject.toml", "paddle_vtensor_autopatch.py"]
SUFFIXES = (".py", ".cc", ".h", ".cu", ".cuh", ".sh", ".txt", ".cmake", ".toml")


def _code_files():
    """Every code file, but this one (its examples are not knobs)."""
    for top in CODE_ROOTS:
        for path in glob.glob(os.path.join(ROOT, top, "**", "*"), recursive=True):
            if os.path.isfile(path) and (path.endswith(SUFFIXES) or os.path.basename(path) == "run") \
                    and os.path.abspath(path) != os.path.abspath(__file__):
                yield path
    yield from (os.path.join(ROOT, f) for f in CODE_FILES)


def _listed() -> set[str]:
    return set(re.findall(r"^(PADDLE_VTENSOR_\w+) ", _env.__doc__, re.M)) | {"PADDLE_VTENSOR_WITH_CUDA"}


def test_the_table_lists_names_once():
    rows = re.findall(r"^(PADDLE_VTENSOR_\w+) ", _env.__doc__, re.M)
    assert len(rows) == len(set(rows)) >= 12
    assert "PADDLE_VTENSOR_WITH_CUDA" in _env.__doc__  # the define, explained under the table


def test_every_knob_in_the_code_is_listed():
    found: dict[str, str] = {}
    files = list(_code_files())
    assert any(p.endswith("cpu_thread_pool.cc") for p in files) and any(p.endswith("compile_cuda.sh") for p in files)
    for path in files:
        with open(path, errors="replace") as f:
            for name in re.findall(r"PADDLE_VTENSOR_\w+", f.read()):
                found.setdefault(name, os.path.relpath(path, ROOT))
    assert {"PADDLE_VTENSOR_NUM_THREADS", "PADDLE_VTENSOR_JIT", "PADDLE_VTENSOR_NVIDIA_WHEELS"} <= set(found)
    missing = {name: where for name, where in found.items() if name not in _listed()}
    assert not missing, f"not in paddle_vtensor/_env.py's table: {missing}"


# An environment read of a PVT_ name: os.environ[...] / .get(...) / getenv(...) / a shell ${PVT_...}.
PVT_READ = re.compile(r"""(environ(\.get|\.pop|\.setdefault)?\s*[\[(]\s*["']PVT_|getenv\(\s*["']PVT_|\$\{?PVT_)""")


def test_nothing_reads_a_pvt_variable():
    """Python and the scripts (tests/native and tests/gpu belong to their own harnesses)."""
    offenders = []
    for path in _code_files():
        rel = os.path.relpath(path, ROOT)
        if rel.startswith((os.path.join("tests", "native"), os.path.join("tests", "gpu"), "custom_ops", "passes")):
            continue
        with open(path, errors="replace") as f:
            for n, line in enumerate(f, 1):
                if PVT_READ.search(line):
                    offenders.append(f"{rel}:{n}: {line.strip()}")
    assert not offenders, offenders


def test_the_pattern_catches_reads():
    for line in ['os.environ.get("PVT_X")', "os.environ['PVT_X']", 'std::getenv("PVT_X")', "w=${PVT_X:-1}"]:
        assert PVT_READ.search(line), line
    assert not PVT_READ.search('os.environ.get("PADDLE_VTENSOR_X")')


@pytest.mark.parametrize("name, value, expr, want", [
    ("PADDLE_VTENSOR_MAX_SEQ_LEN", "77", "pvt.configure().max_seq_len", 77),
    ("PADDLE_VTENSOR_CHUNK_BYTES", "8192", "pvt.configure().chunk_bytes", 8192),
    ("PADDLE_VTENSOR_BUILD_DIR", "/tmp/x", "_env.build_dir()", "/tmp/x"),
    ("PADDLE_VTENSOR_JIT", "1", "_env.jit_forced()", True),
])
def test_python_knobs_take_effect(name, value, expr, want):
    code = f"import paddle_vtensor as pvt\nfrom paddle_vtensor import _env\nprint(repr({expr}))"
    env = dict(os.environ, PYTHONPATH=ROOT, **{name: value})
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == repr(want)


def test_defaults_and_a_bad_value(monkeypatch):
    monkeypatch.delenv("PADDLE_VTENSOR_MAX_SEQ_LEN", raising=False)
    assert _env.max_seq_len() == 4096 and _env.DEFAULT_CHUNK_BYTES == 2 << 20
    monkeypatch.setenv("PADDLE_VTENSOR_MAX_SEQ_LEN", "lots")
    with pytest.raises(ValueError, match="PADDLE_VTENSOR_MAX_SEQ_LEN='lots' is not an integer"):
        _env.max_seq_len()


def test_only_env_reads_the_python_knobs():
    offenders = []
    for path in glob.glob(os.path.join(ROOT, "paddle_vtensor", "**", "*.py"), recursive=True):
        if os.path.basename(path) == "_env.py":
            continue
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if re.search(r"""(environ|getenv)\S*\s*[\[(]\s*["']PADDLE_VTENSOR_""", line):
                    offenders.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}")
    assert not offenders, offenders
