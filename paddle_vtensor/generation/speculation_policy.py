"""How many tokens a speculative step drafts: the pure policy (``choose_k``) and the per-run controller
that feeds it measured costs and acceptance (``speculative_generate(..., adaptive=True)``).

The model. A step drafting k tokens costs ``C(k) = overhead + verify(k + 1) + draft(k)`` seconds (k = 0:
a plain target step, ``overhead + verify(1)``). Sequence i accepts each drafted position with
probability ``alpha_i`` until the first miss, so a step yields X tokens, ``P(X >= t) = alpha^(t - 1)``
for t = 1 .. k + 1. The batch steps until its slowest sequence has its remaining ``R_i`` tokens;
sequence i needs about ``N_i ~ Normal((R_i - 1 + E[overshoot]) / mu_i, R_i var_i / mu_i^3)`` steps
(renewal theory; the overshoot past R_i - 1 has mean ``E[X (X + 1)] / (2 mu_i)``), and the slowest of B
about ``max_i(E[N_i] + z_B sd_i)``, z_B the expected maximum of B standard normals (exact when the
sequences are alike; never fewer than ``ceil(max R / (k + 1))`` steps). ``choose_k`` minimizes
``C(k) * steps(k)``, the expected seconds to finish the batch if k were kept, i.e. it picks the k with
the most expected tokens per second. The controller re-decides every step.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np


def step_seconds(verify, draft, overhead: float, top: int) -> np.ndarray:
    """C(k) for k = 0 .. top from cost tables with NaN where not measured: verify[n - 1] for n tokens a
    sequence (filled linearly between measured sizes, flat past them), draft[k - 1] for k drafted tokens
    (filled linearly from (0, 0) through the measured ones, and past the largest measured k at its cost
    per token)."""
    v, d = np.asarray(verify, dtype=np.float64), np.asarray(draft, dtype=np.float64)
    n = np.arange(1, top + 2)
    seen = np.nonzero(np.isfinite(v))[0]
    cost = overhead + np.interp(n, seen + 1, v[seen])
    seen = np.nonzero(np.isfinite(d))[0]
    x, y = np.concatenate([[0], seen + 1]), np.concatenate([[0.0], d[seen]])
    k = n - 1
    return cost + np.where(k <= x[-1], np.interp(k, x, y), k * (y[-1] / x[-1]))


@dataclass(frozen=True)
class StepCosts:
    """Seconds of a step's parts for the batch as it is now, NaN where not measured (see step_seconds).
    ``verify_s[n - 1]``: the target forward over n tokens a sequence (n = 1: a plain step);
    ``draft_s[k - 1]``: drafting k tokens (k forwards and their bookkeeping); ``overhead_s``: the rest
    of a step (accept, finished check, reservations)."""

    verify_s: tuple
    draft_s: tuple
    overhead_s: float

    def __post_init__(self):
        for name in ("verify_s", "draft_s"):
            try:
                v = np.asarray(getattr(self, name), dtype=np.float64)
            except (TypeError, ValueError):
                raise TypeError(f"StepCosts: {name} must be a sequence of seconds, got {getattr(self, name)!r}") from None
            if v.ndim != 1 or not np.isfinite(v).any() or (v[np.isfinite(v)] < 0).any() or np.isinf(v).any():
                raise ValueError(f"StepCosts: {name} must be a sequence of seconds >= 0 (NaN: not measured), "
                                 f"at least one measured, got {getattr(self, name)!r}")
        value = self.overhead_s
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"StepCosts: overhead_s must be seconds (a float), got {type(value).__name__}")
        if not 0 <= value < math.inf:
            raise ValueError(f"StepCosts: overhead_s must be finite seconds >= 0, got {value!r}")

    def steps(self, top: int) -> np.ndarray:
        """C(k) for k = 0 .. top."""
        return step_seconds(self.verify_s, self.draft_s, self.overhead_s, top)


def _moments(alpha, top: int):
    """(mean, E[X^2]) of a step's tokens for k = 0 .. top: arrays [..., top + 1]. P(X >= t) = alpha^(t - 1)
    gives E[X] = sum_t alpha^(t-1) and E[X^2] = sum_t (2t - 1) alpha^(t-1), t = 1 .. k + 1."""
    a = np.asarray(alpha, dtype=np.float64)[..., None]
    j = np.arange(top + 1, dtype=np.float64)
    power = a ** j
    return np.cumsum(power, -1), np.cumsum((2 * j + 1) * power, -1)


def tokens_per_step(alpha, k: int):
    """(mean, variance) of the tokens a step drafting k yields, per sequence of acceptance alpha."""
    mean, square = _moments(alpha, k)
    return mean[..., k], square[..., k] - mean[..., k] ** 2


@functools.lru_cache(maxsize=None)
def expected_max_normal(b: int) -> float:
    """E[max of b independent standard normals] (0 for b = 1), by quadrature."""
    if b <= 1:
        return 0.0
    x = np.linspace(-9.0, 9.0, 4001)
    cdf = 0.5 * (1.0 + np.array([math.erf(v / math.sqrt(2.0)) for v in x]))
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    y = x * b * pdf * cdf ** (b - 1)
    # The trapezoid rule by hand: numpy 1.26 (the PaddleNLP 3 environment) has no np.trapezoid.
    return float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2.0)


def _batch_steps(alpha, remaining, top: int) -> np.ndarray:
    """Expected steps to finish the batch for k = 0 .. top (see the module docstring)."""
    r = np.asarray(remaining, dtype=np.float64)[:, None]
    mean, square = _moments(alpha, top)
    var = square - mean ** 2
    steps = (r - 1.0 + (square + mean) / (2.0 * mean)) / mean
    normal = steps + expected_max_normal(len(r)) * np.sqrt(r * var / mean ** 3)
    return np.maximum(normal.max(0), np.ceil(r.max() / np.arange(1, top + 2)))


def expected_batch_steps(alpha, remaining, k: int) -> float:
    """Expected steps until every sequence has its remaining tokens, drafting k a step."""
    return float(_batch_steps(alpha, remaining, k)[k])


def choose_from_seconds(step_seconds, alpha, remaining, k_max: int, min_k: int = 0) -> int:
    """choose_k with C(k) given as an array over k = 0 .. >= min(k_max, max(remaining) - 1)."""
    top = min(k_max, int(np.max(remaining)) - 1)
    min_k = min(min_k, top)  # the last token needs no draft, probe or not
    seconds = np.asarray(step_seconds[: top + 1]) * _batch_steps(alpha, remaining, top)
    return min_k + int(np.argmin(seconds[min_k:]))  # ties: the smaller k


def choose_k(costs: StepCosts, alpha, remaining, k_max: int, min_k: int = 0) -> int:
    """The k in [min_k, min(k_max, max(remaining) - 1)] (just 0 when one token is left) with the fewest
    expected seconds to finish the batch, ``C(k) * expected_batch_steps(alpha, remaining, k)``; ties go
    to the smaller k. alpha, remaining: per active sequence (acceptance in [0, 1], tokens to emit >= 1)."""
    for name, value in (("k_max", k_max), ("min_k", min_k)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"choose_k: {name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"choose_k: {name} must be >= 0, got {value}")
    if not isinstance(costs, StepCosts):
        raise TypeError(f"choose_k: costs must be StepCosts, got {type(costs).__name__}")
    a, r = np.asarray(alpha, dtype=np.float64), np.asarray(remaining)
    if a.ndim != 1 or a.shape != r.shape or a.size == 0 or not ((a >= 0) & (a <= 1)).all():
        raise ValueError(f"choose_k: alpha must be acceptances in [0, 1], one per sequence of remaining, got {alpha!r}")
    if not np.issubdtype(r.dtype, np.integer) or (r < 1).any():
        raise ValueError(f"choose_k: remaining must be ints >= 1 (tokens each sequence still emits), got {remaining!r}")
    return choose_from_seconds(costs.steps(max(k_max, 0)), alpha, remaining, k_max, min_k)


@dataclass(frozen=True)
class AdaptiveSpeculation:
    """Settings of adaptive speculation (``speculative_generate(..., adaptive=AdaptiveSpeculation(...))``;
    ``adaptive=True`` uses these defaults). ``acceptance_decay``: weight of the past in each sequence's
    acceptance counts (per speculative step); ``cost_weight``: weight of a new timing in the cost EMAs;
    ``probe_every``: after this many plain steps in a row the next step drafts (the best k >= 1) so the
    acceptance does not go stale; ``costs``: fixed StepCosts instead of timing this run (e.g. from an
    earlier profile, or to make the choices reproducible)."""

    acceptance_decay: float = 0.95
    cost_weight: float = 0.3
    probe_every: int = 8
    costs: StepCosts | None = None

    def __post_init__(self):
        for name in ("acceptance_decay", "cost_weight", "probe_every"):
            value, kind = getattr(self, name), (int,) if name == "probe_every" else (int, float)
            if isinstance(value, bool) or not isinstance(value, kind):
                raise TypeError(f"AdaptiveSpeculation: {name} must be {'an int' if kind == (int,) else 'a float'}, "
                                f"got {type(value).__name__}")
        if not 0.0 <= self.acceptance_decay < 1.0 or not 0.0 < self.cost_weight <= 1.0 or self.probe_every < 1:
            raise ValueError(f"AdaptiveSpeculation: acceptance_decay must be in [0, 1), cost_weight in (0, 1] and "
                             f"probe_every >= 1, got {self.acceptance_decay}, {self.cost_weight}, {self.probe_every}")
        if self.costs is not None and not isinstance(self.costs, StepCosts):
            raise TypeError(f"AdaptiveSpeculation: costs must be StepCosts or None, got {type(self.costs).__name__}")


# Until a plain step is timed it is guessed this fraction of the cheapest verify seen: cheaper than any
# verify (on this CPU a verify of 12-28 tokens costs 1.09-1.19 plain steps), so the first choice of k = 0
# is made on a guess that favours it, and then measured.
PLAIN_GUESS = 0.85


class Controller:
    """One run's state: acceptance counts per sequence, cost EMAs, plain steps in a row. Host numpy only
    (some 20 small array operations a step): it sees the accepted counts that the loop's finished check
    reads anyway."""

    def __init__(self, settings: AdaptiveSpeculation, n: int, k_max: int):
        self.settings, self.k_max = settings, k_max
        self.hits = np.zeros(n)    # decayed accepted positions
        self.trials = np.zeros(n)  # decayed examined positions (accepted + the first miss)
        self.verify = np.full(k_max + 1, np.nan)  # EMA seconds of a verify of 1 .. k_max + 1 tokens
        self.draft = np.full(k_max + 1, np.nan)   # EMA seconds of drafting k = 0 .. k_max tokens (lag 1)
        self.overhead = None
        self.plain_run = 0

    def alpha(self, seqs) -> np.ndarray:
        """Acceptance per position of sequences `seqs`, shrunk toward the batch's pooled rate as far as
        their spread is noise (empirical Bayes, method of moments): the batch waits for its slowest
        sequence, so the lowest of several noisy estimates of one true rate would look like a slow
        sequence and stop speculation that pays; sequences that truly differ keep their own rates.
        Raw rate (hits + 1/2) / (trials + 1); 1/2 before any trial."""
        hits, trials = self.hits[seqs], self.trials[seqs]
        raw = (hits + 0.5) / (trials + 1.0)
        pooled = (hits.sum() + 0.5) / (trials.sum() + 1.0)
        noise = pooled * (1.0 - pooled) / (trials + 1.0)  # each raw rate's sampling variance
        spread = max(0.0, float(np.mean((raw - pooled) ** 2) - np.mean(noise)))  # the true rates' variance
        return pooled + spread / (spread + noise) * (raw - pooled) if spread > 0 else np.full(len(raw), pooled)

    def step_seconds(self):
        """C(k) for k = 0 .. k_max from this run's timings; None before any speculative step."""
        if self.settings.costs is not None:
            return self.settings.costs.steps(self.k_max)
        if np.isnan(self.draft[1:]).all() or self.overhead is None:
            return None
        v = self.verify.copy()
        if np.isnan(v[0]):
            v[0] = PLAIN_GUESS * np.nanmin(v)
        return step_seconds(v, self.draft[1:], self.overhead, self.k_max)

    def next_k(self, seqs, remaining) -> int:
        """k for the next step of the sequences `seqs` (indices into the run) with `remaining` tokens each."""
        seconds = self.step_seconds()
        if seconds is None:  # nothing timed yet: draft the most, which times the draft and the widest verify
            return min(self.k_max, int(np.max(remaining)) - 1)
        probe = self.plain_run >= self.settings.probe_every
        return choose_from_seconds(seconds, self.alpha(seqs), remaining, self.k_max, min_k=1 if probe else 0)

    def observe(self, k: int, seqs, accepted, seconds: dict, lag: int) -> None:
        """A finished step: k drafted after the draft had missed `lag` tokens, accepted[i] by sequence
        seqs[i] (numpy), seconds {draft, verify, rest}."""
        if k:
            d = self.settings.acceptance_decay
            self.hits[seqs] = d * self.hits[seqs] + accepted
            self.trials[seqs] = d * self.trials[seqs] + accepted + (accepted < k)
            self.plain_run = 0
        else:
            self.plain_run += 1
        w = self.settings.cost_weight
        ema = lambda old, new: new if old is None or np.isnan(old) else (1 - w) * old + w * new
        self.verify[k] = ema(self.verify[k], seconds["verify"])
        self.overhead = ema(self.overhead, seconds["rest"])
        if k and lag == 1:  # a catch-up over more tokens is the price of a switch, not of k
            self.draft[k] = ema(self.draft[k], seconds["draft"])


__all__ = ["AdaptiveSpeculation", "StepCosts", "choose_k", "expected_batch_steps", "step_seconds", "tokens_per_step"]
