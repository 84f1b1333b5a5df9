"""The probe's noise-by-age estimators against a linear regression whose per-sample gradient noise is known."""

import math

import numpy as np
import pytest

from workbench import noise

D, S2, DECAY = 20, 0.25, 0.8
DELTA0 = np.linspace(1.0, -1.0, D) / 2


def _stale_gradients(now: int, ages, per_age: int, seed: int = 0):
    """Least squares y = x·w* + e, x ~ N(0, I), e ~ N(0, S2), on a trajectory w_t = w* + DECAY^t DELTA0. A sample
    born at step b keeps its residual from w_b (as a rollout keeps its behaviour log-probs and advantage), so its
    gradient x(x·w_b - y) = x(x·Delta_b - e) has mean Delta_b and covariance trace (D + 1)|Delta_b|² + D·S2."""
    rng = np.random.default_rng(seed)
    grads, tags = [], []
    for age in ages:
        delta = DECAY ** (now - age) * DELTA0
        x = rng.normal(size=(per_age, D))
        e = rng.normal(0, math.sqrt(S2), size=per_age)
        grads.append(x * (x @ delta - e)[:, None])
        tags += [age] * per_age
    return np.vstack(grads), np.array(tags)


def _truth(now: int, age: int) -> float:
    return (D + 1) * float(np.sum((DECAY ** (now - age) * DELTA0) ** 2)) + D * S2


def test_noise_by_age_recovers_the_computable_truth():
    grads, ages = _stale_gradients(now=10, ages=range(9), per_age=600)
    measured = noise.noise_by_age(grads, ages)
    assert [a.age for a in measured] == list(range(9))
    for a in measured:
        assert abs(a.sigma2 - _truth(10, a.age)) < 4 * a.se
        assert a.se < 0.1 * a.sigma2
    # older rollouts carry larger residuals here: the noise grows with age, and the fit says so (F6 holds)
    growth = noise.fit_noise_growth(measured)
    assert growth.alpha > 0 and growth.non_decreasing


def test_the_growth_fit_recovers_a_shifted_power_law():
    rng = np.random.default_rng(0)
    truth = dict(sigma0_sq=2.0, tau0=3.0, alpha=0.4)
    points = [
        noise.AgeNoise(
            t,
            500,
            truth["sigma0_sq"] * (1 + t / truth["tau0"]) ** (2 * truth["alpha"]) * (1 + 0.01 * rng.normal()),
            0.02 * truth["sigma0_sq"],
            np.zeros(3),
        )
        for t in range(0, 17)
    ]
    got = noise.fit_noise_growth(points)
    assert got.alpha == pytest.approx(0.4, rel=0.15) and got.tau0 == pytest.approx(3.0, rel=0.3)
    assert got.sigma0_sq == pytest.approx(2.0, rel=0.05) and got.non_decreasing


def test_a_random_projection_keeps_the_noise_and_the_bias():
    grads, ages = _stale_gradients(now=10, ages=(0, 4, 8), per_age=800, seed=1)
    full = noise.noise_by_age(grads, ages)
    projected = noise.noise_by_age(grads @ noise.projection(D, 512, seed=2), ages)
    for a, b in zip(full, projected):
        assert b.sigma2 == pytest.approx(a.sigma2, rel=0.15)
    kappa = noise.staleness_bias(full)
    for age in (4, 8):  # |Delta_b - Delta_now| / |Delta_now|, sampling error of the means included
        want = abs(DECAY ** (-age) - 1)
        assert kappa[age] == pytest.approx(want, rel=0.25)


def test_noise_that_falls_with_age_fails_f6():
    grads, ages = _stale_gradients(now=10, ages=range(9), per_age=600, seed=3)
    reversed_ages = 8 - ages  # the same samples, labelled so that the oldest are the least noisy
    growth = noise.fit_noise_growth(noise.noise_by_age(grads, reversed_ages))
    assert growth.alpha < 0 and not growth.non_decreasing


def test_within_group_correlation():
    rng = np.random.default_rng(0)
    shared = np.repeat(rng.normal(size=(50, 30)), 8, axis=0)  # 50 groups of 8 sharing a component
    grads = shared + rng.normal(size=(400, 30))
    groups = np.repeat(np.arange(50), 8)
    assert noise.within_group_correlation(grads, groups) == pytest.approx(0.5, abs=0.06)
    assert abs(noise.within_group_correlation(rng.normal(size=(400, 30)), groups)) < 0.03


def test_count_sketch_keeps_norms_and_reuse_correlation_reads_repeated_noise():
    rng = np.random.default_rng(0)
    g = rng.normal(size=(200, 5000))
    idx, sign = noise.count_sketch(5000, 1024, seed=1)
    sk = np.zeros((200, 1024))
    for i in range(200):
        np.add.at(sk[i], idx, g[i] * sign)
    assert np.mean(np.sum(sk**2, axis=1)) == pytest.approx(np.mean(np.sum(g**2, axis=1)), rel=0.03)
    later = 0.8 * g + 0.6 * rng.normal(size=g.shape)  # the same rollouts' noise, partly renewed: correlation 0.8
    assert noise.reuse_correlation(g, later) == pytest.approx(0.8, abs=0.02)
    assert abs(noise.reuse_correlation(g, rng.normal(size=g.shape))) < 0.02


def test_the_staleness_bias_is_corrected_for_the_noise_of_few_rollouts():
    rng = np.random.default_rng(4)
    mean = np.ones(50)
    grads = mean + 3.0 * rng.normal(size=(16 * 8, 50))  # no bias at all: every age has the same mean
    ages = np.repeat(np.arange(16), 8)
    kappa = noise.staleness_bias(noise.noise_by_age(grads, ages))
    assert np.nanmedian(list(kappa.values())) < 0.35  # uncorrected, |mean_tau - mean_0| / |mean_0| reads ~1.5


def test_horizon_terms_are_unbiased_for_the_computable_truth():
    now, ages = 10, range(6)
    means = {a: DECAY ** (now - a) * DELTA0 for a in ages}  # the mean gradient of a sample born at now - age
    reps = [
        noise.horizon_terms(noise.noise_by_age(*_stale_gradients(now, ages, per_age=8, seed=s))) for s in range(300)
    ]
    assert [t.x for t in reps[0]] == [1, 2, 3, 4, 5, 6]
    for x in (1, 3, 6):
        bar = sum(means[a] for a in range(x)) / x
        got = {k: np.mean([getattr(r[x - 1], k) for r in reps]) for k in ("signal", "mixed", "cross")}
        se = {k: np.std([getattr(r[x - 1], k) for r in reps]) / math.sqrt(len(reps)) for k in got}
        for key, want in (("signal", means[0] @ means[0]), ("mixed", bar @ bar), ("cross", means[0] @ bar)):
            assert abs(got[key] - want) < 4 * se[key], (x, key, got[key], want)
        assert np.mean([r[x - 1].sigma2_bar for r in reps]) == pytest.approx(
            np.mean([_truth(now, a) for a in range(x)]), rel=0.05
        )
    # uncorrected, 8 rollouts a mean read |m_0|² several times its truth: the correction is what makes it usable
    naive = np.mean([float(r[0].signal) + _truth(now, 0) / 8 for r in reps])
    assert naive > 3 * float(means[0] @ means[0])


def test_horizon_terms_stop_at_the_first_missing_age():
    grads, ages = _stale_gradients(now=10, ages=(0, 1, 3), per_age=20)
    assert [t.x for t in noise.horizon_terms(noise.noise_by_age(grads, ages))] == [1, 2]
    grads, ages = _stale_gradients(now=10, ages=(1, 2), per_age=20)
    assert noise.horizon_terms(noise.noise_by_age(grads, ages)) == []
