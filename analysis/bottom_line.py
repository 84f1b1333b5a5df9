"""The report's first lines: what the study found, in one or two sentences, and the command to run next.

Read from the analysis result (`analysis.report.analyze`): the best replay configuration against on-policy on the
study's own curve (`eval.metric`), paired by seed, with its 95% interval and whether that interval resolves the
difference; then what would settle it (`study race` for more seeds, `study confirm` for fresh ones).
"""

from __future__ import annotations

import math

from workbench import stats
from workbench.estimators import METRICS


def _knobs(c: dict) -> str:
    strategy = f"{c['strategy']} " if c.get("strategy", "uniform") != "uniform" else ""
    lr = f", lr {c['lr']:.3g}" if "lr" in c and math.isfinite(c["lr"]) and c.get("lr_varies") else ""
    return f"{strategy}replay at x {c['x']:g}, y {c['y']:g}{lr} (trial {c['trial_number']})"


def _direction(c: dict) -> int:
    """`workbench.stats.direction` of a configuration's paired ratio: -1 resolved less, +1 resolved more, 0 not."""
    return stats.direction(stats.Interval(c["ratio_to_baseline"], c["ratio_ci_low"], c["ratio_ci_high"], c["seeds"]))


def _interval(c: dict) -> str:
    if not math.isfinite(c.get("ratio_ci_low", math.nan)):
        return f"{c['ratio_to_baseline']:.2f}x on-policy's compute (one seed: no interval)"
    return (f"{c['ratio_to_baseline']:.2f}x on-policy's compute (95% CI {c['ratio_ci_low']:.2f} to {c['ratio_ci_high']:.2f}, "
            f"{c['seeds']} paired seeds)")


def runs_line(result: dict) -> str:
    """How many runs, how many reached the target, on which curve, at which mu: one sentence without contradictions."""
    n, censored = result["n_runs"], result["n_censored_runs"]
    metric = result.get("metric", "accuracy")
    reached = (f"every run reached the target {result['target_accuracy']:g}" if censored == 0 else
               f"{censored} of {n} runs never reached the target {result['target_accuracy']:g} (censored: their compute"
               " enters as a lower bound)")
    return (f"{n} runs in {result['n_configurations']} configurations, read on `{metric}` ({METRICS[metric]}): {reached}. "
            f"Compute is counted in compute units (one unit: one on-policy step's generation and training) at the study's"
            f" reference mu = {result['reference_mu']:.3g} (generating a rollout costs mu times training on it), and"
            f" compute-to-target is read by the `{result.get('estimator', 'first')}` estimator.")


def bottom_line(result: dict, spec: str | None = None) -> str:
    """One or two sentences of Markdown: the finding with its interval and verdict, then the next command."""
    spec = spec or "SPEC"
    metric = result.get("metric", "accuracy")
    curve = f"`{metric}` ({METRICS[metric]})"
    on = f"on {curve} at target {result['target_accuracy']:g}"
    lr_varies = len({c.get("lr") for c in result["configurations"]}) > 1
    selection = [c | {"lr_varies": lr_varies} for c in result["configurations"] if c.get("arm") != "confirm"]
    compared = [c for c in selection if not c["baseline"] and math.isfinite(c.get("ratio_to_baseline", math.nan))]
    if result["n_censored_runs"] == result["n_runs"]:
        return (f"**Bottom line.** No run reached the target {result['target_accuracy']:g} on {curve} within its budget, so"
                " nothing is measured: every compute number below is a run's total, a lower bound. Next: `workbench report"
                f" {spec} --target T` reads the same runs at a lower target T.")
    if not compared:
        best = min(selection, key=lambda c: c["compute_to_target"])
        return (f"**Bottom line.** No replay configuration was run beside an on-policy baseline on the same seeds, so no"
                f" saving can be stated; the cheapest {on} is {_knobs(best)}, {best['compute_to_target']:.3g} compute units."
                f" Next: add the baseline (`baseline: true` in {spec}) and `workbench study run {spec}`.")
    # A resolved saving first (the cheapest of those), else the configuration with the smallest ratio
    saving = [c for c in compared if _direction(c) < 0]
    best = min(saving or compared, key=lambda c: c["ratio_to_baseline"])
    tried = (f"{len(saving)} of the {len(compared)} configurations tried save{'s' if len(saving) == 1 else ''} resolvably;"
             " this is the best of them, a selection estimate" if len(compared) > 1 else "a selection estimate")
    confirmed = next((c["replicated"] for c in result.get("confirmations", [])
                      if c["selection"]["trial_number"] == best["trial_number"]), None)
    if saving:
        found = (f"The best replay configuration, {_knobs(best)}, needs {_interval(best)} {on}: a resolved saving of"
                 f" {1 - best['ratio_to_baseline']:.0%} ({tried}).")
        if confirmed is None:
            nxt = f"Next: `workbench study confirm {spec}` re-runs it on fresh seeds, which removes the selection's bias."
        else:
            side = {-1: "the saving holds", 0: "unresolved there", 1: "reversed there"}[_direction(confirmed)]
            nxt = (f"On fresh seeds it needs {_interval(confirmed)}: {side}. Next: `workbench study verify {spec}` runs the"
                   " fitted optimum.")
    elif all(_direction(c) > 0 for c in compared):
        found = (f"Every replay configuration tried needs resolvably more compute than on-policy {on}; the closest,"
                 f" {_knobs(best)}, needs {_interval(best)}.")
        nxt = (f"Next: try other knobs (`search_space` in {spec}, then `workbench study run {spec}`), or read the what-if"
               " section for where replay would pay at a dearer generation.")
    else:
        found = (f"No replay configuration is resolved from on-policy {on}: the closest, {_knobs(best)}, needs"
                 f" {_interval(best)}, an interval that contains 1, so this study cannot tell it from on-policy.")
        nxt = f"Next: `workbench study race {spec}` adds seeds where the leader is not yet resolved."
    return f"**Bottom line.** {found} {nxt}"
