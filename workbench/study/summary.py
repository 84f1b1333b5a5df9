"""What a study has done so far: trials by state, the trial table, the best configuration or Pareto front, and
the lines that make them readable to a newcomer: the curve the target is read on, what x and y mean, the compute
unit, a bottom line that follows the project's rule on intervals, and the command to run next."""

from __future__ import annotations

import csv
import io
import statistics
from collections import Counter
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from workbench import tracking
from workbench.config import ConfigError, TrialConfig, build_config
from workbench.estimators import METRICS
from workbench.study import attrs, compare, lr_sweep
from workbench.verdicts import knob_label


PAST_DECLINE = "not trained past a decline"


def counts(study: optuna.Study) -> dict[str, int]:
    """Trials by state; skipped proposals (x < y, a configuration already run, a trial deferred), the lr-sweep points
    not trained past a decline, the runs of a fitted optimum (`study verify`) and the re-runs on fresh seeds (`study
    confirm`), which are not sampler proposals and do not count towards n_trials, counted apart."""
    out = {s.name.lower(): 0 for s in TrialState}
    out["skipped"] = out["predicted"] = out["confirm"] = out[PAST_DECLINE] = 0
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get(attrs.LR_PAST_DECLINE):
            out[PAST_DECLINE] += 1  # an lr-sweep point its arm's decline ruled out (`lr_sweep.held`)
        elif t.user_attrs.get(attrs.SKIPPED):
            out["skipped"] += 1
        elif t.user_attrs.get(attrs.ARM):
            out[t.user_attrs[attrs.ARM]] = out.get(t.user_attrs[attrs.ARM], 0) + 1
        else:
            out[t.state.name.lower()] += 1
    return out


def done(study: optuna.Study) -> int:
    """Trials that count towards the study's n_trials: sampler or queued configurations completed or pruned."""
    c = counts(study)
    return c["complete"] + c["pruned"]


def counts_line(study: optuna.Study) -> str:
    return ", ".join(f"{n} {'failed' if s == 'fail' else s}" for s, n in counts(study).items() if n) or "no trials yet"


def objective_names(study: optuna.Study) -> list[str]:
    spec = study.user_attrs.get(attrs.SPEC, {})
    obj = spec.get("objective", "compute_to_target")
    return [obj] if isinstance(obj, str) else list(obj)


def trial_table(study: optuna.Study) -> str:
    """The study's trials as CSV: number, state, knobs, values, MLflow run id, failure reason."""
    trials = study.get_trials(deepcopy=False)
    params = {
        t.number: t.params or t.user_attrs.get(attrs.KNOBS, {}) for t in trials
    }  # a verify arm keeps its knobs apart
    knobs = sorted({k for t in trials for k in params[t.number]})
    names = objective_names(study)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(
        ["number", "state", "arm", *knobs, *names, "predicted", "censored_seeds", "mlflow_run_id", "fail_reason"]
    )
    for t in trials:
        values = t.values or [None] * len(names)
        writer.writerow(
            [
                t.number,
                t.state.name,
                t.user_attrs.get(attrs.ARM, "baseline" if t.user_attrs.get(attrs.BASELINE) else "sampler"),
                *[params[t.number].get(k) for k in knobs],
                *values,
                t.user_attrs.get(attrs.PREDICTED),
                t.user_attrs.get(attrs.CENSORED_SEEDS),
                t.user_attrs.get(attrs.RUN),
                t.user_attrs.get(attrs.FAIL_REASON) or t.user_attrs.get(attrs.SKIP_REASON),
            ]
        )
    return buf.getvalue()


@dataclass(frozen=True)
class Reading:
    """What the study's numbers are read on, from the spec it was created with."""

    metric: str
    """`eval.metric`: the held-out curve compute-to-target reads."""
    task: str
    batch_size: int | None
    """B, when every trial shares it (None when it is a knob)."""


def reading(study: optuna.Study) -> Reading:
    spec = study.user_attrs.get(attrs.SPEC, {})
    try:
        cfg = build_config(spec.get("base"))
    except ConfigError:  # a study created by an older spec: the defaults
        cfg = TrialConfig()
    return Reading(
        cfg.eval.metric, cfg.task.name, None if "batch_size" in spec.get("search_space", {}) else cfg.batch_size
    )


def curve_words(r: Reading) -> tuple[str, str]:
    """What the curve `eval.metric` is, and a note on it, in the words of docs/measurement.md."""
    if r.metric == "demo_prob":
        return "the held-out demonstrations' probability", (
            "expected sampled accuracy"
            if r.task == "arithmetic"
            else "one reference answer's: a lower bound on sampled accuracy"
        )
    label, _, note = METRICS[r.metric].partition(" (")
    return label, note.rstrip(")")


def reading_lines(study: optuna.Study) -> list[str]:
    """The curve the target is read on (and the greedy accuracy beside it), x and y, and the compute unit."""
    r = reading(study)
    spec = study.user_attrs.get(attrs.SPEC, {})
    names = objective_names(study)
    target = study.user_attrs.get(attrs.TARGET)
    arms = compare.arms(study)
    lines = []
    if target is not None:
        label, note = curve_words(r)
        how = (
            f"set at {spec.get('target_gain_fraction', 0.7):.0%} of on-policy's gain"
            if spec.get("target_accuracy") == "auto"
            else ""
        )
        line = f"target: {r.metric} {target:g} = {label} ({'; '.join(w for w in (note, how) if w)})"
        final = [
            statistics.fmean(v["final_accuracy"] for v in a.per_seed if "final_accuracy" in v)
            for a in arms
            if any("final_accuracy" in v for v in a.per_seed)
        ]
        if r.metric != "accuracy" and final:
            lo, hi = min(final), max(final)
            line += f"; greedy accuracy at the runs' end: {lo:.2f}" + (
                f"-{hi:.2f}" if f"{hi:.2f}" != f"{lo:.2f}" else ""
            )
        lines.append(line)
    knobs = {k for a in arms for k in a.knobs} | set(spec.get("search_space", {}))
    if knobs & {"replay.ratio", "x"}:
        lines.append(
            "y = replay.ratio, the mean number of steps a rollout is trained in (1: on-policy); x = N/R, the"
            " staleness horizon in steps (buffer capacity N over fresh rollouts per step R)"
        )
    if {"compute_to_target", "compute_units"} & set(names):
        mu = study.user_attrs.get(attrs.REFERENCE_MU)
        b = f"B = {r.batch_size}" if r.batch_size else "the trial's B"
        lines.append(
            f"units: one compute unit = one on-policy update at batch size {b} (B rollouts generated, trained on once)"
            + (f", generation weighted by mu {mu:.3g} (its cost over training's, per rollout)" if mu else "")
        )
    return lines


def summary_lines(study: optuna.Study) -> list[str]:
    """Trials by state, what the numbers are read on (`reading_lines`); every configuration's compute-to-target with
    its interval and paired ratio to on-policy (`workbench.study.compare`), or the Pareto front, or the best trial.
    The bottom line and the next command are `closing_lines`."""
    lines = [f"study {study.study_name}: {counts_line(study)}"]
    names = objective_names(study)
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if not complete:
        return lines
    lines += reading_lines(study)
    if len(names) > 1:
        lines.append("Pareto front (" + ", ".join(names) + "):")
        for t in sorted(study.best_trials, key=lambda t: t.values[0]):
            lines.append(f"  trial {t.number} {knob_label(t.params)} -> " + ", ".join(f"{v:.4g}" for v in t.values))
        return lines
    if names[0] != "compute_to_target":
        return lines
    rows = compare.comparison(study)
    lines += compare.comparison_lines(study)
    lead = compare.leader(rows)
    matched = compare.matched_lr_lines(rows, lead) if lead is not None else []
    if matched:
        lines += [f"the best replay setting, {lead.arm.label}, against on-policy at a matched learning rate:", *matched]
    for t in complete:
        if t.user_attrs.get(attrs.ARM) == "predicted":
            lines.append(
                f"fitted optimum run as trial {t.number} {knob_label(t.user_attrs.get(attrs.KNOBS, {}))}: measured {t.value:.4g},"
                f" predicted {t.user_attrs.get(attrs.PREDICTED, float('nan')):.4g} units"
            )
    return lines


def _best_single(study: optuna.Study, name: str) -> optuna.trial.FrozenTrial | None:
    ranked = [
        t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if not t.user_attrs.get(attrs.ARM)
    ]
    if not ranked:
        return None
    best = study.best_trial
    return best if not best.user_attrs.get(attrs.ARM) else ranked[0]


def _no_result(study: optuna.Study, ref: str) -> list[str]:
    """Why nothing can be compared (what happened to the trials, the commonest failure) and what to do."""
    trials = study.get_trials(deepcopy=False)
    pending = sum(t.state in (TrialState.RUNNING, TrialState.WAITING) for t in trials)
    failed = [t for t in trials if t.state == TrialState.FAIL]
    reasons = Counter(t.user_attrs.get(attrs.FAIL_REASON) for t in failed if not t.user_attrs.get(attrs.INTERRUPTED))
    reasons.pop(None, None)
    text = "no trial completed, so there is nothing to compare" + ("" if trials else " (no trial has started)")
    resume = f"workbench study run {ref} (it resumes; nothing recorded is lost)"
    if reasons:
        reason, n = reasons.most_common(1)[0]
        return [
            f"{text}; {n} of {sum(reasons.values())} failures: {reason}.",
            f"workbench study status {ref} --table (each trial's failure), fix the cause, then {resume}",
        ]
    if failed:
        return [f"{text}: the study was interrupted.", resume]
    if any(t.state == TrialState.RUNNING for t in trials):
        return [
            f"{text} yet ({pending} running or waiting).",
            f"workbench study status {ref} again when a trial has finished",
        ]
    return [f"{text}.", resume]


def closing_lines(study: optuna.Study, spec_ref: str | None = None) -> list[str]:
    """Two lines: `Bottom line: ...` (one sentence, a claim only where an interval excludes 1) and `Next: ...`
    (the commands that would settle or extend it). `spec_ref`: the spec file the commands take."""
    ref = spec_ref or "SPEC"
    report = f"workbench report {spec_ref}" if spec_ref else f"workbench report --study {study.study_name}"
    report_step = f"{report} (figures and the fitted model)"
    trials = study.get_trials(deepcopy=False)
    names = objective_names(study)
    if not any(t.state == TrialState.COMPLETE for t in trials):
        bottom, nxt = _no_result(study, ref)
        return [f"Bottom line: {bottom}", f"Next: {nxt}"]
    steps = []
    if len(names) > 1:
        front = len(study.best_trials)
        bottom = (
            f"{front} configuration(s) on the Pareto front of {' and '.join(names)}, values over seeds without"
            " intervals: a shortlist, not a claim."
        )
    elif names[0] != "compute_to_target":
        best = _best_single(study, names[0])
        bottom = (
            "no sampler configuration completed yet."
            if best is None
            else f"the best by {names[0]}: {knob_label(best.params)} (trial {best.number}), {best.value:.4g} over seeds,"
            " without an interval: a lead, not a claim (the compute_to_target objective gives intervals)."
        )
    else:
        verdict = compare.bottom_line(
            compare.comparison(study), reading(study).metric, study.user_attrs.get(attrs.TARGET), ref, report
        )
        bottom = verdict.text
        steps = [str(step) for step in verdict.steps]
        if any(step.command.startswith("workbench report") for step in verdict.steps):
            report_step = None  # the verdict's own (e.g. a lower target)
    spec = study.user_attrs.get(attrs.SPEC, {})
    left = lr_sweep.to_run(study, int(spec.get("n_trials", 0))) - done(study)
    if left > 0 and not any(t.state == TrialState.RUNNING for t in trials):
        steps.insert(0, f"workbench study run {ref} (resumes: {left} more trial(s))")
    return [f"Bottom line: {bottom}", "Next: " + "; ".join(steps + ([report_step] if report_step else []))]


def log_to_parent_run(tracking_uri: str, study: optuna.Study) -> str | None:
    """Log the trial table, the counts and the reference mu to the study's MLflow parent run; returns the CSV."""
    parent = study.user_attrs.get(attrs.PARENT_RUN)
    if not parent:
        return None
    table = trial_table(study)
    client = tracking.client(tracking_uri)
    client.log_text(parent, table, tracking.TRIALS_ARTIFACT)
    for state, n in counts(study).items():
        client.log_metric(parent, f"{tracking.STUDY_METRIC}trials_{state}", n)
    mu = study.user_attrs.get(attrs.REFERENCE_MU)
    if mu is not None:
        client.set_tag(parent, tracking.REFERENCE_MU, repr(float(mu)))
    return table
