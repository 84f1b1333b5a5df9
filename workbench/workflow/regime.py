"""The paper's regime across asynchronous studies at several mu (`workbench regime`, `analysis.regime`): read them,
set the buffer against the lr-tuned queue at each mu, find the crossover, write the report."""

from __future__ import annotations

from pathlib import Path

from analysis import destination, regime


def report(
    names: list[str],
    tracking_uri: str,
    out: Path | None,
    force: bool,
    *,
    confirm: str | None,
    target: float | None,
    sync: str | None = None,
) -> tuple[dict, dict[str, Path]]:
    folder = destination.prepare(out, "regime-" + "-".join(names), tracking_uri, list(regime.OUTPUT_FILES), force)
    result = regime.build(names, tracking_uri, confirm, target, sync)
    return result, regime.write(result, folder)
