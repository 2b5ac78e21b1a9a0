"""The interpreter-start half of ``PADDLE_VTENSOR_AUTOPATCH=1`` (issue 26), run by the one line of
``paddle_vtensor_autopatch.pth`` that ``pip install`` puts into site-packages.

It is a top-level module, not part of the paddle_vtensor package, because importing the package
imports paddle, and nothing may import paddle (or PaddleNLP) at interpreter start. It imports
only ``os`` and ``sys`` (both already loaded), reads the two variables, and with
``PADDLE_VTENSOR_AUTOPATCH=1`` puts a finder first on ``sys.meta_path`` that waits for two modules:

* ``paddlenlp.generation.utils``: ``GenerationMixin.generate`` is wrapped so that each model is
  given to ``paddle_vtensor.apply`` once, at its first ``generate()``;
* ``paddle.inference``: ``create_predictor`` is wrapped so that the config gets
  ``vtensor_kv_cache_pass``.

The wrappers import paddle_vtensor only when called; everything else (what is refused, the
warning, the report) is in ``paddle_vtensor/_autopatch.py``. Without the variable (or with any
other value) this module installs nothing. ``paddle_vtensor.autopatch()`` calls :func:`install`
from Python, which also patches the two modules if they are already imported.
"""
import os
import sys

_WATCHED = ("paddlenlp.generation.utils", "paddle.inference")
_MARK = "__paddle_vtensor_autopatch__"  # on a wrapper: the function it wraps
_state = {"installed": False, "report_registered": False, "broken": None}


def _engage():
    """The heavy half, imported at first use; if it cannot be imported, the wrappers say so once
    and from then on only call the wrapped functions."""
    if _state["broken"] is not None:
        raise _state["broken"]
    try:
        from paddle_vtensor import _autopatch
    except Exception as e:
        _state["broken"] = RuntimeError(f"paddle_vtensor could not be imported ({type(e).__name__}: {e})")
        print(f"paddle_vtensor autopatch: off for this process, PaddleNLP's own paths run: "
              f"{' '.join(str(_state['broken']).split())}", file=sys.stderr)
        raise _state["broken"]
    return _autopatch


def _wrap_generate(original):
    def generate(self, *args, **kwargs):
        try:
            _engage().engage_model(self)
        except Exception as e:  # never the user's run: one line, PaddleNLP's generate() runs
            if e is not _state["broken"]:  # (that one was said once already)
                print(f"paddle_vtensor autopatch: {type(self).__name__} runs on PaddleNLP's own path: "
                      f"{type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr)
        return original(self, *args, **kwargs)

    generate.__name__, generate.__qualname__, generate.__doc__ = "generate", original.__qualname__, original.__doc__
    generate.__wrapped__ = original
    setattr(generate, _MARK, original)
    return generate


def _wrap_create_predictor(original):
    def create_predictor(config, *args, **kwargs):
        try:
            engage = _engage().engage_predictor
        except Exception:  # _engage said why, once
            return original(config, *args, **kwargs)
        return engage(original, config, *args, **kwargs)

    create_predictor.__name__ = "create_predictor"
    create_predictor.__doc__ = original.__doc__
    create_predictor.__wrapped__ = original
    setattr(create_predictor, _MARK, original)
    return create_predictor


def _patch(name, module):
    if name == "paddlenlp.generation.utils":
        owner, attr, wrap = getattr(module, "GenerationMixin", None), "generate", _wrap_generate
    else:
        owner, attr, wrap = module, "create_predictor", _wrap_create_predictor
    current = getattr(owner, attr, None)
    if current is None or hasattr(current, _MARK):
        return
    setattr(owner, attr, wrap(current))


def unpatch():
    """Put the wrapped functions back (tests; the finder stays but patches nothing new)."""
    _state["installed"] = False
    for name in _WATCHED:
        module = sys.modules.get(name)
        owner = getattr(module, "GenerationMixin", None) if name.endswith("utils") else module
        attr = "generate" if name.endswith("utils") else "create_predictor"
        current = getattr(owner, attr, None) if owner is not None else None
        if current is not None and hasattr(current, _MARK):
            setattr(owner, attr, getattr(current, _MARK))


class _Finder:
    """Finds nothing itself: for a watched module it asks the finders after it, then runs the
    patch right after the module's own code has run."""

    def __init__(self):
        self._busy = set()

    def find_spec(self, name, path=None, target=None):
        if name not in _WATCHED or name in self._busy or not _state["installed"]:
            return None
        self._busy.add(name)
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.discard(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(name, module)

        loader.exec_module = exec_and_patch
        return spec


_finder = _Finder()


def install():
    """Patch from now on (and the watched modules already imported, now). Idempotent."""
    _state["installed"] = True
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    for name in _WATCHED:
        if name in sys.modules:
            _patch(name, sys.modules[name])
    register_report()


def installed() -> bool:
    return _state["installed"]


def requested() -> str:
    """PADDLE_VTENSOR_AUTOPATCH as the process has it (what the doctor shows)."""
    return os.environ.get("PADDLE_VTENSOR_AUTOPATCH", "unset")


def register_report():
    if os.environ.get("PADDLE_VTENSOR_REPORT") == "1" and not _state["report_registered"]:
        import atexit

        _state["report_registered"] = True
        atexit.register(_report_at_exit)


def _report_at_exit():
    if not _state["installed"]:
        print("paddle_vtensor report: autopatch off (PADDLE_VTENSOR_AUTOPATCH is not 1 and "
              "paddle_vtensor.autopatch() was not called): nothing applied", file=sys.stderr)
        return
    try:
        _engage().report(sys.stderr)
    except Exception:
        pass


if os.environ.get("PADDLE_VTENSOR_AUTOPATCH") == "1":
    install()
else:
    register_report()
