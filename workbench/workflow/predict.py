"""Predict: a study's runs fitted and its optimum predicted (`workbench analyze`, `workbench report`).

`analyze` and `report` read the study from MLflow, fit it and write where `analysis.destination` says (`--out`, else
reports-out/NAME/ beside the MLflow store, never over tracked files unless forced); the fit's predicted optimum goes
into `analysis.json` as a `workbench.prediction.Prediction` (`prediction`), which `study verify` runs.
"""

from __future__ import annotations

from pathlib import Path

from analysis import destination
from analysis.bottom_line import bottom_line
from analysis.report import OUTPUT_FILES, analyze, write_report
from analysis.result import Analysis, dumps


def analysis_json(
    name: str,
    tracking_uri: str,
    out: Path | None,
    force: bool,
    *,
    whatif_mu: list[float],
    bootstrap: int,
    target: float | None,
    estimator: str | None,
    bar: bool,
) -> tuple[Analysis, Path]:
    """Fit the study `name` and write its `analysis.json`; returns the analysis and the file's path."""
    folder = destination.prepare(out, name, tracking_uri, ["analysis.json"], force)
    result, _, _ = analyze(
        name, tracking_uri, whatif_mu=whatif_mu, bootstrap=bootstrap, target=target, estimator=estimator, bar=bar
    )
    path = folder / "analysis.json"
    path.write_text(dumps(result))
    return result, path


def report(
    name: str,
    tracking_uri: str,
    out: Path | None,
    force: bool,
    *,
    whatif_mu: list[float],
    bootstrap: int,
    target: float | None,
    estimator: str | None,
    bar: bool,
    spec: str | None,
) -> tuple[str, dict[str, Path]]:
    """Fit the study `name` and write its report (Markdown, HTML, `analysis.json`, the figures); returns its bottom
    line (plain text) and the paths written."""
    folder = destination.prepare(out, name, tracking_uri, list(OUTPUT_FILES), force)
    result, data, fit = analyze(
        name, tracking_uri, whatif_mu=whatif_mu, bootstrap=bootstrap, target=target, estimator=estimator, bar=bar
    )
    paths = write_report(result, data, fit, folder, spec=spec)
    return bottom_line(result, spec).replace("**", "").replace("`", ""), paths
