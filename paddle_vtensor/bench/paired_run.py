"""One greedy ``generate()`` measured (per-step time, cache bytes written, peak memory), and the
same call with and without the plugin on one model: what the demo and the benchmark share."""
from __future__ import annotations

import contextlib
import dataclasses
import resource
import time
from typing import Callable

import numpy as np
import paddle

from .peak_memory import PeakBytes, PeakMemory, overall
from .step_probe import Step, StepRecorder, synchronize


@dataclasses.dataclass
class Run:
    tokens: np.ndarray  # [batch, new tokens]
    generate_s: float  # the whole generate() call, device synchronised
    steps: list[Step]  # steps[0] is the prefill, the rest are decode steps
    # Peaks of [prefill, first decode step, later decode steps], each above what was held before
    # generate(). Kept apart: the prefill's activations dwarf the cache, and the plugin's first
    # decode step holds the prefill's dense cache and its VTensor copy at once.
    memory: list[PeakBytes]
    # Process CPU time and minor page faults over all decode steps (getrusage): where a step's
    # time goes besides the model's arithmetic (fresh memory is faulted in page by page).
    decode_usage: dict
    plugin_counters: dict | None = None  # integration.stats(model) after the run, if it has them

    @property
    def decode_memory(self) -> PeakBytes:
        """The later decode steps: the steady state of a long generation."""
        return self.memory[-1]

    @property
    def first_decode_memory(self) -> PeakBytes:
        return self.memory[1]

    @property
    def whole_memory(self) -> PeakBytes:
        return overall(self.memory)

    @property
    def decode_steps(self) -> list[Step]:
        return self.steps[1:]

    def decode_ms_per_token(self, statistic=np.median) -> float:
        """Median (or ``statistic``) forward time of a decode step (one new token per sequence).
        The median by default: on a shared machine a few steps stall, and the mean follows them."""
        steps = self.decode_steps
        return float(statistic([s.ms for s in steps])) if steps else float("nan")

    def decode_cache_bytes_per_step(self, first: int = 1) -> float | None:
        """Mean cache bytes written per decode step, over steps[first:] (1: every decode step;
        2: all but the first, where the plugin moves the prefill's cache into a VTensor)."""
        written = [s.cache_bytes_written for s in self.steps[first:]]
        if not written or any(w is None for w in written):
            return None
        return float(np.mean(written))

    def first_decode_cache_bytes(self) -> int | None:
        return self.steps[1].cache_bytes_written if len(self.steps) > 1 else None

    def cache_in_vtensors(self) -> bool | None:
        flags = [s.cache_in_vtensors for s in self.decode_steps]
        return None if not flags or any(f is None for f in flags) else all(flags)


def load_integration():
    """(paddle_vtensor.integration, None), or (None, why) when it cannot be imported."""
    try:
        from .. import integration
        integration.apply, integration.remove  # noqa: B018 - the interface this module relies on
    except (ImportError, AttributeError) as e:
        return None, f"paddle_vtensor.integration could not be used ({type(e).__name__}: {e})"
    return integration, None


@contextlib.contextmanager
def plugin_applied(model, integration):
    integration.apply(model)
    try:
        yield model
    finally:
        integration.remove(model)


def generate(model, prompt: paddle.Tensor, new_tokens: int) -> np.ndarray:
    with paddle.no_grad():
        ids, _scores = model.generate(
            prompt,
            attention_mask=paddle.ones_like(prompt),  # paddlenlp 2.8.1 needs it
            max_new_tokens=new_tokens,
            decode_strategy="greedy_search",
            use_cache=True,
        )
    return ids.numpy()


def measure(model, prompt: paddle.Tensor, new_tokens: int, device: str,
            on_step: Callable[[Step], None] | None = None) -> Run:
    memory = PeakMemory(device)

    usage_at_decode = []

    def before_call(index: int) -> None:
        # Phases start as the first and the second decode step begin: by then generate() has
        # dropped the previous step's cache, so a phase does not inherit it.
        if index in (1, 2):
            memory.next_phase()
        if index == 1:
            usage_at_decode.append(_usage())

    recorder = StepRecorder(device, on_step, before_call).attach(model)
    try:
        with memory:
            synchronize(device)
            started = time.perf_counter()
            tokens = generate(model, prompt, new_tokens)
            synchronize(device)
            elapsed = time.perf_counter() - started
            usage = _usage()
    finally:
        recorder.detach()
    decode_usage = {key: usage[key] - usage_at_decode[0][key] for key in usage}
    return Run(tokens, elapsed, recorder.steps, memory.phases, decode_usage)


def _usage() -> dict:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"minor_faults": r.ru_minflt, "user_s": r.ru_utime, "sys_s": r.ru_stime}


def warm_up(model, prompt: paddle.Tensor, integration) -> None:
    """A short generate on each path first, so neither measured run pays one-time costs (op
    loading, first-call allocations) that the other does not."""
    short = prompt[:, : min(8, prompt.shape[1])]
    generate(model, short, 2)
    if integration is not None:
        with plugin_applied(model, integration):
            generate(model, short, 2)


def measure_both(model, prompt, new_tokens, device, integration, on_step_for=None, repeats: int = 1):
    """(baseline Run, plugin Run or None), each the median of ``repeats`` runs taken in turn
    (baseline, plugin, baseline, ...) so that a change in the machine's load over time falls on both
    paths alike. ``on_step_for(name)`` gives each run's step callback."""
    on_step_for = on_step_for or (lambda name: None)
    baselines, plugins = [], []
    for _ in range(repeats):
        baselines.append(measure(model, prompt, new_tokens, device, on_step_for("baseline")))
        if integration is not None:
            with plugin_applied(model, integration):
                run = measure(model, prompt, new_tokens, device, on_step_for("plugin"))
                if hasattr(integration, "stats"):
                    run.plugin_counters = integration.stats(model)
            plugins.append(run)
    return median_run(baselines), median_run(plugins) if plugins else None


def median_run(runs: list[Run]) -> Run:
    """One Run standing for repeats of the same path: per-step median times, median generate()
    time and CPU usage, each memory source's peak over all repeats; tokens, bytes and counters of
    the first.
    Raises if the repeats generated different tokens (greedy decoding must be deterministic)."""
    first = runs[0]
    for i, run in enumerate(runs[1:], start=1):
        if first_difference(first.tokens, run.tokens) is not None:
            raise RuntimeError(f"repeat {i} generated other tokens than repeat 0 of the same path")
    steps = [dataclasses.replace(step, ms=float(np.median([run.steps[i].ms for run in runs])))
             for i, step in enumerate(first.steps)]
    memory = [overall([run.memory[phase] for run in runs]) for phase in range(len(first.memory))]
    usage = {key: float(np.median([run.decode_usage[key] for run in runs])) for key in first.decode_usage}
    return Run(first.tokens, float(np.median([run.generate_s for run in runs])), steps, memory, usage,
               first.plugin_counters)


def first_difference(a: np.ndarray, b: np.ndarray) -> tuple[int, int] | None:
    """(sequence, position) of the first differing token, or None if a and b are identical."""
    if a.shape != b.shape:
        return (0, min(a.shape[1], b.shape[1]))
    rows, cols = np.nonzero(a != b)
    if len(rows) == 0:
        return None
    first = int(np.argmin(cols))
    return int(rows[first]), int(cols[first])
