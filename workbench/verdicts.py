"""The bottom line: what a study found, in one sentence held to the project's rule on intervals (a difference is a
claim only when its paired 95% interval excludes 1: inside the noise it is unresolved, never a win), and the
commands that would settle or extend it.

One home for the rule and its wording. The study's closing lines (`workbench.study.summary`, read from Optuna) and
the report's first lines (`analysis.bottom_line`, read from MLflow) gather their numbers each in their own way and
hand them here as plain data (`Setting`), so both say the same thing in the same words. Torch- and Optuna-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from workbench import stats

KNOB_SYMBOLS = {"replay.ratio": "y", "x": "x"}
"""Knobs shown by their symbol (y: the replay ratio, x = N/R: the staleness horizon; the outputs define both)."""


def knob_label(knobs: dict[str, Any]) -> str:
    """A configuration in the outputs' words: `y=2 x=8`, then any other knob as `key=value` (`lr=0.0001` where the
    caller passes lr, i.e. where it varies)."""
    first = [k for k in KNOB_SYMBOLS if k in knobs]
    shown = {KNOB_SYMBOLS.get(k, k): knobs[k] for k in first + [k for k in knobs if k not in KNOB_SYMBOLS]}
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items())


def setting_label(knobs: dict[str, Any], trial: int) -> str:
    """`y=2 x=8 (trial 3)`: a configuration and the trial that ran it."""
    return f"{knob_label(knobs)} (trial {trial})"


def ratio_text(iv: stats.Interval) -> str:
    """A paired ratio as `0.94x [0.84, 1.05]`: compute over on-policy's on the same seeds, with its 95% interval."""
    pairs = f" ({iv.counts()})" if hasattr(iv, "counts") else ""
    if not math.isfinite(iv.estimate):
        return f"no estimate{pairs}"
    if iv.n < 2 or not math.isfinite(iv.low):
        return f"{iv.estimate:.2f}x (1 seed: no interval){pairs}"
    return f"{iv.estimate:.2f}x [{iv.low:.2f}, {iv.high:.2f}]{pairs}"


def against_same_lr(lr: float) -> str:
    """Whom a replay setting is compared with when on-policy also ran at its learning rate."""
    return f"on-policy at the same lr ({lr:g})"


def against_other_lr(lr: float) -> str:
    """Whom a replay setting is compared with when on-policy ran only at another learning rate."""
    return f"on-policy at another lr ({lr:g}: a saving may be the learning rate's)"


@dataclass(frozen=True)
class Setting:
    """One configuration of a study's selection (not a re-run on fresh seeds), as the bottom line reads it."""

    label: str
    """`setting_label`: its knobs in the outputs' words and its trial."""
    compute: stats.Interval
    """Its compute to target in compute units: the geometric mean over seeds with its 95% interval."""
    ratio: stats.Interval | None = None
    """Its compute over on-policy's on the same seeds with its 95% interval (None: on-policy, or no seed paired)."""
    on_policy: bool = False
    """The baseline, or on-policy at another learning rate: never a replay setting."""
    censored: int = 0
    """Censored seeds on either side of the ratio: it is then a bound."""
    against: str = "on-policy"
    """Whom `ratio` compares it with (`against_same_lr`, `against_other_lr` where lr is searched)."""
    replicated: stats.Interval | None = None
    """The same ratio on fresh seeds (`study confirm`), where it was re-run."""
    tuned: stats.Interval | None = None
    """Its compute over on-policy's at on-policy's best learning rate, where the study ran on-policy at several and
    that one is not whom `ratio` compares it with (both selected on the same seeds)."""
    tuned_lr: float | None = None
    """On-policy's best learning rate, the other side of `tuned`."""


@dataclass(frozen=True)
class Step:
    """A command that would settle or extend the bottom line, and why."""

    command: str
    why: str

    def __str__(self) -> str:
        return f"{self.command} ({self.why})"


@dataclass(frozen=True)
class BottomLine:
    kind: str
    """`nothing_measured`, `no_comparison`, `saving`, `dearer` (every replay setting resolvably dearer), `unresolved`."""
    text: str
    """One sentence, starting with a lower-case word (the caller puts `Bottom line:` before it)."""
    steps: list[Step] = field(default_factory=list)


def _seeds(compared: Sequence[Setting]) -> str:
    """`3 paired seeds, 95% intervals` (a range where the settings ran different numbers)."""
    n = sorted({s.ratio.n for s in compared if s.ratio is not None})
    if n[-1] < 2:
        return "1 seed: no interval"
    seeds = f"{n[0]}" if len(n) == 1 else f"{n[0]}-{n[-1]}"
    return f"{seeds} paired seeds, 95% interval{'s' if len(compared) > 1 else ''}"


def _where(s: Setting) -> str:
    """`y=2 x=8 (trial 2), 1.30x [1.10, 1.60]`, with whom it is compared where that is not plain on-policy."""
    against = "" if s.against == "on-policy" else f" against {s.against}"
    return f"{s.label}, {ratio_text(s.ratio)}{against}"


def _tuned(s: Setting) -> str:
    """A saving read again against on-policy at its best learning rate: a claim rests on that comparison."""
    if s.tuned is None:
        return ""
    words = {
        -1: "the saving holds there",
        0: "unresolved there, so the saving may be the learning rate's",
        1: "more compute there, so the saving is the learning rate's",
    }
    return (
        f"; against on-policy at its best lr ({s.tuned_lr:g}), {ratio_text(s.tuned)}: {words[stats.direction(s.tuned)]}"
    )


def _tuned_best(compared: Sequence[Setting]) -> str:
    """Where no setting saves: the comparison the headline rests on, each replay setting at its best lr against
    on-policy at its best (the one of them closest to on-policy), where the study ran on-policy at several lrs."""
    tuned = [s for s in compared if s.tuned is not None and math.isfinite(s.tuned.estimate)]
    if not tuned:
        return ""
    best = min(tuned, key=lambda s: s.tuned.estimate)
    words = {-1: "resolved, less compute", 0: "unresolved", 1: "resolved, more compute"}
    return (
        f"; each at its own best lr, the closest, {best.label}, against on-policy at its best lr ({best.tuned_lr:g}):"
        f" {ratio_text(best.tuned)}, {words[stats.direction(best.tuned)]}"
    )


def _replication(s: Setting, saving: bool) -> str:
    """What the fresh seeds of `study confirm` gave, for the sentence's end."""
    if s.replicated is None:
        return "; a selection estimate until replicated on fresh seeds" if saving else ""
    side = stats.direction(s.replicated)
    words = (
        {
            -1: "the saving holds",
            0: "unresolved, so the saving is not confirmed",
            1: "more compute, so the saving does not hold",
        }
        if saving
        else {-1: "resolved, less compute", 0: "unresolved", 1: "resolved, more compute"}
    )
    return f"; on fresh seeds {ratio_text(s.replicated)}: {words[side]}"


def bottom_line(
    settings: Sequence[Setting],
    curve: str,
    target: float | None,
    spec_ref: str = "SPEC",
    nothing_reached: bool = False,
    report: str | None = None,
) -> BottomLine:
    """The finding in one sentence and what to run next. `settings`: the study's selection configurations (on-policy
    included); `curve`: `eval.metric`, the curve the target is read on; `target`: its value (None: not set yet);
    `spec_ref`: the spec file the commands take; `nothing_reached`: no run reached the target (every value a run's
    total compute); `report`: the command that reports this study (`workbench report SPEC` when None)."""
    ref = spec_ref
    goal = f"the {curve} target" + (f" {target:g}" if target is not None and math.isfinite(target) else "")
    if nothing_reached:
        report = report or f"workbench report {ref}"
        return BottomLine(
            "nothing_measured",
            f"no run reached {goal} within its budget, so nothing is measured: every"
            " compute number is a run's total, a lower bound.",
            [Step(f"{report} --target T", "the same runs read at a lower target T")],
        )
    compared = [s for s in settings if not s.on_policy and s.ratio is not None and math.isfinite(s.ratio.estimate)]
    if not compared:
        return _no_comparison(settings, ref)
    unresolved = any(stats.direction(s.ratio) == 0 for s in compared)
    steps = [Step(f"workbench study race {ref}", "more seeds where unresolved")] if unresolved else []
    wins = [s for s in compared if stats.direction(s.ratio) < 0]
    if wins:
        best = min(wins, key=lambda s: s.ratio.estimate)
        text = (
            f"the best replay setting, {best.label}, reaches {goal} with {ratio_text(best.ratio)} the compute of {best.against}"
            f" ({_seeds([best])}: resolved,"
            f" {1 - best.ratio.estimate:.0%} saved)"
        )
        if len(wins) > 1:
            text += f"; {len(wins) - 1} other setting{'s' if len(wins) > 2 else ''} also resolved"
        if any(s.replicated is None for s in wins):
            steps.append(Step(f"workbench study confirm {ref}", "fresh seeds"))
        if best.replicated is not None and stats.direction(best.replicated) < 0:
            steps.append(Step(f"workbench study verify {ref}", "runs the fitted optimum"))
        return BottomLine("saving", text + _tuned(best) + _replication(best, saving=True) + ".", steps)
    closest = min(compared, key=lambda s: stats.finite_or_inf(s.ratio.estimate))
    tail = _replication(closest, saving=False)
    if all(stats.direction(s.ratio) > 0 for s in compared):
        return BottomLine(
            "dearer",
            f"every replay setting tried needs resolvably more compute than on-policy to reach {goal}"
            f" ({_seeds(compared)}); the closest, {_where(closest)}{tail}{_tuned_best(compared)}.",
            [Step(f"workbench study run {ref}", "once its search_space holds other knobs")],
        )
    state = (
        "unresolved, its interval contains 1"
        if stats.direction(closest.ratio) == 0 and closest.ratio.n > 1
        else "unresolved"
        if stats.direction(closest.ratio) == 0
        else "resolved, more compute"
    )
    return BottomLine(
        "unresolved",
        f"no replay setting resolvably beats on-policy to reach {goal} ({_seeds(compared)});"
        f" the closest, {_where(closest)}: {state}{tail}{_tuned_best(compared)}.",
        steps,
    )


def _no_comparison(settings: Sequence[Setting], ref: str) -> BottomLine:
    """No replay setting paired with on-policy: which side is missing, and the cheapest configuration so far."""
    finite = [s for s in settings if math.isfinite(s.compute.estimate)]
    on_policy = [s for s in finite if s.on_policy]
    replay = [s for s in finite if not s.on_policy]
    if not finite:
        return BottomLine("no_comparison", "no configuration reached a comparable result yet.")
    if not replay:
        base = on_policy[0]
        return BottomLine(
            "no_comparison",
            f"only on-policy has completed ({base.compute.fmt()} units to the target); no"
            " replay setting to compare yet.",
        )
    low = min(replay, key=lambda s: s.compute.estimate)
    lowest = f"the lowest compute to target: {low.label}, {low.compute.fmt()} units."
    if not on_policy:
        return BottomLine(
            "no_comparison",
            f"no on-policy run completed, so no saving can be claimed; {lowest}",
            [Step(f"workbench study run {ref}", f"with baseline: true in {ref}, on-policy on the same seeds")],
        )
    return BottomLine(
        "no_comparison", f"no replay setting ran on on-policy's seeds, so no saving can be claimed; {lowest}"
    )
