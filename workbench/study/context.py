"""A study's handles: its spec, its Optuna storage and MLflow store, and the Optuna study itself.

`context` resolves the storage URL and the tracking URI once; `create_or_load` creates the study (with its
baseline and points enqueued and its MLflow parent run) or loads it to resume.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback

from workbench import faults, tracking
from workbench.config import ConfigError, build_config, resolve_tracking_uri
from workbench.study import attrs, lr_sweep, resume
from workbench.study.spec import StudySpec
from workbench.study.storage import DEFAULT_GRACE, DEFAULT_HEARTBEAT, default_storage_url, open_storage

log = logging.getLogger(__name__)

optuna.logging.set_verbosity(optuna.logging.ERROR)  # failures are reported in one line by the objective
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


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
        run_id = trial.user_attrs.get(attrs.RUN)
        if run_id:
            tracking.kill_run_tree(self.tracking_uri, run_id, "worker lost (no heartbeat): trial retried")


def context(
    spec: StudySpec, storage: str | None = None, tracking_uri: str | None = None, spec_path: str = ""
) -> StudyContext:
    """The study's handles: the storage and tracking URI given, else the spec's, else the defaults."""
    return StudyContext(
        spec,
        storage or spec.storage or default_storage_url(),
        resolve_tracking_uri(tracking_uri or spec.tracking_uri),
        spec_path=str(spec_path),
        heartbeat_interval=int(os.environ.get("WORKBENCH_HEARTBEAT_INTERVAL", DEFAULT_HEARTBEAT)),
        grace_period=int(os.environ.get("WORKBENCH_GRACE_PERIOD", DEFAULT_GRACE)),
    )


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
    """Create the study (with its baseline enqueued and its MLflow parent run) or load it to resume; a store whose
    disk is full (a new store's tables cannot even be written) stops it in one line (`tracking.StoresFull`)."""
    try:
        return _create_or_load(ctx)
    except Exception as err:
        if faults.disk_full(err):
            raise tracking.StoresFull(stores_full(ctx)) from None
        raise


def stores_full(ctx: StudyContext) -> str:
    """The one line of a study stopped by a full disk: which stores, the space left, how to resume."""
    where = []
    for what, url in (("Optuna", ctx.storage_url), ("MLflow", ctx.tracking_uri)):
        if url.startswith("sqlite:///"):
            folder = Path(url[len("sqlite:///") :]).parent
            with contextlib.suppress(OSError):
                where.append(f"{what} in {folder}: {shutil.disk_usage(folder).free / 2**20:.1f} MiB free")
    return (
        f"the stores' disk is full ({'; '.join(where) or 'a store refused a write: disk full'}): the study stops, and"
        f" what it recorded stays readable; free some space, then `workbench study run {ctx.spec_path or ctx.spec.name}`"
        " resumes it"
    )


def _create_or_load(ctx: StudyContext) -> optuna.Study:
    spec = ctx.spec
    directions = spec.directions
    study = optuna.create_study(
        study_name=spec.name,
        storage=ctx.storage(),
        directions=directions,
        sampler=make_sampler(spec),
        pruner=make_pruner(spec),
        load_if_exists=True,
    )
    if [d.name.lower() for d in study.directions] != directions:
        raise ConfigError(
            f"objective: study {spec.name!r} already exists with directions {[d.name.lower() for d in study.directions]}"
        )
    user_attrs = study.user_attrs
    if attrs.SPEC not in user_attrs:
        study.set_user_attr(attrs.SPEC, spec.model_dump(mode="json"))
        if spec.compute_mu is not None:
            study.set_user_attr(attrs.REFERENCE_MU, spec.compute_mu)
        if spec.target_accuracy != "auto":
            study.set_user_attr(attrs.TARGET, spec.fixed_target or build_config(spec.base).eval.target_accuracy)
        if spec.baseline:
            study.enqueue_trial(spec.baseline_params(), user_attrs={attrs.BASELINE: True})
        for point in spec.points:
            study.enqueue_trial(point, user_attrs={attrs.POINT: True})
    else:  # resumed: a spec edited since may add points, not change a categorical's choices
        resume.check(spec, user_attrs[attrs.SPEC])
        added = resume.new_points(spec, user_attrs[attrs.SPEC])
        for point in added:
            study.enqueue_trial(point, user_attrs={attrs.POINT: True})
        if added:
            study.set_user_attr(
                attrs.SPEC, {**user_attrs[attrs.SPEC], "points": [*user_attrs[attrs.SPEC].get("points", []), *added]}
            )
            log.info(f"study {spec.name}: {len(added)} point(s) added to the spec since it was created, queued")
        # an lr sweep's extensions are queued as its trials finish; a finished study resumed with a larger
        # `lr_extend` (or one stopped between a trial's end and that queueing) has no trial left to queue them
        lr_sweep.extend(study, spec)
    if attrs.PARENT_RUN in user_attrs and not tracking.run_exists(ctx.tracking_uri, user_attrs[attrs.PARENT_RUN]):
        # the Optuna record resumed against a new tracking store (a study carried to another machine by its record)
        log.warning(
            f"study {spec.name}: its MLflow parent run is not in {tracking.redact_url(ctx.tracking_uri)}; a new one"
            " is made there (the earlier trials' curves stay in the store they were logged to)"
        )
        user_attrs = {k: v for k, v in user_attrs.items() if k != attrs.PARENT_RUN}
    if attrs.PARENT_RUN not in user_attrs:
        parent = tracking.RunLogger(
            ctx.tracking_uri,
            spec.name,
            run_name=f"study {spec.name}",
            tags={
                tracking.STUDY: spec.name,
                tracking.KIND: tracking.KIND_STUDY,
                tracking.SAMPLER: spec.sampler,
                tracking.OBJECTIVE: ",".join(spec.objectives),
                tracking.STORAGE: tracking.redact_url(ctx.storage_url),
            },
        )
        parent.log_params(
            {
                "n_trials": spec.n_trials,
                "seeds": ",".join(map(str, spec.seed_list)),
                "target_accuracy": spec.target_accuracy,
                "target_gain_fraction": spec.target_gain_fraction,
                "estimator": spec.estimator,
            }
        )
        if study.user_attrs.get(attrs.TARGET) is not None:
            parent.set_tags({tracking.TARGET_ACCURACY: repr(float(study.user_attrs[attrs.TARGET]))})
        study.set_user_attr(attrs.PARENT_RUN, parent.run_id)
    else:
        tracking.set_run_status(ctx.tracking_uri, user_attrs[attrs.PARENT_RUN], "RUNNING")  # resumed
    return study


def calibrated(study: optuna.Study) -> bool:
    """Whether the study's reference mu and target accuracy are known (the baseline sets whichever the spec left
    open); until then other trials wait, since they would be accounted and scored against them."""
    return study.user_attrs.get(attrs.REFERENCE_MU) is not None and study.user_attrs.get(attrs.TARGET) is not None


def load_study(name: str, storage_url: str, storage=None, **kwargs) -> optuna.Study:
    """Load study `name`; a missing one is a ConfigError naming it and its storage (password removed)."""
    try:
        return optuna.load_study(study_name=name, storage=storage or open_storage(storage_url), **kwargs)
    except KeyError:
        raise ConfigError(f"study: no study named {name!r} in {tracking.redact_url(storage_url)}") from None


def load_existing(ctx: StudyContext, sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
    """The study of `ctx.spec` as stored, with the spec's sampler unless another is given."""
    return load_study(
        ctx.spec.name,
        ctx.storage_url,
        ctx.storage(),
        sampler=sampler or make_sampler(ctx.spec),
        pruner=make_pruner(ctx.spec),
    )
