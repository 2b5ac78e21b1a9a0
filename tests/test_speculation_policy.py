"""The adaptive speculation policy (generation/speculation_policy.py) against independent references, with
injected costs and no timing: a step's token distribution by enumerating every accept pattern, the batch's
expected steps and the best k by simulating the batch (seeded Monte Carlo), the cost tables by hand; the
controller's probing and acceptance estimate; bad settings. No model, no Paddle op: well under a second."""
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paddle_vtensor.generation.speculation_policy import (AdaptiveSpeculation, Controller, StepCosts,
                                                          choose_k, expected_batch_steps, tokens_per_step)

NAN = float("nan")


def enumerated_moments(alpha, k):
    """(mean, variance) of 1 + the leading accepted drafts, over all 2^k accept patterns of k drafts."""
    mean = square = 0.0
    for pattern in itertools.product((0, 1), repeat=k):
        prob = math.prod(alpha if hit else 1 - alpha for hit in pattern)
        tokens = 1 + next((j for j, hit in enumerate(pattern) if not hit), k)
        mean += prob * tokens
        square += prob * tokens * tokens
    return mean, square - mean * mean


def simulated_steps(alpha, remaining, k, trials=3000, seed=0):
    """Mean steps until every sequence has its remaining tokens: the batch simulated step by step."""
    rng = np.random.default_rng(seed)
    alpha, remaining = np.asarray(alpha, float), np.asarray(remaining)
    got = np.zeros((trials, len(alpha)))
    steps = np.zeros(trials)
    while (got < remaining).any():
        live = got < remaining
        hits = rng.random((trials, len(alpha), k)) < alpha[:, None] if k else np.zeros((trials, len(alpha), 0))
        accepted = np.cumprod(hits, axis=2).sum(axis=2)
        got += live * (accepted + 1)
        steps += live.any(axis=1)
    return steps.mean()


def step_cost(costs, k):
    """C(k) from fully measured tables, by the definition: overhead + verify(k + 1) + draft(k)."""
    return costs.overhead_s + costs.verify_s[k] + (costs.draft_s[k - 1] if k else 0.0)


# derandomize: CI sees the same examples every run.
@settings(max_examples=40, deadline=None, derandomize=True)
@given(alpha=st.floats(0.0, 1.0), k=st.integers(0, 6))
def test_tokens_per_step_matches_enumeration(alpha, k):
    mean, var = tokens_per_step(np.array([alpha]), k)
    want_mean, want_var = enumerated_moments(alpha, k)
    assert mean[0] == pytest.approx(want_mean, rel=1e-9, abs=1e-12)
    assert var[0] == pytest.approx(want_var, rel=1e-9, abs=1e-9)


def test_expected_batch_steps_matches_simulation():
    """Alike sequences (where the normal approximation of the slowest is meant to be close), and a batch
    that waits for its one slow sequence: within 3%. (One test, not parametrized: each test item costs
    the suite a garbage collection.)"""
    for alpha, remaining in [([0.5] * 4, [63] * 4), ([0.7] * 4, [63] * 4), ([0.9] * 4, [40] * 4), ([0.6] * 4, [8] * 4),
                             ([0.8], [30]), ([0.0, 1.0, 0.9], [20, 20, 9])]:
        for k in (0, 1, 3, 6):
            want = simulated_steps(alpha, remaining, k)
            assert expected_batch_steps(alpha, remaining, k) == pytest.approx(want, rel=0.03), (alpha, remaining, k)


def measured_costs(draw):
    verify1 = draw(st.floats(0.5, 2.0))
    verify = [verify1 * (1 + draw(st.floats(0.0, 0.3)) * n / 6) for n in range(7)]  # grows with tokens
    draft = list(np.cumsum([draw(st.floats(0.01, 0.4)) for _ in range(6)]))
    return StepCosts(tuple(verify), tuple(draft), draw(st.floats(0.0, 0.1)))


@settings(max_examples=12, deadline=None, derandomize=True)
@given(data=st.data())
def test_choice_is_as_fast_as_the_simulated_best(data):
    """choose_k against an independent computation: each k's expected seconds from the costs by their
    definition times the simulated steps of the batch; the chosen k is within 4% of the best one."""
    costs = measured_costs(data.draw)
    alike = data.draw(st.booleans())
    b = data.draw(st.integers(1, 4))
    alpha = [data.draw(st.floats(0.0, 1.0))] * b if alike else [data.draw(st.floats(0.0, 1.0)) for _ in range(b)]
    remaining = [data.draw(st.integers(12, 48))] * b
    seconds = [step_cost(costs, k) * simulated_steps(alpha, remaining, k, trials=1500) for k in range(7)]
    chosen = choose_k(costs, alpha, remaining, k_max=6)
    assert seconds[chosen] <= min(seconds) * 1.04, (chosen, np.round(seconds, 3))


def test_choice_extremes():
    costs = StepCosts((1.0, 1.1, 1.2, 1.3, 1.4), (0.2, 0.4, 0.6, 0.8), 0.05)
    assert choose_k(costs, [0.0] * 4, [50] * 4, 4) == 0           # nothing accepted: plain steps
    assert choose_k(costs, [1.0] * 4, [50] * 4, 4) == 4           # everything accepted: the most
    assert choose_k(costs, [1.0] * 4, [3, 2, 1, 1], 4) == 2       # never past the longest remaining
    assert choose_k(costs, [1.0] * 4, [1] * 4, 4, min_k=1) == 0   # one token left: no draft, probe or not
    assert choose_k(costs, [0.0] * 4, [50] * 4, 4, min_k=1) == 1  # a probe drafts, the cheapest k >= 1


def test_step_costs_fill_unmeasured_sizes():
    """Verify: linear between measured token counts, flat past them; draft: linear from (0, 0) through the
    measured k, past the largest at its cost per token."""
    costs = StepCosts((1.0, NAN, NAN, NAN, 2.0), (NAN, 0.6, NAN), 0.1)
    want = [0.1 + 1.0, 0.1 + 1.25 + 0.3, 0.1 + 1.5 + 0.6, 0.1 + 1.75 + 0.9, 0.1 + 2.0 + 1.2, 0.1 + 2.0 + 1.5]
    np.testing.assert_allclose(costs.steps(5), want, rtol=1e-12)


def fixed(verify, draft, overhead=0.0, **kw):
    return AdaptiveSpeculation(costs=StepCosts(verify, draft, overhead), **kw)


def test_controller_probes_after_plain_steps():
    """Costs that make drafting lose: plain steps, and every probe_every-th step a probe (the best k >= 1)."""
    ctl = Controller(fixed((1.0, 1.5, 1.5), (1.0, 2.0), probe_every=3), n=2, k_max=2)
    seqs, remaining = np.arange(2), np.array([40, 40])
    ks = []
    for _ in range(8):
        ks.append(ctl.next_k(seqs, remaining))
        ctl.observe(ks[-1], seqs, np.zeros(2) if ks[-1] else None, {"draft": 1, "verify": 1, "rest": 0}, lag=1)
    assert ks == [0, 0, 0, 1, 0, 0, 0, 1]


def shrunk(hits, trials):
    """The empirical-Bayes estimate written out per sequence: raw rates, their pooled mean, the part of
    their spread that sampling noise does not explain, and each rate pulled toward the pool by its noise."""
    raw = [(h + 0.5) / (t + 1) for h, t in zip(hits, trials)]
    pool = (sum(hits) + 0.5) / (sum(trials) + 1)
    noise = [pool * (1 - pool) / (t + 1) for t in trials]
    spread = sum((r - pool) ** 2 for r in raw) / len(raw) - sum(noise) / len(noise)
    if spread <= 0:
        return [pool] * len(raw)
    return [pool + spread / (spread + v) * (r - pool) for r, v in zip(raw, noise)]


def test_controller_acceptance_counts_and_pooling():
    """hits += a, trials += a + (a < k) with decay; then the empirical-Bayes shrinkage toward the pool."""
    ctl = Controller(AdaptiveSpeculation(acceptance_decay=0.5), n=3, k_max=4)
    seqs = np.array([0, 2])
    for accepted in ([4, 0], [4, 1], [3, 0]):
        ctl.observe(4, seqs, np.array(accepted), {"draft": 1.0, "verify": 1.0, "rest": 0.1}, lag=1)
    hits = [((4 * 0.5) + 4) * 0.5 + 3, ((0 * 0.5) + 1) * 0.5 + 0]
    trials = [((4 * 0.5) + 4) * 0.5 + 4, ((1 * 0.5) + 2) * 0.5 + 1]
    got = ctl.alpha(seqs)
    np.testing.assert_allclose(got, shrunk(hits, trials), rtol=1e-12)
    assert got[0] > got[1] + 0.15  # these two differ beyond their noise: each keeps part of its own rate
    assert ctl.alpha(np.array([1]))[0] == 0.5  # no trials yet


def test_alike_noisy_sequences_share_the_pooled_rate():
    """Four sequences with rates 0.5-0.8 from a few trials each: the spread is noise, so all get the pool."""
    ctl = Controller(AdaptiveSpeculation(), n=4, k_max=2)
    ctl.hits[:], ctl.trials[:] = [2, 3, 3, 4], [4, 4, 5, 5]
    np.testing.assert_allclose(ctl.alpha(np.arange(4)), [(12 + 0.5) / (18 + 1)] * 4)


def test_controller_times_before_choosing():
    """Nothing timed: the first step drafts the most (capped by what is left); a catch-up step's draft
    time (lag > 1) is not taken as the cost of its k."""
    ctl = Controller(AdaptiveSpeculation(), n=1, k_max=5)
    assert ctl.next_k([0], [40]) == 5 and ctl.next_k([0], [3]) == 2
    ctl.observe(2, [0], np.array([0]), {"draft": 9.0, "verify": 1.0, "rest": 0.0}, lag=3)
    assert ctl.step_seconds() is None
    ctl.observe(5, [0], np.array([5]), {"draft": 0.5, "verify": 1.0, "rest": 0.0}, lag=1)
    assert ctl.step_seconds()[2] == pytest.approx(1.0 + 0.2)  # verify(3) flat from verify(6); draft 2/5 of 0.5


BAD_SETTINGS = [
    (dict(probe_every=0), ValueError, "probe_every >= 1"),
    (dict(probe_every=2.0), TypeError, "probe_every must be an int, got float"),
    (dict(acceptance_decay=1.0), ValueError, r"acceptance_decay must be in \[0, 1\)"),
    (dict(acceptance_decay="0.9"), TypeError, "acceptance_decay must be a float, got str"),
    (dict(cost_weight=0.0), ValueError, r"cost_weight in \(0, 1\]"),
    (dict(costs=(1.0, 2.0)), TypeError, "costs must be StepCosts or None, got tuple"),
]


BAD_COSTS = [
    (((NAN, NAN), (0.1,), 0.0), ValueError, "verify_s must be a sequence of seconds >= 0"),
    (((1.0,), (-0.1,), 0.0), ValueError, "draft_s must be a sequence of seconds >= 0"),
    (((1.0,), ("x",), 0.0), TypeError, "draft_s must be a sequence of seconds"),
    (((1.0,), (0.1,), float("inf")), ValueError, "overhead_s must be finite seconds >= 0"),
    (((1.0,), (0.1,), "0"), TypeError, "overhead_s must be seconds .a float., got str"),
]
GOOD = StepCosts((1.0,), (0.1,), 0.0)
BAD_CHOICES = [
    (dict(k_max=-1), ValueError, "k_max must be >= 0, got -1"),
    (dict(k_max=2.0), TypeError, "k_max must be an int, got float"),
    (dict(min_k=True), TypeError, "min_k must be an int, got bool"),
    (dict(costs=(1.0,)), TypeError, "costs must be StepCosts, got tuple"),
    (dict(alpha=[0.5, 1.2]), ValueError, r"alpha must be acceptances in \[0, 1\]"),
    (dict(alpha=[0.5]), ValueError, "one per sequence of remaining"),
    (dict(remaining=[3, 0]), ValueError, "remaining must be ints >= 1"),
]


def test_bad_settings_costs_and_choices_are_refused():
    for kw, exc, match in BAD_SETTINGS:
        with pytest.raises(exc, match=match):
            AdaptiveSpeculation(**kw)
    for args, exc, match in BAD_COSTS:
        with pytest.raises(exc, match=match):
            StepCosts(*args)
    for kw, exc, match in BAD_CHOICES:
        args = {"costs": GOOD, "alpha": [0.5, 0.5], "remaining": [3, 4], "k_max": 2, "min_k": 0, **kw}
        with pytest.raises(exc, match=match):
            choose_k(**args)
