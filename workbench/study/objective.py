"""One Optuna trial: a configuration of the search space, trained once per seed of the spec (docs/studies.md).

MLflow mirrors it: one trial run per Optuna trial under the study's parent run (tags `workbench.study`,
`workbench.trial_number`; the Optuna trial stores the run id), and under it one seed run per seed with the curves.
The trial's value is the median over seeds of each seed's value, re-accounted at the study's reference mu
(`workbench.compute`): compute is compared at one mu per study. A seed that never reaches the target is censored
by `compute.to_target`'s rule, so the sampler learns from it; the trial records how many seeds were censored.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from typing import Any

import optuna
from optuna.trial import TrialState

from workbench import faults
from workbench import knobs, stats, tracking
from workbench.compute import to_target, units
from workbench.config import ConfigError
from workbench.estimators import DEFAULT_ESTIMATOR, auto_target, curve_summary, readings
from workbench.study import attrs, lr_sweep
from workbench.study.context import StudyContext, calibrated
from workbench.study.pruning import ComputePruner
from workbench.study.slots import SlotPool
from workbench.study.spec import StudySpec, fmt_params
from workbench.trial.loop import TrialResult, TrialStopped, run_trial

log = logging.getLogger(__name__)


def suggest(trial: optuna.Trial, spec: StudySpec) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for key, dim in spec.search_space.items():
        if not dim.active(params):
            continue  # a conditional knob whose condition does not hold (e.g. another strategy's parameter)
        try:
            if dim.choices is not None:
                params[key] = trial.suggest_categorical(key, dim.choices)
            elif dim.is_int:
                params[key] = trial.suggest_int(key, int(dim.low), int(dim.high), log=dim.log, step=int(dim.step or 1))
            else:
                params[key] = trial.suggest_float(key, dim.low, dim.high, log=dim.log, step=dim.step)
        except ValueError as err:  # the storage refusing this knob's distribution: no trial of the spec can run
            raise ConfigError(f"search_space.{key}: {err}") from None
    return params


def seed_values(
    result: TrialResult,
    target: float,
    mu: float,
    batch_size: int,
    estimator: str = DEFAULT_ESTIMATOR,
    budget: float | None = None,
    metric: str = "accuracy",
) -> dict[str, float]:
    """One seed's objective values, re-accounted at the study's mu from its logged eval curve: every estimator of
    compute-to-target (`compute_to_target_<name>`, with its censoring flag), `compute_to_target` by `estimator`,
    and the curve's summaries (`workbench.estimators.curve_summary`), all read from the curve `metric`
    (`eval.metric`); best and final accuracy stay greedy pass@1."""
    evals = result.evals
    spent = [units(e["train_rollouts"], e["gen_rollouts"], batch_size, mu) for e in evals]
    accuracy = [e["accuracy"] for e in evals]
    reading = readings(evals, metric)
    best = max(accuracy)
    curve = curve_summary(spent, reading, target, budget)
    wall = to_target([e.get("wall_seconds", e["seconds"]) for e in evals], reading, target)  # older runs: "seconds"
    return {
        "best_accuracy": best,
        "final_accuracy": accuracy[-1],
        "compute_units": spent[accuracy.index(best)],
        "total_units": spent[-1],
        **curve,
        "compute_to_target": curve[f"compute_to_target_{estimator}"],
        "censored": curve[f"censored_{estimator}"],
        "accuracy_at_budget": curve["accuracy_at_100pct"],
        "wall_to_target": wall.value,
        "mu_measured": result.metrics.get(tracking.FINAL_MU_MEASURED, float("nan")),
    }


def aggregate(per_seed: list[dict[str, float]]) -> dict[str, float]:
    """A configuration's values over its seeds: geometric means of compute and time to target (they compare as
    ratios), means of the rest, the censored seeds counted, and the 95% interval of `compute_to_target`."""
    summary: dict[str, float] = {}
    for key in dict.fromkeys(k for v in per_seed for k in v):  # a seed whose curve could not be fitted lacks fit_*
        if key == "seed":
            continue
        values = [v[key] for v in per_seed if key in v]
        if key.startswith(("compute_to_target", "wall_to_target")) and not key.endswith(("_low", "_high")):
            summary[key] = stats.geometric_interval(values).estimate
        else:
            summary[key] = float(statistics.fmean(values))
    interval = stats.geometric_interval([v["compute_to_target"] for v in per_seed])
    summary["compute_to_target_ci_low"], summary["compute_to_target_ci_high"] = interval.low, interval.high
    summary["censored_seeds"] = sum(v["censored"] for v in per_seed)
    summary["seeds"] = len(per_seed)
    return summary


PROGRESS_EVERY_SECONDS = 5.0
HOLD_POLL_SECONDS = 10.0
"""How often a worker holding an lr-sweep point re-reads the lrs that decide it (`StudyObjective._past_decline`)."""


def _reporting(trial: optuna.Trial, index: int, seeds: int, budget: float | None, then=None):
    """An evaluation hook that records the trial's progress on it (`attrs.PROGRESS`, at most every few seconds, for
    the driver's bar), then calls `then` (a pruning hook) if any."""
    last = [-PROGRESS_EVERY_SECONDS]

    def hook(row: dict[str, float]) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_SECONDS:
            last[0] = now
            of = f"/{budget:.0f}" if budget else ""
            trial.set_user_attr(attrs.PROGRESS, f"seed {index + 1}/{seeds}, {row['compute_units']:.0f}{of} units")
        if then is not None:
            then(row)

    return hook


def same_params(study: optuna.Study, number: int, params: dict[str, Any]) -> int | None:
    """Another trial of the study that ran (or runs) exactly these knobs, if any."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING, TrialState.PRUNED)):
        if (
            t.number != number
            and not t.user_attrs.get(attrs.SKIPPED)
            and not t.user_attrs.get(attrs.ARM)
            and t.params == params
        ):
            return t.number
    return None


def _baseline_waiting(study: optuna.Study) -> bool:
    return any(
        t.user_attrs.get(attrs.BASELINE) and t.state == TrialState.WAITING for t in study.get_trials(deepcopy=False)
    )


def run_arm(study: optuna.Study, objective, user_attrs: dict[str, Any], params: dict[str, Any], **evaluate) -> Any:
    """An arm trial outside `study.optimize` (`study confirm`, `race`, `verify`): asked, its `user_attrs` set,
    `objective.evaluate(trial, params, **evaluate)`, told its value; the told trial. Whatever stops it from the
    moment it is asked (an error, Ctrl-C, SIGTERM under `interrupts.terminate_as_interrupt`) tells it failed and
    goes on up: such a trial has no heartbeat to go stale, so one left running would stay so for good (and `study
    pack` refuses a study with a running trial). Its attributes are written inside that guard too: a signal that
    came while they were written left the trial running (`make test`, 2026-11-29)."""
    trial = study.ask()
    try:
        for key, value in user_attrs.items():
            trial.set_user_attr(key, value)
        value = objective.evaluate(trial, params, **evaluate)
    except BaseException:
        study.tell(trial, state=TrialState.FAIL)
        raise
    return study.tell(trial, value)


class StudyObjective:
    """Callable for `study.optimize`: one configuration over all seeds, logged under the study's parent run."""

    def __init__(
        self,
        ctx: StudyContext,
        study: optuna.Study,
        threads: int | None,
        baseline_threads: int | None = None,
        devices: dict[str, Any] | None = None,
        pools: dict[str, SlotPool] | None = None,
    ):
        self.ctx, self.study, self.threads = ctx, study, threads
        self.baseline_threads = baseline_threads or threads
        self.devices = devices
        """What this worker process runs on (`workbench.study.devices.apply`), recorded on every trial it runs."""
        self.stores_full = False
        """A trial failed because a store's disk is full: the worker stops (`worker._run`)."""
        self.pools = pools if pools is not None else {}
        """Device slots that run a configuration's seeds side by side (`workbench.study.slots`): "trials" for
        this worker's own, "baseline" for the baseline's (every device, while it runs alone)."""

    def __call__(self, trial: optuna.Trial):
        spec = self.ctx.spec
        try:
            params = suggest(trial, spec)
        except ConfigError as err:  # recorded as any trial's ConfigError (failfast stops the study with it)
            trial.set_user_attr(attrs.FAIL_REASON, tracking.failure_reason(err))
            trial.set_user_attr(attrs.CONFIG_ERROR, str(err))
            log.warning(f"trial {trial.number} failed: {tracking.failure_reason(err)}")
            raise
        is_baseline = bool(trial.user_attrs.get(attrs.BASELINE))
        # Without a reference mu yet (the baseline, or the first trial of a study without one), this trial
        # measures mu itself and its median measured mu becomes the study's reference.
        mu = self.study.user_attrs.get(attrs.REFERENCE_MU)
        if "x" in params:
            ratio = params.get("replay.ratio", spec.trial_config({}, 0).replay.ratio)
            if not knobs.feasible(params["x"], ratio):
                self._skip(trial, f"x = {params['x']} < y = {ratio}: capacity below batch_size")
        if not is_baseline and not calibrated(self.study) and _baseline_waiting(self.study):
            # A baseline enqueued again on resume stands behind the points enqueued at creation; it runs first.
            self._defer(
                trial, params, "the on-policy baseline runs first (it sets the study's reference mu and target)"
            )
        twin = same_params(self.study, trial.number, params)
        if twin is not None:  # a sampler proposing a configuration already run: do not train it twice
            self._skip(trial, f"same configuration as trial {twin}")
        if not is_baseline:
            self._past_decline(trial, params)
        threads = self.baseline_threads if is_baseline else self.threads
        return self.evaluate(trial, params, is_baseline=is_baseline, mu=mu, threads=threads)

    def _defer(self, trial: optuna.Trial, params: dict[str, Any], reason: str):
        """Queue `params` again behind the waiting trials and skip this one."""
        kept = (attrs.POINT, attrs.REQUEUED_FROM, attrs.LR_EXTENSION)
        self.study.enqueue_trial(params, user_attrs={k: trial.user_attrs[k] for k in kept if k in trial.user_attrs})
        self._skip(trial, f"deferred: {reason}")

    def _past_decline(self, trial: optuna.Trial, params: dict[str, Any]) -> None:
        """An lr-sweep point whose arm declined towards it is skipped (`lr_sweep.held`); one whose deciding lrs are
        still to run is deferred behind a trial that can run now, or, with none, waits here for them."""
        spec = self.ctx.spec
        hold = lr_sweep.held(self.study, spec, params)
        while hold is not None and hold.kind == "wait":
            view = lr_sweep.View(self.study)  # one read of the study for every waiting trial's question
            if any(
                getattr(lr_sweep.held(self.study, spec, t.system_attrs.get("fixed_params", {}), view), "kind", None)
                != "wait"
                for t in view.waiting()
            ):
                self._defer(trial, params, hold.reason)
            trial.set_user_attr(attrs.PROGRESS, hold.reason)
            time.sleep(HOLD_POLL_SECONDS)
            hold = lr_sweep.held(self.study, spec, params)
        if hold is not None:
            trial.set_user_attr(attrs.LR_PAST_DECLINE, True)
            log.info(f"trial {trial.number} not trained ({fmt_params(params)}): {hold.reason}")
            self._skip(trial, hold.reason)

    @staticmethod
    def _skip(trial: optuna.Trial, reason: str):
        trial.set_user_attr(attrs.SKIPPED, True)
        trial.set_user_attr(attrs.SKIP_REASON, reason)
        raise optuna.TrialPruned(f"not trained: {reason}")

    def evaluate(
        self,
        trial: optuna.Trial,
        params: dict[str, Any],
        *,
        is_baseline: bool,
        mu: float | None,
        threads: int | None,
        arm: str | None = None,
        extra_metrics: dict[str, float] | None = None,
        seeds: list[int] | None = None,
    ):
        """Train `params` once per seed (the spec's, or `seeds`) under an MLflow trial run; return the objective
        value(s).

        `arm` tags a run that is not a sampler proposal (`predicted`: the fitted optimum run by `study verify`;
        `confirm`: a configuration re-run on fresh seeds by `study confirm`).
        """
        spec, ctx = self.ctx.spec, self.ctx
        seeds = seeds or spec.seed_list
        target = self.study.user_attrs.get(attrs.TARGET)
        which = "baseline" if is_baseline and "baseline" in self.pools else "trials"
        pool = self.pools.get(which)
        limited = pool is not None and pool.limits is not None and pool.limits.any
        pool = pool if len(seeds) > 1 or limited else None  # a lone seed runs in the worker unless it is watched
        if pool is not None and len(pool.slots) > 1 and pool.slots[0].kind == "cpu":
            threads = len(pool.slots[0].devices)  # a slot's cores
        configs = [
            spec.trial_config(params, seed, mu=mu, threads=threads, tracking_uri=ctx.tracking_uri, target=target)
            for seed in seeds
        ]
        log.info(
            f"trial {trial.number} starts: {fmt_params(params) or 'the base configuration'}"
            f"{' (the on-policy baseline)' if is_baseline else ''}{f' ({arm})' if arm else ''}, seeds {', '.join(map(str, seeds))}"
        )
        tags = {
            tracking.STUDY: spec.name,
            tracking.TRIAL_NUMBER: str(trial.number),
            tracking.OPTUNA_TRIAL_NUMBER: str(trial.number),
        }
        if arm:
            tags[tracking.ARM] = arm
        if trial.user_attrs.get(attrs.EXTENDS) is not None:
            tags[tracking.EXTENDS] = str(trial.user_attrs[attrs.EXTENDS])
        run = self._trial_run(trial, params, seeds, configs, tags, arm=arm, is_baseline=is_baseline)
        try:
            with tracking.run_lifecycle(run, stopped=tracking.STATUS_PRUNED):
                if extra_metrics:
                    run.log_metrics(extra_metrics, step=0)
                results = self._train_seeds(trial, run, configs, tags, pool, which, arm=arm, is_baseline=is_baseline)
                summary = self._record(trial, run, configs, results, mu, seeds)
        except TrialStopped as err:
            raise optuna.TrialPruned(str(err)) from None
        except BaseException as err:
            self._failed(trial, err)
            raise
        values = [summary[name] for name in spec.objectives]
        trial.set_user_attr(attrs.SUMMARY, summary)
        log.info(
            f"trial {trial.number} done: {fmt_params(params)} -> "
            + ", ".join(f"{n} {v:.4g}" for n, v in zip(spec.objectives, values))
        )
        return values[0] if len(values) == 1 else values

    def _trial_run(self, trial, params, seeds, configs, tags, *, arm, is_baseline) -> tracking.RunLogger:
        """The trial's MLflow run (a child of the study's), its knobs, seeds and baseline flag logged."""
        try:
            run = tracking.RunLogger(
                self.ctx.tracking_uri,
                self.ctx.spec.name,
                run_name=f"trial {trial.number}" + (f" ({arm})" if arm else ""),
                parent_run_id=self.study.user_attrs[attrs.PARENT_RUN],
                tags={**tags, tracking.KIND: tracking.KIND_TRIAL},
                outage_s=configs[0].tracking.outage_s,
            )
            trial.set_user_attr(attrs.RUN, run.run_id)
            if self.devices:
                trial.set_user_attr(attrs.DEVICES, self.devices)
            run.log_params(
                {
                    **{f"{tracking.PARAM_KNOB_PREFIX}{k}": v for k, v in params.items()},
                    tracking.PARAM_SEEDS: ",".join(map(str, seeds)),
                    tracking.PARAM_BASELINE: is_baseline,
                }
            )
        except Exception as err:  # the tracking server away: the trial fails with that reason (failfast reads it)
            # (also when it leaves between the run's creation and its params: a window a study's outage can hit)
            trial.set_user_attr(attrs.FAIL_REASON, tracking.failure_reason(err))
            log.warning(f"trial {trial.number} failed: {tracking.failure_reason(err)}")
            raise
        return run

    def _train_seeds(self, trial, run, configs, tags, pool, which, *, arm, is_baseline) -> list[TrialResult]:
        """One seed run per config, in the worker's slots (`pool`) or in this process; the first seed reports to
        the pruner."""
        spec = self.ctx.spec
        seed_runs = [
            dict(
                parent_run_id=run.run_id,
                run_name=f"trial {trial.number} seed {cfg.seed}",
                tags={**tags, tracking.KIND: tracking.KIND_SEED, tracking.SEED: str(cfg.seed)},
            )
            for cfg in configs
        ]
        hooks = [
            _reporting(
                trial,
                i,
                len(configs),
                cfg.budget.compute_units,
                self._pruning_hook(trial, cfg.eval.target_accuracy, cfg.budget.compute_units, cfg.eval.metric)
                if (i == 0 and spec.pruner and not arm and not (is_baseline and spec.pruner == "compute"))
                else None,
            )
            for i, cfg in enumerate(configs)
        ]
        if pool is None:
            return [run_trial(cfg, on_eval=hook, **kw) for cfg, kw, hook in zip(configs, seed_runs, hooks)]
        try:
            return pool.run(list(zip(configs, seed_runs)), hooks)
        finally:
            if which == "baseline":  # its devices go to the other workers now
                self.pools.pop("baseline").close()

    def _record(self, trial, run, configs, results, mu, seeds) -> dict[str, float]:
        """The seeds' values at the study's target and mu, recorded on the Optuna trial and the MLflow run."""
        spec = self.ctx.spec
        mu = self._reference_mu(mu, results, run)
        target = self._target(configs[0].eval.target_accuracy, results, run, configs[0].eval.metric)
        per_seed = [
            {
                **seed_values(r, target, mu, cfg.batch_size, spec.estimator, cfg.budget.compute_units, cfg.eval.metric),
                "seed": cfg.seed,
            }
            for r, cfg in zip(results, configs)
        ]
        summary = aggregate(per_seed)
        trial.set_user_attr(attrs.PER_SEED, per_seed)
        trial.set_user_attr(attrs.SEEDS, seeds)
        trial.set_user_attr(attrs.CENSORED_SEEDS, int(summary["censored_seeds"]))
        trial.set_user_attr(attrs.REFERENCE_MU, mu)
        run.log_metrics({f"{tracking.STUDY_METRIC}{k}": v for k, v in summary.items()}, step=0)
        run.log_text(json.dumps(per_seed, indent=1), tracking.PER_SEED_ARTIFACT)
        return summary

    def _failed(self, trial: optuna.Trial, err: BaseException) -> None:
        """Record why the trial failed (Ctrl-C, a full disk, a configuration that cannot run, a crash)."""
        if isinstance(err, KeyboardInterrupt):
            trial.set_user_attr(attrs.FAIL_REASON, tracking.STATUS_INTERRUPTED)
            trial.set_user_attr(attrs.INTERRUPTED, True)
            return
        reason = tracking.failure_reason(err)
        if faults.disk_full(err):  # nothing more can be written: the worker stops after this trial
            self.stores_full = True
            return
        trial.set_user_attr(attrs.FAIL_REASON, reason)
        if isinstance(err, ConfigError):  # a configuration that cannot run: it stops the study (failfast)
            trial.set_user_attr(attrs.CONFIG_ERROR, str(err))
        log.warning(f"trial {trial.number} failed: {reason}")

    def _reference_mu(self, mu: float | None, results: list[TrialResult], run: tracking.RunLogger) -> float:
        """The study's reference mu; the first trial to finish without one sets it (median measured mu)."""
        if mu is None:
            mu = self.study.user_attrs.get(attrs.REFERENCE_MU)  # another worker may have set it meanwhile
        if mu is None:
            mu = statistics.median(r.metrics[tracking.FINAL_MU] for r in results)
            self.study.set_user_attr(attrs.REFERENCE_MU, mu)
            run.set_tags({tracking.REFERENCE_MU: repr(float(mu))})
        return mu

    def _target(
        self, configured: float, results: list[TrialResult], run: tracking.RunLogger, metric: str = "accuracy"
    ) -> float:
        """The study's target accuracy; with `target_accuracy: auto`, the first trial to finish without one (the
        baseline) sets it from its own curves (`workbench.estimators.auto_target`)."""
        target = self.study.user_attrs.get(attrs.TARGET)
        if target is not None:
            return float(target)
        if self.ctx.spec.target_accuracy != "auto":
            target = configured
        else:
            curves = [([e["compute_units"] for e in r.evals], readings(r.evals, metric)) for r in results]
            target = auto_target(curves, self.ctx.spec.target_gain_fraction)
            log.info(f"target accuracy set from this trial's curves: {target:g}")
        self.study.set_user_attr(attrs.TARGET, target)
        run.set_tags({tracking.TARGET_ACCURACY: repr(float(target))})
        return float(target)

    def _pruning_hook(self, trial: optuna.Trial, target: float, budget: float | None, metric: str = "accuracy"):
        if self.ctx.spec.pruner == "compute":
            pruner = ComputePruner(target, budget, self._incumbent_high())

            def compute_hook(row: dict[str, float]) -> None:
                trial.report(row["compute_units"], int(row["step"]))  # the curve, for the dashboard
                why = pruner.observe(row["compute_units"], row[metric])
                if why:
                    trial.set_user_attr(attrs.PRUNE_REASON, why)
                    raise TrialStopped(f"pruned at {row['compute_units']:.4g} units: {why}")

            return compute_hook

        def hook(row: dict[str, float]) -> None:
            # Lower is better for a minimised objective: report the negated held-out reading.
            value = -row[metric] if self.ctx.spec.directions[0] == "minimize" else row[metric]
            trial.report(value, int(row["step"]))
            if trial.should_prune():
                raise TrialStopped(f"pruned at step {int(row['step'])} ({metric} {row[metric]:.3f})")

        return hook

    def _incumbent_high(self) -> float | None:
        """The upper end of the 95% interval of the best complete sampler trial (the baseline included)."""
        best = None
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            summary = t.user_attrs.get(attrs.SUMMARY) or {}
            high = summary.get("compute_to_target_ci_high")
            if t.user_attrs.get(attrs.ARM) or high is None or summary.get("censored_seeds"):
                continue
            if best is None or summary["compute_to_target"] < best[0]:
                best = (summary["compute_to_target"], high)
        return None if best is None or best[1] != best[1] else float(best[1])
