"""The package's layout (issue 24 point 3): the API at the top, generation strategies in
generation/, the command line and benchmarks in bench/ (which no library module imports), and one
way into the compiled library (_ops/). Read from the modules' source with ast, so a new import
that breaks the layering fails here."""
import ast
import glob
import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import ROOT

import paddle_vtensor as pvt
from paddle_vtensor import _build

PACKAGE = os.path.join(ROOT, "paddle_vtensor")


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def _modules():
    """(dotted name, path, ast) of every module of the package."""
    for path in sorted(glob.glob(os.path.join(PACKAGE, "**", "*.py"), recursive=True)):
        with open(path) as f:
            yield _module_name(path), path, ast.parse(f.read(), path)


def _imports(name: str, path: str, tree: ast.AST) -> set[str]:
    """Every module `name` imports, absolute (relative imports resolved; `from x import y` counts
    as x and x.y, since y may be a module)."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


LIBRARY = [(n, p, t) for n, p, t in _modules() if not _in(n, "paddle_vtensor.bench") and n != "paddle_vtensor.__main__"]


def test_the_walk_sees_the_package():
    names = {n for n, _, _ in _modules()}
    assert {"paddle_vtensor.api", "paddle_vtensor.generation.speculative", "paddle_vtensor.bench.cli",
            "paddle_vtensor._ops", "paddle_vtensor._ops.c", "paddle_vtensor.integration._hooks"} <= names
    assert "paddle_vtensor.bench.cli" in _imports("paddle_vtensor.__main__", os.path.join(PACKAGE, "__main__.py"),
                                                  ast.parse(open(os.path.join(PACKAGE, "__main__.py")).read()))


def test_no_library_module_imports_bench():
    offenders = [(n, m) for n, p, t in LIBRARY for m in _imports(n, p, t) if _in(m, "paddle_vtensor.bench")]
    assert not offenders, offenders


def test_only_generation_imports_generation():
    """The API never reaches up into the generation strategies; paddle_vtensor/__init__.py names
    some of them lazily (strings, no import statement), and bench/ (not the library) uses them."""
    offenders = [(n, m) for n, p, t in LIBRARY if not _in(n, "paddle_vtensor.generation")
                 for m in _imports(n, p, t) if _in(m, "paddle_vtensor.generation")]
    assert not offenders, offenders


def _touches_the_library(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "ctypes" for a in node.names):
            found.append(f"{node.lineno}: import ctypes")
        elif isinstance(node, ast.ImportFrom) and node.module == "ctypes":
            found.append(f"{node.lineno}: from ctypes")
        elif isinstance(node, ast.Attribute) and node.attr == "_run_custom_op":
            found.append(f"{node.lineno}: _run_custom_op")
    return found


# bench-host measures Paddle's dispatch floor itself: the do-nothing ops of its own bench-only
# extension, called through _run_custom_op (none of the library's ops).
DISPATCH_FLOOR = "paddle_vtensor.bench.bench_host"


def test_only_ops_touches_the_library():
    offenders = {n: _touches_the_library(t) for n, _, t in _modules()
                 if not _in(n, "paddle_vtensor._ops") and n != DISPATCH_FLOOR}
    offenders = {n: v for n, v in offenders.items() if v}
    assert not offenders, offenders
    with open(os.path.join(PACKAGE, "bench", "bench_host.py")) as f:
        calls = [node for node in ast.walk(ast.parse(f.read())) if isinstance(node, ast.Call)
                 and isinstance(node.func, ast.Name) and node.func.id == "run"]
    assert calls and all(c.args[0].value.startswith("pvt_bench_") for c in calls)


def test_old_paths_are_gone():
    for old in ("tools", "inflight", "speculative", "speculative_accept", "model_runner", "distributed"):
        assert importlib.util.find_spec(f"paddle_vtensor.{old}") is None, old
    assert not os.path.exists(os.path.join(PACKAGE, "tools"))


def test_every_public_name_resolves():
    for name in pvt.__all__:
        assert getattr(pvt, name) is not None, name
    assert pvt.distributed.__name__ == "paddle_vtensor.generation.distributed"
    assert pvt.generate_inflight.__module__ == "paddle_vtensor.generation.inflight"
    assert pvt.SpeculativeError.__module__ == "paddle_vtensor.errors"


def test_import_builds_and_loads_nothing():
    code = ("import sys, paddle_vtensor as pvt\n"
            "from paddle_vtensor._ops import _loader\n"
            "assert _loader.load.cache_info().currsize == 0, 'ops loaded at import'\n"
            "heavy = [m for m in sys.modules if m.startswith(('paddle_vtensor.bench', 'paddle_vtensor.generation',"
            " 'paddle_vtensor.integration', 'paddle_vtensor.static_export'))]\n"
            "assert not heavy, heavy\n"
            "pvt.generate_inflight\n"
            "assert 'paddle_vtensor.generation.inflight' in sys.modules\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_bench_ops_source_sits_with_the_adapter_but_stays_out_of_the_library():
    path = os.path.join(ROOT, *_build.BENCH_ONLY_SOURCE.split("/"))
    assert os.path.isfile(path)
    assert os.path.dirname(path) == os.path.join(ROOT, "custom_ops", "paddle")
    for cuda in (False, True):
        sources = _build.sources(cuda)
        assert path not in sources
        assert os.path.join(ROOT, "custom_ops", "paddle", "c_api.cc") in sources


@pytest.mark.parametrize("module", ["paddle_vtensor.__main__", "paddle_vtensor.bench.cli"])
def test_the_command_line_names_every_command(module):
    from paddle_vtensor.bench.cli import COMMANDS, parser

    spec = importlib.util.find_spec(module)
    with open(spec.origin) as f:
        doc = ast.get_docstring(ast.parse(f.read()))
    for command in COMMANDS:
        assert command in doc, (module, command)
    assert all(c in parser().format_help() for c in COMMANDS)
    assert "demo|bench" not in doc
