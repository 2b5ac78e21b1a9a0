"""The PaddleNLP decoder families apply() supports, and how each is hooked.

A family is supported when its attention appends the new token with
``paddle.concat([past, new], axis=1)`` on ``[B, S, H, D]`` caches and computes attention in one
replaceable place. In paddlenlp 2.8.1 and 3.0.0b4 that is:

* llama (``LlamaForCausalLM``, and models built from ``LlamaAttention``): the attention function,
  which 2.8.1 calls by its module name ``scaled_dot_product_attention`` and 3.0.0b4 binds per layer
  as ``self.attn_func`` (the function or a ``functools.partial`` of it) in ``__init__``, so both
  the module function and each layer's ``attn_func`` are wrapped; and ``repeat_kv`` (GQA).
* qwen (``QWenForCausalLM``): the method ``QWenAttention._attn`` (2.8.1 returns heads unmerged and
  merges them in ``_merge_heads``; 3.0.0b4 returns them merged and has no ``_merge_heads``).

mixtral has the same cache pattern, but its MoE block fails under paddle 3.x before any cache is
used (``routing_weights[top_x, idx]`` broadcast error in paddlenlp 2.8.1), so it is not offered;
gpt's attention works on ``[B, H, S, D]`` and is a different layout.

Hooks are installed in a family's module while at least one of its models is applied, and the
original objects are put back when the last one is removed.
"""
from __future__ import annotations

import dataclasses
import importlib
import threading
from typing import Callable

from ..errors import UnsupportedModelError
from . import _hooks


def _check_llama(config, layers) -> None:
    if getattr(config, "tensor_parallel_degree", 1) > 1:
        raise UnsupportedModelError("paddle_vtensor.apply: tensor parallel llama (tensor_parallel_degree > 1) is not supported")
    if getattr(config, "sep_parallel_degree", 1) > 1:
        raise UnsupportedModelError("paddle_vtensor.apply: sequence-split llama (sep_parallel_degree > 1) is not supported")
    if getattr(config, "sequence_parallel", False):
        raise UnsupportedModelError("paddle_vtensor.apply: sequence_parallel llama is not supported (it has no KV cache)")
    if getattr(config, "alibi", False):
        raise UnsupportedModelError("paddle_vtensor.apply: llama with alibi is not supported (the decode attention takes no bias)")
    if any(getattr(layer, "kv_indices", None) is not None for layer in layers):
        raise UnsupportedModelError("paddle_vtensor.apply: llama with kv_indices (kv heads split across ranks) is not supported")
    if getattr(config, "immediate_clear_past_key_value", False):
        # PaddleNLP frees the past cache's data after the concat; on a VTensor that past is the
        # same memory the new cache sees, so the option cannot be honoured.
        raise UnsupportedModelError("paddle_vtensor.apply: llama with immediate_clear_past_key_value=True is not "
                                    "supported (the past and new caches share one VTensor); set it to False")
    _check_common(config, "llama")


def _check_common(config, name) -> None:
    if getattr(config, "context_parallel_degree", 1) > 1:
        raise UnsupportedModelError(f"paddle_vtensor.apply: context parallel {name} (context_parallel_degree > 1) "
                                    "is not supported")


def _check_qwen(config, layers) -> None:
    if getattr(config, "tensor_parallel_degree", 1) > 1:
        raise UnsupportedModelError("paddle_vtensor.apply: tensor parallel qwen (tensor_parallel_degree > 1) is not supported")
    if getattr(config, "sequence_parallel", False):
        raise UnsupportedModelError("paddle_vtensor.apply: sequence_parallel qwen is not supported")
    _check_common(config, "qwen")


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    module: str                       # the modeling module whose globals are hooked
    attention_class: str              # attention layers that identify the family in a model
    module_hooks: tuple[tuple[str, Callable], ...]  # (global name, wrapper factory)
    class_hooks: tuple[tuple[str, Callable], ...]   # (attention class attribute, wrapper factory)
    instance_hooks: tuple[tuple[str, Callable], ...]  # (attention layer attribute, wrapper factory)
    check: Callable
    # (module hook, layer attribute): the module hook is not installed when the layers bind that
    # attribute themselves. 3.0.0b4's llama binds `attn_func = scaled_dot_product_attention` in
    # __init__; a wrapped module function would be bound by models built while hooks are installed,
    # and stay with them after remove().
    instead_of_module: tuple[tuple[str, str], ...] = ()

    def load(self):
        """(modeling module, attention class), or None when paddlenlp lacks them."""
        try:
            module = importlib.import_module(self.module)
        except ImportError:
            return None
        cls = getattr(module, self.attention_class, None)
        return None if cls is None else (module, cls)


FAMILIES = (
    Family("llama", "paddlenlp.transformers.llama.modeling", "LlamaAttention",
           (("scaled_dot_product_attention", _hooks.wrap_sdpa), ("repeat_kv", _hooks.wrap_repeat_kv)),
           (), (("attn_func", _hooks.wrap_sdpa),), _check_llama,
           (("scaled_dot_product_attention", "attn_func"),)),
    Family("qwen", "paddlenlp.transformers.qwen.modeling", "QWenAttention",
           (), (("_attn", _hooks.wrap_attn_method),), (), _check_qwen),
)

_lock = threading.Lock()
_installed: dict[str, tuple[int, list]] = {}  # family -> (models applied, [(owner, name, original)])


def install(family: Family, layers) -> None:
    """Install the family's module and class hooks (first model) or count one more model."""
    bound = {attr for attr in dict(family.instead_of_module).values() if attr in layers[0].__dict__}
    skip = {name for name, attr in family.instead_of_module if attr in bound}
    with _lock:
        count, saved = _installed.get(family.name, (0, []))
        if count == 0:
            module, cls = family.load()
            saved = []
            try:  # all or nothing: a hook that cannot be made puts back the ones already made
                saved.append((module, "paddle", module.paddle))
                module.paddle = _hooks.PaddleProxy(module.paddle)
                for name, wrap in family.module_hooks:
                    if name in skip:
                        continue
                    saved.append((module, name, getattr(module, name)))
                    setattr(module, name, wrap(getattr(module, name), module))
                for name, wrap in family.class_hooks:
                    original = cls.__dict__[name]
                    saved.append((cls, name, original))
                    setattr(cls, name, wrap(original, cls))
            except BaseException:
                for owner, name, original in reversed(saved):
                    setattr(owner, name, original)
                raise
        _installed[family.name] = (count + 1, saved)


def uninstall(family: Family) -> None:
    with _lock:
        count, saved = _installed[family.name]
        if count == 1:
            for owner, name, original in reversed(saved):
                setattr(owner, name, original)
            del _installed[family.name]
        else:
            _installed[family.name] = (count - 1, saved)


def installed_count(name: str) -> int:
    """Models of the family applied now (0: its module is untouched)."""
    with _lock:
        return _installed.get(name, (0, []))[0]


def install_on_layers(family: Family, layers) -> list[tuple[object, str, object]]:
    """Wrap the functions each attention layer binds for itself (3.0.0b4's ``attn_func``); returns
    [(layer, name, original)] for :func:`uninstall_on_layers`. Layers without them are left alone."""
    saved = []
    for layer in layers:
        for name, wrap in family.instance_hooks:
            if name in layer.__dict__:
                original = layer.__dict__[name]
                saved.append((layer, name, original))
                layer.__dict__[name] = wrap(original, layer)
    return saved


def uninstall_on_layers(saved) -> None:
    for layer, name, original in reversed(saved):
        layer.__dict__[name] = original
