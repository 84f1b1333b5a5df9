"""MLflow logging of one trial: params (the flattened config), step metrics, final metrics, run state.

Uses `MlflowClient` with explicit run ids (no global active run), so a trial can run inside a study worker
and be a child of the study's parent run (`mlflow.parentRunId` tag).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

MAX_BATCH = 1000  # MLflow log_batch limit on metrics per call


def resolve_tracking_uri(uri: str | None = None) -> str:
    """`--tracking-uri`, else `MLFLOW_TRACKING_URI`, else a SQLite store `mlflow.db` in the working directory."""
    if uri:
        return uri
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


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


class TrialLogger:
    """One MLflow run. Metrics are buffered and flushed in batches (every `flush_every` seconds and at the end)."""

    def __init__(
        self,
        tracking_uri: str,
        experiment: str,
        run_name: str | None = None,
        parent_run_id: str | None = None,
        tags: dict[str, str] | None = None,
        run_id: str | None = None,
        flush_every: float = 5.0,
    ):
        from mlflow import MlflowClient

        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)  # "Creating initial tables" noise
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.tracking_uri = tracking_uri
        if run_id is None:
            exp = self.client.get_experiment_by_name(experiment)
            exp_id = exp.experiment_id if exp else self.client.create_experiment(experiment)
            all_tags = dict(tags or {})
            if parent_run_id:
                all_tags["mlflow.parentRunId"] = parent_run_id
            run_id = self.client.create_run(exp_id, run_name=run_name, tags=all_tags).info.run_id
        self.run_id = run_id
        self.flush_every = flush_every
        self._pending: list = []
        self._last_flush = time.monotonic()

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, _param_value(v)) for k, v in params.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i : i + 100])

    def set_tags(self, tags: dict[str, Any]) -> None:
        for k, v in tags.items():
            self.client.set_tag(self.run_id, k, str(v))

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        self._pending.extend(Metric(k, float(v), ts, step) for k, v in metrics.items() if v is not None)
        if time.monotonic() - self._last_flush >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        while self._pending:
            chunk, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            self.client.log_batch(self.run_id, metrics=chunk)
        self._last_flush = time.monotonic()

    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, text, artifact_file)

    def end(self, status: str = "FINISHED") -> None:
        """Flush and close the run with MLflow status FINISHED, FAILED or KILLED."""
        try:
            self.flush()
        finally:
            self.client.set_terminated(self.run_id, status=status)
