"""Race: more seeds where the leader is not yet resolved against a contender (`workbench study race`; the rounds
themselves: `workbench.study.race`)."""

from __future__ import annotations

import optuna

from workbench.study.confirm import open_for_confirm
from workbench.study.context import StudyContext
from workbench.study.race import run_race


def race(
    ctx: StudyContext, max_seeds: int, step: int, threads: int | None = None, devices: list[int] | None = None
) -> tuple[optuna.Study, list[str]]:
    """Race the study's configurations (`workbench.study.race.run_race`); returns the study, with the new seeds
    recorded, and one line per round."""
    study = open_for_confirm(ctx)
    return study, run_race(ctx, study, max_seeds, step, threads=threads, devices=devices)
