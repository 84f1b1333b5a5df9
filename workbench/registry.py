"""Registries of the parts users extend, by name: replay strategies and objectives.

They live at the bottom of the package so that the config can validate a name against them without importing
the trial engine: a strategy module registers itself here when it is imported (the package imports the
built-in ones), and `replay.strategy` / `objective.name` are then checked against what is registered.
"""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Registry(dict[str, T], Generic[T]):
    """`name -> entry`, filled by the `register(name)` decorator; `field` is the config key that names an entry."""

    def __init__(self, field: str):
        super().__init__()
        self.field = field

    def register(self, name: str) -> Callable[[T], T]:
        def wrap(entry: T) -> T:
            self[name] = entry
            return entry

        return wrap

    def lookup(self, name: str) -> T:
        """The entry called `name`; an unknown name raises ValueError("field: unknown ...; known: ...")."""
        if name not in self:
            raise ValueError(f"{self.field}: unknown {name!r}; known: {', '.join(sorted(self))}")
        return self[name]


STRATEGIES: Registry = Registry("replay.strategy")
"""Replay strategies (`workbench.trial.strategies`): classes with `Params`, `validate` and `default_capacity`."""

OBJECTIVES: Registry = Registry("objective.name")
"""Policy-gradient objectives (`workbench.trial.objectives`): `fn(inp, cfg) -> ObjectiveOutput`."""
