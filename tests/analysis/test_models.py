"""The model registry: each model recovers itself from its own data with censoring, unidentified parameters are
flagged, a flat-ridge optimum is refused, and the comparison prefers the model that made the data."""

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from analysis.models import MODELS, ModelFit, compare, fit_model_runs, log_likelihood, optimum, probe_optimum
from workbench.prediction import ProbePrediction, SweepPoint

MU = 0.85
GRID = [(x, y) for x in (1, 2, 4, 8, 16) for y in (1, 2, 4) if x >= y]
TRUTH = {
    "thm45": {"log_scale": 2.0, "alpha": 0.25, "log_tau0": math.log(3.0), "log_rho": math.log(0.4)},
    "with_replacement": {"log_scale": 2.0, "alpha": 0.25, "log_tau0": math.log(3.0), "log_rho": math.log(0.4)},
    "extended": {
        "log_scale": 3.0,
        "alpha": 0.2,
        "log_tau0": math.log(4.0),
        "log_c": math.log(2.0),
        "log_rho": math.log(0.3),
        "log_vstar": math.log(6.0),
    },
}


def _runs(
    model: str,
    params: dict,
    grid=GRID,
    seeds: int = 4,
    noise: float = 0.08,
    budget: float | None = None,
    lrs=(None,),
    seed: int = 0,
) -> pd.DataFrame:
    """Per-seed runs drawn from `model` itself: log-normal scatter, censored at `budget` (the run spent its whole
    budget and never reached the target)."""
    rng = np.random.default_rng(seed)
    truth = ModelFit(model, {**params, "log_sigma": math.log(noise)}, MU, 1.0, 0, 0, 0.0)
    rows = []
    for lr in lrs:
        for x, y in grid:
            c_true = float(truth.predict(x, y, lr))
            for s in range(seeds):
                c = c_true * math.exp(rng.normal(0, noise))
                censored = budget is not None and c > budget
                rows.append(
                    {
                        "x": float(x),
                        "y": float(y),
                        "seed": s,
                        "compute_to_target": budget * 1.3 if censored else c,
                        "censored": int(censored),
                        "total_units": budget if censored else c,
                        **({} if lr is None else {"lr": lr}),
                    }
                )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("model", ["thm45", "with_replacement", "extended"])
def test_each_model_recovers_its_own_data_with_censoring(model):
    runs = _runs(model, TRUTH[model])
    budget = float(np.quantile(runs["compute_to_target"], 0.85))
    runs = _runs(model, TRUTH[model], budget=budget)
    assert runs["censored"].sum() > 0
    fit = fit_model_runs(model, runs, MU, bootstrap=8)
    truth = ModelFit(model, {**TRUTH[model], "log_sigma": math.log(0.08)}, MU, 1.0, 0, 0, 0.0)
    xs, ys = np.array([g[0] for g in GRID], float), np.array([g[1] for g in GRID], float)
    err = np.abs(np.log(fit.predict(xs, ys)) - np.log(truth.predict(xs, ys)))
    assert np.median(err) < 0.05 and err.max() < 0.15  # the censored corner included
    assert fit.sigma == pytest.approx(0.08, rel=0.35)
    assert fit.loco["n"] >= 8 and fit.loco["median_abs_log_error"] < 0.12


def test_the_learning_rate_aware_model_recovers_the_noise_floor_from_three_learning_rates():
    params = TRUTH["extended"]
    runs = _runs("extended_lr", params, lrs=(0.5, 1.0, 2.0), seeds=3)
    fit = fit_model_runs("extended_lr", runs, MU, bootstrap=0)
    truth = ModelFit("extended_lr", {**params, "log_sigma": math.log(0.08)}, MU, 1.0, 0, 0, 0.0)
    for lr in (0.5, 1.0, 2.0):
        got, want = fit.predict(8.0, 2.0, lr), truth.predict(8.0, 2.0, lr)
        assert abs(math.log(got / want)) < 0.1
    assert fit.reported()["vstar"] == pytest.approx(6.0, rel=0.3)  # the floor, seen through the learning rates


def test_a_parameter_the_data_cannot_see_is_flagged_unidentified():
    # at y = 1 only, Theorem 4.5's rho multiplies the scale: (1 + y/mu)(1/y + rho) = (1 + 1/mu)(1 + rho)
    runs = _runs("thm45", TRUTH["thm45"], grid=[(x, 1) for x in (1, 2, 4, 8, 16)])
    fit = fit_model_runs("thm45", runs, MU, bootstrap=0)
    assert "rho" in fit.unidentified
    full = fit_model_runs("thm45", _runs("thm45", TRUTH["thm45"]), MU, bootstrap=0)
    assert "rho" not in full.unidentified


def test_an_optimum_on_a_flat_ridge_is_refused_with_the_reason():
    # alpha 0: sigma_bar² is 1 at every x and the distinct-draw objective does not depend on x at all
    flat = ModelFit(
        "thm45",
        {"log_scale": 0.0, "alpha": 0.0, "log_tau0": 0.0, "log_rho": math.log(0.3), "log_sigma": -2.0},
        MU,
        1.0,
        0,
        0,
        0.0,
    )
    out = optimum(flat)
    assert "flat ridge" in out["refused"] and out["near_x"][1] / out["near_x"][0] > 4
    # the ridge's simplest point, what `study verify --ridge` runs: its smallest horizon, within the tolerance
    ridge = out["ridge_point"]
    assert ridge["x"] == pytest.approx(out["near_x"][0]) and ridge["y"] <= ridge["x"]
    assert ridge["compute"] <= out["compute"] * 1.05 and ridge["compute"] == pytest.approx(
        float(flat.predict(ridge["x"], ridge["y"]))
    )
    shaped = ModelFit(
        "with_replacement",
        {"log_scale": 0.0, "alpha": 0.4, "log_tau0": 0.0, "log_rho": math.log(0.1), "log_sigma": -2.0},
        MU,
        1.0,
        0,
        0,
        0.0,
    )
    out = optimum(shaped)
    assert "refused" not in out and 1 <= out["y"] <= out["x"]
    grid_best = min(
        float(shaped.predict(x, y)) for x in np.geomspace(1, 64, 300) for y in np.geomspace(1, 16, 300) if x >= y
    )
    assert out["compute"] <= grid_best * 1.01


def test_compare_prefers_the_model_that_made_the_data():
    runs = _runs("extended", TRUTH["extended"], seeds=3)
    fits = compare(runs, MU, bootstrap=0)
    assert [f.model for f in fits][0] == "extended"
    by = {f.model: f for f in fits}
    assert by["extended"].aic < by["thm45"].aic - 10
    assert "extended_lr" not in by  # one learning rate: the lr-aware form would be the same model


def test_the_censored_likelihood_is_the_survival_beyond_the_bound():
    pred, sigma = np.array([1.0]), 0.5
    ll = log_likelihood(pred, np.array([1.5]), np.array([True]), sigma)
    from scipy import stats

    assert float(ll[0]) == pytest.approx(float(stats.norm.logsf(1.0)))
    assert set(MODELS) >= {"thm45", "with_replacement", "extended", "extended_lr"}


def test_the_learning_rate_aware_optimum_predicts_the_learning_rate_with_x_and_y():
    # compute ∝ cost(y)/(lam(1 - lam V/V*)) is smallest at lam = V*/(2 V): the best lr falls as the noise V rises
    from analysis.theory import shifted_power_law_sigma_bar_sq

    p = TRUTH["extended"]
    truth = ModelFit("extended_lr", {**p, "log_sigma": math.log(0.08)}, MU, 1e-4, 0, 0, 0.0)
    o = optimum(truth, lr_bounds=(1e-6, 1e-2))
    assert "refused" not in o
    v = shifted_power_law_sigma_bar_sq(p["alpha"], math.exp(p["log_tau0"]))(o["x"]) * (
        1 + math.exp(p["log_c"]) * o["y"] / o["x"] + math.exp(p["log_rho"]) * o["y"]
    )
    assert o["lr"] == pytest.approx(1e-4 * math.exp(p["log_vstar"]) / (2 * v), rel=0.15)
    fixed = optimum(truth, lr=1e-4)
    assert "lr" not in fixed and fixed["compute"] >= o["compute"]
    narrow = optimum(truth, lr_bounds=(1e-9, 2e-9))
    assert "refused" in narrow and "learning rate" in narrow["refused"]


def _terms(xs, bias: float = 0.0, sigma2: float = 20.0, signal: float = 0.05):
    """Horizon terms of a probe: the mean gradient over ages 0..x-1 keeps a share 1 - bias·(x - 1) of the fresh
    one (and that squared norm), the noise is flat in age."""
    keep = lambda x: 1.0 - bias * (x - 1)  # noqa: E731
    return [
        {"x": x, "sigma2_bar": sigma2, "signal": signal, "mixed": signal * keep(x) ** 2, "cross": signal * keep(x)}
        for x in xs
    ]


def test_the_probe_optimum_is_the_descent_lemma_at_a_tuned_step_by_hand():
    terms, c, rho, mu, b = _terms(range(1, 17), bias=0.06), 1.0, 0.1, 10.0, 128
    got = probe_optimum(terms, c, rho, mu, b)
    x, y = int(got["x"]), got["y"]
    t = terms[x - 1]
    v = t["sigma2_bar"] * (1 + c * y / x) * (1 + (y - 1) * rho) / b
    v_on = 20.0 * (1 + c) / b
    want = (1 + mu / y) / (1 + mu) * (t["mixed"] + v) / t["cross"] ** 2 / ((0.05 + v_on) / 0.05**2)
    assert got["relative_compute"] == pytest.approx(want, rel=1e-9) and got["relative_compute"] < 1
    assert 1 < x < 16 and 1 < y <= x and "refused" not in got  # bias bounds x; mu over rho pays for reuse
    assert got["lr_factor"] == pytest.approx(t["cross"] / (t["mixed"] + v) / (0.05 / (0.05 + v_on)), rel=1e-9)


def test_the_probe_optimum_moves_with_what_it_measures():
    no_bias = probe_optimum(_terms(range(1, 17)), 3.0, 0.5, 2.0, 128)
    assert no_bias["x"] == 16 and "largest horizon" in no_bias["refused"]  # nothing bounds the buffer
    strong = probe_optimum(_terms(range(1, 17), bias=0.06), 3.0, 0.5, 2.0, 128)
    weak = probe_optimum(_terms(range(1, 17), bias=0.01), 3.0, 0.5, 2.0, 128)
    assert strong["x"] < weak["x"]
    cheap = probe_optimum(_terms(range(1, 17), bias=0.03), 3.0, 1.0, 0.3, 128)  # mu 0.3, reuse repeats all its noise
    assert cheap["y"] == pytest.approx(1.0)  # reuse does not pay when generation is cheap
    dear = probe_optimum(_terms(range(1, 17), bias=0.03), 3.0, 0.1, 10.0, 128)
    assert dear["y"] > 2


def test_the_probe_refuses_when_the_fresh_gradient_is_not_resolved():
    got = probe_optimum(_terms(range(1, 9), signal=-0.01), 3.0, 0.5, 2.0, 128)
    assert "not resolved" in got["refused"] and "x" not in got


@pytest.mark.parametrize("model", ["thm45", "extended"])
def test_a_fit_rebuilt_from_its_summary_predicts_the_same(model):
    """`study verify --model` predicts from the report's JSON summary of a fit: the rebuilt fit is the fit."""
    import json

    fit = ModelFit(model, {**TRUTH[model], "log_sigma": math.log(0.08)}, MU, 2.5e-5, 52, 3, -12.5)
    rebuilt = ModelFit.from_summary(json.loads(json.dumps(fit.summary())))
    xs, ys = np.array([1.0, 2.0, 8.0, 16.0]), np.array([1.0, 2.0, 4.0, 2.0])
    assert np.allclose(rebuilt.predict(xs, ys), fit.predict(xs, ys), rtol=1e-12)
    assert rebuilt.params == pytest.approx(fit.params, rel=1e-12) and rebuilt.aic == pytest.approx(fit.aic)


def test_lr_optimum_finds_the_vertex_in_log_lr_and_refuses_an_unbounded_sweep():
    from analysis.models import lr_optimum

    best, width = 1.7e-4, 0.8

    def run(lr, censored=False):
        c = 40.0 * math.exp(((math.log(lr) - math.log(best)) / width) ** 2)
        return SweepPoint(lr, c, censored, c)

    sweep = [run(2.5e-5 * 2**i) for i in range(5)]  # 2.5e-5 .. 4e-4
    got = lr_optimum(sweep)
    assert (
        got.refused is None and got.lr == pytest.approx(best, rel=1e-6) and got.compute == pytest.approx(40.0, rel=1e-6)
    )
    assert got.bounded_by_censored is False and got.points == 5
    rising = lr_optimum(sweep[:3])  # 2.5e-5 .. 1e-4: still falling at the largest
    assert "largest" in rising.refused and rising.lr == 1e-4
    assert rising.to_json().keys() == {"lr", "compute", "refused"}  # the JSON it always wrote
    none = lr_optimum([replace(p, censored=True) for p in sweep])
    assert none.refused and none.lr is None and none.lines() == [f"no lr*: {none.refused}"]
    # a censored neighbour enters at its budget, a lower bound: flagged
    capped = sweep[:3] + [replace(sweep[3], censored=True, budget=45.0)]
    assert lr_optimum(capped).bounded_by_censored is True


def test_probe_lr_scales_on_policys_swept_lr_by_the_points_factor():
    from analysis.models import probe_lr

    predicted = ProbePrediction(x=4.0, y=2.0, relative_compute=0.8, lr_factor=0.5)
    sweep = [SweepPoint(lr, c, False, 100.0) for lr, c in ((1e-4, 50.0), (2e-4, 40.0), (4e-4, 50.0))]
    got = probe_lr(predicted, sweep, lr=1e-5)
    assert (
        got.lr == pytest.approx(1e-4)
        and got.compute == pytest.approx(0.8 * 40.0)
        and got.lr_source == "the sweep's lr*"
        and got.lr_sweep == tuple(sweep)
    )
    unswept = probe_lr(predicted, None, lr=1e-5)
    assert unswept.lr == pytest.approx(5e-6) and unswept.lr_source == "the trial's lr (no sweep)"
    assert unswept.compute is None and unswept.lr_sweep is None
    refused = probe_lr(ProbePrediction(refused="why"), sweep, lr=1e-5)
    assert refused.lr is None and refused.lr_optimum.lr == pytest.approx(2e-4) and len(refused.lr_sweep) == 3
    unbounded = probe_lr(predicted, sweep[:2], lr=1e-5)  # the cheapest run is the largest lr: its lr stands in
    assert unbounded.lr == pytest.approx(0.5 * 2e-4) and unbounded.lr_source.startswith("the sweep's cheapest run (")


def test_a_probe_point_outside_its_own_replicates_is_refused_as_unstable():
    from analysis.models import probe_prediction

    biased = _terms(range(1, 17), bias=0.03)
    steady = probe_prediction(
        biased, [biased] * 20, group_correlation=0.4, rho=0.5, mu=2.0, group_size=8, batch_size=128
    )
    assert steady.refused is None and steady.stability.same_point == 1.0 and steady.stability.draws == 20
    assert steady.c == pytest.approx(0.4 * 7) and (steady.rho, steady.mu) == (0.5, 2.0)
    # the replicates all see a strong bias (on-policy); the point estimate a weak one (a long buffer)
    weak = _terms(range(1, 17), bias=0.01)
    strong = _terms(range(1, 17), bias=0.5)
    got = probe_prediction(weak, [strong] * 20, group_correlation=0.4, rho=0.5, mu=2.0, group_size=8, batch_size=128)
    assert got.stability.x_95[1] < got.x and not got.stability.covers(got.x, got.y)
    assert got.refused.startswith("unstable") and "outside its own replicates' 95% range" in got.refused
    unmeasured = probe_prediction(weak, [], group_correlation=0.4, rho=math.nan, mu=2.0, group_size=8, batch_size=128)
    assert not unmeasured.has_point and unmeasured.to_json() == {"refused": "rho (nan) or mu (2) not measured"}
