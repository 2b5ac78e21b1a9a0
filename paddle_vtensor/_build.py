"""Where the extension's sources are and how to compile them: shared by setup_ops.py and the
just-in-time build in _ops/_loader.py, so the two can never disagree on sources or flags."""
from __future__ import annotations

import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENSION_NAME = "paddle_vtensor_ops"


def with_cuda() -> bool:
    """CUDA kernels are compiled when the installed paddle is (the GPU build)."""
    import paddle

    return bool(paddle.is_compiled_with_cuda())


# Compiled only into bench-host's own extension (paddle_vtensor/bench/bench_host.py), never the library.
BENCH_ONLY_SOURCE = "custom_ops/paddle/bench_host_ops.cc"


HOST_PATTERNS = ["custom_ops/core/*.cc", "custom_ops/kernels/*.cc"]  # no Paddle in them: the core and host kernels


def _collect(patterns: list[str]) -> list[str]:
    found: list[str] = []
    for pattern in patterns:
        found += sorted(glob.glob(os.path.join(ROOT, pattern)))
    return [path for path in found if os.path.relpath(path, ROOT) != BENCH_ONLY_SOURCE]


def host_sources() -> list[str]:
    """The core and the host kernels (what bench-host's own extension links in beside its ops)."""
    return _collect(HOST_PATTERNS)


def sources(cuda: bool) -> list[str]:
    """Every C++ source of the extension, collected by pattern (core, kernels, adapter, passes)."""
    return _collect(HOST_PATTERNS + ["custom_ops/paddle/*.cc", "passes/*.cc"]
                    + (["custom_ops/kernels/*.cu"] if cuda else []))


# -fno-wrapv undoes the -fwrapv that setuptools copies from Python's own CFLAGS: with it the host
# attention's index arithmetic cannot assume no overflow, which made that kernel 1.5x slower
# (docs/PERFORMANCE.md, section 4). The flags are part of the source digest: changing them rebuilds.
CXX_FLAGS = ["-O2", "-fno-wrapv", "-std=c++17", "-Wno-unused-parameter"]
NVCC_FLAGS = ["-O2", "-std=c++17", "-DPADDLE_VTENSOR_WITH_CUDA"]


def cxx_flags(cuda: bool) -> list[str]:
    # The digest is compiled in (c_api.cc) so an installed build can be matched against the sources.
    flags = CXX_FLAGS + [f"-DPVT_SOURCE_DIGEST=d{source_digest(cuda)}"]
    return flags + (["-DPADDLE_VTENSOR_WITH_CUDA"] if cuda else [])


def nvcc_flags() -> list[str]:
    return list(NVCC_FLAGS)


def ld_flags(cuda: bool) -> list[str]:
    return ["-lcuda"] if cuda else []


def source_digest(cuda: bool) -> str:
    """A hash of every source and header, so a just-in-time build is redone when any changes."""
    import hashlib

    h = hashlib.sha256(b"cuda" if cuda else b"cpu")
    h.update(" ".join(CXX_FLAGS + NVCC_FLAGS).encode())
    files = sources(cuda) + sorted(glob.glob(os.path.join(ROOT, "custom_ops", "**", "*.h"), recursive=True))
    files += sorted(glob.glob(os.path.join(ROOT, "custom_ops", "**", "*.cuh"), recursive=True))
    files += sorted(glob.glob(os.path.join(ROOT, "passes", "*.h")))
    for path in files:
        h.update(os.path.relpath(path, ROOT).encode())
        with open(path, "rb") as f:
            h.update(f.read())
    import paddle

    h.update(paddle.__version__.encode())
    return h.hexdigest()[:16]
