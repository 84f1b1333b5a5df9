"""Comparisons with their uncertainty, read from a study's Optuna record (each trial's per-seed values).

Every configuration is an *arm*: the on-policy baseline, the sampler's trials, a fitted optimum (`predicted`), and
the re-runs of `study confirm` on fresh seeds (`confirm`, with their own baseline). An arm's compute-to-target is the
geometric mean over its seeds with a 95% interval (`workbench.stats`); its savings is the paired ratio against the
baseline arm that ran the same seeds; a difference is *resolved* only when that interval excludes 1.

A seed that never reached the target is censored, and `workbench.censoring` is the one rule for it: a pair where
neither arm reached the target is left out (it says nothing about the ratio), a pair where one did is a bound, and
every ratio states its informative and censored pair counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from workbench import censoring, stats
from workbench.censoring import Outcome
from workbench.estimators import ESTIMATORS
from workbench.study import attrs
from workbench.verdicts import BottomLine, Setting, against_other_lr, against_same_lr, knob_label, setting_label
from workbench.verdicts import bottom_line as verdict_line

RACE = "race"


@dataclass
class Arm:
    number: int
    kind: str
    """`baseline`, `sampler` (a sampler proposal or a queued point), `predicted`, `confirm` (race seeds are merged
    into the trial they extend)."""
    knobs: dict[str, Any]
    per_seed: list[dict[str, float]]
    baseline: bool
    confirms: int | None = None
    """For a `confirm` arm: the trial whose configuration it re-ran."""
    label: str = field(default="")

    def values(self, estimator: str | None = None) -> dict[int, float]:
        """Per seed: compute-to-target by `estimator` (the study's when None); censored seeds at their total."""
        key = f"compute_to_target_{estimator}" if estimator else "compute_to_target"
        flag = f"censored_{estimator}" if estimator else "censored"
        out = {}
        for v in self.per_seed:
            if key in v:
                out[int(v["seed"])] = v["total_units"] if v.get(flag) else v[key]
        return out

    def outcomes(self, estimator: str | None = None) -> dict[int, Outcome]:
        """Per seed: compute-to-target by `estimator` (the study's when None), a censored seed as what it spent in all
        and flagged so (`workbench.censoring`)."""
        return censoring.outcomes(self.values(estimator), self.censored_seeds(estimator))

    def level(self, estimator: str | None = None) -> stats.Interval:
        """Compute-to-target over its seeds with its interval, censored seeds as censored."""
        return censoring.level_interval(list(self.outcomes(estimator).values()))

    def ratio(self, other: "Arm", estimator: str | None = None) -> censoring.Comparison:
        """This arm's compute-to-target over `other`'s, paired by seed, censoring as censoring."""
        return censoring.paired_ratio(self.outcomes(estimator), other.outcomes(estimator))

    def censored(self, estimator: str | None = None) -> int:
        return len(self.censored_seeds(estimator))

    def censored_seeds(self, estimator: str | None = None) -> set[int]:
        """The seeds that never reached the target (their value is the run's total compute)."""
        flag = f"censored_{estimator}" if estimator else "censored"
        return {int(v["seed"]) for v in self.per_seed if v.get(flag)}

    @property
    def seeds(self) -> list[int]:
        return sorted(int(v["seed"]) for v in self.per_seed)


def arms(study: optuna.Study, trials: list[optuna.trial.FrozenTrial] | None = None) -> list[Arm]:
    """Every complete trial that recorded per-seed values, in trial order; the extra seeds a race gave a
    configuration (`study race`, trials with `arm = race`) are merged into the trial they extend. `trials`: the
    study's trials as already read (one read shared by several questions), else read now."""
    out = []
    if trials is None:
        trials = study.get_trials(deepcopy=False)
    trials = [t for t in trials if t.state == TrialState.COMPLETE]
    extra: dict[int, list[dict]] = {}
    for t in trials:
        if t.user_attrs.get(attrs.ARM) == RACE and t.user_attrs.get(attrs.PER_SEED):
            extra.setdefault(t.user_attrs[attrs.EXTENDS], []).extend(t.user_attrs[attrs.PER_SEED])
    for t in trials:
        per_seed = t.user_attrs.get(attrs.PER_SEED)
        if not per_seed or t.user_attrs.get(attrs.ARM) == RACE:
            continue
        per_seed = per_seed + extra.get(t.number, [])
        baseline = bool(t.user_attrs.get(attrs.BASELINE))
        kind = t.user_attrs.get(attrs.ARM) or ("baseline" if baseline else "sampler")
        knobs = t.params or t.user_attrs.get(attrs.KNOBS, {})
        arm = Arm(t.number, kind, knobs, per_seed, baseline, t.user_attrs.get(attrs.CONFIRMS))
        what = "on-policy" if baseline else knob_label(knobs)
        arm.label = f"trial {t.number} {what}" + (
            f" (confirms trial {arm.confirms})" if arm.confirms is not None else ""
        )
        out.append(arm)
    return out


def baseline_for(arm: Arm, all_arms: list[Arm]) -> Arm | None:
    """The baseline arm sharing the most seeds with `arm` (the original baseline, or a confirm run's own)."""
    candidates = [a for a in all_arms if a.baseline and a.number != arm.number]
    if not candidates:
        return None
    best = max(candidates, key=lambda a: (len(set(a.seeds) & set(arm.seeds)), -a.number))
    return best if set(best.seeds) & set(arm.seeds) else None


@dataclass
class Row:
    arm: Arm
    estimate: stats.Interval
    """Geometric mean compute-to-target over seeds, with its 95% interval."""
    ratio: stats.Interval | None
    """Paired ratio against the baseline on the same seeds (None for a baseline)."""
    censored: int
    verdict: str


def comparison(study: optuna.Study, estimator: str | None = None) -> list[Row]:
    """One row per arm: compute-to-target with its interval and the paired savings against the baseline."""
    all_arms = arms(study)
    rows = []
    for a in all_arms:
        est = a.level(estimator)
        base = None if a.baseline else baseline_for(a, all_arms)
        ratio = a.ratio(base, estimator) if base is not None else None
        verdict = "baseline" if ratio is None else paired_verdict(a, base, ratio, estimator, brief=True)
        rows.append(Row(a, est, ratio, a.censored(estimator), verdict))
    return rows


NOTHING_MEASURED = "no verdict: every seed censored on both sides (neither reached the target)"
NO_RATIO = "no ratio: fewer than two seeds reached the target on both sides"


def paired_verdict(
    arm: Arm, other: Arm, ratio: stats.Interval, estimator: str | None = None, brief: bool = False
) -> str:
    """`ratio` (arm over other, paired by seed) in words, as far as censoring allows. A seed censored on both sides
    measured nothing: its ratio is that of the two runs' total compute, which differ by float rounding, and a
    verdict drawn from such seeds alone is noise. Where every shared seed is, there is no verdict; where some seeds
    are censored, the ratio is a bound. Where the ratio has no estimate (fewer than two seeds reached the target on
    both sides), its seeds' orders are read instead (`Comparison.orders`, a sign test)."""
    shared = set(arm.seeds) & set(other.seeds)
    if shared and shared <= (arm.censored_seeds(estimator) & other.censored_seeds(estimator)):
        return NOTHING_MEASURED
    if isinstance(ratio, censoring.Comparison) and ratio.orders is not None:
        return f"{NO_RATIO}; seed by seed, {ratio.orders.fmt()}: {ratio.orders.verdict()}"
    return censoring.verdict(ratio, brief=brief)


def leader(rows: list[Row]) -> Row | None:
    """The replay selection arm (sampler or predicted) with the lowest geometric mean compute-to-target: not the
    baseline, nor on-policy at another learning rate."""
    on_policy = {a.number for a in on_policy_arms([r.arm for r in rows])}
    pool = [
        r
        for r in rows
        if not r.arm.baseline
        and r.arm.number not in on_policy
        and r.arm.kind != "confirm"
        and math.isfinite(r.estimate.estimate)
    ]
    return min(pool, key=lambda r: r.estimate.estimate) if pool else None


def on_policy_arms(all_arms: list[Arm]) -> list[Arm]:
    """The baseline and, when a study searches lr, the selection arms whose knobs are the baseline's but for lr."""
    base = next((a for a in all_arms if a.baseline and a.kind == "baseline"), None) or next(
        (a for a in all_arms if a.baseline), None
    )
    if base is None:
        return []
    knobs = lambda a: {k: v for k, v in a.knobs.items() if k != "lr"}  # noqa: E731
    return [a for a in all_arms if a is base or (a.kind == "sampler" and "lr" in a.knobs and knobs(a) == knobs(base))]


def on_policy_by_lr(all_arms: list[Arm]) -> dict[float, Arm]:
    """On-policy selection arms by learning rate (`on_policy_arms`); the one with the most seeds where two ran one lr."""
    out: dict[float, Arm] = {}
    for a in on_policy_arms(all_arms):
        if "lr" in a.knobs:
            lr = float(a.knobs["lr"])
            if lr not in out or len(a.seeds) > len(out[lr].seeds):
                out[lr] = a
    return out


def matched_lr_lines(rows: list[Row], lead: Row, estimator: str | None = None) -> list[str]:
    """The leader against on-policy at its own learning rate and at on-policy's best, when on-policy ran at two or more
    (a saving against the baseline's lr alone may be the learning rate's, not the buffer's)."""
    ops = on_policy_by_lr([r.arm for r in rows])
    if len(ops) < 2 or "lr" not in lead.arm.knobs:
        return []
    by_number = {r.arm.number: r for r in rows}
    best = min(ops.values(), key=lambda a: stats.finite_or_inf(by_number[a.number].estimate.estimate))
    out = []
    same = ops.get(float(lead.arm.knobs["lr"]))
    if same is not None and same.number != lead.arm.number:
        iv = lead.arm.ratio(same, estimator)
        out.append(
            f"  against on-policy at the same lr (trial {same.number}, lr {float(same.knobs['lr']):g}): {iv.fmt()}, {paired_verdict(lead.arm, same, iv, estimator)}"
        )
    if best.number != lead.arm.number:
        iv = lead.arm.ratio(best, estimator)
        out.append(
            f"  against on-policy at its best lr (trial {best.number}, lr {float(best.knobs['lr']):g}; a selection estimate too): {iv.fmt()}, {paired_verdict(lead.arm, best, iv, estimator)}"
        )
    return out


@dataclass(frozen=True)
class Claim:
    """A replay configuration against on-policy: the comparison the study's bottom line is made of."""

    row: Row
    ratio: stats.Interval
    """Paired ratio of its compute to on-policy's (at its own learning rate where on-policy ran there too)."""
    against: str
    """`on-policy`, or which on-policy run when the learning rate is searched."""
    censored: int
    """Censored seeds on either side: the ratio is then a bound."""
    replicated: stats.Interval | None
    """The same comparison from `study confirm`'s fresh seeds, where it ran."""
    tuned: stats.Interval | None = None
    """Against on-policy at its best learning rate, where that is another run than `against` (`verdicts.Setting`)."""
    tuned_lr: float | None = None


def claims(rows: list[Row], estimator: str | None = None) -> list[Claim]:
    """Every replay selection configuration (sampler or predicted) against on-policy: at its own learning rate when
    on-policy ran at two or more and at this one (a saving against another lr may be the lr's), else against the
    baseline; with its replication on fresh seeds where `study confirm` ran it."""
    all_arms = [r.arm for r in rows]
    on_policy = {a.number for a in on_policy_arms(all_arms)}
    by_lr = on_policy_by_lr(all_arms)
    base = next((a for a in all_arms if a.baseline and a.kind == "baseline"), None)
    out = []
    for r in rows:
        if r.arm.baseline or r.arm.number in on_policy or r.arm.kind not in ("sampler", "predicted") or r.ratio is None:
            continue
        ratio, against, cens = r.ratio, "on-policy", r.censored + (base.censored(estimator) if base else 0)
        lr = r.arm.knobs.get("lr")
        same = by_lr.get(float(lr)) if lr is not None and len(by_lr) > 1 else None
        if same is not None:
            ratio = r.arm.ratio(same, estimator)
            against, cens = against_same_lr(float(lr)), r.censored + same.censored(estimator)
        elif lr is not None and base is not None and "lr" in base.knobs and float(base.knobs["lr"]) != float(lr):
            against = against_other_lr(float(base.knobs["lr"]))
        rep = next(
            (c.ratio for c in rows if c.arm.kind == "confirm" and c.arm.confirms == r.arm.number and c.ratio), None
        )
        tuned = tuned_lr = None
        if len(by_lr) > 1:
            by_number = {row.arm.number: row for row in rows}
            best = min(by_lr.values(), key=lambda a: stats.finite_or_inf(by_number[a.number].estimate.estimate))
            if best is not (same or base):
                tuned, tuned_lr = r.arm.ratio(best, estimator), float(best.knobs["lr"])
        out.append(Claim(r, ratio, against, cens, rep, tuned, tuned_lr))
    return out


def none_reached(rows: list[Row], estimator: str | None = None) -> bool:
    """Whether no run of the study reached the target: every value is then a run's total compute, and nothing is
    measured."""
    return bool(rows) and all(r.arm.censored(estimator) == len(r.arm.per_seed) for r in rows)


def settings(rows: list[Row], estimator: str | None = None) -> list[Setting]:
    """The study's selection configurations (not the re-runs on fresh seeds) as the bottom line reads them: each
    replay setting with its claim against on-policy (`claims`), on-policy at every learning rate it ran."""
    on_policy = {a.number for a in on_policy_arms([r.arm for r in rows])}
    claimed = {c.row.arm.number: c for c in claims(rows, estimator)}
    out = []
    for r in rows:
        if r.arm.kind == "confirm":
            continue
        c = claimed.get(r.arm.number)
        out.append(
            Setting(
                setting_label(r.arm.knobs, r.arm.number),
                r.estimate,
                c.ratio if c else None,
                r.arm.baseline or r.arm.number in on_policy,
                c.censored if c else r.censored,
                c.against if c else "on-policy",
                c.replicated if c else None,
                c.tuned if c else None,
                c.tuned_lr if c else None,
            )
        )
    return out


def bottom_line(
    rows: list[Row],
    curve: str,
    target: float | None,
    spec_ref: str = "SPEC",
    report: str | None = None,
    estimator: str | None = None,
) -> BottomLine:
    """The study's conclusion in one sentence and the commands that would settle it (`workbench.verdicts`, the rule
    and wording the report shares); `report`: the command that reports this study."""
    return verdict_line(settings(rows, estimator), curve, target, spec_ref, none_reached(rows, estimator), report)


def noise(study: optuna.Study) -> list[dict[str, Any]]:
    """Per arm and estimator: the per-run standard deviation of log compute-to-target across seeds (censored seeds
    left out and counted), and the paired savings against the baseline with its interval."""
    out = []
    all_arms = arms(study)
    for name in ESTIMATORS:
        for a in all_arms:
            uncensored = {
                s: v
                for s, v in a.values(name).items()
                if not any(int(p["seed"]) == s and p.get(f"censored_{name}") for p in a.per_seed)
            }
            base = None if a.baseline else baseline_for(a, all_arms)
            ratio = a.ratio(base, name) if base is not None else None
            out.append(
                {
                    "estimator": name,
                    "arm": a.label,
                    "seeds": len(a.per_seed),
                    "censored": a.censored(name),
                    "log_sd": stats.log_sd(list(uncensored.values())),
                    "geo_mean": stats.geometric_interval(list(uncensored.values())).estimate,
                    "ratio": ratio,
                }
            )
    return out


def comparison_lines(study: optuna.Study) -> list[str]:
    """The comparison in words: each arm's estimate and interval (compute units), its paired ratio to on-policy and
    whether it is resolved."""
    rows = comparison(study)
    if not rows:
        return []
    lines = [
        "compute to target in units, geometric mean over seeds [95% CI]; ratio = its compute over on-policy's"
        " on the same seeds (< 1: less):"
    ]
    for r in rows:
        head = f"  {r.arm.label}: {r.estimate.fmt()}"
        lines.append(head + ("" if r.ratio is None else f"; ratio {r.ratio.fmt()}: {r.verdict}"))
    return lines


def confirmation_lines(study: optuna.Study) -> list[str]:
    """Each confirmed configuration: its selection estimate next to its replication on fresh seeds."""
    rows = comparison(study)
    by_number = {r.arm.number: r for r in rows}
    lines = []
    for r in rows:
        if r.arm.kind != "confirm" or r.arm.baseline or r.arm.confirms not in by_number:
            continue
        sel = by_number[r.arm.confirms]
        lines.append(f"  trial {sel.arm.number} {knob_label(sel.arm.knobs)}:")
        for what, row in (("selection", sel), ("replicated", r)):
            seeds = ",".join(map(str, row.arm.seeds))
            ratio = f"ratio to on-policy {row.ratio.fmt()}: {row.verdict}" if row.ratio else "no paired baseline"
            lines.append(f"    {what:10s} (seeds {seeds}): {row.estimate.fmt()}; {ratio}")
    return (
        (
            ["selection against replication on fresh seeds (compute to target in units, geometric mean [95% CI]):"]
            + lines
        )
        if lines
        else []
    )


def noise_lines(study: optuna.Study) -> list[str]:
    """The per-run noise table: per estimator and arm, the sd of log compute-to-target over seeds and the paired
    savings against on-policy with its interval (how finely this study's protocol can resolve a difference)."""
    rows = noise(study)
    if not rows:
        return []
    target = study.user_attrs.get(attrs.TARGET)
    lines = [
        f"per-run noise of compute-to-target (target {target} on the curve named above); sd of log over seeds,"
        " censored seeds left out:",
        f"  {'estimator':13s} {'arm':40s} {'seeds':>5s} {'cens.':>5s} {'log sd':>7s} {'geo mean':>9s}  paired ratio to on-policy [95% CI]",
    ]
    for r in rows:
        ratio = "" if r["ratio"] is None else f"{r['ratio'].fmt()}  {stats.verdict(r['ratio']).split(':')[0]}"
        lines.append(
            f"  {r['estimator']:13s} {r['arm'][:40]:40s} {r['seeds']:5d} {r['censored']:5d} {r['log_sd']:7.3f} {r['geo_mean']:9.4g}  {ratio}"
        )
    return lines
