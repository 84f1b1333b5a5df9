"""When a study stops because its trials keep failing, and how `study run` ends.

A study must not spend its budget, on many workers, on configurations that cannot run. Every worker checks these
rules between trials (and stops taking trials when one holds; a trial already running elsewhere finishes):

- a trial failed with a `ConfigError`, a configuration that cannot run: the study stops at once (exit code 2);
- the on-policy baseline failed: the trials accounted and compared against it (its mu, its target) do not start;
- `max_same_failures` trials in a row failed with the same reason (exception and message, numbers aside);
- `max_failures` trials failed.

Failures already dealt with do not count: interrupted trials (Ctrl-C), trials whose dead worker's configuration
was retried (heartbeat), and failures a resumed `study run` re-enqueued (`attrs.REQUEUED`). Nothing is deleted: the
failed trials stay FAIL in the storage, and when `study run` resumes a stopped study it enqueues the configurations
behind the stop again (`Stop.trials`), so a fixed cause lets the study complete its n_trials.
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from datetime import datetime

import optuna
from optuna.trial import FrozenTrial, TrialState

from workbench.study import attrs
from workbench.study.spec import StudySpec
from workbench.study.summary import counts_line

RESUME = "fix it, then `workbench study run` resumes the study"
LOST = "worker lost (no heartbeat)"
"""The reason of a trial whose worker died and whose retries ran out (it has no recorded reason)."""


@dataclass(frozen=True)
class Stop:
    reason: str
    """One line: why the study stopped."""
    exit_code: int
    """2: a configuration that cannot run (`ConfigError`); 1: any other failure."""
    trials: tuple[int, ...] = ()
    """The failed trials whose configurations a resumed study runs again."""


def failure(trial: FrozenTrial) -> str:
    """Why a trial failed: `Type: message`."""
    return trial.user_attrs.get(attrs.FAIL_REASON) or LOST


def _kind(reason: str) -> str:
    """A reason with its numbers blanked: two trials over one limit (`LimitExceeded: out of memory: ... held 212 MiB`
    and `... 224 MiB`), or running out of CUDA memory by different amounts, fail for the same reason."""
    return re.sub(r"\d+(\.\d+)?", "#", reason)


def ended(study: optuna.Study) -> list[FrozenTrial]:
    """The study's trained trials that ended (complete, pruned or failed) in the order they ended, without the
    failures already dealt with, the skipped proposals and the `verify`/`confirm` arms."""
    trials = study.get_trials(deepcopy=False)
    requeued = set(study.user_attrs.get(attrs.REQUEUED, []))
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", [])}

    def counts(t: FrozenTrial) -> bool:
        if t.user_attrs.get(attrs.SKIPPED) or t.user_attrs.get(attrs.ARM):
            return False
        if t.state == TrialState.FAIL:
            return not (t.user_attrs.get(attrs.INTERRUPTED) or t.number in requeued or t.number in retried)
        return t.state in (TrialState.COMPLETE, TrialState.PRUNED)

    return sorted(filter(counts, trials), key=lambda t: (t.datetime_complete or datetime.max, t.number))


def check(study: optuna.Study, spec: StudySpec) -> Stop | None:
    """Why the study must stop now because of its failed trials (None while they allow it to go on)."""
    trials = ended(study)
    failed = [t for t in trials if t.state == TrialState.FAIL]
    config = [t for t in failed if attrs.CONFIG_ERROR in t.user_attrs]
    if config:
        first = config[0]
        return Stop(
            f"trial {first.number} failed: {first.user_attrs[attrs.CONFIG_ERROR]} (a configuration that cannot"
            f" run; {RESUME})",
            2,
            tuple(t.number for t in config),
        )
    baseline = [t for t in failed if t.user_attrs.get(attrs.BASELINE)]
    if baseline:
        t = baseline[-1]
        return Stop(
            f"the on-policy baseline (trial {t.number}) failed with {failure(t)}; no other trial starts"
            f" without it ({RESUME})",
            1,
            (t.number,),
        )
    streak: list[FrozenTrial] = []
    for t in reversed(trials):
        if t.state != TrialState.FAIL or (streak and _kind(failure(t)) != _kind(failure(streak[0]))):
            break
        streak.append(t)
    if len(streak) >= spec.max_same_failures > 0:
        numbers = sorted(t.number for t in streak)
        return Stop(
            f"{len(streak)} trials in a row failed with {failure(streak[0])} (trials {', '.join(map(str, numbers))};"
            f" max_same_failures = {spec.max_same_failures}; {RESUME})",
            1,
            tuple(numbers),
        )
    if len(failed) >= spec.max_failures > 0:
        return Stop(
            f"{len(failed)} failed trials (max_failures = {spec.max_failures}; the last: {failure(failed[-1])})", 1
        )
    return None


def verdict(study: optuna.Study, spec: StudySpec) -> Stop | None:
    """How `study run` ends: a stop above, or a study that completed no trial (exit code 1); None when it ran."""
    stop = check(study, spec)
    if stop is not None:
        return stop
    if not any(t.state == TrialState.COMPLETE for t in ended(study)):
        return Stop(f"no trial completed ({counts_line(study)}; `workbench study status SPEC --table` lists them)", 1)
    return None
