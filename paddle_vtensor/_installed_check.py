"""Is there a built ops library that matches this tree? ``python -m paddle_vtensor._installed_check``
exits 0 when either the package's own library (``pip install --no-build-isolation .``, see
_packaged.py) or the extension of ``setup_ops.py install`` matches, else 1.

Used by scripts/setup.sh to skip a rebuild, and by _ops/_loader.py to refuse a stale setup_ops.py build."""
from __future__ import annotations

import importlib.util
import os
import re
import sys

from . import _build


def installed_library() -> str | None:
    spec = importlib.util.find_spec(_build.EXTENSION_NAME)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for name in sorted(os.listdir(folder)):
            if name.startswith(_build.EXTENSION_NAME) and name.endswith(".so"):
                return os.path.join(folder, name)
    return None


def library_digest(path: str) -> str | None:
    with open(path, "rb") as f:
        match = re.search(rb"PVT_SOURCE_DIGEST=(\w+);", f.read())
    return match.group(1).decode() if match else None


def sources_available() -> bool:
    return os.path.isdir(os.path.join(_build.ROOT, "custom_ops"))


def installed_is_current() -> bool:
    path = installed_library()
    if path is None:
        return False
    if not sources_available():  # an installed package without its sources: nothing to compare
        return True
    return library_digest(path) == "d" + _build.source_digest(_build.with_cuda())


def describe() -> tuple[bool, str]:
    from . import _packaged

    folder, why = _packaged.find()
    if folder:
        return True, f"paddle_vtensor ops: the package's library in {folder} is current"
    if installed_is_current():
        return True, f"paddle_vtensor ops: the setup_ops.py build {installed_library()} is current"
    return False, "paddle_vtensor ops: not installed or stale" + (f" ({why})" if why else "")


if __name__ == "__main__":
    ok, text = describe()
    print(text)
    sys.exit(0 if ok else 1)
