"""`workbench study confirm`: the best configurations and the baseline re-run on seeds never used in selection.

Picking the best of many noisy configurations favours the ones whose seeds happened to be lucky (the winner's
curse): their selection estimate is biased low. Re-running them on fresh seeds gives an unbiased estimate. This
module takes the top K configurations of a study (by its objective, sampler trials and queued points only), picks
N seeds no trial of the study has used, and trains the on-policy baseline and each configuration on them, exactly
as the study trains a trial (same reference mu and target, same MLflow layout). Each re-run is recorded in Optuna
as a trial with `arm = confirm` and the number of the trial it confirms; it does not count towards `n_trials` and
the sampler never learns from it. The baseline is re-run too, so the replicated savings are paired on the same
fresh seeds. The fresh seeds are the N right above the selection seeds, so the command is idempotent: interrupted,
it resumes, and a configuration already confirmed on those seeds is not run again. With `predicted`, the optima
predicted by `study verify` (arms `predicted` and `probe`) are re-run on the same fresh seeds too, so a prediction's
cost is replicated against the empirical best's on seeds neither was selected on.

A fresh seed resamples training's randomness; whether it also resamples the starting model depends on the spec's
`seeds_per_checkpoint` (`StudySpec.checkpoint_of`): without it every seed shares one warm start, with it the fresh
seeds start from warm starts that selection may or may not have used. `warm_start_line` says which, in one line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from workbench import interrupts, prediction, stats
from workbench.config import ConfigError
from workbench.study import attrs
from workbench.study.compare import arms
from workbench.study.context import StudyContext, calibrated, load_existing
from workbench.study.objective import run_arm
from workbench.study.preflight import check_study
from workbench.study.placement import arm_objective
from workbench.study.spec import StudySpec, fmt_params
from workbench.trial.model_sources import model_source

log = logging.getLogger(__name__)
CONFIRM = "confirm"
PREDICTION_ARMS = prediction.ARMS
"""The arms `study verify` records: the fitted model's optimum and the probe's."""


@dataclass
class Confirmation:
    confirms: int
    """The trial whose configuration was re-run."""
    trial_number: int
    seeds: list[int]
    selection: float
    """The configuration's value in selection (on the study's seeds)."""
    replicated: float
    """Its value on the fresh seeds."""


def selection_seeds(study: optuna.Study) -> set[int]:
    """Every seed the study used to select configurations (the spec's, and any a non-confirm trial ran)."""
    seeds: set[int] = set(study.user_attrs.get(attrs.SPEC, {}).get("seeds") or [])
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get(attrs.ARM) != CONFIRM:
            seeds.update(t.user_attrs.get(attrs.SEEDS) or [])
            seeds.update(int(v["seed"]) for v in t.user_attrs.get(attrs.PER_SEED) or [])
    return seeds


def fresh_seeds(study: optuna.Study, n: int) -> list[int]:
    """The `n` seeds right above every seed used in selection: the same command confirms on the same seeds (so it
    resumes, and running it again trains nothing); a larger `n` extends them."""
    start = max(selection_seeds(study), default=-1) + 1
    return list(range(start, start + n))


def _span(seeds: list[int]) -> str:
    """Seeds in words: `8`, `8-11` (consecutive), or `3, 5, 9`."""
    seeds = sorted(seeds)
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def warm_start_line(spec: StudySpec, fresh: list[int], selection: set[int]) -> str:
    """One line: the warm starts (`model.init_seed`, `StudySpec.checkpoint_of`) the `fresh` seeds start from, each
    marked a fresh checkpoint or one a `selection` seed also started from; without `seeds_per_checkpoint`, that every
    seed shares one checkpoint, so a confirmation replicates over training's randomness only."""
    cfg = spec.trial_config({}, 0)  # seed 0 starts from the base config's warm start
    head = f"fresh seed{'s' if len(fresh) > 1 else ''} {_span(fresh)}"
    if not model_source(cfg.model).seeded:
        return (
            f"{head}: every seed starts from the one model of model.source {cfg.model.source_name}, so confirm"
            " replicates over training's randomness only, not over the starting model"
        )
    base = cfg.model.init_seed
    if spec.seeds_per_checkpoint is None:
        return (
            f"{head}: every seed of this study shares one checkpoint (model.init_seed {base}), so confirm replicates over"
            " training's randomness only, not over the warm start (a spec's seeds_per_checkpoint varies it)"
        )
    used = {spec.checkpoint_of(s, base) for s in selection}
    starts: dict[int, list[int]] = {}
    for s in fresh:
        starts.setdefault(spec.checkpoint_of(s, base), []).append(s)
    parts = [
        f"{c} for seed{'s' if len(ss) > 1 else ''} {_span(ss)} ("
        + (f"checkpoint {c}, also used in selection" if c in used else "a fresh checkpoint")
        + ")"
        for c, ss in starts.items()
    ]
    tail = "" if set(starts) - used else "; no fresh checkpoint: more seeds (--seeds) reach one"
    return (
        f"{head} start from warm starts (model.init_seed, {spec.seeds_per_checkpoint} seeds each): "
        + ", ".join(parts)
        + tail
    )


def top_trials(study: optuna.Study, k: int) -> list[FrozenTrial]:
    """The best `k` complete sampler trials or queued points (the baseline and arms left out), best first: by the
    objective, or for compute-to-target by the geometric mean over every seed they ran (a race's included)."""
    pool = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if not t.user_attrs.get(attrs.ARM) and not t.user_attrs.get(attrs.BASELINE) and t.value is not None
    ]
    if study.user_attrs.get(attrs.SPEC, {}).get("objective") == "compute_to_target":
        merged = {a.number: stats.finite_or_inf(a.level().estimate) for a in arms(study)}
        return sorted(pool, key=lambda t: merged.get(t.number, t.value))[:k]
    sign = -1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else 1.0
    return sorted(pool, key=lambda t: sign * t.value)[:k]


def named_trials(study: optuna.Study, numbers: list[int]) -> list[FrozenTrial]:
    """The complete sampler trials or points `numbers` names, in that order (the question's arms: the best of each
    family, say); a number that is not one is a one-line `ConfigError`."""
    pool = {
        t.number: t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if not t.user_attrs.get(attrs.ARM) and t.value is not None
    }
    unknown = [n for n in numbers if n not in pool]
    if unknown:
        raise ConfigError(
            f"--trials: {', '.join(map(str, unknown))} is not a complete trial of the study"
            f" (complete: {', '.join(map(str, sorted(pool))) or 'none'})"
        )
    return [pool[n] for n in dict.fromkeys(numbers) if not pool[n].user_attrs.get(attrs.BASELINE)]


def open_for_confirm(ctx: StudyContext) -> optuna.Study:
    check_study(ctx.spec)  # this machine can run the study's trials (data, backend), before anything is recorded
    # Arms are not sampler proposals: a plain sampler, so a grid sampler's `tell` cannot stop anything.
    study = load_existing(ctx, sampler=optuna.samplers.RandomSampler())
    if len(ctx.spec.objectives) != 1:
        raise ConfigError("objective: study confirm needs a single-objective study")
    if not calibrated(study):
        raise ConfigError(f"study: {ctx.spec.name!r} has no reference mu or target yet (run its baseline first)")
    return study


def _already(study: optuna.Study, number: int, seeds: list[int]) -> FrozenTrial | None:
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if (
            t.user_attrs.get(attrs.ARM) == CONFIRM
            and t.user_attrs.get(attrs.CONFIRMS) == number
            and t.user_attrs.get(attrs.SEEDS) == seeds
        ):
            return t
    return None


def prediction_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The complete `study verify` arms (a model's or the probe's predicted optimum) and the measured trials a
    prediction named instead of running anew (its twins), in trial order."""
    twins = set(study.user_attrs.get(attrs.PREDICTED_TWINS, []))
    return [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if (t.user_attrs.get(attrs.ARM) in PREDICTION_ARMS or t.number in twins) and t.value is not None
    ]


def run_confirm(
    ctx: StudyContext,
    study: optuna.Study,
    top: int,
    n_seeds: int,
    threads: int | None = None,
    predicted: bool = False,
    devices: list[int] | None = None,
    trials: list[int] | None = None,
) -> list[Confirmation]:
    """Re-run the baseline and the best `top` configurations (or the `trials` named) on `n_seeds` fresh seeds, as
    `confirm` arms; with `predicted`, the study's predicted optima too (`study verify`). With `devices` holding
    several slots, each configuration's seeds run side by side (`workbench.study.placement`)."""
    if top < 1 or n_seeds < 2:
        raise ConfigError(f"--top must be >= 1 and --seeds >= 2 (an interval needs two seeds), got {top} and {n_seeds}")
    best = named_trials(study, trials) if trials else top_trials(study, top)
    if predicted:
        chosen = {tuple(sorted((t.params or t.user_attrs.get(attrs.KNOBS, {})).items())) for t in best}
        for t in prediction_trials(study):
            key = tuple(sorted((t.params or t.user_attrs.get(attrs.KNOBS, {})).items()))
            if key not in chosen and not t.user_attrs.get(attrs.BASELINE):  # confirmed once (the baseline always is)
                best.append(t)
                chosen.add(key)
        if not prediction_trials(study):
            raise ConfigError(
                f"--predicted: study {ctx.spec.name!r} has no predicted optimum yet (run `workbench study verify` first)"
            )
    if not best:
        raise ConfigError(f"study: {ctx.spec.name!r} has no complete trial besides the baseline to confirm")
    base = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.user_attrs.get(attrs.BASELINE) and not t.user_attrs.get(attrs.ARM)
    ]
    targets = base[:1] + best
    seeds = fresh_seeds(study, n_seeds)
    log.info(f"confirming {len(best)} configuration(s) and the baseline on fresh seeds {seeds}")
    log.info(warm_start_line(ctx.spec, seeds, selection_seeds(study)))
    out = []
    with interrupts.terminate_as_interrupt(), arm_objective(ctx, study, threads, devices) as objective:
        for t in targets:
            knobs = t.params or t.user_attrs.get(attrs.KNOBS, {})
            done = _already(study, t.number, seeds)
            if done is None:
                on_policy = bool(t.user_attrs.get(attrs.BASELINE))
                log.info(f"confirm trial {t.number} ({'on-policy' if on_policy else fmt_params(knobs)})")
                done = run_arm(
                    study,
                    objective,
                    {
                        attrs.ARM: CONFIRM,
                        attrs.CONFIRMS: t.number,
                        attrs.KNOBS: knobs,
                        attrs.SEEDS: seeds,
                        **({attrs.BASELINE: True} if on_policy else {}),
                    },
                    knobs,
                    is_baseline=on_policy,
                    mu=study.user_attrs[attrs.REFERENCE_MU],
                    threads=objective.threads,
                    arm=CONFIRM,
                    seeds=seeds,
                )
            out.append(Confirmation(t.number, done.number, seeds, float(t.value), float(done.value)))
    return out
