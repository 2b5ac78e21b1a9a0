"""No code change: the plugin for unmodified PaddleNLP inference (issue 26).

    PADDLE_VTENSOR_AUTOPATCH=1 python your_script.py        # the .pth hook that pip install adds
    import paddle_vtensor; paddle_vtensor.autopatch()        # the same from Python, at any time

Setting the variable from inside a running Python does nothing (the hook reads it at interpreter
start): call :func:`autopatch` instead. The hook itself is ``paddle_vtensor_autopatch.py`` (a
top-level module so that interpreter start imports no paddle); this module is what its wrappers
call, on first use:

* eager: a model's first ``generate()`` calls :func:`paddle_vtensor.apply` on it, once per model
  (a model the plugin refuses is remembered too and runs PaddleNLP's own path, with one warning
  line); each model is applied and removed on its own, so one model's removal or garbage
  collection leaves another's hooks in place (integration/ counts them);
* static: ``paddle.inference.create_predictor(config)`` gets ``vtensor_kv_cache_pass`` added to the
  config's passes (Paddle's own passes stay). A program whose caches never cross its boundary
  (PaddleNLP's exported generation loop) keeps its interface, so the caller's feeds and fetches
  are unchanged. Where the pass would change the boundary (cache inputs and outputs in storage
  layout ``[S, B, H, D]``, docs/STATIC.md), the caller's feeds could not know: that predictor is
  made without the pass, with one warning line (use ``static_export.create_predictor`` and
  ``run_decode_step`` for it).

``PADDLE_VTENSOR_REPORT=1`` prints, at exit, one line per model and predictor to stderr.
"""
from __future__ import annotations

import dataclasses
import sys
import weakref

import paddle


_PREFIX = "paddle_vtensor autopatch:"


@dataclasses.dataclass
class Entry:
    """One model or predictor the hook saw, for the report."""

    kind: str          # "model" or "predictor"
    name: str
    applied: bool
    why: str           # why not, or what the pass did
    state: object = None  # a model's integration ModelState (its counters), kept past the model


_entries: list[Entry] = []
_seen: "weakref.WeakKeyDictionary[paddle.nn.Layer, Entry]" = weakref.WeakKeyDictionary()


def autopatch() -> None:
    """What ``PADDLE_VTENSOR_AUTOPATCH=1`` does at interpreter start, from Python: every later
    PaddleNLP ``generate()`` and ``paddle.inference.create_predictor()`` uses the plugin, also
    when PaddleNLP or paddle.inference were imported before this call."""
    import paddle_vtensor_autopatch

    paddle_vtensor_autopatch.install()


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


def _warn(text: str) -> None:
    print(f"{_PREFIX} {text}", file=sys.stderr)


def engage_model(model) -> None:
    """Apply the plugin to ``model`` at its first ``generate()``; on refusal, warn once and leave
    it on PaddleNLP's path. Static-mode calls (tracing) are left alone."""
    from . import integration

    if not paddle.in_dynamic_mode() or not isinstance(model, paddle.nn.Layer) or model in _seen:
        return
    name = f"{type(model).__name__}#{sum(e.kind == 'model' for e in _entries) + 1}"
    if integration.is_applied(model):  # the user applied it: report it, leave it
        entry = Entry("model", name, True, "applied by the caller", integration._records[model].state)
    else:
        try:
            integration.apply(model)
        except Exception as e:  # UnsupportedModelError, ops that fail to load, an unknown version
            entry = Entry("model", name, False, _one_line(e))
            _warn(f"{name} runs on PaddleNLP's own path: {entry.why}")
        else:
            state = integration._records[model].state
            entry = Entry("model", name, True, f"family {state.family}", state)
    _seen[model] = entry
    _entries.append(entry)


def engage_predictor(create, config, *args, **kwargs):
    """``create(config)`` (paddle.inference.create_predictor) with ``vtensor_kv_cache_pass`` added
    when the caller's feeds and fetches stay valid; otherwise ``create`` of the unchanged config."""
    from paddle import inference

    if not isinstance(config, inference.Config) or args or kwargs:
        return create(config, *args, **kwargs)
    name = config.prog_file() or config.model_dir() or "predictor"

    def unchanged(why):
        _entries.append(Entry("predictor", name, False, why))
        _warn(f"predictor for {name} left alone: {why}")
        return create(plain)

    plain = inference.Config(config)  # before any change: the predictor without the pass
    try:
        from . import passes

        passes.load()
    except Exception as e:
        return unchanged(f"the ops did not load: {_one_line(e)}")
    if hasattr(config, "new_ir_enabled") and not config.new_ir_enabled():
        return unchanged("the config does not use the new IR (PIR), where the pass runs")
    try:
        config.enable_custom_passes([passes.PASS_NAME])
        predictor = create(config)
        report = passes.last_report()
    except Exception as e:
        return unchanged(f"{passes.PASS_NAME} failed: {_one_line(e)}")
    moved = report["storage_inputs"] + report["storage_outputs"]
    if report["appends"] and moved:
        return unchanged(f"{passes.PASS_NAME} would make {', '.join(moved)} take/give the storage layout "
                         f"[S, B, H, D], which the caller's feeds and fetches do not know (use "
                         f"paddle_vtensor.static_export.create_predictor and run_decode_step)")
    if not report["appends"]:
        why = "; ".join(report["refused"] + report["notes"]) or "no cache append found"
        _entries.append(Entry("predictor", name, False, f"{passes.PASS_NAME} found nothing to rewrite: {why}"))
        return predictor
    _entries.append(Entry("predictor", name, True,
                          f"{passes.PASS_NAME}: {report['appends']} appends and {report['attentions']} attentions "
                          f"in place, {len(report['copies'])} copies left"))
    return predictor


def report(out) -> None:
    """The ``PADDLE_VTENSOR_REPORT=1`` lines: one per model and predictor, then the VTensor memory."""
    if not _entries:
        print("paddle_vtensor report: autopatch on, nothing engaged (no generate() or create_predictor() call)",
              file=out)
    for e in _entries:
        line = f"paddle_vtensor report: {e.kind} {e.name}: {'applied' if e.applied else 'not applied'} ({e.why})"
        if e.state is not None:
            c = e.state.counters()
            line += (f"; appends in place {c['appends_in_place']}, appends copied {c['appends_copied']}, "
                     f"migrations {c['migrations']}, attentions in place {c['attention_calls']}")
        print(line, file=out)
    if any(e.applied for e in _entries):
        from .api import memory_stats

        devices = ["cpu"] + (["gpu:0"] if paddle.is_compiled_with_cuda() else [])
        for device in devices:
            s = memory_stats(device)
            print(f"paddle_vtensor report: {device} memory: peak mapped {s['peak_mapped_bytes']} bytes, "
                  f"bytes written by the ops {s['bytes_written']} (appends, migrations, copy-on-write copies)",
                  file=out)


__all__ = ["autopatch", "engage_model", "engage_predictor", "report"]
