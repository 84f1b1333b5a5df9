"""A prediction as typed data (`workbench.prediction`): the knobs it runs with, its JSON round trip, its twin; the
probe's prediction read back from the JSON it has always written, and what `workbench probe` prints of it."""

import json
import math

import pytest

from workbench.prediction import LrOptimum, Measured, Prediction, ProbePrediction, SweepPoint, twin


def test_a_prediction_runs_at_whole_rollouts_and_a_typed_ratio():
    p = Prediction("predicted", 7.9, 1.3712, 128, 40.0)
    assert p.knobs == {"replay.ratio": 1.37, "replay.capacity": 738, "replay.horizon": None}
    assert p.ratio == 1.37 and p.run_x == pytest.approx(738 * 1.37 / 128)
    below = Prediction("predicted", 1.0, 0.6, 128, 40.0)  # below on-policy: runs on-policy, a buffer of one batch
    assert below.knobs["replay.ratio"] == 1.0 and below.knobs["replay.capacity"] == 128
    assert Prediction("probe", 4, 2, 16, 9.0, lr=1.23456e-4).knobs["lr"] == 1.23e-4


def test_its_compute_is_read_at_the_knobs_it_runs_not_at_the_unrounded_point():
    p = Prediction.at("predicted", 7.9, 1.3712, 128, lambda x, y: 100 * x + y)
    assert p.compute == pytest.approx(100 * (738 * 1.37 / 128) + 1.37)
    assert p.compute != pytest.approx(100 * 7.9 + 1.3712)


def test_it_round_trips_through_json_as_analysis_json_holds_it():
    p = Prediction.at(
        "probe",
        12.0,
        2.5,
        64,
        lambda x, y: 3.0 * x / y,
        lr=7.5e-5,
        provenance={"probe_run": "abc", "lr_sweep": [[5e-5, 80.0, False]], "rho": math.nan},
    )
    text = json.dumps({"prediction": p.to_json()})  # as `workbench analyze` writes it
    data = json.loads(text)["prediction"]
    assert data["knobs"] == {"replay.ratio": 2.5, "replay.capacity": 307, "replay.horizon": None, "lr": 7.5e-5}
    back = Prediction.from_json(data)
    assert (back.arm, back.x, back.y, back.batch_size, back.compute, back.lr) == (
        p.arm,
        p.x,
        p.y,
        p.batch_size,
        p.compute,
        p.lr,
    )
    assert back.provenance["lr_sweep"] == [[5e-5, 80.0, False]] and math.isnan(back.provenance["rho"])
    # what a reader sees (knobs, run_x) is derived again, never trusted from the file
    assert Prediction.from_json({**data, "knobs": {"replay.capacity": 1}}).knobs == p.knobs


@pytest.mark.parametrize("bad", [{"arm": "sampler"}, {"x": math.nan}, {"y": 0.0}, {"batch_size": 0}])
def test_a_prediction_that_cannot_run_is_refused_when_built(bad):
    fields = {"arm": "predicted", "x": 4.0, "y": 2.0, "batch_size": 16, "compute": 1.0} | bad
    with pytest.raises(ValueError, match=next(iter(bad)).split("_")[0]):
        Prediction(**fields)


def test_a_measured_twin_has_the_same_knobs_at_the_learning_rate_the_prediction_runs_at():
    measured = (Measured(0, 1.0, 128, 50.0, baseline=True), Measured(5, 1.37, 738, 41.0))
    p = Prediction("predicted", 7.9, 1.3712, 128, 40.0)
    assert twin(measured, p.knobs).trial_number == 5
    assert twin(measured, Prediction("predicted", 1.0, 0.6, 128, 40.0).knobs).trial_number == 0
    assert twin(measured, Prediction("predicted", 7.9, 1.5, 128, 40.0).knobs) is None
    # a study that searches lr: a prediction without its own lr runs at the base lr, so only that twin counts
    by_lr = (Measured(8, 1.0, 128, 60.0, lr=5e-5), Measured(0, 1.0, 128, 50.0, lr=1e-4))
    on_policy = Prediction("predicted", 1.0, 1.0, 128, 40.0)
    assert (
        twin(by_lr, on_policy.knobs, base_lr=1e-4).trial_number == 0
        and twin(by_lr, on_policy.knobs, base_lr=2e-4) is None
    )
    assert twin(by_lr, Prediction("predicted", 1.0, 1.0, 128, 40.0, lr=5e-5).knobs, base_lr=1e-4).trial_number == 8


def test_an_asynchronous_study_runs_a_prediction_as_the_split_that_gives_its_replay_ratio():
    """y is not set asynchronously: (x*, y*) at mu runs as W = mu·T/y* generators with the buffer N = x*·B/y*, and as
    the queue where y* rounds to on-policy."""
    from workbench.prediction import Prediction

    p = Prediction("predicted", 4.0, 2.0, 128, 50.0)
    assert p.split_knobs(6.0) == {"replay.strategy": "uniform", "replay.capacity": 256, "pipeline.generators": 3}
    assert p.split_knobs(6.0, trainers=2)["pipeline.generators"] == 6
    assert Prediction("predicted", 1.0, 1.0, 128, 50.0).split_knobs(0.5) == {
        "replay.strategy": "queue",
        "replay.capacity": 128,
        "pipeline.generators": 1,
    }
    # a predicted lr runs with the split, on-policy's too (the probe's answer at mu 6.16 was on-policy at its sweep's lr)
    assert Prediction("probe", 1.0, 1.0, 128, 36.3, lr=4.74e-5).split_knobs(6.16) == {
        "replay.strategy": "queue",
        "replay.capacity": 128,
        "pipeline.generators": 6,
        "lr": 4.74e-5,
    }


RECORDED = {
    "x": 4.0,
    "y": 2.0,
    "relative_compute": 0.62,
    "lr_factor": 1.25,
    "near_x": [4.0, 6.0],
    "near_y": [1.8, 2.4],
    "at_edge": False,
    "c": 2.1,
    "rho": 0.3,
    "mu": 1.5,
    "stability": {"draws": 50, "same_point": 0.84, "x_95": [4.0, 6.0], "y_95": [1.9, 2.3]},
    "lr_sweep": [
        {"lr": 1e-5, "compute_to_target": 60.0, "censored": False, "budget": 100.0, "run_id": "a"},
        {"lr": 2e-5, "compute_to_target": 40.0, "censored": False, "budget": 90.0, "run_id": "b"},
        {"lr": 4e-5, "compute_to_target": 60.0, "censored": True, "budget": 60.0, "run_id": "c"},
    ],
    "lr_optimum": {"lr": 2.2e-5, "compute": 39.5, "bounded_by_censored": True, "points": 3},
    "lr": 2.75e-5,
    "lr_source": "the sweep's lr*",
    "compute": 24.49,
    "capacity": 32,
    "ratio": 2.0,
    "against_sweep": {
        "sweep_units": 250.0,
        "gradient_units": 10.0,
        "sweep_lr": 2.2e-5,
        "sweep_compute": 39.5,
        "claims": True,
        "probe_compute": 24.49,
        "probe_path": 34.49,
        "sweep_path": 39.5,
        "reason": "claims its point: to reach the target once: ...",
    },
}
"""The `predicted` block of a `probe/probe.json` as `workbench probe` has always written it (`--json` prints it)."""


def test_the_probes_prediction_reads_back_the_json_it_has_always_written():
    p = ProbePrediction.from_json(json.loads(json.dumps(RECORDED)))
    assert json.dumps(p.to_json()) == json.dumps(RECORDED)  # the same text, key order included
    assert p.has_point and p.near_x == (4.0, 6.0) and p.stability.covers(p.x, p.y)
    assert p.lr_sweep[2] == SweepPoint(4e-5, 60.0, True, 60.0, "c") and p.lr_optimum.bounded_by_censored
    assert p.against_sweep.claims and p.against_sweep.probe_path == 34.49
    assert p.lines() == [
        "on-policy lr sweep, compute to target: lr 1e-05: 60, lr 2e-05: 40, lr 4e-05: >60; lr* 2.2e-05 (39.5 units)",
        "predicted optimum at a tuned lr: x 4, y 2 (capacity 32), lr 2.75e-05 (the sweep's lr*; x1.25 on-policy's),"
        " 0.62x on-policy's compute (24.5 units); within 5%: x 4-6, y 1.8-2.4",
        "stability over 50 bootstrap resamples of the probe's groups: the same point in 84%; 95% of draws within"
        " x 4-6, y 1.9-2.3",
        "against its lr sweep at equal compute, the probe claims its point: to reach the target once: ...",
    ]
    # a refusal keeps what it had: no point, the sweep's edge, none of the keys it never wrote
    refused = {"refused": "the fresh mean gradient is not resolved", "c": 2.1, "rho": 0.3, "mu": 1.5}
    back = ProbePrediction.from_json(refused)
    assert back.to_json() == refused and not back.has_point and back.lines() == [f"no prediction: {refused['refused']}"]
    edge = LrOptimum.from_json({"lr": 4e-5, "compute": 60.0, "refused": "the cheapest run is at the sweep's largest"})
    assert edge.lines() == ["no lr*: the cheapest run is at the sweep's largest"] and edge.bounded_by_censored is None
    assert SweepPoint(1e-5, 60.0, False, 100.0).to_json() == {
        "lr": 1e-5,
        "compute_to_target": 60.0,
        "censored": False,
        "budget": 100.0,
    }
