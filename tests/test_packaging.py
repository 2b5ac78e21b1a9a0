"""How the ops library that `pip install --no-build-isolation .` builds into the package is chosen
(paddle_vtensor/_packaged.py): a library built for another paddle, or from other sources, is never
loaded, and an installed package without a usable library says how to rebuild. (The install
itself is exercised by .ci/run: pip install, then import and `demo --tiny` from outside the tree.)"""
import json
import re
import sys

import paddle
import pytest

from paddle_vtensor import _build, _ops, _packaged


def fake_lib(folder, **info):
    folder.mkdir()
    base = {"digest": "d" + _build.source_digest(_build.with_cuda()), "paddle": paddle.__version__,
            "cuda": _build.with_cuda()}
    base.update(info)
    (folder / "build_info.json").write_text(json.dumps(base))
    return str(folder)


def test_a_matching_library_is_chosen(tmp_path, monkeypatch):
    good = fake_lib(tmp_path / "good")
    monkeypatch.setattr(_packaged, "_candidates", lambda: [good])
    assert _packaged.find() == (good, "")


@pytest.mark.parametrize("info, says", [
    ({"paddle": "0.0.1"}, r"was built for paddle 0.0.1 \((CPU|CUDA)\), this is paddle "),
    ({"cuda": not _build.with_cuda()}, r"was built for paddle .* this is paddle "),
    ({"digest": "d0000"}, "was built from other sources than"),
])
def test_a_library_for_another_paddle_or_other_sources_is_refused(tmp_path, monkeypatch, info, says):
    bad, good = fake_lib(tmp_path / "bad", **info), fake_lib(tmp_path / "good")
    monkeypatch.setattr(_packaged, "_candidates", lambda: [bad])
    folder, why = _packaged.find()
    assert folder is None
    assert bad in why
    assert re.search(says, why), why
    monkeypatch.setattr(_packaged, "_candidates", lambda: [bad, good])  # the next one is taken
    assert _packaged.find() == (good, "")


def test_an_installed_package_without_a_usable_library_says_how_to_rebuild(monkeypatch):
    monkeypatch.setattr(_build, "sources", lambda cuda: [])  # as in site-packages: no sources
    monkeypatch.setattr(_packaged, "find", lambda: (None, "/x/_lib was built for paddle 0.0.1 (CPU)"))
    with pytest.raises(RuntimeError, match=r"no ops library for this paddle \(/x/_lib was built for paddle 0.0.1 "
                                           r"\(CPU\)\)\. Rebuild .*pip install --no-build-isolation"):
        _ops._loader._jit_build()


def test_a_finished_build_of_the_same_sources_and_paddle_is_taken_as_is(tmp_path, monkeypatch):
    """A second environment with the same paddle and Python (CI's PaddleNLP 3.0.0b4 one) takes the library the
    first one built; paddle's own check would compile everything again (its signature names the environment's
    include paths). A build that left only some of its files is not taken."""
    from paddle.utils import cpp_extension

    def compile_again(**kwargs):
        raise AssertionError("compiled again")

    monkeypatch.setattr(cpp_extension, "load", compile_again)
    info = _packaged._info(_build.with_cuda())
    done = tmp_path / "ops" / info["digest"] / ("built-py%d%d" % sys.version_info[:2])
    done.mkdir(parents=True)
    for name in _packaged._FILES:
        (done / name).write_text(f"{name} of the first build")
    assert _packaged.build_into(str(tmp_path / "lib"), str(tmp_path / "ops")) == info
    assert {p.name: p.read_text() for p in (tmp_path / "lib").iterdir()} == {
        name: f"{name} of the first build" for name in _packaged._FILES}
    (done / _packaged._API).unlink()
    with pytest.raises(AssertionError, match="compiled again"):
        _packaged.build_into(str(tmp_path / "lib2"), str(tmp_path / "ops"))


def test_the_ops_are_compiled_without_wrapv():
    """setuptools puts Python's own CFLAGS (with -fwrapv) before ours; -fwrapv made the host attention
    kernel 1.5x slower (docs/PERFORMANCE.md, section 4), so the build must switch it off again. Read
    from the debug info of the library this process loaded (its compile flags, as gcc records them)."""
    import shutil
    import subprocess

    from paddle_vtensor import _ops

    if shutil.which("readelf") is None:
        pytest.skip("readelf is not installed")
    path = _ops.library_path()
    info = subprocess.run(["readelf", "--debug-dump=info", path], capture_output=True, text=True).stdout
    producers = {line.split(":", 2)[-1].strip() for line in info.splitlines() if "DW_AT_producer" in line}
    producers = {p for p in producers if "-fwrapv" in p or "-fno-wrapv" in p}
    if not producers:
        pytest.skip("the library carries no record of its compile flags")
    for p in producers:  # gcc applies the last of -fwrapv / -fno-wrapv
        assert p.rfind("-fno-wrapv") > p.rfind("-fwrapv"), p


def test_the_distribution_ships_every_subpackage_the_command_line_needs(tmp_path):
    """What `pip install .` copies: setup.py's package list, as setuptools records it (egg_info's
    SOURCES.txt, without building the ops). The command line (bench/) and the generation
    strategies must be in it, the old tools/ not."""
    import subprocess
    import sys

    from conftest import ROOT

    proc = subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    sources = set((tmp_path / "paddle_vtensor.egg-info" / "SOURCES.txt").read_text().split())
    for name in ("__main__.py", "errors.py", "_env.py", "_op_names.py", "_ops/__init__.py", "_ops/c.py",
                 "_ops/_loader.py", "bench/cli.py", "bench/demo.py", "bench/tiny_llama.py", "bench/sp_rank.py",
                 "generation/inflight.py", "generation/speculative_accept.py", "integration/_hooks.py"):
        assert f"paddle_vtensor/{name}" in sources, name
    assert not [s for s in sources if s.startswith("paddle_vtensor/tools")]
