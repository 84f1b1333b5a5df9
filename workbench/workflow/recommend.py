"""Recommend: the settings a study or a probe supports at the user's mu (`workbench recommend`,
`analysis.recommend`). A synchronous study is re-accounted at the user's mu first (its runs' rollout counts priced
at that mu: the same learning curves in steps, docs/theory.md); an asynchronous one is read as measured, with a note
where the user's mu is far from the one its split ran at."""

from __future__ import annotations

import json
import tempfile

from workbench import tracking
from workbench.config import ConfigError

from analysis import recommend as rec
from analysis.data import load_study, reaccount, retarget
from analysis.pipeline import is_async
from analysis.report import analyze_data
from analysis.result import Recommendation


def from_study(
    name: str,
    tracking_uri: str,
    *,
    mu: float | None,
    gen_seconds: float | None,
    train_seconds: float | None,
    split: tuple[int, int] | None,
    target: float | None,
) -> Recommendation:
    data = load_study(name, tracking_uri)
    if target is not None:
        data = retarget(data, target)
    mu = _mu(mu, gen_seconds, train_seconds, int(data.runs["batch_size"].iloc[0]))
    measured = data.reference_mu
    if mu is not None and not is_async(data):
        data = reaccount(data, mu)
    result, _, _ = analyze_data(data, whatif_mu=[], bootstrap=0)
    return rec.from_study(result, mu, split, measured)


def from_probe(
    run_id: str,
    tracking_uri: str,
    *,
    mu: float | None,
    gen_seconds: float | None,
    train_seconds: float | None,
    split: tuple[int, int] | None,
) -> Recommendation:
    client = tracking.client(tracking_uri)
    try:
        run = client.get_run(run_id)
        with tempfile.TemporaryDirectory() as tmp:
            with open(client.download_artifacts(run_id, "probe/probe.json", tmp)) as f:
                recorded = json.load(f)
    except Exception as err:  # noqa: BLE001 - no such run, or not a probe's: one line
        raise ConfigError(
            f"--probe: run {run_id} has no probe/probe.json in {tracking.redact_url(tracking_uri)}"
            f" ({type(err).__name__})"
        ) from None
    batch = int(run.data.params.get("batch_size", 0) or 0)
    return rec.from_probe(recorded, _mu(mu, gen_seconds, train_seconds, batch), split)


def _mu(mu: float | None, gen_seconds: float | None, train_seconds: float | None, batch_size: int) -> float | None:
    if gen_seconds is not None and train_seconds is not None:
        if batch_size < 1:
            raise ConfigError("--gen-seconds: the source records no batch size to turn seconds into mu; give --mu")
        return rec.mu_from_seconds(gen_seconds, train_seconds, batch_size)
    return mu
