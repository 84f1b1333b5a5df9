"""The report's first lines: what the study found, in one or two sentences, and the command to run next.

Read from the analysis result (`analysis.report.analyze`): every configuration of the study's selection against
on-policy on the study's own curve (`eval.metric`), paired by seed, with its 95% interval, handed as plain data to
`workbench.verdicts`, which holds the rule and the words the study's own closing lines use too.
"""

from __future__ import annotations


from analysis.result import Analysis, Configuration
from workbench import censoring, stats
from workbench.estimators import METRICS
from workbench.verdicts import BottomLine, Setting, against_other_lr, setting_label
from workbench.verdicts import bottom_line as verdict_line


def _tuned(result: Analysis, base: Configuration | None) -> dict[int, stats.Interval]:
    """Each trial's ratio to on-policy at on-policy's best lr, where that is not the baseline."""
    tuned_lr = result.tuned_lr or {}
    if not tuned_lr or base is None or tuned_lr["on_policy_best_trial"] == base.trial_number:
        return {}
    return {
        t["trial_number"]: censoring.from_row(t["against_tuned"], "ratio", "low", "high")
        for t in tuned_lr.get("tuned", [])
    }


def settings(result: Analysis) -> list[Setting]:
    """The report's configurations (not the re-runs on fresh seeds) as `workbench.verdicts` reads them: knobs in the
    outputs' words (the strategy and lr where they vary), on-policy at every learning rate it ran, each replication."""
    configs = result.selection
    lr_varies = result.lr_varies
    strategy_varies = len({(c.strategy, c.variant or "") for c in configs}) > 1
    base = next((c for c in configs if c.baseline), None)
    shape = lambda c: (c.x, c.y, c.strategy, c.variant or "")  # noqa: E731  on-policy's, at any lr
    replicated = {r.selection.trial_number: r.replicated.comparison.interval() for r in result.confirmations}
    tuned = _tuned(result, base)
    best_lr = (result.tuned_lr or {}).get("on_policy_best_lr")
    out = []
    for c in configs:
        knobs = {"replay.ratio": c.y, "x": c.x}
        if strategy_varies:
            knobs.update(c.strategy_shown() or {"strategy": "uniform"})
        if lr_varies and c.lr is not None:
            knobs["lr"] = c.lr
        on_policy = c.baseline or (base is not None and shape(c) == shape(base))
        paired = not on_policy and c.compared
        censored = c.censored_seeds + (base.censored_seeds if paired and base is not None else 0)
        other_lr = paired and lr_varies and base is not None and base.lr is not None and base.lr != c.lr
        out.append(
            Setting(
                setting_label(knobs, c.trial_number),
                c.compute_interval(),
                c.comparison.interval() if paired else None,
                on_policy,
                censored,
                against_other_lr(base.lr) if other_lr else "on-policy",
                replicated.get(c.trial_number),
                tuned.get(c.trial_number) if paired else None,
                best_lr if paired else None,
            )
        )
    return out


def verdict(result: Analysis, spec: str | None = None) -> BottomLine:
    """The report's bottom line as `workbench.verdicts` gives it: the sentence and the commands."""
    return verdict_line(
        settings(result),
        result.metric,
        result.target_accuracy,
        spec or "SPEC",
        result.n_censored_runs == result.n_runs,
    )


def runs_line(result: Analysis) -> str:
    """How many runs, how many reached the target, on which curve, at which mu: one sentence without contradictions."""
    n, censored = result.n_runs, result.n_censored_runs
    metric = result.metric
    reached = (
        f"every run reached the target {result.target_accuracy:g}"
        if censored == 0
        else f"{censored} of {n} runs never reached the target {result.target_accuracy:g} (censored: each is a bound"
        " where its pair's other run reached it, and left out where neither did)"
    )
    return (
        f"{n} runs in {result.n_configurations} configurations, read on `{metric}` ({METRICS[metric]}): {reached}. "
        f"Compute is counted in compute units (one unit: one on-policy step's generation and training) at the study's"
        f" reference mu = {result.reference_mu:.3g} (generating a rollout costs mu times training on it), and"
        f" compute-to-target is read by the `{result.estimator}` estimator."
    )


def bottom_line(result: Analysis, spec: str | None = None) -> str:
    """One paragraph of Markdown: the finding with its interval and verdict, then the commands to run next."""
    v = verdict(result, spec)
    steps = [f"`{step.command}` ({step.why})" for step in v.steps]
    if v.kind == "dearer":
        steps.append("the what-if section, for where replay would pay at a dearer generation")
    return f"**Bottom line.** {v.text[0].upper()}{v.text[1:]}" + (f" Next: {'; '.join(steps)}." if steps else "")
