"""The study's last lines explain themselves: they name the curve the target is read on, define x and y, give the
compute unit once, and end with a bottom line that follows the project's rule (a comparison is a claim only with an
interval that excludes 1) and the next command. Read from real SQLite Optuna storages; printed by the real CLI."""

import optuna
import yaml
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from workbench import censoring, stats
from workbench.cli import main
from workbench.study import attrs, compare, summary
from workbench.study.spec import load_spec
from workbench.verdicts import ratio_text

SPACE = {"replay.ratio": CategoricalDistribution([1, 2]), "x": CategoricalDistribution([1, 4, 8])}
NOISY = {(1, 1): [30.0, 25.0, 33.0], (2, 4): [31.0, 30.0, 30.5], (2, 8): [24.0, 25.5, 33.0]}
"""On-policy against two replay settings whose paired ratios have intervals containing 1 (y=2 x=8: ~0.91)."""


def _spec_file(tmp_path, metric="demo_prob", task="arithmetic", **fields):
    spec = {
        "name": "explain",
        "base": {
            "batch_size": 32,
            "group_size": 4,
            "task": {"name": task, "digits": 2},
            "budget": {"compute_units": 60},
            "eval": {"every_units": 3, "metric": metric},
        },
        "search_space": {"replay.ratio": {"choices": [2]}, "x": {"choices": [4, 8]}},
        "seeds": 3,
        "target_accuracy": "auto",
        "n_trials": 3,
        "sampler": "grid",
        "storage": f"sqlite:///{tmp_path / 'optuna.db'}",
        "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
        **fields,
    }
    path = tmp_path / "explain.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _study(tmp_path, table, *, target=0.13, mu=0.9, seeds=(0, 1, 2), **spec_fields):
    """A study of the spec above whose trials are `table`'s configurations: (y, x) -> per-seed compute to target;
    the first is the on-policy baseline."""
    path = _spec_file(tmp_path, **spec_fields)
    spec = load_spec(path)
    study = optuna.create_study(study_name=spec.name, storage=spec.storage)
    study.set_user_attr(attrs.SPEC, spec.model_dump(mode="json"))
    study.set_user_attr(attrs.TARGET, target)
    study.set_user_attr(attrs.REFERENCE_MU, mu)
    for i, ((y, x), values) in enumerate(table.items()):
        _add(study, {"replay.ratio": y, "x": x}, values, seeds, baseline=i == 0 and spec.baseline)
    return study, path


def _add(study, knobs, values, on_seeds, baseline=False, censored=0, **extra):
    per_seed = [
        {
            "seed": s,
            "compute_to_target": c,
            "total_units": 60.0,
            "censored": censored,
            "final_accuracy": 0.75 + 0.01 * s,
        }
        for s, c in zip(on_seeds, values)
    ]
    params = {} if extra.get(attrs.ARM) else knobs
    study.add_trial(
        create_trial(
            params=params,
            distributions={k: SPACE[k] for k in params},
            value=sum(values) / len(values),
            user_attrs={attrs.PER_SEED: per_seed, attrs.BASELINE: baseline, attrs.KNOBS: knobs, **extra},
        )
    )


def _bottom(study, path):
    bottom, nxt = summary.closing_lines(study, str(path))
    assert bottom.startswith("Bottom line: ") and nxt.startswith("Next: ")
    return bottom, nxt


def test_the_lines_name_the_curve_define_x_and_y_and_give_the_unit_once(tmp_path):
    study, _ = _study(tmp_path, NOISY)
    lines = summary.summary_lines(study)
    text = "\n".join(lines)
    target = next(line for line in lines if line.startswith("target: "))
    assert target.startswith(
        "target: demo_prob 0.13 = the held-out demonstrations' probability (expected sampled accuracy;"
        " set at 70% of on-policy's gain)"
    )
    assert target.endswith("greedy accuracy at the runs' end: 0.76")  # the other curve, so 0.13 is not read as accuracy
    assert "y = replay.ratio, the mean number of steps a rollout is trained in (1: on-policy)" in text
    assert "x = N/R, the staleness horizon in steps (buffer capacity N over fresh rollouts per step R)" in text
    assert text.count("one compute unit = one on-policy update at batch size B = 32") == 1
    assert "generation weighted by mu 0.9" in text and "compute to target in units" in text
    assert "  trial 2 y=2 x=8: " in text and "replay.ratio=" not in text  # configurations in the words just defined


def test_greedy_accuracy_and_a_many_answer_task_are_named_for_what_they_are(tmp_path):
    study, _ = _study(tmp_path, NOISY, target=0.7, metric="accuracy")
    target = next(line for line in summary.summary_lines(study) if line.startswith("target: "))
    assert target == "target: accuracy 0.7 = held-out accuracy (greedy pass@1; set at 70% of on-policy's gain)"
    (tmp_path / "split").mkdir()
    split, _ = _study(tmp_path / "split", NOISY, task="split", target_accuracy=0.13)
    target = next(line for line in summary.summary_lines(split) if line.startswith("target: "))
    assert "(one reference answer's: a lower bound on sampled accuracy)" in target and "gain" not in target


def test_an_unresolved_comparison_is_never_called_a_win(tmp_path):
    study, path = _study(tmp_path, NOISY)
    rows = compare.comparison(study)
    closest = min((r for r in rows if r.ratio), key=lambda r: r.ratio.estimate)
    assert closest.ratio.estimate < 1 and stats.direction(closest.ratio) == 0  # a lower estimate, inside the noise
    lines = summary.summary_lines(study)
    bottom, nxt = _bottom(study, path)
    assert bottom == (
        f"Bottom line: no replay setting resolvably beats on-policy to reach the demo_prob target 0.13 (3 paired"
        f" seeds, 95% intervals); the closest, y=2 x=8 (trial 2), {ratio_text(closest.ratio)}: unresolved, its"
        " interval contains 1."
    )
    assert not any(w in line for line in lines + [bottom] for w in ("saved", "reaches the target", "resolved: less"))
    assert f"workbench study race {path} (more seeds where unresolved)" in nxt and f"workbench report {path}" in nxt
    assert "confirm" not in nxt  # nothing resolved to replicate yet


def test_a_resolved_saving_is_claimed_with_its_interval_until_replicated(tmp_path):
    study, path = _study(tmp_path, {(1, 1): [30.0, 25.0, 33.0], (2, 8): [21.0, 17.6, 23.4]})
    iv = _pairs({0: 21.0, 1: 17.6, 2: 23.4}, {0: 30.0, 1: 25.0, 2: 33.0})
    assert stats.direction(iv) < 0
    bottom, nxt = _bottom(study, path)
    assert bottom == (
        f"Bottom line: the best replay setting, y=2 x=8 (trial 1), reaches the demo_prob target 0.13 with"
        f" {ratio_text(iv)} the compute of on-policy (3 paired seeds, 95% interval: resolved, 30% saved); a"
        " selection estimate until replicated on fresh seeds."
    )
    assert f"workbench study confirm {path} (fresh seeds)" in nxt and "race" not in nxt

    # `study confirm`: on-policy and the setting again on seeds 3-5, where the saving holds
    _add(
        study,
        {"replay.ratio": 1, "x": 1},
        [28.0, 31.0, 26.0],
        (3, 4, 5),
        baseline=True,
        **{attrs.ARM: "confirm", attrs.CONFIRMS: 0},
    )
    _add(study, {"replay.ratio": 2, "x": 8}, [20.0, 22.0, 18.0], (3, 4, 5), **{attrs.ARM: "confirm", attrs.CONFIRMS: 1})
    rep = _pairs({3: 20.0, 4: 22.0, 5: 18.0}, {3: 28.0, 4: 31.0, 5: 26.0})
    bottom, nxt = _bottom(study, path)
    assert bottom.endswith(
        f"(3 paired seeds, 95% interval: resolved, 30% saved); on fresh seeds {ratio_text(rep)}: the saving holds."
    )
    assert "confirm" not in nxt and f"workbench study verify {path} (runs the fitted optimum)" in nxt


def test_resolvably_more_compute_everywhere_is_said_so(tmp_path):
    study, path = _study(tmp_path, {(1, 1): [30.0, 25.0, 33.0], (2, 4): [39.0, 33.0, 42.0]}, n_trials=2)
    bottom, nxt = _bottom(study, path)
    assert bottom.startswith(
        "Bottom line: every replay setting tried needs resolvably more compute than on-policy to reach"
        " the demo_prob target 0.13 (3 paired seeds, 95% interval); the closest, y=2 x=4 (trial 1), 1.30x ["
    )
    assert nxt == (
        f"Next: workbench study run {path} (once its search_space holds other knobs); workbench report {path}"
        " (figures and the fitted model)"
    )


def test_a_saving_from_the_learning_rate_alone_is_not_the_bottom_line(tmp_path):
    # on-policy 100 at lr 1e-5 (the baseline) and 50 at 1e-4; replay 60 at 1e-4: 40% "saved" against the baseline's lr
    space = {"replay.ratio": {"choices": [1, 2]}, "x": {"choices": [1, 2]}, "lr": {"choices": [1e-5, 1e-4]}}
    path = _spec_file(tmp_path, search_space=space)
    spec = load_spec(path)
    study = optuna.create_study(study_name=spec.name, storage=spec.storage)
    study.set_user_attr(attrs.SPEC, spec.model_dump(mode="json"))
    dist = {k: CategoricalDistribution(v["choices"]) for k, v in space.items()}
    for i, ((y, x, lr), c) in enumerate({(1, 1, 1e-5): 100.0, (1, 1, 1e-4): 50.0, (2, 2, 1e-4): 60.0}.items()):
        per_seed = [
            {"seed": s, "compute_to_target": c * (1 + 0.02 * s), "total_units": 150.0, "censored": 0} for s in range(3)
        ]
        study.add_trial(
            create_trial(
                params={"replay.ratio": y, "x": x, "lr": lr},
                distributions=dist,
                value=c,
                user_attrs={attrs.PER_SEED: per_seed, attrs.BASELINE: i == 0},
            )
        )
    text = "\n".join(summary.summary_lines(study))
    assert "resolved: less compute (40% saved)" in text  # against the baseline's lr, in the table
    bottom, _ = _bottom(study, path)
    assert bottom.startswith("Bottom line: every replay setting tried needs resolvably more compute than on-policy")
    assert "1.20x [1.20, 1.20] (3 informative pairs) against on-policy at the same lr (0.0001)" in bottom
    assert "saved" not in bottom and "reaches the target" not in bottom


def test_runs_that_never_reached_the_target_measure_nothing(tmp_path):
    study, path = _study(tmp_path, {}, n_trials=2)
    _add(study, {"replay.ratio": 1, "x": 1}, [70.0, 66.0, 75.0], (0, 1, 2), baseline=True, censored=1)
    _add(study, {"replay.ratio": 2, "x": 8}, [61.0, 64.0, 62.0], (0, 1, 2), censored=1)
    bottom, nxt = _bottom(study, path)
    assert bottom == (
        "Bottom line: no run reached the demo_prob target 0.13 within its budget, so nothing is measured:"
        " every compute number is a run's total, a lower bound."
    )
    assert nxt == f"Next: workbench report {path} --target T (the same runs read at a lower target T)"


def test_no_complete_trial_is_said_plainly_with_the_commonest_failure(tmp_path):
    study, path = _study(tmp_path, {})
    reason = "ConfigError: task.n_eval: must be < the 300 examples"
    for _ in range(3):
        study.add_trial(create_trial(state=TrialState.FAIL, user_attrs={attrs.FAIL_REASON: reason}))
    assert summary.summary_lines(study) == ["study explain: 3 failed"]
    bottom, nxt = _bottom(study, path)
    assert bottom == f"Bottom line: no trial completed, so there is nothing to compare; 3 of 3 failures: {reason}."
    assert (
        nxt.startswith(f"Next: workbench study status {path} --table")
        and f"workbench study run {path} (it resumes" in nxt
    )


def test_what_is_there_to_compare_without_a_replay_arm_or_without_a_baseline(tmp_path):
    study, path = _study(tmp_path, {(1, 1): [30.0, 25.0, 33.0]})
    bottom, nxt = _bottom(study, path)
    assert (
        bottom.startswith("Bottom line: only on-policy has completed (")
        and "no replay setting to compare yet" in bottom
    )
    assert f"workbench study run {path} (resumes: 2 more trial(s))" in nxt
    (tmp_path / "b").mkdir()
    study, path = _study(tmp_path / "b", {(2, 4): [30.0, 25.0, 33.0], (2, 8): [24.0, 25.5, 33.0]}, baseline=False)
    bottom, _ = _bottom(study, path)
    assert bottom.startswith(
        "Bottom line: no on-policy run completed, so no saving can be claimed; the lowest compute to target: y=2 x="
    )


def test_objectives_without_intervals_are_leads_not_claims(tmp_path):
    path = _spec_file(tmp_path, objective="best_accuracy")
    spec = load_spec(path)
    study = optuna.create_study(study_name=spec.name, storage=spec.storage, direction="maximize")
    study.set_user_attr(attrs.SPEC, spec.model_dump(mode="json"))
    for y, x, acc in ((1, 1, 0.70), (2, 8, 0.74)):
        study.add_trial(create_trial(params={"replay.ratio": y, "x": x}, distributions=SPACE, value=acc))
    bottom, nxt = _bottom(study, path)
    assert (
        bottom.startswith("Bottom line: the best by best_accuracy: y=2 x=8 (trial 1), 0.74") and "not a claim" in bottom
    )
    assert "race" not in nxt and "confirm" not in nxt

    (tmp_path / "m").mkdir()
    path = _spec_file(tmp_path / "m", objective=["best_accuracy", "compute_units"], sampler="nsga2")
    spec = load_spec(path)
    study = optuna.create_study(study_name=spec.name, storage=spec.storage, directions=["maximize", "minimize"])
    study.set_user_attr(attrs.SPEC, spec.model_dump(mode="json"))
    for y, x, acc, units in ((1, 1, 0.70, 40.0), (2, 8, 0.74, 50.0)):
        study.add_trial(create_trial(params={"replay.ratio": y, "x": x}, distributions=SPACE, values=[acc, units]))
    assert "Pareto front (best_accuracy, compute_units):" in summary.summary_lines(study)
    bottom, _ = _bottom(study, path)
    assert bottom == (
        "Bottom line: 2 configuration(s) on the Pareto front of best_accuracy and compute_units, values over"
        " seeds without intervals: a shortlist, not a claim."
    )


def test_the_cli_prints_a_dozen_lines_ending_with_the_bottom_line_and_the_next_command(tmp_path, capsys):
    study, path = _study(tmp_path, NOISY)
    assert main(["study", "status", str(path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) <= 10  # `study run` adds the two store lines
    assert out[0] == "study explain: 3 complete"
    assert out[-2].startswith("Bottom line: no replay setting resolvably beats on-policy")
    assert out[-1].startswith("Next: workbench study race")

    assert main(["study", "compare", str(path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert (
        out[0].startswith("target: demo_prob 0.13 = ")
        and out[-2].startswith("Bottom line: ")
        and out[-1].startswith("Next: ")
    )
    assert main(["study", "compare", str(path), "--noise"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("target: demo_prob") and out[-2].startswith("Bottom line: ")


def test_an_interrupted_study_is_resumed_not_debugged(tmp_path):
    study, path = _study(tmp_path, {})
    study.add_trial(
        create_trial(state=TrialState.FAIL, user_attrs={attrs.FAIL_REASON: "interrupted", attrs.INTERRUPTED: True})
    )
    bottom, nxt = _bottom(study, path)
    assert bottom == "Bottom line: no trial completed, so there is nothing to compare: the study was interrupted."
    assert nxt == f"Next: workbench study run {path} (it resumes; nothing recorded is lost)"


def test_race_and_confirm_end_with_the_same_bottom_line_and_next_command(tmp_path, capsys):
    # every configuration already has its 3 seeds (the race has nothing to run) and its re-run on seeds 3-5 (confirm
    # finds them already there): the real commands, with nothing to train
    study, path = _study(tmp_path, {(1, 1): [30.0, 25.0, 33.0], (2, 8): [21.0, 17.6, 23.4]}, n_trials=2)
    assert main(["study", "race", str(path), "--max-seeds", "3"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("race over") and out[-2:] == summary.closing_lines(study, str(path))
    assert (
        out[-2].startswith("Bottom line: the best replay setting, y=2 x=8 (trial 1), reaches") and "confirm" in out[-1]
    )

    fresh = (3, 4, 5)
    _add(
        study,
        {"replay.ratio": 1, "x": 1},
        [28.0, 31.0, 26.0],
        fresh,
        baseline=True,
        **{attrs.ARM: "confirm", attrs.CONFIRMS: 0, attrs.SEEDS: list(fresh)},
    )
    _add(
        study,
        {"replay.ratio": 2, "x": 8},
        [20.0, 22.0, 18.0],
        fresh,
        **{attrs.ARM: "confirm", attrs.CONFIRMS: 1, attrs.SEEDS: list(fresh)},
    )
    assert main(["study", "confirm", str(path), "--top", "1", "--seeds", "3", "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert (
        len(optuna.load_study(study_name="explain", storage=f"sqlite:///{tmp_path / 'optuna.db'}").trials) == 4
    )  # nothing trained
    assert out[-3:-1] == summary.closing_lines(study, str(path)) and out[-1].startswith("[")  # the JSON stays last
    assert out[-3].endswith(": the saving holds.") and out[-2].startswith(f"Next: workbench study verify {path}")


def _pairs(arm: dict[int, float], other: dict[int, float]):
    """The comparison the summary prints for these per-seed values (none censored)."""
    return censoring.paired_ratio(censoring.outcomes(arm), censoring.outcomes(other))
