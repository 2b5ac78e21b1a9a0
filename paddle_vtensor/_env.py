"""Every environment variable the project reads, in one place: this module reads the Python ones,
and the table below lists all of them (C++ and build ones too), each with who reads it and what
it means. One prefix: ``PADDLE_VTENSOR_``. tests/test_env.py checks that every
``PADDLE_VTENSOR_*`` name in the repository's code is listed here and that nothing reads a
``PVT_*`` variable.

===================================  ==========================  ===================================
Not an environment variable: ``PADDLE_VTENSOR_WITH_CUDA`` is the compile-time define (set by
_build.py when paddle is the GPU build) that compiles the CUDA half of the adapter.
"""
from __future__ import annotations

import os

DEFAULT_MAX_SEQ_LEN = 4096
DEFAULT_CHUNK_BYTES = 2 << 20


def _int(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None


def max_seq_len() -> int:
    return _int("PADDLE_VTENSOR_MAX_SEQ_LEN", DEFAULT_MAX_SEQ_LEN)


def chunk_bytes() -> int:
    return _int("PADDLE_VTENSOR_CHUNK_BYTES", DEFAULT_CHUNK_BYTES)


def jit_forced() -> bool:
    return os.environ.get("PADDLE_VTENSOR_JIT") == "1"


def build_dir() -> str:
    return os.environ.get("PADDLE_VTENSOR_BUILD_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                       "paddle_vtensor")


def hypothesis_examples() -> int | None:
    """The property tests' example count when set (a longer, randomized run), else None."""
    text = os.environ.get("PADDLE_VTENSOR_HYPOTHESIS_EXAMPLES")
    return None if not text else _int("PADDLE_VTENSOR_HYPOTHESIS_EXAMPLES", 0)


def verbose_build() -> bool:
    return bool(os.environ.get("PADDLE_VTENSOR_VERBOSE_BUILD"))
