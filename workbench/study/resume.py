"""What a spec edited after its study was created may change when the study resumes, and what it may not.

Optuna keeps one distribution per parameter for a study's life, and a categorical knob's choices cannot change:
its storage refuses the new list ("dynamic value space") at the first trial that suggests the knob. Measured: a
spec whose `lr` choices gained a value made three trials in a row fail at once, recorded as lost workers, before
the study stopped. So a resumed study checks its spec against the one stored when it was created, before any
trial: changed choices are one line naming the knob. Points added to the spec since are enqueued once, and the
stored spec records them: adding a point is how a user extends a study.
"""

from __future__ import annotations

from typing import Any

from workbench.config import ConfigError
from workbench.study.spec import StudySpec


def check(spec: StudySpec, stored: dict[str, Any]) -> None:
    """Raise ConfigError where `spec` changes a categorical knob's choices against the `stored` spec (a dump of the
    spec the study was created with)."""
    before = stored.get("search_space") or {}
    for knob, dim in spec.search_space.items():
        old = (before.get(knob) or {}).get("choices")
        if (
            dim.choices is not None
            and old is not None
            and list(old) != spec.model_dump(mode="json")["search_space"][knob]["choices"]
        ):
            raise ConfigError(
                f"search_space.{knob}.choices: {dim.choices} now, {old} when study {spec.name!r} was created; an"
                " Optuna study cannot change a categorical's choices: restore them, or give the spec a new name"
            )


def _same(point: dict[str, Any], stored: dict[str, Any], added: dict[str, Any]) -> bool:
    """Whether `point` is the `stored` point: equal on the stored point's knobs, and every knob the spec gained since
    at its base value (`added`: those knobs and their base values), the configuration the stored point ran."""
    return all(point.get(k) == v for k, v in stored.items()) and all(
        k in stored or (k in added and v == added[k]) for k, v in point.items()
    )


def new_points(spec: StudySpec, stored: dict[str, Any]) -> list[dict[str, Any]]:
    """The spec's points that the `stored` spec did not list (as the spec dumps them), in the spec's order. A knob
    added to the search space since makes every point name it: an old point that names it at the base config's
    value is the configuration that already ran, not a new one."""
    before = stored.get("search_space") or {}
    base = spec.base_config_dict()
    added = {}
    for knob in spec.search_space:
        if knob not in before:
            node: Any = base
            for part in knob.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            added[knob] = node
    old = stored.get("points") or []
    return [p for p in spec.model_dump(mode="json")["points"] if not any(_same(p, q, added) for q in old)]
