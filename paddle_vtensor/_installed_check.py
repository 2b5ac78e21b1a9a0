"""Exit 0 when the ops installed by setup_ops.py were built from the sources in this tree, else 1.

Used by scripts/setup.sh to skip a rebuild, and by _ops.py to refuse a stale installed build."""
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


if __name__ == "__main__":
    ok = installed_is_current()
    print("paddle_vtensor ops: installed build is current" if ok else "paddle_vtensor ops: not installed or stale")
    sys.exit(0 if ok else 1)
