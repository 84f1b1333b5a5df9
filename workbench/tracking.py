"""MLflow, in one place: the client, every tag, metric and artifact name the workbench writes or reads, one run
logger and the run lifecycle shared by trials and studies.

Runs are driven through `MlflowClient` with explicit run ids (no global active run), so a trial can run inside a
study worker and be a child of the study's parent run (`mlflow.parentRunId`). The layout (docs/studies.md, "MLflow"):

    study run      (KIND = "study")    one per study: trial table, reference mu
      trial run    (KIND = "trial")    one per Optuna trial: its knobs, the objective over seeds
        seed run   (KIND = "seed")     one training run: the flattened config, step metrics, curves
"""

from __future__ import annotations

import functools
import logging
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit, urlunsplit

from workbench import faults
from workbench.faults import disk_full as disk_full  # the study asks here whether its stores are full
from workbench.faults import unreachable

log = logging.getLogger(__name__)

# ---------------------------------------------------------------- names

PARENT_RUN = "mlflow.parentRunId"

# tags
KIND = "workbench.kind"
"""`study`, `trial` or `seed` (the values below)."""
KIND_STUDY, KIND_TRIAL, KIND_SEED = "study", "trial", "seed"
STATUS = "workbench.status"
"""How the run ended, in the workbench's words (the STATUS_* values below)."""
FAILURE = "workbench.failure"
"""Why a run did not finish (exception, pruned, interrupted, worker lost)."""
STUDY = "workbench.study"
TRIAL_NUMBER = "workbench.trial_number"
OPTUNA_TRIAL_NUMBER = "optuna.trial_number"
SEED = "workbench.seed"
SLOT = "workbench.slot"
"""The devices a seed ran on when a trial's seeds run side by side (`workbench.study.slots`): kind and ids."""
ARM = "workbench.arm"
"""A trial that is not a sampler proposal (`predicted`: the fitted optimum run by `study verify`)."""
EXTENDS = "workbench.extends"
"""On the runs of a `race` arm: the trial number whose configuration they run on more seeds."""
REFERENCE_MU = "workbench.reference_mu"
TARGET_ACCURACY = "workbench.target_accuracy"
"""On a study's parent run: the target accuracy its compute-to-target is measured at (set by the baseline for
`target_accuracy: auto`)."""
MODEL_PATH = "workbench.model_path"
DEVICE = "workbench.device"
TRAINER = "workbench.trainer"
"""Who trained a seed run: `workbench`, `trl` or `command` (`trainer.kind`)."""
SAMPLER = "workbench.sampler"
OBJECTIVE = "workbench.objective"
STORAGE = "workbench.storage"
"""The Optuna storage URL of a study, password removed."""

# run outcomes: the workbench's status tag and the MLflow run status it maps to
STATUS_FINISHED, STATUS_STOPPED, STATUS_PRUNED = "finished", "stopped", "pruned"
STATUS_INTERRUPTED, STATUS_FAILED, STATUS_KILLED = "interrupted", "failed", "killed"
MLFLOW_STATUS = {
    STATUS_FINISHED: "FINISHED",
    STATUS_STOPPED: "FINISHED",
    STATUS_PRUNED: "FINISHED",
    STATUS_INTERRUPTED: "KILLED",
    STATUS_KILLED: "KILLED",
    STATUS_FAILED: "FAILED",
}

# params of a trial run
PARAM_KNOB_PREFIX = "knob."
PARAM_SEEDS = "seeds"
PARAM_BASELINE = "baseline"

# step metrics read back by the analysis (the trainer logs more: see docs/trial.md)
EVAL_ACCURACY = "eval/accuracy"
EVAL_PASS_AT_K = "eval/pass_at_k"
EVAL_MEAN_AT_K = "eval/mean_at_k"
EVAL_DEMO_PROB = "eval/demo_prob"
EVAL_SAMPLE_ENTROPY = "eval/sample_entropy"
"""Mean per-token entropy of the held-out pass@k samples at the generation temperature (at the evaluations that
sample)."""
EVAL_MEAN_AT_K_AT_T = "eval/mean_at_k_t{:g}"
"""Sampled pass@1 at decoding temperature T (`.format(T)`; `eval.temperatures`)."""
EVAL_DEMO_PROB_AT_T = "eval/demo_prob_t{:g}"
"""The demonstrations' probability at decoding temperature T (`.format(T)`)."""
COMPUTE_UNITS = "compute/units"
POLICY_ENTROPY = "policy/entropy"
# the ledger, cumulative at each step (a trial command reports these too: docs/trainers.md)
GEN_ROLLOUTS = "compute/gen_rollouts"
"""Rollouts generated so far."""
TRAIN_ROLLOUTS = "compute/train_rollouts"
"""Rollout uses trained on so far (a rollout trained twice counts twice)."""
DISCARDED_ROLLOUTS = "compute/discarded_rollouts"
"""Rollouts dropped without ever being trained on (evicted from a full buffer, aged out past the horizon)."""
TRAINED_ONCE_ROLLOUTS = "compute/trained_once_rollouts"
"""Rollouts trained on at least once so far (a native trial's ledger: generated = trained once + held + discarded)."""
HELD_ROLLOUTS = "compute/held_rollouts"
"""Rollouts waiting untrained in the buffer now."""
GEN_SECONDS = "compute/gen_seconds"
TRAIN_SECONDS = "compute/train_seconds"

# final metrics of a seed run
FINAL = "final/"
FINAL_ACCURACY = "final/accuracy"
FINAL_BEST_ACCURACY = "final/best_accuracy"
FINAL_INITIAL_ACCURACY = "final/initial_accuracy"
FINAL_COMPUTE_UNITS = "final/compute_units"
FINAL_COMPUTE_TO_TARGET = "final/compute_to_target"
FINAL_CENSORED = "final/censored"
FINAL_MU = "final/mu"
FINAL_MU_MEASURED = "final/mu_measured"
FINAL_WALL_SECONDS = "final/wall_seconds"

# metrics of a trial run (objective values over seeds) and of the study run
STUDY_METRIC = "study/"
PREDICTED_COMPUTE_TO_TARGET = "study/predicted_compute_to_target"

# keys of a curve row (one evaluation in `CURVE_ARTIFACT`) beyond the fixed ones, each its metric's name less `eval/`
CURVE_SAMPLE_ENTROPY = EVAL_SAMPLE_ENTROPY.removeprefix("eval/")
CURVE_MEAN_AT_K_AT_T = EVAL_MEAN_AT_K_AT_T.removeprefix("eval/")
CURVE_DEMO_PROB_AT_T = EVAL_DEMO_PROB_AT_T.removeprefix("eval/")

# artifacts
CURVE_ARTIFACT = "eval/curve.json"
AGES_ARTIFACT = "replay/age_histogram.json"
PER_SEED_ARTIFACT = "per_seed.json"
TRIALS_ARTIFACT = "trials.csv"

MAX_BATCH = 1000  # MLflow log_batch limit on metrics per call


# ---------------------------------------------------------------- the client


@functools.lru_cache(maxsize=8)
def client(uri: str):
    """The `MlflowClient` of a tracking URI (one per process and URI)."""
    from mlflow import MlflowClient

    # its "Creating initial tables" noise, and the traceback it logs with every database error it then raises: the
    # workbench says what an error means in one line (a refused write, a full disk, a store away: docs/faults.md)
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    # and SQLAlchemy's "Error closing cursor" traceback when Ctrl-C lands inside a read of a SQLite store
    logging.getLogger("sqlalchemy.engine").setLevel(logging.CRITICAL)
    return MlflowClient(tracking_uri=uri)


def artifact_location(uri: str, experiment: str) -> str | None:
    """Where a new experiment keeps its artifacts: for a SQLite store, `mlruns/<experiment>/` beside the database
    file (the name with anything but letters, digits, `.`, `_` and `-` replaced by `_`), so the
    store and its artifacts (every run's curve) stay together whatever directory a study ran from (MLflow's own
    default is `./mlruns` under the working directory of the process that created the experiment). None: the
    store's default (a tracking server decides its own)."""
    if not uri.startswith("sqlite:///"):
        return None
    db = Path(uri[len("sqlite:///") :])
    if str(db) in ("", ":memory:"):
        return None
    return (db.parent.resolve() / "mlruns" / re.sub(r"[^A-Za-z0-9._-]", "_", experiment)).as_uri()


def redact_url(url: str) -> str:
    """The URL with any password replaced by `***` (safe to print, log or tag)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[-1]}"))


def _param_value(v: Any) -> str:
    return "null" if v is None else str(v)


# ---------------------------------------------------------------- one run


OUTAGE_S = 300.0
"""How long a run's logging waits out a tracking server that does not answer (`tracking.outage_s`)."""
RETRY_S = 5.0
"""While the server does not answer, how often a run tries to send what it holds again."""
HTTP_RETRIES = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}
"""MLflow's own retries of one request, kept short (where the environment does not set them): the run's outage
window (`OUTAGE_S`) decides how long to keep trying, not a request's minutes of back-off."""


class TrackingUnavailable(RuntimeError):
    """The tracking server did not answer for a run's whole outage window: the run cannot be recorded."""


class RunLogger:
    """A new MLflow run. Params, tags and metrics are held and sent in batches (every `flush_every` seconds and at
    the end). When the tracking server does not answer, they are kept and sent again every `RETRY_S`, so a trial
    goes on through an outage; a batch is dropped only once it was stored, and a batch sent again after it arrived
    (its answer lost) is the same points, which MLflow's SQL store keeps once. An outage longer than `outage_s`
    raises `TrackingUnavailable`."""

    def __init__(
        self,
        tracking_uri: str,
        experiment: str,
        run_name: str | None = None,
        parent_run_id: str | None = None,
        tags: dict[str, str] | None = None,
        flush_every: float = 5.0,
        outage_s: float = OUTAGE_S,
    ):
        for k, v in HTTP_RETRIES.items():
            os.environ.setdefault(k, v)
        self.client = client(tracking_uri)
        self.tracking_uri = tracking_uri
        exp_id = self._experiment_id(experiment)
        all_tags = dict(tags or {})
        if parent_run_id:
            all_tags[PARENT_RUN] = parent_run_id
        self.run_id: str = self.client.create_run(exp_id, run_name=run_name, tags=all_tags).info.run_id
        self.flush_every, self.outage_s = flush_every, outage_s
        self._metrics: list = []
        self._params: dict[str, str] = {}
        self._tags: dict[str, str] = {}
        self._last_flush = time.monotonic()
        self._patience = faults.Patience(
            unreachable,
            outage_s,
            pause_s=RETRY_S,
            max_pause_s=RETRY_S,
            from_try=True,
            warn=self._down,
            give_up=self._unavailable,
            back=self._back,
        )
        """The outage's clock (`patience.down_since`: when the server stopped answering; None: it answers)."""

    def _experiment_id(self, experiment: str) -> str:
        """The experiment's id, created if it does not exist; where another process (a seed beside this one) created
        it between the look and the creation, the id it created."""
        exp = self.client.get_experiment_by_name(experiment)
        if exp is not None:
            return exp.experiment_id
        try:
            return self.client.create_experiment(
                experiment, artifact_location=artifact_location(self.tracking_uri, experiment)
            )
        except Exception:
            exp = self.client.get_experiment_by_name(experiment)
            if exp is None:
                raise
            return exp.experiment_id

    def log_params(self, params: dict[str, Any]) -> None:
        self._params.update({k: _param_value(v) for k, v in params.items()})
        self._send(wait=True)

    def set_tags(self, tags: dict[str, Any]) -> None:
        self._tags.update({k: str(v) for k, v in tags.items()})
        self._send(wait=False)

    def log_metrics(self, metrics: dict[str, float], step: int, timestamp_ms: int | None = None) -> None:
        from mlflow.entities import Metric

        ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        self._metrics.extend(Metric(k, float(v), ts, step) for k, v in metrics.items() if v is not None)
        if time.monotonic() - self._last_flush >= self.flush_every:
            self._send(wait=False)

    def flush(self) -> None:
        """Send everything held, waiting out an outage of up to `outage_s`."""
        self._send(wait=True)

    def _send(self, wait: bool) -> None:
        """Send what is held in batches (MLflow's limits: 1,000 metrics, 100 params, 100 tags a call). Not `wait`ing:
        one try (while the server is down, at most every `RETRY_S`). `wait`ing: try until all is sent or the outage
        passes `outage_s`."""
        while self._params or self._tags or self._metrics:
            now = time.monotonic()
            if self._patience.down_since is not None and not wait and now - self._last_flush < RETRY_S:
                return
            self._last_flush = now
            if wait:
                self._tolerant(self._batch)
            elif not self._try(self._batch):
                return
        self._last_flush = time.monotonic()

    def _try(self, fn) -> bool:
        """`fn()` once: whether it returned (a failure is counted into the outage, which raises once too long)."""
        return self._patience.attempt(fn)[0]

    def _tolerant(self, fn) -> None:
        """`fn()` until it returns, through an outage of up to `outage_s`."""
        self._patience.call(fn)

    def _down(self, err: BaseException) -> None:
        line = faults.one_line(err, 300, typed=True)
        log.warning(
            f"tracking: the server at {redact_url(self.tracking_uri)} did not answer ({line});"
            f" holding this run's points and trying again every {RETRY_S:g} s, for up to {self.outage_s:g} s"
        )

    def _unavailable(self, err: BaseException, lasted: float) -> TrackingUnavailable:
        return TrackingUnavailable(
            f"the tracking server at {redact_url(self.tracking_uri)} did not answer for"
            f" {lasted:.0f} s (tracking.outage_s {self.outage_s:g});"
            f" the last error: {faults.one_line(err, 300, typed=True)}"
        )

    @staticmethod
    def _back(lasted: float) -> None:
        log.warning(f"tracking: the server answers again after {lasted:.0f} s; the held points are sent")

    def _batch(self) -> None:
        """One `log_batch` of the oldest held points; they are dropped from what is held only once it returned."""
        from mlflow.entities import Param, RunTag

        params = list(self._params.items())[:100]
        tags = list(self._tags.items())[:100]
        metrics = self._metrics[:MAX_BATCH]
        try:
            self.client.log_batch(
                self.run_id,
                metrics=metrics,
                params=[Param(k, v) for k, v in params],
                tags=[RunTag(k, v) for k, v in tags],
            )
        except Exception as err:
            if unreachable(err):
                raise  # kept, sent again
            self._drop(params, tags, metrics)  # refused (a changed param, a key too long): as before, not retried
            raise
        self._drop(params, tags, metrics)

    def _drop(self, params, tags, metrics) -> None:
        """Forget what one batch held (it was stored, or refused)."""
        for k, _ in params:
            self._params.pop(k, None)
        for k, v in tags:
            if self._tags.get(k) == v:
                del self._tags[k]
        del self._metrics[: len(metrics)]

    def log_text(self, text: str, artifact_file: str) -> None:
        self.flush()
        self._tolerant(lambda: self.client.log_text(self.run_id, text, artifact_file))

    def end(self, status: str, reason: str | None = None) -> None:
        """Flush, tag the outcome (`STATUS_*`, and the reason when it did not finish) and close the run. A server
        away for longer than the outage window leaves the run open there (`TrackingUnavailable`)."""
        self.set_tags({STATUS: status, **({FAILURE: reason} if reason else {})})
        try:
            self.flush()
        except TrackingUnavailable:
            raise
        except BaseException:
            self._tolerant(lambda: self.client.set_terminated(self.run_id, status=MLFLOW_STATUS[status]))
            raise
        self._tolerant(lambda: self.client.set_terminated(self.run_id, status=MLFLOW_STATUS[status]))


class StoresFull(RuntimeError):
    """The disk of a store (the Optuna database, the MLflow store) is full: nothing more can be recorded, so the
    study stops (`EXIT_STORES_FULL`); what was recorded stays, and `study run` resumes once there is space."""


EXIT_STORES_FULL = 3
"""A study worker's (and `study run`'s) exit code when a store's disk is full."""


class RunStopped(Exception):
    """Raised inside a run to end it early on purpose (a pruner): the run is complete, tagged as stopped."""


def failure_reason(err: BaseException) -> str:
    """How a failed run's reason reads: `ExceptionType: message` (at most 2000 characters)."""
    return f"{type(err).__name__}: {err}"[:2000]


@contextmanager
def run_lifecycle(run: RunLogger, stopped: str = STATUS_STOPPED) -> Iterator[RunLogger]:
    """End `run` by how the block ends, then let the exception through:

    - normally: FINISHED (`finished`);
    - `RunStopped`: FINISHED, tagged `stopped` (or the `stopped` status given, e.g. `pruned`) with its reason;
    - Ctrl-C: KILLED (`interrupted`);
    - any other exception (NaN, out of memory, a bug): FAILED (`failed`) with `Type: message`.
    """
    try:
        yield run
    except RunStopped as err:
        run.end(stopped, str(err))
        raise
    except KeyboardInterrupt:
        run.end(STATUS_INTERRUPTED, "KeyboardInterrupt")
        raise
    except BaseException as err:
        run.end(STATUS_FAILED, failure_reason(err))
        raise
    else:
        run.end(STATUS_FINISHED)


ANALYSED_HISTORIES = (COMPUTE_UNITS, POLICY_ENTROPY, GEN_ROLLOUTS, TRAIN_ROLLOUTS, GEN_SECONDS, TRAIN_SECONDS)
"""The per-step series the analysis reads besides the `eval/` ones (`curve_from_history`, the entropy figure of
`analysis.data`): what `workbench study pack` keeps of a run's metric history."""


def curve_from_history(c, run_id: str) -> list[dict[str, float | None]]:
    """A run's evaluations (the rows of `CURVE_ARTIFACT`) rebuilt from its metric history, by the one rule every
    trainer logs by (the workbench's own and a trial command: docs/trainers.md): the evaluation after s optimizer
    steps is logged at step s, and the cumulative ledger after optimizer step i (counting from 0) at step i, so the
    evaluation at step s reads the ledger at step s - 1 (zero before the first step). `c`: an `MlflowClient`.
    Empty when the run logged no evaluation or no ledger."""

    def history(key: str) -> dict[int, float]:
        return {m.step: m.value for m in c.get_metric_history(run_id, key)}

    acc, pass_k = history(EVAL_ACCURACY), history(EVAL_PASS_AT_K)
    mean_k, demo = history(EVAL_MEAN_AT_K), history(EVAL_DEMO_PROB)
    gen, train = history(GEN_ROLLOUTS), history(TRAIN_ROLLOUTS)
    gen_s, train_s = history(GEN_SECONDS), history(TRAIN_SECONDS)
    entropy = history(EVAL_SAMPLE_ENTROPY)
    at_t = tuple(name.split("{")[0] for name in (EVAL_MEAN_AT_K_AT_T, EVAL_DEMO_PROB_AT_T))
    by_temperature = {
        key.removeprefix("eval/"): history(key) for key in c.get_run(run_id).data.metrics if key.startswith(at_t)
    }
    if not acc or not gen:
        return []

    def before(values: dict[int, float], step: int) -> float:
        """The latest value logged at a step before `step` (a trainer may log its ledger at fewer steps)."""
        earlier = [s for s in values if s < step]
        return values[max(earlier)] if earlier else 0.0

    rows = []
    for step in sorted(acc):
        rows.append(
            {
                "step": step,
                "accuracy": acc[step],
                "pass_at_k": pass_k.get(step),
                "mean_at_k": mean_k.get(step),
                "demo_prob": demo.get(step),
                CURVE_SAMPLE_ENTROPY: entropy.get(step),
                **{key: values.get(step) for key, values in by_temperature.items()},
                "gen_rollouts": before(gen, step),
                "train_rollouts": before(train, step),
                "seconds": before(gen_s, step) + before(train_s, step),
            }
        )
    return rows


def kill_run_tree(tracking_uri: str, run_id: str, reason: str) -> None:
    """End a run and its still-running children as KILLED (a worker died under them)."""
    c = client(tracking_uri)
    run = c.get_run(run_id)
    children = c.search_runs(
        [run.info.experiment_id], filter_string=f"tags.{PARENT_RUN} = '{run_id}' and attributes.status = 'RUNNING'"
    )
    for r in [*children, run]:
        if r.info.status == "RUNNING":
            c.set_tag(r.info.run_id, FAILURE, reason)
            c.set_tag(r.info.run_id, STATUS, STATUS_KILLED)
            c.set_terminated(r.info.run_id, status=MLFLOW_STATUS[STATUS_KILLED])


def fail_run(tracking_uri: str, run_id: str, reason: str) -> None:
    """End a run that its process could not end (killed by the worker's limits) FAILED with `reason`."""
    c = client(tracking_uri)
    if c.get_run(run_id).info.status == "RUNNING":
        c.set_tag(run_id, FAILURE, reason)
        c.set_tag(run_id, STATUS, STATUS_FAILED)
        c.set_terminated(run_id, status=MLFLOW_STATUS[STATUS_FAILED])


def run_exists(tracking_uri: str, run_id: str) -> bool:
    """Whether the tracking store holds run `run_id` (a study's Optuna record may outlive the store it logged to)."""
    from mlflow.exceptions import MlflowException

    try:
        client(tracking_uri).get_run(run_id)
    except MlflowException as err:
        if faults.missing(err):
            return False
        raise
    return True


def set_run_status(tracking_uri: str, run_id: str, status: str) -> None:
    """Set an existing run's MLflow status (`RUNNING` when a study resumes, `FINISHED`/`FAILED` at its end)."""
    if status == "RUNNING":
        client(tracking_uri).update_run(run_id, status=status)
    else:
        client(tracking_uri).set_terminated(run_id, status=status)
