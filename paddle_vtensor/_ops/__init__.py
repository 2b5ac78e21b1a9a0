"""The one way into the compiled library: no other module of paddle_vtensor loads it, calls an op
by name, or declares a C entry point (tests/test_layout.py checks that no other module imports
ctypes or ``paddle._C_ops._run_custom_op``).

Three doors, each for one kind of call:

``run(op, *inputs_then_attrs) -> list[Tensor]``
    A tensor op by its name from :mod:`paddle_vtensor._op_names` (``run(PVT_OP_APPEND, storage,
    tokens, max_seq_len, chunk_bytes)``), through Paddle's custom-op dispatch; the op's outputs in
    the order of its ``.Outputs``. A refusal raises OSError ``"<op>: ..."``: turn it into the
    typed error with :func:`paddle_vtensor.errors.from_op_error`.
``fast() -> module``
    The CPython module of custom_ops/paddle/fast_calls.cc: ``append``, ``truncate``, ``storage``,
    ``is_view``, ``decode_attention`` call the ops' own C++ functions for eager VTensor inputs
    without Paddle's dispatch (the host-cost fast path; each returns None when it cannot take the
    call, and the caller then uses :func:`run`).
``c``
    The plain C entry points (custom_ops/paddle/c_api.cc, vtensor_slot_c_api.cc, the pass's report,
    the accept kernel's launch counter, the CPU kernel's ISA), declared once with ctypes and
    wrapped in typed functions that return Python values and ``(code, "<Code>: <message>")``
    pairs for :func:`paddle_vtensor.errors.from_status`.

``load()`` loads (or builds) the library once; every door calls it. ``load_ops()`` does the same
and says so when that means a first-time build (the command line uses it).
"""
from __future__ import annotations

import sys
import time

from paddle import _C_ops

from . import c
from ._loader import load as _load
from ._loader import needs_build


def load() -> None:
    """Load the ops (building them on first use from a source tree); registers ops and pass."""
    _load()


def library_path() -> str:
    """The shared library the ops were loaded from."""
    return _load()[1]


def run(op: str, *args) -> list:
    """Op ``op`` (a name from _op_names) on ``args``: inputs first, then attributes, as the op's
    PD_BUILD_OP declares them. Returns the list of its outputs."""
    _load()
    try:
        return _C_ops._run_custom_op(op, *args)
    except BaseException:
        del args  # the traceback keeps this frame: it must not keep the inputs (a migrated copy) alive
        raise


_fast_module = None


def fast():
    """The fast-call module (fast_calls.cc), loaded on first use."""
    return _fast_module or _load_fast()


def _load_fast():
    global _fast_module
    _fast_module = c.fast_calls_module()
    return _fast_module


def load_ops(out=sys.stdout) -> None:
    """load(), saying so on `out` when it means a first-time build (the command line uses this)."""
    try:
        building = needs_build()
    except Exception:  # a layout this check does not know: load() still works, we just can't tell
        building = None
    if building:
        print("Building the paddle_vtensor ops (first run only; 1-3 minutes on a 2-core machine)...", file=out, flush=True)
    started = time.perf_counter()
    load()
    if building is not False:
        print(f"ops ready ({time.perf_counter() - started:.0f} s)", file=out, flush=True)


__all__ = ["c", "fast", "library_path", "load", "load_ops", "run"]
