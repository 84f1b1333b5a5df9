"""One trial's record in both pipeline modes: the same config trained synchronously and as W = T = 1 asynchronously
logs the same metric names (the asynchronous run adds only its pipeline's own)."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from support.toy import toy_dict, tracked
from workbench.config import build_config
from workbench.trial.loop import run_trial


def _names(tracking_uri: str, run_id: str) -> set[str]:
    return set(MlflowClient(tracking_uri).get_run(run_id).data.metrics)


@pytest.mark.slow
def test_sync_and_async_log_the_same_metric_names(tracking_uri):
    base = dict(replay={"strategy": "queue"}, budget={"steps": 4})
    sync = run_trial(tracked(build_config(toy_dict(**base)), tracking_uri))
    asyn = run_trial(tracked(build_config(toy_dict(pipeline={"mode": "async"}, **base)), tracking_uri))
    # the gradient cosine (and its run mean) only where two steps have non-zero gradients: which ones do depends on what
    # each mode sampled, so it is compared in tests/trial/test_loop.py and test_pipeline.py, not here
    cosine = {"offpolicy/grad_cosine", "final/grad_cosine_mean"}
    s, a = _names(tracking_uri, sync.run_id) - cosine, _names(tracking_uri, asyn.run_id) - cosine
    assert sorted(s - a) == []  # every step and final metric of the synchronous loop, in the asynchronous one too
    extra = sorted(n for n in a - s if not n.startswith(("pipeline/", "final/pipeline_")))
    assert extra == [] and "pipeline/mu_d4" in a  # and the pipeline's own account besides, under its own names
    assert {"train/loss", "compute/units", "final/accuracy", "final/compute_units"} <= s
