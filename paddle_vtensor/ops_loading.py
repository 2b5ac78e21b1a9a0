"""Loading the compiled ops from the command line, saying so when it means a first-time build."""
from __future__ import annotations

import sys
import time


def ops_need_building() -> bool | None:
    """True when loading will compile, None when that cannot be told."""
    try:
        from . import _ops

        return _ops.needs_build()
    except Exception:  # a layout this check does not know: load() still works, we just can't tell
        return None


def load_ops(out=sys.stdout) -> None:
    from . import _ops

    building = ops_need_building()
    if building:
        print("Building the paddle_vtensor ops (first run only; 1-3 minutes on a 2-core machine)...", file=out, flush=True)
    started = time.perf_counter()
    _ops.load()
    if building is not False:
        print(f"ops ready ({time.perf_counter() - started:.0f} s)", file=out, flush=True)
