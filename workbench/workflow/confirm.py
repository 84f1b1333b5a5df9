"""Confirm: the best configurations, the baseline and (with `predicted`) the verified predictions re-run on fresh
seeds (`workbench study confirm`; the re-runs themselves: `workbench.study.confirm`)."""

from __future__ import annotations

import optuna

from workbench.study.confirm import Confirmation, open_for_confirm, run_confirm
from workbench.study.context import StudyContext


def confirm(
    ctx: StudyContext,
    top: int,
    seeds: int,
    threads: int | None = None,
    predicted: bool = False,
    devices: list[int] | None = None,
    trials: list[int] | None = None,
) -> tuple[optuna.Study, list[Confirmation]]:
    """Re-run the baseline and the best `top` configurations (or the `trials` named; and the predictions, with
    `predicted`) on `seeds` fresh
    seeds; returns the study, with the re-runs recorded, and what each confirmed."""
    study = open_for_confirm(ctx)
    return study, run_confirm(
        ctx, study, top, seeds, threads=threads, predicted=predicted, devices=devices, trials=trials
    )
