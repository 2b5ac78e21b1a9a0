"""Make an unmodified PaddleNLP model's ``generate()`` use VTensor KV caches.

    import paddle_vtensor as pvt
    pvt.integration.apply(model)        # or: with pvt.integration.applied(model): ...
    model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=64)
    pvt.integration.remove(model)       # back to PaddleNLP's own path, exactly

Prefill runs PaddleNLP's own code. The first decode step moves each layer's cache into a VTensor
(one copy); every later step writes only the new token, and the attention reads the cache where it
lies, so no step copies the cache. Greedy tokens are the same as without the plugin. Supported:
llama (MHA, GQA, MQA) and qwen in paddlenlp 2.8.1 and 3.0.0b4, eager mode, inference (no
gradients through the cache).

apply() is all or nothing: it checks the configuration, installs its hooks, then proves with a
one-token probe (_probe.py) that both the cache append and the attention of every layer go
through the plugin and agree with PaddleNLP's; any failure puts everything back and raises
UnsupportedModelError saying what it found.

Lifetimes: hooks in PaddleNLP's modules stay while at least one applied model lives; they are
removed by the last remove() or when the last applied model is garbage-collected.
``copy.deepcopy`` of an applied model gives a model that is *not* applied (PaddleNLP's own path,
its own weights); apply() it if wanted.

Beam search works (same tokens) but is not copy-free: PaddleNLP reorders the caches with
index_select each step, which makes dense caches that the next step migrates again.
"""
from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import functools
import inspect
import weakref

import paddle

from .. import api, quant
from ..errors import UnsupportedModelError
from . import _probe
from ._hooks import ACTIVE, ModelState
from .families import FAMILIES, Family, install, install_on_layers, installed_count, uninstall, uninstall_on_layers


@dataclasses.dataclass
class _Record:
    state: ModelState
    families: list[Family]
    own: dict            # the instance attributes apply() replaced: name -> value before, or _NONE
    layer_hooks: list    # [(layer, name, original)] from install_on_layers
    finalizer: object    # weakref.finalize that uninstalls the families if the model dies applied


_NONE = object()
_records: "weakref.WeakKeyDictionary[paddle.nn.Layer, _Record]" = weakref.WeakKeyDictionary()
_BYPASS: contextvars.ContextVar[bool] = contextvars.ContextVar("paddle_vtensor_bypass", default=False)


def _families_of(model) -> list[tuple[Family, list]]:
    found = []
    for family in FAMILIES:
        loaded = family.load()
        if loaded is None:
            continue
        layers = [layer for layer in model.sublayers(include_self=True) if isinstance(layer, loaded[1])]
        if layers:
            found.append((family, layers))
    return found


def _default_max_seq_len(config) -> int:
    # The model cannot attend past its position limit, so that bounds the cache; the reservation is
    # virtual address space only (physical memory is mapped as tokens arrive).
    limit = getattr(config, "max_position_embeddings", None)
    return int(limit) if limit else api.configure().max_seq_len


def _uninstall_all(families) -> None:
    for family in families:
        uninstall(family)


def apply(model, max_seq_len: int | None = None, chunk_bytes: int | None = None, probe: bool = True,
          cache_dtype=None):
    """Route ``model``'s KV caches through VTensors; returns ``model``.

    max_seq_len: tokens reserved per cache (virtual only); default the model's
        ``max_position_embeddings``. Generating past it raises an out-of-range error.
    chunk_bytes: physical mapping granularity; default :func:`paddle_vtensor.configure`'s.
    probe: run the one-token probe that proves the hooks are reached (three tiny forward steps,
        twice). Leave it on unless the model cannot run a forward step at apply time.
    cache_dtype: 'float8_e4m3fn' or 'int8': 8-bit caches (:mod:`paddle_vtensor.quant`), quantized
        when the prefill's cache migrates (fp8: per-layer, per-kv-head scales calibrated from that
        prefill); None keeps the model's dtype. Needs the probe, which then also checks the
        quantized outputs against PaddleNLP's to the 8-bit tolerance (docs/QUANTIZED_CACHE.md).

    Raises UnsupportedModelError for models, configurations or PaddleNLP versions the plugin cannot
    serve, and ValueError for bad arguments or when already applied; in every case the model and
    PaddleNLP's modules are left exactly as they were.
    """
    if not isinstance(model, paddle.nn.Layer):
        raise UnsupportedModelError(f"paddle_vtensor.apply: expected a paddle.nn.Layer, got {type(model).__name__}")
    if model in _records:
        raise ValueError(f"paddle_vtensor.apply: {type(model).__name__} is already applied; call remove() first")
    if not paddle.in_dynamic_mode():
        raise UnsupportedModelError("paddle_vtensor.apply: only eager (dynamic graph) mode is supported")
    found = _families_of(model)
    if not found:
        names = ", ".join(f"{f.name} ({f.attention_class})" for f in FAMILIES)
        raise UnsupportedModelError(
            f"paddle_vtensor.apply: {type(model).__name__} is not supported: no attention layer of a supported "
            f"family ({names})")
    config = getattr(model, "config", None)
    for family, layers in found:
        family.check(config, layers)
    if max_seq_len is None:
        max_seq_len = _default_max_seq_len(config)
    if int(max_seq_len) <= 0:
        raise ValueError(f"paddle_vtensor.apply: max_seq_len must be positive, got {max_seq_len}")
    if chunk_bytes is not None and int(chunk_bytes) <= 0:
        raise ValueError(f"paddle_vtensor.apply: chunk_bytes must be positive, got {chunk_bytes}")
    cache_dtype = quant.cache_dtype_name("paddle_vtensor.apply", cache_dtype)
    if cache_dtype is not None and not probe:
        raise UnsupportedModelError(
            f"paddle_vtensor.apply: cache_dtype={cache_dtype!r} needs probe=True: the probe is where the 8-bit "
            f"cache's outputs are checked against PaddleNLP's own; without it their accuracy on this model is unknown")

    state = ModelState(family="+".join(f.name for f, _ in found), max_seq_len=int(max_seq_len),
                       chunk_bytes=None if chunk_bytes is None else int(chunk_bytes), cache_dtype=cache_dtype)
    families = [f for f, _ in found]
    record = _Record(state, [], {name: model.__dict__.get(name, _NONE) for name in ("forward", "__deepcopy__")},
                     [], None)
    plain_forward = model.forward
    try:
        # Straight into the instance dict: PaddleNLP's __setattr__ would re-wrap a `forward` whose
        # signature differs from the class's, as if it were an unbound patch.
        model.__dict__["forward"] = _active_forward(plain_forward, config, found, state)
        model.__dict__["__deepcopy__"] = _unapplied_deepcopy(weakref.ref(model))
        for family, layers in found:
            install(family, layers)
            record.families.append(family)
            record.layer_hooks += install_on_layers(family, layers)
        if probe:
            _probe.run(model, config, state, plain_call=_bypassed(model), plugin_call=model,
                       layers=sum(len(layers) for _, layers in found), describe=lambda: _describe(found))
    except BaseException:
        _undo(model, record)
        raise
    record.finalizer = weakref.finalize(model, _uninstall_all, list(families))
    _records[model] = record
    return model


def _undo(model, record: _Record) -> None:
    uninstall_on_layers(record.layer_hooks)
    _uninstall_all(record.families)
    for name, value in record.own.items():
        if value is _NONE:
            model.__dict__.pop(name, None)
        else:
            model.__dict__[name] = value


def _bypassed(model):
    def call(**kwargs):
        token = _BYPASS.set(True)
        try:
            return model(**kwargs)
        finally:
            _BYPASS.reset(token)

    return call


def _describe(found) -> str:
    parts = []
    for family, layers in found:
        module, cls = family.load()
        bound = [f"{name}={getattr(module, name, None)!r}" for name, _ in family.module_hooks]
        bound += [f"{cls.__name__}.{name}={cls.__dict__.get(name)!r}" for name, _ in family.class_hooks]
        bound += [f"layer 0 {name}={layers[0].__dict__.get(name)!r}" for name, _ in family.instance_hooks
                  if name in layers[0].__dict__]
        parts.append(f"{family.name}: {', '.join(bound) or 'paddle.concat only'}")
    return "; ".join(parts)


def _active_forward(original, config, found, state: ModelState):
    signature = inspect.signature(original)

    def forward(*args, **kwargs):
        if _BYPASS.get():
            return original(*args, **kwargs)
        arguments = signature.bind_partial(*args, **kwargs).arguments
        asked = arguments.get("output_attentions")
        if asked or (asked is None and getattr(config, "output_attentions", False)):
            raise UnsupportedModelError(
                "paddle_vtensor: output_attentions=True is not supported on VTensor caches (the decode attention "
                "does not form the weights); call paddle_vtensor.remove(model) first")
        if arguments.get("attn_mask_startend_row_indices") is not None:
            raise UnsupportedModelError(
                "paddle_vtensor: attn_mask_startend_row_indices is not supported on VTensor caches (the decode "
                "attention takes a dense attention_mask); call paddle_vtensor.remove(model) first")
        for family, layers in found:  # the config may have changed since apply()
            family.check(config, layers)
        token = ACTIVE.set(state)
        try:
            return original(*args, **kwargs)
        finally:
            ACTIVE.reset(token)

    functools.update_wrapper(forward, original)
    forward.__signature__ = signature  # PaddleNLP inspects forward's arguments
    return forward


def _unapplied_deepcopy(model_ref):
    """The applied model's ``__deepcopy__`` (copy.deepcopy looks it up on the instance): copy the
    model as it was before apply(), so the copy runs PaddleNLP's own path on its own weights
    (the wrapped forward would otherwise be shared, and call the original's)."""

    def __deepcopy__(memo):
        model = model_ref()
        record = _records[model]
        saved = {name: model.__dict__.pop(name) for name in record.own}
        wrapped = [(layer, name, layer.__dict__[name]) for layer, name, _ in record.layer_hooks]
        uninstall_on_layers(record.layer_hooks)
        try:
            for name, value in record.own.items():
                if value is not _NONE:
                    model.__dict__[name] = value
            return copy.deepcopy(model, memo)
        finally:
            for layer, name, value in wrapped:
                layer.__dict__[name] = value
            model.__dict__.update(saved)

    return __deepcopy__


def remove(model):
    """Undo :func:`apply`: the model and PaddleNLP's modules are exactly as before; returns ``model``.

    Caches already made keep working on PaddleNLP's own path (they are ordinary tensors to it).
    """
    record = _records.pop(model, None)
    if record is None:
        raise ValueError(f"paddle_vtensor.remove: {type(model).__name__} is not applied")
    record.finalizer.detach()
    _undo(model, record)
    return model


@contextlib.contextmanager
def applied(model, max_seq_len: int | None = None, chunk_bytes: int | None = None, probe: bool = True,
            cache_dtype=None):
    """``with applied(model): model.generate(...)``: apply for the block, remove after (also on error)."""
    apply(model, max_seq_len=max_seq_len, chunk_bytes=chunk_bytes, probe=probe, cache_dtype=cache_dtype)
    try:
        yield model
    finally:
        remove(model)


def is_applied(model) -> bool:
    return model in _records


def stats(model) -> dict:
    """What the hooks did for ``model`` since apply: migrations, appends_in_place, appends_copied,
    attention_calls (decode attentions that read VTensors in place)."""
    record = _records.get(model)
    if record is None:
        raise ValueError(f"paddle_vtensor.stats: {type(model).__name__} is not applied")
    return record.state.counters()


__all__ = ["UnsupportedModelError", "apply", "applied", "installed_count", "is_applied", "remove", "stats"]
