"""Times every forward call that ``generate()`` makes and how many bytes each one wrote into the KV
cache, from hooks on the model: the bytes the plugin's ops wrote are counted by the ops themselves
(``memory_stats()["bytes_written"]``); what a dense cache's ``concat`` wrote is the size of the new
tensor it returned."""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

import paddle


def synchronize(device: str) -> None:
    """Wait for queued device work, so a timer read after it covers the work (no-op on CPU, where
    ops run synchronously and paddle.device.synchronize refuses the device)."""
    if not device.startswith("cpu"):
        paddle.device.synchronize(device)


@dataclasses.dataclass
class Step:
    new_tokens: int  # tokens this call fed in: the prompt length at prefill, then 1
    context_len: int  # cached tokens after the call (the keys the call attended over)
    ms: float  # wall time of the forward call, device synchronised at both ends
    # K and V of every layer; None if the cache was not found. VTensor caches: the ops' own count
    # (cache_bytes_counted); dense caches: every cache tensor the call replaced by a new one, whole.
    cache_bytes_written: int | None
    cache_in_vtensors: bool | None  # every K and V a VTensor; None if the cache was not found
    cache_bytes_counted: int = 0  # bytes paddle_vtensor's kernels wrote into caches during the call


class StepRecorder:
    """Forward hooks on the top-level model; ``steps`` holds one Step per forward call.

    Bytes written per call: when the caches are VTensors, what paddle_vtensor's kernels counted
    while the call ran (every append, migration and copy-on-write reports the bytes it writes).
    A dense cache is written by Paddle's ``concat([past, new])``, which returns a new tensor holding
    every past token: a layer's K or V that is not the tensor the previous call returned, grown in
    place, was written whole (batch * kv_heads * head_dim * element bytes per token).
    """

    def __init__(self, device: str, on_step: Callable[[Step], None] | None = None,
                 on_start: Callable[[int], None] | None = None):
        self.device = device
        self.on_step = on_step  # called with each Step once its call returns
        self.on_start = on_start  # called with a call's index (0: prefill) before it, untimed
        self.steps: list[Step] = []
        self._handles: list = []
        self._started = 0.0
        self._last: dict[tuple[int, int], tuple[int, int]] = {}  # (layer, k/v) -> (address, tokens)
        self._counted_before = 0

    def attach(self, model) -> "StepRecorder":
        self._handles = [model.register_forward_pre_hook(self._before),
                         model.register_forward_post_hook(self._after)]
        return self

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _before(self, layer, inputs):
        if self.on_start is not None:
            self.on_start(len(self.steps))
        self._counted_before = self._bytes_counted()
        synchronize(self.device)
        self._started = time.perf_counter()

    def _after(self, layer, inputs, outputs):
        synchronize(self.device)
        ms = (time.perf_counter() - self._started) * 1e3
        counted = self._bytes_counted() - self._counted_before
        cache = _past_key_values(outputs)
        logits = outputs[0] if isinstance(outputs, (tuple, list)) else outputs.logits
        new_tokens = int(logits.shape[1])
        written, in_vtensors, context = self._account(cache, new_tokens)
        if in_vtensors:
            written = counted
        step = Step(new_tokens, context, ms, written, in_vtensors, counted)
        self.steps.append(step)
        if self.on_step is not None:
            self.on_step(step)

    def _bytes_counted(self) -> int:
        from ..api import memory_stats

        return memory_stats(self.device)["bytes_written"]

    def _account(self, cache, new_tokens: int) -> tuple[int | None, bool | None, int]:
        if cache is None:
            return None, None, -1
        from ..api import is_vtensor

        written, all_vtensors, context = 0, True, -1
        for layer, pair in enumerate(cache):
            for kv, t in enumerate(pair[:2]):
                batch, tokens, heads, head_dim = t.shape
                token_bytes = batch * heads * head_dim * t.element_size()
                address = t.data_ptr()
                before = self._last.get((layer, kv))
                grew_in_place = before == (address, tokens - new_tokens)
                written += (new_tokens if grew_in_place else tokens) * token_bytes
                all_vtensors = all_vtensors and is_vtensor(t)
                self._last[(layer, kv)] = (address, tokens)
                context = tokens
        return written, all_vtensors, context


def _past_key_values(outputs):
    """The per-layer (key, value) pairs of a forward output, or None if it holds no such thing."""
    if isinstance(outputs, (tuple, list)):
        cache = outputs[1] if len(outputs) > 1 and not isinstance(outputs[1], paddle.Tensor) else None
    else:
        cache = getattr(outputs, "past_key_values", None)
    if not isinstance(cache, (tuple, list)) or not cache:
        return None
    for pair in cache:
        if not isinstance(pair, (tuple, list)) or len(pair) < 2:
            return None
        if not all(isinstance(t, paddle.Tensor) and t.ndim == 4 for t in pair[:2]):
            return None
    return cache
