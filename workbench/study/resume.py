"""What a spec edited after its study was created may change when the study resumes, and what it may not.

Optuna keeps one distribution per parameter for a study's life, and a categorical knob's choices cannot change:
its storage refuses the new list ("dynamic value space") at the first trial that suggests the knob. Measured: a
spec whose `lr` choices gained a value made three trials in a row fail at once, recorded as lost workers, before
the study stopped. So a resumed study checks its spec against the one stored when it was created, before any
trial: changed choices are one line naming the knob. Points added to the spec since are enqueued once, and the
stored spec records them: adding a point is how a user extends a study.
"""

from __future__ import annotations

import json
from typing import Any

from workbench.config import ConfigError
from workbench.study.spec import StudySpec


def check(spec: StudySpec, stored: dict[str, Any]) -> None:
    """Raise ConfigError where `spec` changes a categorical knob's choices against the `stored` spec (a dump of the
    spec the study was created with)."""
    before = stored.get("search_space") or {}
    for knob, dim in spec.search_space.items():
        old = (before.get(knob) or {}).get("choices")
        if dim.choices is not None and old is not None and list(old) != spec.model_dump(mode="json")["search_space"][knob]["choices"]:
            raise ConfigError(f"search_space.{knob}.choices: {dim.choices} now, {old} when study {spec.name!r} was created; an"
                              " Optuna study cannot change a categorical's choices: restore them, or give the spec a new name")


def _key(point: dict[str, Any]) -> str:
    return json.dumps(point, sort_keys=True)


def new_points(spec: StudySpec, stored: dict[str, Any]) -> list[dict[str, Any]]:
    """The spec's points that the `stored` spec did not list (as the spec dumps them), in the spec's order."""
    seen = {_key(p) for p in stored.get("points") or []}
    return [p for p in spec.model_dump(mode="json")["points"] if _key(p) not in seen]
