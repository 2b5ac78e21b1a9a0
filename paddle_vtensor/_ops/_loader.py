"""Finds or builds the ops library, once, from the first of:

1. the library ``pip install --no-build-isolation .`` built into the package (_packaged.py), when
   it was built for this paddle (and, from a source tree, from these sources);
2. the extension ``setup_ops.py install`` installed, when it was built from these sources;
3. a just-in-time build of the sources next to this package into a per-user cache (only from a
   source tree; an installed package without a matching library says how to rebuild).

``PADDLE_VTENSOR_JIT=1`` skips 1 and 2 (developers changing the C++ sources). Only the _ops
package uses this module; everything else calls the ops through ``paddle_vtensor._ops``.
"""
from __future__ import annotations

import fcntl
import functools
import glob
import importlib
import os
import types

from .. import _build, _env, _packaged


def _jit_dir(cuda: bool) -> str:
    return os.path.join(_env.build_dir(), _build.source_digest(cuda))


def _use_installed() -> bool:
    from .. import _installed_check

    return not _env.jit_forced() and _installed_check.installed_is_current()


def _packaged_folder() -> str | None:
    return None if _env.jit_forced() else _packaged.find()[0]


def needs_build() -> bool:
    """True when load() will compile: no current installed build and no cached just-in-time one."""
    if load.cache_info().currsize or _packaged_folder() or _use_installed():
        return False
    return not glob.glob(os.path.join(_jit_dir(_build.with_cuda()), "**", _build.EXTENSION_NAME + "*.so"),
                         recursive=True)


def _jit_build() -> tuple[types.ModuleType, str]:
    from paddle.utils import cpp_extension

    cuda = _build.with_cuda()
    if not _build.sources(cuda):
        why = _packaged.find()[1] or "no library was built into it"
        raise RuntimeError(
            f"paddle_vtensor: the installed package has no ops library for this paddle ({why}). Rebuild it "
            f"against the installed paddle from a source checkout: pip install --no-build-isolation <checkout>")
    build_dir = _jit_dir(cuda)
    os.makedirs(build_dir, exist_ok=True)
    # Processes building the same sources at once would overwrite each other's objects.
    with open(os.path.join(build_dir, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        module = _load(cpp_extension, cuda, build_dir)
    return module, _find_library(build_dir)


def _load(cpp_extension, cuda: bool, build_dir: str) -> types.ModuleType:
    return cpp_extension.load(
        name=_build.EXTENSION_NAME,
        sources=_build.sources(cuda),
        extra_cxx_cflags=_build.cxx_flags(cuda),
        extra_cuda_cflags=_build.nvcc_flags(),
        extra_ldflags=_build.ld_flags(cuda),
        build_directory=build_dir,
        verbose=_env.verbose_build(),
    )


def _find_library(folder: str) -> str:
    hits = sorted(glob.glob(os.path.join(folder, "**", _build.EXTENSION_NAME + "*.so"), recursive=True))
    if not hits:
        raise RuntimeError(f"paddle_vtensor: built ops but found no {_build.EXTENSION_NAME}*.so under {folder}")
    return hits[0]


def _installed() -> tuple[types.ModuleType, str] | None:
    """The extension installed by setup_ops.py, when it was built from these sources.
    PADDLE_VTENSOR_JIT=1 forces the just-in-time build."""
    from .. import _installed_check

    if not _use_installed():
        return None
    return importlib.import_module(_build.EXTENSION_NAME), _installed_check.installed_library()


@functools.lru_cache(maxsize=None)
def load() -> tuple[types.ModuleType, str]:
    """(the op module, the path of its shared library); the ops are registered with Paddle once
    this returns."""
    folder = _packaged_folder()
    return (_packaged.load(folder), _packaged.library(folder)) if folder else (_installed() or _jit_build())
