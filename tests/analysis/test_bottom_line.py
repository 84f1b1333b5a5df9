"""The bottom line (`workbench.verdicts`, rendered by `analysis.bottom_line` for the report): a claim only where the
paired interval excludes 1, on the study's curve, and the command that would settle it; the same sentence from the
report's MLflow frames as from the study's Optuna record."""

from __future__ import annotations

import json
import math
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from analysis.bottom_line import bottom_line, runs_line, verdict
from analysis.report import analyze_data
from analysis.result import SCHEMA_VERSION, Analysis
from support.analysis_result import analysis
from workbench.study import attrs, compare

ROOT = Path(__file__).resolve().parents[2]


def _config(
    number: int,
    x: float,
    y: float,
    ratio: float = math.nan,
    low: float = math.nan,
    high: float = math.nan,
    seeds: int = 3,
    arm: str = "sampler",
    censored: int = 0,
    **extra,
) -> dict:
    compute = 20.0 * (1 if math.isnan(ratio) else ratio)
    return {
        "trial_number": number,
        "x": x,
        "y": y,
        "strategy": "uniform",
        "baseline": (x, y) == (1, 1),
        "arm": arm,
        "compute_to_target": compute,
        "ci_low": 0.8 * compute,
        "ci_high": 1.2 * compute,
        "ratio_to_baseline": ratio,
        "ratio_ci_low": low,
        "ratio_ci_high": high,
        "seeds": seeds,
        "censored_seeds": censored,
        **extra,
    }


def _result(*configs: dict, censored: int = 0, confirmations=()) -> Analysis:
    return analysis(
        {
            "metric": "demo_prob",
            "target_accuracy": 0.665,
            "reference_mu": 0.92,
            "estimator": "fitted",
            "n_runs": 3 * len(configs),
            "n_censored_runs": censored,
            "n_configurations": len(configs),
            "configurations": list(configs),
            "confirmations": list(confirmations),
        }
    )


BASE = _config(0, 1, 1)


def test_an_interval_containing_1_is_unresolved_and_the_next_step_is_a_race():
    line = bottom_line(
        _result(BASE, _config(1, 4, 2, 1.10, 0.50, 2.44), _config(2, 8, 2, 1.21, 0.56, 2.61)), "studies/quickstart.yaml"
    )
    assert line == (
        "**Bottom line.** No replay setting resolvably beats on-policy to reach the demo_prob target 0.665 (3"
        " paired seeds, 95% intervals); the closest, y=2 x=4 (trial 1), 1.10x [0.50, 2.44]: unresolved, its"
        " interval contains 1. Next: `workbench study race studies/quickstart.yaml` (more seeds where unresolved)."
    )
    assert "saving" not in line and "saved" not in line


def test_a_resolved_saving_is_named_before_a_larger_unresolved_one_and_sent_to_confirmation():
    line = bottom_line(_result(BASE, _config(1, 4, 2, 0.80, 0.70, 0.90), _config(2, 8, 4, 0.60, 0.30, 1.20)))
    assert line.startswith(
        "**Bottom line.** The best replay setting, y=2 x=4 (trial 1), reaches the demo_prob target 0.665"
        " with 0.80x [0.70, 0.90] the compute of on-policy (3 paired seeds, 95% interval: resolved, 20% saved);"
        " a selection estimate until replicated on fresh seeds."
    )
    assert "`workbench study confirm SPEC` (fresh seeds)" in line and "`workbench study race SPEC`" in line


def test_a_replicated_saving_says_whether_it_held_on_the_fresh_seeds():
    best = _config(1, 4, 2, 0.80, 0.70, 0.90)
    for replicated, said in (
        ((0.95, 0.80, 1.10), "unresolved, so the saving is not confirmed"),
        ((0.82, 0.75, 0.90), "the saving holds"),
    ):
        confirmations = [{"selection": best, "replicated": _config(5, 4, 2, *replicated, arm="confirm")}]
        line = bottom_line(_result(BASE, best, confirmations=confirmations), "s.yaml")
        assert f"; on fresh seeds {replicated[0]:.2f}x [{replicated[1]:.2f}, {replicated[2]:.2f}]: {said}." in line
        assert "confirm s.yaml" not in line and ("`workbench study verify s.yaml`" in line) == (
            said == "the saving holds"
        )


def test_every_setting_resolvably_dearer_is_said_as_such():
    line = bottom_line(_result(BASE, _config(1, 4, 2, 1.5, 1.2, 1.9), _config(2, 8, 2, 1.3, 1.1, 1.6)))
    assert "Every replay setting tried needs resolvably more compute than on-policy" in line
    assert "the closest, y=2 x=8 (trial 2), 1.30x [1.10, 1.60]." in line and "race" not in line


def test_every_is_said_only_when_every_setting_is_dearer():
    # the lowest ratio resolved-more, another setting unresolved: not "every"
    v = verdict(_result(BASE, _config(1, 4, 2, 1.3, 1.1, 1.6), _config(2, 8, 2, 1.5, 0.8, 2.9)))
    assert v.kind == "unresolved" and "every" not in v.text.lower()
    assert v.text.endswith("the closest, y=2 x=4 (trial 1), 1.30x [1.10, 1.60]: resolved, more compute.")
    assert [s.command for s in v.steps] == ["workbench study race SPEC"]


def test_one_seed_is_never_a_claim():
    line = bottom_line(_result(BASE, _config(1, 4, 2, 0.5, seeds=1)))
    assert "(1 seed: no interval); the closest, y=2 x=4 (trial 1), 0.50x (1 seed: no interval): unresolved." in line
    assert "No replay setting resolvably beats on-policy" in line


def test_labels_carry_lr_where_it_varies_and_on_policy_at_another_lr_is_no_replay_setting():
    base = _config(0, 1, 1, lr=1e-5)
    other_lr = _config(1, 1, 1, 0.5, 0.45, 0.55, lr=1e-4) | {"baseline": False}  # on-policy, faster at its lr
    replay = _config(2, 8, 2, 0.6, 0.5, 0.7, lr=1e-4, censored=1)
    v = verdict(_result(base, other_lr, replay))
    assert v.text.startswith(
        "the best replay setting, y=2 x=8 lr=0.0001 (trial 2), reaches the demo_prob target 0.665 with"
        " 0.60x [0.50, 0.70] the compute of on-policy at another lr (1e-05: a saving may be the"
        " learning rate's) (3 paired seeds"
    )
    assert "lr=" not in verdict(_result(BASE, _config(1, 4, 2, 0.6, 0.5, 0.7))).text


def test_no_run_reaching_the_target_says_nothing_is_measured_and_not_zero_censored():
    result = _result(BASE, _config(1, 4, 2, 1.0, 0.9, 1.1), censored=6)
    assert "No run reached the demo_prob target 0.665 within its budget" in bottom_line(result)
    assert "`workbench report SPEC --target T`" in bottom_line(result)
    assert "6 of 6 runs never reached the target 0.665" in runs_line(result)
    assert "every run reached the target 0.665" in runs_line(_result(BASE, _config(1, 4, 2, 1.0, 0.9, 1.1)))


def test_without_a_paired_baseline_no_saving_is_stated():
    line = bottom_line(
        _result(_config(1, 4, 2) | {"compute_to_target": 30.0}, _config(2, 8, 2) | {"compute_to_target": 25.0})
    )
    assert (
        "No on-policy run completed, so no saving can be claimed; the lowest compute to target: y=2 x=8 (trial 2), 25"
        in line
    )
    assert "`workbench study run SPEC` (with baseline: true in SPEC" in line


def _optuna_twin(data, path) -> optuna.Study:
    """The study record the same runs would have left in Optuna: per trial, its knobs and per-seed values."""
    study = optuna.create_study(study_name=data.name, storage=f"sqlite:///{path}")
    runs = data.runs.sort_values(["trial_number", "seed"])
    space = {
        "replay.ratio": CategoricalDistribution(sorted(set(runs["y"]))),
        "x": CategoricalDistribution(sorted(set(runs["x"]))),
    }
    for number, g in runs.groupby("trial_number"):
        per_seed = [
            {
                "seed": int(r.seed),
                "compute_to_target": float(r.compute_to_target),
                "total_units": float(r.total_units),
                "censored": int(r.censored),
            }
            for r in g.itertuples()
        ]
        first = g.iloc[0]
        study.add_trial(
            create_trial(
                params={"replay.ratio": float(first["y"]), "x": float(first["x"])},
                distributions=space,
                value=1.0,
                user_attrs={attrs.PER_SEED: per_seed, attrs.BASELINE: bool(first["baseline"])},
            )
        )
    return study


@pytest.mark.parametrize(
    "grid",
    [
        {(1.0, 1.0): 1.0, (4.0, 2.0): 1.1, (8.0, 2.0): 1.2},  # the quickstart's: unresolved
        {(1.0, 1.0): 1.0, (4.0, 2.0): 0.6, (8.0, 2.0): 1.1},
    ],
)  # a resolved saving
def test_the_report_and_the_study_summary_give_the_same_bottom_line_for_the_same_runs(study, grid, tmp_path):
    data = study(grid)
    result, _, _ = analyze_data(data, whatif_mu=[], bootstrap=0)
    twin = _optuna_twin(data, tmp_path / "optuna.db")
    from_report = verdict(result, "s.yaml")
    from_study = compare.bottom_line(compare.comparison(twin), data.metric, data.target, "s.yaml")
    assert from_report == from_study
    assert from_report.kind == ("unresolved" if grid[(4.0, 2.0)] > 1 else "saving")


def test_the_reports_bottom_line_reads_a_saving_against_on_policy_at_its_best_lr_too():
    """The committed confirmation of skill_greedy: positive_bias saves 26% against on-policy at the default lr, and
    is unresolved against on-policy at its best (1e-4); the bottom line says both."""
    committed = json.loads((ROOT / "reports" / "archive" / "skill_greedy_fresh" / "analysis.json").read_text())
    # written before analysis.json had a schema_version; its shape is version 1's
    result = Analysis.from_json(committed | {"schema_version": SCHEMA_VERSION})
    line = bottom_line(result, "studies/skill_greedy_fresh.yaml")
    assert "0.74x [0.57, 0.97] the compute of on-policy" in line
    assert (
        "against on-policy at its best lr (0.0001), 0.95x [0.57, 1.58]: unresolved there, so the saving may be the learning rate's"
        in line
    )


def test_where_nothing_saves_the_bottom_line_also_reads_each_arm_at_its_best_lr():
    """Replay at the baseline's lr ties on-policy there, but on-policy at its own best lr is faster: the sentence
    carries the comparison the headline rests on (each arm at its best lr), resolved against replay."""
    from workbench import censoring
    from workbench.verdicts import Setting, bottom_line as verdict_line

    def ratio(e, lo, hi):
        return censoring.Comparison(e, lo, hi, 4)

    settings = [
        Setting("on-policy lr=2.5e-05 (trial 8)", ratio(28, 24.7, 31.6), on_policy=True),
        Setting("y=1 x=1 lr=5e-05 (trial 9)", ratio(19.7, 18.8, 20.8), on_policy=True),
        Setting(
            "y=2 x=4 lr=2.5e-05 (trial 4)",
            ratio(28.1, 24.4, 32.3),
            ratio(1.0, 0.967, 1.04),
            tuned=ratio(1.42, 1.21, 1.67),
            tuned_lr=5e-5,
        ),
        Setting("y=2 x=4 lr=5e-05 (trial 5)", ratio(32, 15.1, 67.8), ratio(1.14, 0.601, 2.18)),
    ]
    line = verdict_line(settings, "accuracy", 0.55, "s.yaml")
    assert line.kind == "unresolved"
    assert line.text.endswith(
        "; each at its own best lr, the closest, y=2 x=4 lr=2.5e-05 (trial 4), against on-policy at its best lr"
        " (5e-05): 1.42x [1.21, 1.67] (4 informative pairs), resolved, more compute."
    )
    # without an lr sweep there is nothing more to say
    plain = [s if s.tuned is None else Setting(s.label, s.compute, s.ratio) for s in settings]
    assert "best lr" not in verdict_line(plain, "accuracy", 0.55, "s.yaml").text
