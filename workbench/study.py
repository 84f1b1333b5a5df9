"""The study driver: Optuna samples buffer settings, every trial is a real training run logged to MLflow.

Mapping (design §6):
- One Optuna trial = one configuration of the search space. It trains once per seed of the spec and its value is
  the median over seeds. MLflow mirrors that: one parent run per study, one child run per Optuna trial (tags
  `workbench.study`, `workbench.trial_number`; the Optuna trial stores `mlflow_run_id`), and under it one run per
  seed holding the curves (`workbench.kind` = `seed`).
- Compute is compared at one mu per study: `compute_mu` of the spec, or the median measured mu of the on-policy
  baseline (the first trial, run before any other). Every other trial then runs with `compute.mu` fixed to it,
  so budgets and compute-to-target are in the same units; each trial still logs its own measured mu.
- Censoring: a seed that never reaches the target gets compute_to_target = U·(1 + (target - best)/target), with
  U its total compute. That ranks it after every seed that reached the target within the same budget, and among
  censored seeds closer misses rank better, so the sampler learns from them instead of ignoring them. The trial
  records how many seeds were censored (`censored_seeds`) and MLflow keeps the raw curves.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from workbench.config import ConfigError
from workbench.storage import DEFAULT_GRACE, DEFAULT_HEARTBEAT, default_storage_url, open_storage
from workbench.study_spec import StudySpec, feasible_space_size
from workbench.tracking import TrialLogger, redact_url, resolve_tracking_uri

optuna.logging.set_verbosity(optuna.logging.ERROR)  # failures are reported in one line by the objective
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

ATTR_PARENT_RUN = "mlflow_parent_run_id"
ATTR_MU = "reference_mu"
ATTR_SPEC = "spec"
MU_WAIT_SECONDS = 3600


@dataclass
class StudyContext:
    spec: StudySpec
    storage_url: str
    tracking_uri: str
    heartbeat_interval: int = DEFAULT_HEARTBEAT
    grace_period: int = DEFAULT_GRACE
    spec_path: str = ""
    """The spec file, handed to worker processes."""

    def storage(self):
        return open_storage(self.storage_url, self.heartbeat_interval, self.grace_period, self._on_stale_trial)

    def _on_stale_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """A worker died mid-trial (no heartbeat): retry the configuration, end its MLflow runs as KILLED."""
        RetryHeartbeatStaleTrialCallback(max_retry=2)(study, trial)
        run_id = trial.user_attrs.get("mlflow_run_id")
        if run_id:
            kill_runs(self.tracking_uri, run_id, "worker lost (no heartbeat): trial retried")


def context(spec: StudySpec, storage: str | None = None, tracking_uri: str | None = None, spec_path: str = "") -> StudyContext:
    return StudyContext(
        spec,
        storage or spec.storage or default_storage_url(),
        resolve_tracking_uri(tracking_uri or spec.tracking_uri),
        spec_path=str(spec_path),
        heartbeat_interval=int(os.environ.get("WORKBENCH_HEARTBEAT_INTERVAL", DEFAULT_HEARTBEAT)),
        grace_period=int(os.environ.get("WORKBENCH_GRACE_PERIOD", DEFAULT_GRACE)),
    )


def kill_runs(tracking_uri: str, run_id: str, reason: str) -> None:
    """End a trial's MLflow run and its still-running seed runs as KILLED."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    run = client.get_run(run_id)
    children = client.search_runs(
        [run.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run_id}' and attributes.status = 'RUNNING'"
    )
    for r in [*children, run]:
        if r.info.status == "RUNNING":
            client.set_tag(r.info.run_id, "workbench.failure", reason)
            client.set_tag(r.info.run_id, "workbench.status", "killed")
            client.set_terminated(r.info.run_id, status="KILLED")


# ---------------------------------------------------------------- samplers and study creation


def make_sampler(spec: StudySpec) -> optuna.samplers.BaseSampler:
    seed = spec.sampler_seed
    if spec.sampler == "grid":
        return optuna.samplers.GridSampler(spec.grid(), seed=seed)
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.sampler == "qmc":
        return optuna.samplers.QMCSampler(seed=seed)
    if spec.sampler == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    if spec.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    # TPE: multivariate and group handle the conditional knobs of strategies; a few random trials first.
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=min(5, spec.n_trials))


def make_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    if spec.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)
    return optuna.pruners.NopPruner()


def create_or_load(ctx: StudyContext) -> optuna.Study:
    """Create the study (with its baseline enqueued and its MLflow parent run) or load it to resume."""
    spec = ctx.spec
    storage = ctx.storage()
    directions = spec.directions
    study = optuna.create_study(
        study_name=spec.name,
        storage=storage,
        directions=directions,
        sampler=make_sampler(spec),
        pruner=make_pruner(spec),
        load_if_exists=True,
    )
    if [d.name.lower() for d in study.directions] != directions:
        raise ConfigError(f"objective: study {spec.name!r} already exists with directions {[d.name.lower() for d in study.directions]}")
    attrs = study.user_attrs
    if ATTR_SPEC not in attrs:
        study.set_user_attr(ATTR_SPEC, spec.model_dump(mode="json"))
        if spec.compute_mu is not None:
            study.set_user_attr(ATTR_MU, spec.compute_mu)
        if spec.baseline:
            study.enqueue_trial(spec.baseline_params(), user_attrs={"baseline": True})
        for point in spec.points:
            study.enqueue_trial(point, user_attrs={"point": True})
    if ATTR_PARENT_RUN not in attrs:
        parent = TrialLogger(
            ctx.tracking_uri,
            spec.name,
            run_name=f"study {spec.name}",
            tags={
                "workbench.study": spec.name,
                "workbench.kind": "study",
                "workbench.sampler": spec.sampler,
                "workbench.objective": ",".join(spec.objectives),
                "workbench.storage": redact_url(ctx.storage_url),
            },
        )
        parent.log_params({"n_trials": spec.n_trials, "seeds": ",".join(map(str, spec.seed_list)), "target_accuracy": spec.target_accuracy})
        study.set_user_attr(ATTR_PARENT_RUN, parent.run_id)
    else:
        from mlflow import MlflowClient

        MlflowClient(ctx.tracking_uri).update_run(attrs[ATTR_PARENT_RUN], status="RUNNING")  # resumed
    return study


def load_existing(ctx: StudyContext, name: str | None = None) -> optuna.Study:
    name = name or ctx.spec.name
    try:
        return optuna.load_study(study_name=name, storage=ctx.storage(), sampler=make_sampler(ctx.spec), pruner=make_pruner(ctx.spec))
    except KeyError:
        raise ConfigError(f"study: no study named {name!r} in {redact_url(ctx.storage_url)}") from None


# ---------------------------------------------------------------- one trial


def suggest(trial: optuna.Trial, spec: StudySpec) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for key, dim in spec.search_space.items():
        if not dim.active(params):
            continue  # a conditional knob whose condition does not hold (e.g. another strategy's parameter)
        if dim.choices is not None:
            params[key] = trial.suggest_categorical(key, dim.choices)
        elif dim.is_int:
            params[key] = trial.suggest_int(key, int(dim.low), int(dim.high), log=dim.log, step=int(dim.step or 1))
        else:
            params[key] = trial.suggest_float(key, dim.low, dim.high, log=dim.log, step=dim.step)
    return params


def seed_values(result_evals: list[dict], final: dict, spec: StudySpec, target: float, mu: float, batch_size: int) -> dict[str, float]:
    """One seed's objective values, re-accounted at the study's mu from the logged eval curve."""
    units = lambda e: (e["train_rollouts"] + mu * e["gen_rollouts"]) / (batch_size * (1.0 + mu))  # noqa: E731
    total = units(result_evals[-1])
    best = max(e["accuracy"] for e in result_evals)
    reached = next((e for e in result_evals if e["accuracy"] >= target), None)
    penalty = 1.0 + (target - best) / target
    return {
        "best_accuracy": best,
        "final_accuracy": result_evals[-1]["accuracy"],
        "compute_units": units(next(e for e in result_evals if e["accuracy"] == best)),
        "total_units": total,
        "censored": 0.0 if reached else 1.0,
        "compute_to_target": units(reached) if reached else total * penalty,
        "wall_to_target": reached["seconds"] if reached else result_evals[-1]["seconds"] * penalty,
        "mu_measured": final.get("final/mu_measured", float("nan")),
    }


class StudyObjective:
    """Callable for `study.optimize`: one configuration over all seeds, logged under the study's parent run."""

    def __init__(self, ctx: StudyContext, study: optuna.Study, threads: int | None, say: Callable[[str], None], baseline_threads: int | None = None):
        self.ctx, self.study, self.threads, self.say = ctx, study, threads, say
        self.baseline_threads = baseline_threads or threads

    def __call__(self, trial: optuna.Trial):
        spec = self.ctx.spec
        params = suggest(trial, spec)
        is_baseline = bool(trial.user_attrs.get("baseline"))
        # Without a reference mu yet (the baseline, or the first trial of a study without one), this trial
        # measures mu itself and its median measured mu becomes the study's reference.
        mu = self.study.user_attrs.get(ATTR_MU)
        if "x" in params:
            ratio = params.get("replay.ratio", spec.trial_config({}, 0).replay.ratio)
            if params["x"] < ratio:
                trial.set_user_attr("skipped", True)
                trial.set_user_attr("skip_reason", f"x = {params['x']} < y = {ratio}: capacity below batch_size")
                raise optuna.TrialPruned(f"infeasible: x < y ({params['x']} < {ratio})")
        twin = _same_params(self.study, trial.number, params)
        if twin is not None:  # a sampler proposing a configuration already run: do not train it twice
            trial.set_user_attr("skipped", True)
            trial.set_user_attr("skip_reason", f"same configuration as trial {twin}")
            raise optuna.TrialPruned(f"duplicate of trial {twin}")
        threads = self.baseline_threads if is_baseline else self.threads
        return self.evaluate(trial, params, is_baseline=is_baseline, mu=mu, threads=threads)

    def evaluate(
        self, trial: optuna.Trial, params: dict[str, Any], *, is_baseline: bool, mu: float | None, threads: int | None,
        arm: str | None = None, extra_metrics: dict[str, float] | None = None,
    ):
        """Train `params` once per seed of the spec under an MLflow trial run; return the objective value(s).

        `arm` tags a run that is not a sampler proposal (`predicted`: the fitted optimum run by `study verify`).
        """
        from workbench.trainer import TrialStopped, run_trial

        spec, ctx = self.ctx.spec, self.ctx
        configs = [spec.trial_config(params, seed, mu=mu, threads=threads) for seed in spec.seed_list]
        parent = self.study.user_attrs[ATTR_PARENT_RUN]
        tags = {"workbench.study": spec.name, "workbench.trial_number": str(trial.number), "optuna.trial_number": str(trial.number)}
        if arm:
            tags["workbench.arm"] = arm
        logger = TrialLogger(ctx.tracking_uri, spec.name, run_name=f"trial {trial.number}" + (f" ({arm})" if arm else ""),
                             parent_run_id=parent, tags={**tags, "workbench.kind": "trial"})
        trial.set_user_attr("mlflow_run_id", logger.run_id)
        logger.log_params({**{f"knob.{k}": v for k, v in params.items()}, "seeds": ",".join(map(str, spec.seed_list)), "baseline": is_baseline})
        if extra_metrics:
            logger.log_metrics(extra_metrics, step=0)
        try:
            results = []
            for i, cfg in enumerate(configs):
                on_eval = self._pruning_hook(trial) if (i == 0 and spec.pruner and not arm) else None
                results.append(
                    run_trial(
                        cfg,
                        tracking_uri=ctx.tracking_uri,
                        parent_run_id=logger.run_id,
                        run_name=f"trial {trial.number} seed {cfg.seed}",
                        tags={**tags, "workbench.kind": "seed", "workbench.seed": str(cfg.seed)},
                        on_eval=on_eval,
                    )
                )
            if mu is None:
                mu = self.study.user_attrs.get(ATTR_MU)  # another worker may have set it meanwhile
            if mu is None:
                mu = statistics.median(r.metrics["final/mu"] for r in results)
                self.study.set_user_attr(ATTR_MU, mu)
                logger.set_tags({"workbench.reference_mu": repr(float(mu))})
            target = configs[0].eval.target_accuracy
            per_seed = [
                {**seed_values(r.evals, r.metrics, spec, target, mu, cfg.batch_size), "seed": cfg.seed}
                for r, cfg in zip(results, configs)
            ]
            summary = {k: statistics.median(v[k] for v in per_seed) for k in per_seed[0] if k != "seed"}
            summary["censored_seeds"] = sum(v["censored"] for v in per_seed)
            trial.set_user_attr("per_seed", per_seed)
            trial.set_user_attr("censored_seeds", int(summary["censored_seeds"]))
            trial.set_user_attr("reference_mu", mu)
            logger.log_metrics({f"study/{k}": v for k, v in summary.items()}, step=0)
            logger.log_text(json.dumps(per_seed, indent=1), "per_seed.json")
            logger.set_tags({"workbench.status": "finished"})
            logger.end("FINISHED")
            values = [summary[name] for name in spec.objectives]
            trial.set_user_attr("summary", summary)
            self.say(f"trial {trial.number} done: {fmt_params(params)} -> " + ", ".join(f"{n} {v:.4g}" for n, v in zip(spec.objectives, values)))
            return values[0] if len(values) == 1 else values
        except TrialStopped as err:
            logger.set_tags({"workbench.status": "pruned", "workbench.failure": str(err)})
            logger.end("FINISHED")
            raise optuna.TrialPruned(str(err)) from None
        except KeyboardInterrupt:
            trial.set_user_attr("fail_reason", "interrupted")
            trial.set_user_attr("interrupted", True)
            logger.set_tags({"workbench.status": "interrupted", "workbench.failure": "KeyboardInterrupt"})
            logger.end("KILLED")
            raise
        except BaseException as err:
            reason = f"{type(err).__name__}: {err}"[:2000]
            trial.set_user_attr("fail_reason", reason)
            logger.set_tags({"workbench.status": "failed", "workbench.failure": reason})
            logger.end("FAILED")
            self.say(f"trial {trial.number} failed: {reason}")
            raise

    def _pruning_hook(self, trial: optuna.Trial):
        from workbench.trainer import TrialStopped

        def hook(row: dict[str, float]) -> None:
            # Lower is better for a minimised objective: report the negated held-out accuracy.
            value = -row["accuracy"] if self.ctx.spec.directions[0] == "minimize" else row["accuracy"]
            trial.report(value, int(row["step"]))
            if trial.should_prune():
                raise TrialStopped(f"pruned at step {int(row['step'])} (accuracy {row['accuracy']:.3f})")

        return hook


def fmt_params(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


# ---------------------------------------------------------------- workers


def counts(study: optuna.Study) -> dict[str, int]:
    """Trials by state; skipped proposals (x < y, or a configuration already run) and the runs of a fitted
    optimum (`study verify`, which are not sampler proposals and do not count towards n_trials) counted apart."""
    out = {s.name.lower(): 0 for s in TrialState}
    out["skipped"] = out["predicted"] = 0
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("skipped"):
            out["skipped"] += 1
        elif t.user_attrs.get("arm"):
            out["predicted"] += 1
        else:
            out[t.state.name.lower()] += 1
    return out


def run_worker(
    ctx: StudyContext,
    n_trials: int,
    threads: int | None = None,
    baseline_threads: int | None = None,
    say: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True),
) -> None:
    """Run trials of an existing study until `n_trials` are complete (or pruned); fault-tolerant.

    A trial that raises (NaN, exception, out of memory) fails with its reason and the worker goes on; trials of
    dead workers are failed by heartbeat and retried. Stops after `max_failures` failed trials.
    """
    study = load_existing(ctx)
    objective = StudyObjective(ctx, study, threads, say, baseline_threads)
    waited = 0.0
    while True:
        optuna.storages.fail_stale_trials(study)
        c = counts(study)
        done = c["complete"] + c["pruned"]
        if done >= n_trials:
            return
        if c["fail"] - _retried(study) >= ctx.spec.max_failures > 0:
            say(f"stopping: {c['fail']} failed trials (max_failures = {ctx.spec.max_failures})")
            return
        if c["skipped"] >= 10 * n_trials or _space_exhausted(study, ctx.spec):
            say("stopping: the search space has no untried feasible configuration left")
            return
        mu_known = study.user_attrs.get(ATTR_MU) is not None
        if not mu_known and _baseline_running(study):
            if waited >= MU_WAIT_SECONDS:
                raise RuntimeError("gave up waiting for the baseline trial to set the study's reference mu")
            time.sleep(2.0)  # another worker runs the baseline, which sets the study's reference mu
            waited += 2.0
            continue
        if done + c["running"] >= n_trials:
            time.sleep(2.0)  # the last trials are in flight elsewhere; stay to retry them if their worker dies
            continue
        study.optimize(objective, n_trials=1, catch=(Exception,), gc_after_trial=True)


def _same_params(study: optuna.Study, number: int, params: dict[str, Any]) -> int | None:
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING, TrialState.PRUNED)):
        if t.number != number and not t.user_attrs.get("skipped") and not t.user_attrs.get("arm") and t.params == params:
            return t.number
    return None


def _space_exhausted(study: optuna.Study, spec: StudySpec) -> bool:
    """A finite space (all knobs choices or stepped ranges) whose feasible configurations have all been run."""
    size = feasible_space_size(spec)
    if size is None:
        return False
    ran = {tuple(sorted(t.params.items())) for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
           if not t.user_attrs.get("skipped") and not t.user_attrs.get("arm")}
    return len(ran) >= size


def _baseline_pending(study: optuna.Study) -> bool:
    return any(t.user_attrs.get("baseline") and t.state in (TrialState.WAITING, TrialState.RUNNING) for t in study.get_trials(deepcopy=False))


def _baseline_running(study: optuna.Study) -> bool:
    return any(t.user_attrs.get("baseline") and t.state == TrialState.RUNNING for t in study.get_trials(deepcopy=False))


def _retried(study: optuna.Study) -> int:
    return sum(1 for t in study.get_trials(deepcopy=False) if "failed_trial" in t.system_attrs)


# ---------------------------------------------------------------- the driver: `workbench study run`


def finalize(ctx: StudyContext, study: optuna.Study) -> str | None:
    """Log the trial table to the parent run as an artifact; returns its CSV text."""
    from mlflow import MlflowClient

    parent = study.user_attrs.get(ATTR_PARENT_RUN)
    if not parent:
        return None
    table = trial_table(study)
    client = MlflowClient(ctx.tracking_uri)
    client.log_text(parent, table, "trials.csv")
    c = counts(study)
    for state, n in c.items():
        client.log_metric(parent, f"study/trials_{state}", n)
    mu = study.user_attrs.get(ATTR_MU)
    if mu is not None:
        client.set_tag(parent, "workbench.reference_mu", repr(float(mu)))
    return table


def trial_table(study: optuna.Study) -> str:
    """The study's trials as CSV: number, state, knobs, values, MLflow run id, failure reason."""
    import csv
    import io

    trials = study.get_trials(deepcopy=False)
    params = {t.number: t.params or t.user_attrs.get("knobs", {}) for t in trials}  # a verify arm keeps its knobs apart
    knobs = sorted({k for t in trials for k in params[t.number]})
    names = objective_names(study)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["number", "state", "arm", *knobs, *names, "predicted", "censored_seeds", "mlflow_run_id", "fail_reason"])
    for t in trials:
        values = t.values or [None] * len(names)
        writer.writerow(
            [t.number, t.state.name, t.user_attrs.get("arm", "baseline" if t.user_attrs.get("baseline") else "sampler"),
             *[params[t.number].get(k) for k in knobs], *values, t.user_attrs.get("predicted_compute_to_target"),
             t.user_attrs.get("censored_seeds"), t.user_attrs.get("mlflow_run_id"),
             t.user_attrs.get("fail_reason") or t.user_attrs.get("skip_reason")]
        )
    return buf.getvalue()


def objective_names(study: optuna.Study) -> list[str]:
    spec = study.user_attrs.get(ATTR_SPEC, {})
    obj = spec.get("objective", "compute_to_target")
    return [obj] if isinstance(obj, str) else list(obj)


def summary_lines(study: optuna.Study) -> list[str]:
    """Trials by state, the best configuration (or the Pareto front), the reference mu."""
    c = counts(study)
    lines = [
        f"study {study.study_name}: " + ", ".join(f"{n} {s}" for s, n in c.items() if n)
        + (f"; reference mu {study.user_attrs[ATTR_MU]:.3f}" if study.user_attrs.get(ATTR_MU) is not None else "")
    ]
    names = objective_names(study)
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if not complete:
        return lines + ["no complete trial yet"]
    if len(names) == 1:
        best = study.best_trial
        base = next((t for t in complete if t.user_attrs.get("baseline")), None)
        lines.append(f"best: trial {best.number} {fmt_params(best.params or best.user_attrs.get('knobs', {}))} -> {names[0]} {best.value:.4g}"
                     f" (censored seeds: {best.user_attrs.get('censored_seeds', 0)})")
        if base is not None and base.number != best.number and names[0].endswith("_to_target"):
            lines.append(f"on-policy baseline: trial {base.number} -> {base.value:.4g}; best/baseline = {best.value / base.value:.3f}")
        for t in complete:
            if t.user_attrs.get("arm") == "predicted":
                lines.append(f"fitted optimum run as trial {t.number} {fmt_params(t.user_attrs.get('knobs', {}))}: measured {t.value:.4g},"
                             f" predicted {t.user_attrs.get('predicted_compute_to_target', float('nan')):.4g}")
    else:
        lines.append("Pareto front (" + ", ".join(names) + "):")
        for t in sorted(study.best_trials, key=lambda t: t.values[0]):
            lines.append(f"  trial {t.number} {fmt_params(t.params)} -> " + ", ".join(f"{v:.4g}" for v in t.values))
    return lines


def run_study(
    ctx: StudyContext,
    n_trials: int,
    workers: int,
    say: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True),
    poll: float = 3.0,
) -> optuna.Study:
    """Create or resume the study, run its baseline, then `workers` local worker processes until done.

    Workers are `workbench study worker` subprocesses (the same path a remote machine uses). Ctrl-C stops them
    (their running trials are recorded as interrupted) and the next `study run` resumes up to `n_trials`.
    """
    import signal
    import subprocess

    study = create_or_load(ctx)
    cores = os.cpu_count() or 1
    threads = max(1, cores // max(workers, 1))
    say(f"study {ctx.spec.name}: {n_trials} trials, {workers} worker(s) x {threads} thread(s); storage {redact_url(ctx.storage_url)};"
        f" MLflow {redact_url(ctx.tracking_uri)}")
    _requeue_interrupted(study)

    def spawn() -> subprocess.Popen:
        cmd = [sys.executable, "-m", "workbench.cli", "study", "worker", ctx.spec_path, "--storage", ctx.storage_url,
               "--tracking-uri", ctx.tracking_uri, "--n-trials", str(n_trials), "--threads", str(threads),
               "--baseline-threads", str(cores)]
        # Own session: a terminal's Ctrl-C reaches the driver only, which forwards exactly one SIGINT.
        return subprocess.Popen(cmd, start_new_session=True)

    procs: list[subprocess.Popen] = []
    try:
        procs = [spawn()]
        if study.user_attrs.get(ATTR_MU) is None and _baseline_pending(study):
            # The first worker runs the baseline alone with every core (its measured mu is the study's
            # reference); the others start once it is known, so no core is oversubscribed.
            say(f"running the on-policy baseline first with {cores} thread(s) (it sets the study's reference mu)")
            _watch(study, procs, say, poll, until=lambda: study.user_attrs.get(ATTR_MU) is not None or not _baseline_pending(study))
        procs += [spawn() for _ in range(max(workers, 1) - 1)]
        _watch(study, procs, say, poll)
    except KeyboardInterrupt:
        say("interrupted: stopping workers (run `workbench study run` again to resume)")
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        finalize(ctx, study)
        raise
    finalize(ctx, study)
    _end_parent(ctx, study, "FINISHED" if counts(study)["complete"] + counts(study)["pruned"] >= n_trials else "FAILED")
    return study


def _watch(study: optuna.Study, procs, say, poll: float, until: Callable[[], bool] | None = None) -> None:
    """Print the trial counts when they change, until every worker exited (or `until()` holds)."""
    last = None
    while True:
        if until is not None and until():
            return
        alive = [p for p in procs if p.poll() is None]
        c = counts(study)
        line = ", ".join(f"{n} {s}" for s, n in c.items() if n) or "no trials yet"
        if line != last:
            say(f"[{time.strftime('%H:%M:%S')}] trials: {line}")
            last = line
        if not alive:
            bad = [p.returncode for p in procs if p.returncode not in (0, None)]
            if bad:
                raise RuntimeError(f"a worker exited with code {bad[0]}")
            return
        time.sleep(poll)


def _end_parent(ctx: StudyContext, study: optuna.Study, status: str) -> None:
    from mlflow import MlflowClient

    parent = study.user_attrs.get(ATTR_PARENT_RUN)
    if parent:
        MlflowClient(ctx.tracking_uri).set_terminated(parent, status=status)


def _requeue_interrupted(study: optuna.Study) -> None:
    """Enqueue again (once) the configurations whose trials were interrupted by Ctrl-C, so none is lost."""
    done = set(study.user_attrs.get("requeued", []))
    todo = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.FAIL and t.user_attrs.get("interrupted") and t.number not in done]
    for t in todo:
        attrs = {"requeued_from": t.number, **({"baseline": True} if t.user_attrs.get("baseline") else {})}
        study.enqueue_trial(t.params, user_attrs=attrs)
    if todo:
        study.set_user_attr("requeued", sorted(done | {t.number for t in todo}))
