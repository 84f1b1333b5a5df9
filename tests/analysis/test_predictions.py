"""The analysis's predictions as typed data (`analysis.predictions`): what `study verify` receives from each source."""

import json
import math

import pytest

from workbench.prediction import Prediction

from analysis import predictions
from analysis.models import MODELS, ModelFit
from analysis.report import analyze_data
from analysis.result import ModelSummary, Point, dumps
from support.analysis_result import analysis

PREDICTED = {"compute_to_target": 1.0, "knobs": {}, "on_policy_optimal": False}


def test_the_fitted_optimum_is_written_into_analysis_json_and_read_back(study):
    data = study({(1.0, 1.0): 1.0, (2.0, 1.0): 0.95, (4.0, 2.0): 0.9, (8.0, 2.0): 1.05}, seeds=2)
    result, _, fit = analyze_data(data, whatif_mu=[], bootstrap=0)
    back = Prediction.from_json(json.loads(dumps(result))["prediction"])
    assert back == predictions.fitted(result, fit, 16) == result.prediction
    assert (back.arm, back.x, back.y, back.batch_size) == ("predicted", result.predicted.x, result.predicted.y, 16)
    assert back.compute == pytest.approx(float(fit.predict(back.run_x, back.ratio)))  # at the knobs it runs
    assert back.provenance == {k: getattr(result.fit, k) for k in predictions.FIT_PROVENANCE}
    measured = predictions.measured(result)
    assert [m.trial_number for m in measured] == [c.trial_number for c in result.configurations]
    by_number = {m.trial_number: m for m in measured}  # trials numbered in the grid's order
    assert [by_number[n].baseline for n in range(4)] == [True, False, False, False] and by_number[3].capacity == 64
    assert all(m.lr == 2.5e-5 for m in measured)
    assert [m.compute_to_target for m in measured] == [c.compute_to_target for c in result.configurations]


def test_no_prediction_where_the_fit_found_no_optimum():
    assert predictions.fitted(analysis({"predicted": {**PREDICTED, "x": math.nan, "y": 2.0}}), None, 16) is None


def _model_fit(name: str) -> ModelFit:
    params = {p.name: p.start for p in (*MODELS[name].params,)} | {"log_scale": 3.0, "log_sigma": math.log(0.3)}
    return ModelFit(
        name,
        params,
        mu=0.9,
        lr_ref=2.5e-5,
        n_points=6,
        n_censored=0,
        log_likelihood=-1.0,
        loco={"n": 6, "median_abs_log_error": 0.05},
    )


def _summary(fit: ModelFit) -> ModelSummary:
    return ModelSummary.from_json(fit.summary() | {"optimum": {"x": 1.0, "y": 1.0, "compute": 1.0}})


def test_a_compared_models_optimum_carries_its_learning_rate_and_provenance():
    fit = _model_fit("extended_lr")
    point = {"x": 6.0, "y": 1.8, "lr": 4e-5, "compute": 10.0}
    p = predictions.of_model(_summary(fit), Point(**point), 16)
    assert p.arm == "predicted" and p.lr == 4e-5 and p.knobs["lr"] == 4e-5
    assert p.compute == pytest.approx(float(fit.predict(p.run_x, p.ratio, 4e-5)))
    assert p.provenance == {"model": "extended_lr", "params": fit.reported(), "mu": 0.9, "loco": 0.05}
    ridge = predictions.of_model(_summary(_model_fit("thm45")), Point(x=2.0, y=1.0, compute=9.0), 16, ridge=True)
    assert ridge.lr is None and ridge.provenance["ridge"] is True


def test_the_probes_optimum_is_priced_by_its_sweep_or_by_the_measured_baseline():
    o = {
        "x": 8.0,
        "y": 2.0,
        "relative_compute": 0.8,
        "lr": 6e-5,
        "lr_factor": 1.2,
        "lr_source": "the sweep's lr*",
        "rho": 0.1,
        "c": 0.4,
        "stability": {"same_point": 0.9},
    }
    sweep = [{"lr": 5e-5, "compute_to_target": 80.0, "censored": False}]
    with_sweep = predictions.of_probe(o | {"compute": 64.0}, sweep, "run1", 0.9, 120.0, 100.0, 16)
    assert (with_sweep.arm, with_sweep.compute, with_sweep.lr) == ("probe", 64.0, 6e-5)
    assert with_sweep.provenance["lr_sweep"] == [[5e-5, 80.0, False]] and with_sweep.provenance["probe_units"] == 120.0
    alone = predictions.of_probe(
        o, None, "run1", 0.9, 40.0, 100.0, 16
    )  # no sweep: the study's lr, priced by its baseline
    assert alone.compute == pytest.approx(80.0) and alone.lr is None and "lr_sweep" not in alone.provenance
    assert (
        "claims_beyond_sweep" not in alone.provenance
    )  # a prediction that was not held against a sweep says nothing of it
    claimed = predictions.of_probe(
        o | {"compute": 64.0, "against_sweep": {"claims": False, "reason": "on-policy"}},
        sweep,
        "run1",
        0.9,
        120.0,
        100.0,
        16,
    )
    assert claimed.provenance["claims_beyond_sweep"] is False
