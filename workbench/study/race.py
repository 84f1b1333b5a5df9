"""`workbench study race`: more seeds where they decide something (seed allocation by racing).

The same number of seeds everywhere wastes runs on configurations that are already clearly worse than the
leader and leaves the close calls unresolved. A race works in rounds: the leader is the selection configuration
with the lowest compute-to-target (geometric mean over its seeds); a *contender* is one whose paired ratio to the
leader (on the seeds both ran) still has a 95% interval containing 1. Each round runs the leader, the contenders
and the on-policy baseline (so savings stay paired) on `step` new seeds, recorded as trials with `arm = race` and
`extends = <trial number>`, merged into the configuration they extend wherever a study is compared
(`workbench.study.compare`). The race ends when no contender is left or every contender has `max_seeds` seeds.
New seeds lie above every seed the study has used, so seeds `study confirm` used stay fresh.
"""

from __future__ import annotations

import logging

import optuna

from workbench import interrupts, stats
from workbench.config import ConfigError
from workbench.study import attrs
from workbench.study.compare import RACE, Arm, arms, baseline_for
from workbench.study.context import StudyContext
from workbench.study.objective import StudyObjective, run_arm
from workbench.study.placement import arm_objective

log = logging.getLogger(__name__)


def all_seeds(study: optuna.Study) -> set[int]:
    seeds: set[int] = set(study.user_attrs.get(attrs.SPEC, {}).get("seeds") or [])
    for t in study.get_trials(deepcopy=False):
        seeds.update(t.user_attrs.get(attrs.SEEDS) or [])
    return seeds


def contenders(study: optuna.Study) -> tuple[Arm | None, list[Arm]]:
    """The leader and the configurations not yet resolved against it."""
    pool = [a for a in arms(study) if a.kind in ("sampler", "predicted")]
    if not pool:
        return None, []
    lead = min(pool, key=lambda a: stats.finite_or_inf(a.level().estimate))
    close = []
    for a in pool:
        if a is lead:
            continue
        ratio = a.ratio(lead)
        if ratio.n < 2 or not ratio.excludes(1.0):
            close.append(a)
    return lead, close


def run_race(
    ctx: StudyContext,
    study: optuna.Study,
    max_seeds: int,
    step: int = 2,
    threads: int | None = None,
    devices: list[int] | None = None,
) -> list[str]:
    """Race until the leader separates from every contender or the contenders have `max_seeds` seeds each;
    returns one line per round."""
    if step < 1 or max_seeds < 2:
        raise ConfigError(f"--step must be >= 1 and --max-seeds >= 2, got {step} and {max_seeds}")
    if ctx.spec.objectives != ["compute_to_target"]:
        raise ConfigError("objective: study race needs the compute_to_target objective")
    with interrupts.terminate_as_interrupt(), arm_objective(ctx, study, threads, devices) as objective:
        return _rounds(study, objective, max_seeds, step)


def _rounds(study: optuna.Study, objective: StudyObjective, max_seeds: int, step: int) -> list[str]:
    rounds = []
    while True:
        lead, close = contenders(study)
        if lead is None:
            raise ConfigError(
                f"study: {objective.ctx.spec.name!r} has no complete configuration besides the baseline to race"
            )
        close = [a for a in close if len(a.seeds) < max_seeds]
        if not close:
            rounds.append(f"race over: leader trial {lead.number}; no contender left under {max_seeds} seeds")
            return rounds
        base = baseline_for(lead, arms(study))
        start = max(all_seeds(study), default=-1) + 1
        seeds = list(range(start, start + step))
        runners = [lead, *close] + ([base] if base is not None else [])
        log.info(f"race round: leader trial {lead.number}, contenders {[a.number for a in close]}: seeds {seeds}")
        for a in runners:
            run_arm(
                study,
                objective,
                {
                    attrs.ARM: RACE,
                    attrs.EXTENDS: a.number,
                    attrs.KNOBS: a.knobs,
                    attrs.SEEDS: seeds,
                    **({attrs.BASELINE: True} if a.baseline else {}),
                },
                a.knobs,
                is_baseline=a.baseline,
                mu=study.user_attrs[attrs.REFERENCE_MU],
                threads=objective.threads,
                arm=RACE,
                seeds=seeds,
            )
        rounds.append(f"round: leader trial {lead.number}, contenders {[a.number for a in close]} ran seeds {seeds}")
