"""Make an unmodified PaddleNLP model's ``generate()`` use VTensor KV caches.

    import paddle_vtensor as pvt
    pvt.integration.apply(model)        # or: with pvt.integration.applied(model): ...
    model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=64)
    pvt.integration.remove(model)       # back to PaddleNLP's own path, exactly

Prefill runs PaddleNLP's own code. The first decode step moves each layer's cache into a VTensor
(one copy); every later step writes only the new token, and the attention reads the cache where it
lies, so no step copies the cache. Greedy tokens are the same as without the plugin. Supported:
llama (incl. GQA) and qwen in paddlenlp 2.8.1, eager mode, inference (no gradients through the
cache). Anything else raises UnsupportedModelError and leaves the model as it was.

Beam search works (same tokens) but is not copy-free: PaddleNLP reorders the caches with
index_select each step, which makes dense caches that the next step migrates again.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import weakref

import paddle

from .. import api
from ._hooks import ACTIVE, ModelState, UnsupportedModelError
from .families import FAMILIES, Family, install, installed_count, uninstall


@dataclasses.dataclass
class _Record:
    state: ModelState
    families: list[Family]
    own_forward: object  # the instance's own `forward` attribute before apply, or _NONE


_NONE = object()
_records: "weakref.WeakKeyDictionary[paddle.nn.Layer, _Record]" = weakref.WeakKeyDictionary()


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


def apply(model, max_seq_len: int | None = None, chunk_bytes: int | None = None):
    """Route ``model``'s KV caches through VTensors; returns ``model``.

    max_seq_len: tokens reserved per cache (virtual only); default the model's
        ``max_position_embeddings``. Generating past it raises an out-of-range error.
    chunk_bytes: physical mapping granularity; default :func:`paddle_vtensor.configure`'s.

    Raises UnsupportedModelError (the model is left unchanged) for models outside the supported
    families or configurations, and ValueError when already applied.
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

    state = ModelState(family="+".join(f.name for f, _ in found), max_seq_len=int(max_seq_len),
                       chunk_bytes=None if chunk_bytes is None else int(chunk_bytes))
    own_forward = model.__dict__.get("forward", _NONE)
    # Straight into the instance dict: PaddleNLP's __setattr__ would re-wrap a `forward` whose
    # signature differs from the class's, as if it were an unbound patch.
    model.__dict__["forward"] = _active_forward(model.forward, config, state)
    for family, _ in found:
        install(family)
    _records[model] = _Record(state, [f for f, _ in found], own_forward)
    return model


def _active_forward(original, config, state: ModelState):
    signature = inspect.signature(original)

    def forward(*args, **kwargs):
        asked = signature.bind_partial(*args, **kwargs).arguments.get("output_attentions")
        if asked or (asked is None and getattr(config, "output_attentions", False)):
            raise UnsupportedModelError(
                "paddle_vtensor: output_attentions=True is not supported on VTensor caches (the decode attention "
                "does not form the weights); call paddle_vtensor.remove(model) first")
        token = ACTIVE.set(state)
        try:
            return original(*args, **kwargs)
        finally:
            ACTIVE.reset(token)

    functools.update_wrapper(forward, original)
    forward.__signature__ = signature  # PaddleNLP inspects forward's arguments
    return forward


def remove(model):
    """Undo :func:`apply`: the model and PaddleNLP's modules are exactly as before; returns ``model``.

    Caches already made keep working on PaddleNLP's own path (they are ordinary tensors to it).
    """
    record = _records.pop(model, None)
    if record is None:
        raise ValueError(f"paddle_vtensor.remove: {type(model).__name__} is not applied")
    if record.own_forward is _NONE:
        del model.__dict__["forward"]
    else:
        model.__dict__["forward"] = record.own_forward
    for family in record.families:
        uninstall(family)
    return model


@contextlib.contextmanager
def applied(model, max_seq_len: int | None = None, chunk_bytes: int | None = None):
    """``with applied(model): model.generate(...)``: apply for the block, remove after (also on error)."""
    apply(model, max_seq_len=max_seq_len, chunk_bytes=chunk_bytes)
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
