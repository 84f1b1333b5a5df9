"""Registries of the parts users extend, by name: replay strategies, objectives, tasks, generation backends and
model sources.

They live near the bottom of the package (only `workbench.config_names` is below) so that the config can validate
a name against them without importing the trial engine up front: a strategy module registers itself here when it
is imported, and the built-in ones are imported the first time a registry is read (so `import workbench` and
`workbench --help` never load torch).
`replay.strategy` / `objective.name` / `task.name` / `generation.backend` / `model.source` are then checked against
what is registered. A part added from outside the package registers itself the same way (`@TASKS.register("mine")`
on a `TaskConfig -> Task` function, `@GENERATION_BACKENDS.register("mine")` on a `GenerationBackend` class,
`@MODEL_SOURCES.register("mine")` on a `ModelSource` class) before the config that names it is validated.
"""

from __future__ import annotations

import importlib
from typing import Callable, Generic, TypeVar

from workbench.config_names import did_you_mean

T = TypeVar("T")


class Registry(dict[str, T], Generic[T]):
    """`name -> entry`, filled by the `register(name)` decorator; `field` is the config key that names an entry.

    `builtins` is the module that registers the built-in entries: it is imported on the first read."""

    def __init__(self, field: str, builtins: str):
        super().__init__()
        self.field, self.builtins, self._loaded = field, builtins, False

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True  # before the import: the module's decorators write into this registry
            importlib.import_module(self.builtins)

    def __getitem__(self, name: str) -> T:
        self._load()
        return super().__getitem__(name)

    def __contains__(self, name: object) -> bool:
        self._load()
        return super().__contains__(name)

    def __iter__(self):
        self._load()
        return super().__iter__()

    def __len__(self) -> int:
        self._load()
        return super().__len__()

    def get(self, name: str, default=None):
        self._load()
        return super().get(name, default)

    def keys(self):
        self._load()
        return super().keys()

    def values(self):
        self._load()
        return super().values()

    def items(self):
        self._load()
        return super().items()

    def register(self, name: str) -> Callable[[T], T]:
        def wrap(entry: T) -> T:
            self[name] = entry
            return entry

        return wrap

    def lookup(self, name: str) -> T:
        """The entry called `name`; an unknown name raises ValueError("field: unknown 'x' (did you mean 'y'?); known:
        ...")."""
        if name not in self:
            hint = did_you_mean(name, self)
            raise ValueError(f"{self.field}: unknown {name!r}{hint}; known: {', '.join(sorted(self))}")
        return self[name]


STRATEGIES: Registry = Registry("replay.strategy", "workbench.trial.strategies")
"""Replay strategies (`workbench.trial.strategies`): classes with `Params`, `validate` and `default_capacity`."""

OBJECTIVES: Registry = Registry("objective.name", "workbench.trial.objectives")
"""Policy-gradient objectives (`workbench.trial.objectives`): `fn(inp, cfg) -> ObjectiveOutput`."""

TASKS: Registry = Registry("task.name", "workbench.trial.builtin_tasks")
"""Tasks (`workbench.trial.builtin_tasks`: `tasks`, `word_problems`): `fn(cfg: TaskConfig) -> Task`, the prompts, the
held-out set and the checker."""

GENERATION_BACKENDS: Registry = Registry("generation.backend", "workbench.backends.builtin")
"""Generation backends (`workbench.backends.builtin`): `GenerationBackend` classes (`workbench.backends.base`), what
samples a trial's rollouts: the optional package each needs and the engine it starts for the trial's policy."""

MODEL_SOURCES: Registry = Registry("model.source", "workbench.trial.model_sources")
"""Model sources (`workbench.trial.model_sources`): `ModelSource` classes, where a trial's starting model comes from
(the local directory `from_pretrained` loads, built or unpacked once where it is not one already)."""

REGISTRIES: tuple[Registry, ...] = (STRATEGIES, OBJECTIVES, TASKS, GENERATION_BACKENDS, MODEL_SOURCES)
"""Every registry, each naming the config key its entries are chosen by (`Registry.field`)."""
