"""apply()'s proof that its hooks are reached on the model it was given.

Hooks patch PaddleNLP's modules by name; a PaddleNLP release that binds a function elsewhere
(3.0.0b4's per-layer ``attn_func``) or reshapes differently would silently bypass or break them.
So apply() runs three tiny steps (a one-token prefill, then two one-token decode steps, batch 1)
twice: on PaddleNLP's own path, then through the plugin, and requires

* every attention layer's K and V cache to be migrated on the first decode step and appended in
  place on the second (the cache append goes through the plugin),
* one plugin attention per layer and decode step (the attention goes through the plugin),
* the same outputs as PaddleNLP's own path, to a tolerance for the dtype.

Anything else is an UnsupportedModelError that says what was found.
"""
from __future__ import annotations

import inspect

import numpy as np
import paddle

from ..errors import UnsupportedModelError
from ._hooks import ModelState

_STEPS = 3  # prefill, first decode (migration), second decode (in-place append)


def _token(config) -> int:
    vocab = int(getattr(config, "vocab_size", 2) or 2)
    return 1 % vocab


def _steps(model, config, run) -> list[np.ndarray]:
    """The three steps through ``run(**inputs)``; the first output of each, as float32 numpy."""
    accepts = inspect.signature(model.forward).parameters
    outputs, past = [], None
    ids = paddle.full([1, 1], _token(config), dtype="int64")
    for step in range(_STEPS):
        inputs = dict(input_ids=ids, attention_mask=paddle.ones([1, step + 1], dtype="int64"), use_cache=True,
                      return_dict=True)
        if "position_ids" in accepts:
            inputs["position_ids"] = paddle.full([1, 1], step, dtype="int64")
        if past is not None:
            inputs["past_key_values"] = past
        out = run(**inputs)
        past = out.past_key_values
        outputs.append(out[0].astype("float32").numpy())
    return outputs


# Relative tolerance of an 8-bit cache's outputs (on top of the model dtype's): e4m3 keeps 3 mantissa
# bits (a value's error up to 1/16), int8 7 bits of each token's amax (docs/QUANTIZED_CACHE.md).
_QUANT_TOLERANCE = {"int8": 3e-2, "float8_e4m3fn": 1.5e-1}


def _tolerance(model, cache_dtype=None) -> float:
    dtypes = {p.dtype for p in model.parameters()}
    tol = 1e-3 if dtypes <= {paddle.float32, paddle.float64} else 5e-2
    return tol + _QUANT_TOLERANCE.get(cache_dtype, 0.0)


def run(model, config, state: ModelState, plain_call, plugin_call, layers: int, describe) -> None:
    """Raise UnsupportedModelError unless the plugin path is taken and agrees with PaddleNLP's.
    ``plain_call``/``plugin_call`` run the model without/with the plugin; ``describe()`` names
    the hooked functions for the message. Leaves ``state``'s counters at zero."""
    training = [(layer, layer.training) for layer in model.sublayers(include_self=True)]
    model.eval()  # dropout would make the two paths differ
    try:
        with paddle.no_grad():
            try:
                want = _steps(model, config, plain_call)
            except Exception as e:
                raise UnsupportedModelError(
                    f"paddle_vtensor.apply: could not run {type(model).__name__}'s one-token probe step "
                    f"(input_ids, attention_mask, past_key_values, use_cache): {type(e).__name__}: {e}") from e
            try:
                got = _steps(model, config, plugin_call)
            except UnsupportedModelError:
                raise
            except Exception as e:
                raise UnsupportedModelError(
                    f"paddle_vtensor.apply: the probe step fails on the plugin path ({describe()}): "
                    f"{type(e).__name__}: {e}") from e
    finally:
        for layer, was in training:
            layer.training = was
    found = state.counters()
    for key in found:
        setattr(state, key, 0)
    expected = {"migrations": 2 * layers, "appends_in_place": 2 * layers, "appends_copied": 0,
                "attention_calls": 2 * layers}
    if found != expected:
        raise UnsupportedModelError(
            f"paddle_vtensor.apply: the hooks are not reached on {type(model).__name__}: a probe of two decode "
            f"steps over {layers} attention layers expected {expected} and found {found} ({describe()})")
    tol = _tolerance(model, state.cache_dtype)
    quantized = f" with cache_dtype={state.cache_dtype!r} (tolerance {tol:.3g} x (1 + max |output|))" \
        if state.cache_dtype else ""
    for step, (a, b) in enumerate(zip(got, want)):
        err = float(np.max(np.abs(a - b))) if a.shape == b.shape else float("inf")
        if not err <= tol * (1.0 + float(np.max(np.abs(b)))):
            raise UnsupportedModelError(
                f"paddle_vtensor.apply: on {type(model).__name__} the plugin path differs from PaddleNLP's at probe "
                f"step {step}{quantized} (shapes {list(a.shape)} vs {list(b.shape)}, max difference {err:.3g}) "
                f"({describe()})")
