"""The PaddleNLP decoder families apply() supports, and how each is hooked.

A family is supported when its attention appends the new token with
``paddle.concat([past, new], axis=1)`` on ``[B, S, H, D]`` caches and computes attention in one
replaceable place. In paddlenlp 2.8.1 that is:

* llama (``LlamaForCausalLM``, and models built from ``LlamaAttention``, e.g. the pipeline model):
  module functions ``scaled_dot_product_attention`` and ``repeat_kv`` (GQA).
* qwen (``QWenForCausalLM``): the method ``QWenAttention._attn``.

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

from . import _hooks
from ._hooks import UnsupportedModelError


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


def _check_qwen(config, layers) -> None:
    if getattr(config, "tensor_parallel_degree", 1) > 1:
        raise UnsupportedModelError("paddle_vtensor.apply: tensor parallel qwen (tensor_parallel_degree > 1) is not supported")


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    module: str                       # the modeling module whose globals are hooked
    attention_class: str              # attention layers that identify the family in a model
    module_hooks: tuple[tuple[str, Callable], ...]  # (global name, wrapper factory)
    class_hooks: tuple[tuple[str, Callable], ...]   # (attention class attribute, wrapper factory)
    check: Callable

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
           (), _check_llama),
    Family("qwen", "paddlenlp.transformers.qwen.modeling", "QWenAttention",
           (), (("_attn", _hooks.wrap_attn_method),), _check_qwen),
)

_lock = threading.Lock()
_installed: dict[str, tuple[int, list]] = {}  # family -> (models applied, [(owner, name, original)])


def install(family: Family) -> None:
    with _lock:
        count, saved = _installed.get(family.name, (0, []))
        if count == 0:
            module, cls = family.load()
            saved = [(module, "paddle", module.paddle)]
            module.paddle = _hooks.PaddleProxy(module.paddle)
            for name, wrap in family.module_hooks:
                saved.append((module, name, getattr(module, name)))
                setattr(module, name, wrap(getattr(module, name)))
            for name, wrap in family.class_hooks:
                original = cls.__dict__[name]
                saved.append((cls, name, original))
                setattr(cls, name, wrap(original))
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
