"""What a study has done so far: trials by state, the trial table, the best configuration or Pareto front."""

from __future__ import annotations

import csv
import io
import optuna
from optuna.trial import TrialState

from workbench import tracking
from workbench.study import attrs, compare
from workbench.study.spec import fmt_params


def counts(study: optuna.Study) -> dict[str, int]:
    """Trials by state; skipped proposals (x < y, or a configuration already run) and the runs of a fitted
    optimum (`study verify`) and the re-runs on fresh seeds (`study confirm`), which are not sampler proposals and do
    not count towards n_trials, counted apart."""
    out = {s.name.lower(): 0 for s in TrialState}
    out["skipped"] = out["predicted"] = out["confirm"] = 0
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get(attrs.SKIPPED):
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
    return ", ".join(f"{n} {s}" for s, n in counts(study).items() if n) or "no trials yet"


def objective_names(study: optuna.Study) -> list[str]:
    spec = study.user_attrs.get(attrs.SPEC, {})
    obj = spec.get("objective", "compute_to_target")
    return [obj] if isinstance(obj, str) else list(obj)


def trial_table(study: optuna.Study) -> str:
    """The study's trials as CSV: number, state, knobs, values, MLflow run id, failure reason."""
    trials = study.get_trials(deepcopy=False)
    params = {t.number: t.params or t.user_attrs.get(attrs.KNOBS, {}) for t in trials}  # a verify arm keeps its knobs apart
    knobs = sorted({k for t in trials for k in params[t.number]})
    names = objective_names(study)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["number", "state", "arm", *knobs, *names, "predicted", "censored_seeds", "mlflow_run_id", "fail_reason"])
    for t in trials:
        values = t.values or [None] * len(names)
        writer.writerow(
            [t.number, t.state.name, t.user_attrs.get(attrs.ARM, "baseline" if t.user_attrs.get(attrs.BASELINE) else "sampler"),
             *[params[t.number].get(k) for k in knobs], *values, t.user_attrs.get(attrs.PREDICTED),
             t.user_attrs.get(attrs.CENSORED_SEEDS), t.user_attrs.get(attrs.RUN),
             t.user_attrs.get(attrs.FAIL_REASON) or t.user_attrs.get(attrs.SKIP_REASON)]
        )
    return buf.getvalue()


def summary_lines(study: optuna.Study) -> list[str]:
    """Trials by state, the reference mu and target; every configuration's compute-to-target with its interval and
    paired savings against on-policy (`workbench.study.compare`), or the Pareto front."""
    mu = study.user_attrs.get(attrs.REFERENCE_MU)
    target = study.user_attrs.get(attrs.TARGET)
    lines = [f"study {study.study_name}: {counts_line(study)}" + (f"; reference mu {mu:.3f}" if mu is not None else "")
             + (f"; target accuracy {target:g}" if target is not None else "")]
    names = objective_names(study)
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if not complete:
        return lines + ["no complete trial yet"]
    if len(names) > 1:
        lines.append("Pareto front (" + ", ".join(names) + "):")
        for t in sorted(study.best_trials, key=lambda t: t.values[0]):
            lines.append(f"  trial {t.number} {fmt_params(t.params)} -> " + ", ".join(f"{v:.4g}" for v in t.values))
        return lines
    if names[0] != "compute_to_target":
        ranked = [t for t in complete if not t.user_attrs.get(attrs.ARM)]
        if ranked:
            best = study.best_trial if not study.best_trial.user_attrs.get(attrs.ARM) else ranked[0]
            lines.append(f"best: trial {best.number} {fmt_params(best.params)} -> {names[0]} {best.value:.4g}")
        return lines
    rows = compare.comparison(study)
    lines += compare.comparison_lines(study)
    lead = compare.leader(rows)
    if lead is not None:
        spec = study.user_attrs.get(attrs.SPEC, {})
        lines.append(f"best replay configuration: {lead.arm.label} -> {lead.estimate.fmt()} ({spec.get('estimator', 'first')} estimator, "
                     f"{lead.estimate.n} seed(s)); against on-policy: " + (f"{lead.ratio.fmt()}, {lead.verdict}" if lead.ratio else "no baseline"))
        lines += compare.matched_lr_lines(rows, lead)
    for t in complete:
        if t.user_attrs.get(attrs.ARM) == "predicted":
            lines.append(f"fitted optimum run as trial {t.number} {fmt_params(t.user_attrs.get(attrs.KNOBS, {}))}: measured {t.value:.4g},"
                         f" predicted {t.user_attrs.get(attrs.PREDICTED, float('nan')):.4g}")
    return lines


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
