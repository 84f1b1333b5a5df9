"""Study specs: a question as data (docs/studies.md). YAML in `studies/`, validated like trial configs.

    name: replay_grid
    base: {...}                                # a trial config: the same keys as `workbench train`
    search_space:
      replay.ratio: {low: 1, high: 4, log: true}
      replay.capacity: {low: 128, high: 2048, log: true, type: int}
      replay.horizon: {choices: [null, 4, 8]}
      x: {choices: [2, 4, 8]}                  # staleness horizon x = N/R: sets capacity N = x·B/y
    objective: compute_to_target               # or wall_to_target, best_accuracy, auc, accuracy_at_budget,
                                               # [best_accuracy, compute_units]
    estimator: fitted                          # how compute-to-target is read off a curve (workbench.estimators)
    sampler: tpe                               # tpe, gp, random, grid, qmc, nsga2
    seeds: 2                                   # or a list; each trial runs the configuration once per seed
    target_accuracy: auto                      # or a number; auto: from the on-policy baseline's curve
    n_trials: 8

Every error is one line naming the field (`search_space.replay.ratio.low: must be <= high (4 > 2)`).
"""

from __future__ import annotations

import copy
import itertools
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from workbench import knobs, seeds
from workbench.config import (
    ConfigError,
    TrialConfig,
    build_config,
    format_validation_error,
    load_yaml_mapping,
    set_dotted,
)
from workbench.config_names import PLACEHOLDER, did_you_mean, model_keys
from workbench.estimators import DEFAULT_ESTIMATOR

SAMPLERS = ("tpe", "gp", "random", "grid", "qmc", "nsga2")
SINGLE_OBJECTIVES = {
    "compute_to_target": "minimize",
    "wall_to_target": "minimize",
    "best_accuracy": "maximize",
    "auc": "maximize",
    "accuracy_at_budget": "maximize",
}
MULTI_OBJECTIVES = {"best_accuracy": "maximize", "compute_units": "minimize", "compute_to_target": "minimize"}
PSEUDO_KNOBS = {
    "x": "staleness horizon x = N/R; sets replay.capacity = N = x·B/y in whole rollouts (workbench.knobs.capacity)"
}


class Dimension(BaseModel):
    """One knob of the search space: a range (`low`, `high`) or a list of `choices`."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    low: float | None = None
    """Lower end of a range."""
    high: float | None = None
    """Upper end of a range."""
    log: bool = False
    """Sample the range on a log scale."""
    step: float | None = None
    """Spacing of a range's values (the grid sampler needs it)."""
    type: Literal["int", "float"] | None = None
    """Defaults to int when low and high are integers (and no float step is given)."""
    choices: list[Any] | None = None
    """The values of a categorical knob (instead of a range)."""
    when: dict[str, Any] | None = None
    """Conditional knob: sampled only when each named knob (earlier in the space) has the given value, or one of
    the given values for a list (`when: {replay.strategy: [uniform, positive_bias]}`)."""

    def active(self, params: dict[str, Any]) -> bool:
        """Whether this knob is sampled given the knobs sampled before it."""
        for key, want in (self.when or {}).items():
            if key not in params:
                return False
            if params[key] not in (want if isinstance(want, list) else [want]):
                return False
        return True

    @model_validator(mode="after")
    def _shape(self) -> "Dimension":
        if self.choices is not None:
            if self.low is not None or self.high is not None:
                raise ValueError("choices: give either choices or low/high, not both")
            if not self.choices:
                raise ValueError("choices: must not be empty")
            return self
        if self.low is None or self.high is None:
            raise ValueError("low: a range needs low and high (or give choices)")
        if self.low > self.high:
            raise ValueError(f"low: must be <= high ({self.low:g} > {self.high:g})")
        if self.log and self.low <= 0:
            raise ValueError("low: must be > 0 on a log scale")
        if self.log and self.step is not None:
            raise ValueError("step: not allowed on a log scale")
        return self

    @property
    def is_int(self) -> bool:
        if self.type is not None:
            return self.type == "int"
        whole = lambda v: v is None or float(v).is_integer()  # noqa: E731
        return whole(self.low) and whole(self.high) and whole(self.step)

    def probe_values(self) -> list[Any]:
        """Values that must all give a valid trial config (the ends of a range, every choice)."""
        if self.choices is not None:
            return list(self.choices)
        cast = int if self.is_int else float
        return [cast(self.low), cast(self.high)]

    def grid_values(self) -> list[Any]:
        if self.choices is not None:
            return list(self.choices)
        if self.step is None:
            raise ValueError("step: the grid sampler needs choices or a step for every range")
        n = int(math.floor((self.high - self.low) / self.step + 1e-9)) + 1
        cast = int if self.is_int else float
        return [cast(self.low + i * self.step) for i in range(n)]


class TrialLimits(BaseModel):
    """What a seed may take before the worker ends it (docs/faults.md). Any limit set runs every seed in a process
    of its own (a device slot, `workbench.study.slots`), which the worker can end with everything under it; none set
    (the default): seeds run in the worker, as before."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    stall_s: float | None = Field(None, gt=0)
    """A seed that makes no training step (and no evaluation) for this many seconds is hung: its process tree is
    killed, the trial fails with that reason, and the study goes on. Allow for the first step's start-up (a model,
    a compile: minutes on a CPU)."""
    wall_s: float | None = Field(None, gt=0)
    """A seed running longer than this many seconds is ended the same way."""
    memory_mib: float | None = Field(None, gt=0)
    """A seed whose processes hold more resident host memory than this (MiB, the seed's process and its children)
    is ended as out of memory, as a cgroup's OOM killer would; the worker goes on with a fresh process. A seed that
    raises out of memory itself (host or CUDA) fails with its one line, and its process is restarted too."""

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.stall_s, self.wall_s, self.memory_mib))


class StudySpec(BaseModel):
    """A study: a base trial config, the knobs searched, the objective and how it is sampled (docs/studies.md)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    """The study's name: its Optuna study and MLflow experiment."""
    description: str = ""
    """What the study asks, in words."""
    base: dict[str, Any] = {}
    """The base trial config (same keys as `workbench train --config`)."""
    search_space: dict[str, Dimension]
    """The knobs sampled: trial-config keys (`replay.ratio`) or `x`, the staleness horizon N/R."""
    objective: str | list[str] = "compute_to_target"
    """`compute_to_target`, `wall_to_target`, `best_accuracy`, `auc`, `accuracy_at_budget`, or two of
    `best_accuracy`, `compute_units`, `compute_to_target` for a Pareto front."""
    sampler: str = "tpe"
    """Optuna sampler: `tpe`, `gp`, `random`, `grid`, `qmc`, `nsga2`."""
    sampler_seed: int = 0
    """Seed of the sampler."""
    pruner: Literal["median", "compute"] | None = None
    """`compute`: stop a trial (on its first seed) once it has spent more than the incumbent's compute-to-target
    interval allows without reaching the target, or its fitted curve cannot reach it within its budget
    (`workbench.study.pruning`). `median`: Optuna's median pruner on held-out accuracy at equal steps."""
    seeds: list[int] | int = Field(1, validate_default=True)
    """Seeds per configuration: a count (0..n-1) or a list. The trial's value aggregates them (median)."""
    seeds_per_checkpoint: int | None = Field(None, ge=1)
    """Warm starts as a second dimension of replication (a seeded model source only, `ModelSource.seeded`: the
    embedded model). `null`: every seed starts from the base config's checkpoint (`model.init_seed`), so seeds
    resample training's randomness but never the starting model. `k`: seeds 0..k-1 start from warm start `model.init_seed`, seeds k..2k-1 from warm start
    `model.init_seed + 1`, and so on (each built once per machine, ~90 s on one core): arms compared on a seed share its
    checkpoint, and `study confirm`'s fresh seeds (right above the selection seeds) start from checkpoints no
    selection run used when the selection seeds fill whole blocks of k."""
    warm_starts: list[int] | None = None
    """With `seeds_per_checkpoint` k: the warm starts (`model.init_seed`) of the blocks of seeds in order, e.g.
    `[0, 2]`: seeds 0..k-1 start from warm start 0, k..2k-1 from 2; seeds past the list (`study confirm`'s fresh
    ones) take the init seeds the list leaves out, in ascending order (1, 3, 4, ...), so they start from warm starts
    no listed block used. `null`: consecutive warm starts from `model.init_seed`."""
    target_accuracy: float | Literal["auto"] | None = None
    """Sets `eval.target_accuracy` of every trial. `auto`: set from the on-policy baseline (which runs first) as the
    level its fitted curve reaches `target_gain_fraction` of the way from its start to the end of the budget: late
    enough that the runs' different take-off times average out, early enough to stay off the plateau (measured
    in docs/measurement.md)."""
    target_gain_fraction: float = Field(0.7, gt=0, lt=1)
    """`target_accuracy: auto`: the share of the baseline's gain over the budget at which the target is set."""
    estimator: Literal["first", "interpolated", "sustained", "fitted"] = DEFAULT_ESTIMATOR
    """How a run's compute-to-target is read off its curve (`workbench.estimators`); every estimator is logged
    either way, this one is the objective."""
    n_trials: int = Field(8, ge=1)
    """Trials to complete (the on-policy baseline included); failed trials do not count and are replaced."""
    baseline: bool = True
    """Enqueue the on-policy baseline (ratio 1, capacity = B) as the study's first trial; its values are added to
    categorical knobs that lack them (e.g. `x: {choices: [4, 8]}` becomes `[1, 4, 8]`)."""
    storage: str | None = None
    """Optuna storage URL; default `sqlite:///optuna.db` in the working directory."""
    tracking_uri: str | None = None
    """MLflow tracking URI; default `$MLFLOW_TRACKING_URI`, else `sqlite:///mlflow.db` in the working directory."""
    compute_mu: float | None = Field(None, gt=0)
    """The study's reference mu. `null`: measured on the baseline trial (median over its seeds)."""
    max_failures: int = Field(20, ge=0)
    """Stop the study after this many failed trials (a configuration that always crashes must not loop forever);
    0: no limit. Failures a resumed `study run` enqueued again, interrupted trials and trials retried after their
    worker died do not count."""
    max_same_failures: int = Field(3, ge=0)
    """Stop the study when this many trials in a row fail with the same reason (exception and message: a missing
    package, a data file every trial reads, a device too small); 0: never. Whatever the count, a trial that fails with
    a `ConfigError` (a configuration that cannot run) stops it at once, and so does a failed on-policy baseline (the
    other trials are accounted and compared against it). A stopped study exits non-zero; once the cause is fixed,
    `study run` resumes it and runs the stopped configurations again (`workbench.study.failfast`)."""
    limits: TrialLimits = TrialLimits()
    """Per seed: a progress watchdog (`stall_s`), a wall-time limit (`wall_s`) and a memory limit (`memory_mib`)."""
    lr_sweep: list[float] | None = None
    """Each arm at its own learning rate (Arnal et al.'s protocol): the on-policy baseline and every point run at each
    of these learning rates (ascending, evenly spaced on a log scale, the base lr among them), and an arm whose best
    lr is at an end of what it ran is run once more at the next lr out, up to `lr_extend` times per side, so that its
    best is bounded on both sides or said not to be. The headline is then each arm at its best against on-policy at
    its best (`analysis.tuned_lr`). `lr` becomes a log-range knob of the search space (the sampler's own proposals
    draw it there); `n_trials` is raised to cover every arm at every lr."""
    lr_extend: int = Field(2, ge=0)
    """`lr_sweep`: how many learning rates an arm may be extended by past each end of the sweep. Raised on a study
    that has run, its next `study run` queues the lrs now due."""
    lr_skip_past_decline: bool = True
    """`lr_sweep`: an arm's next lr up is not trained once the two lrs below it are resolved in its disfavour (the
    nearer one needs more compute than the farther, paired by seed, the 95% interval above 1): under a unimodal
    response to the lr its best lies below. The trial is recorded as skipped, with that comparison as its
    reason, and no longer counts towards `n_trials`; a worker that draws it before both lrs are measured runs
    another trial first, or waits (`workbench.study.lr_sweep.held`). False: every lr of the sweep is trained."""
    points: list[dict[str, Any]] = []
    """Configurations to run first (after the baseline), in order, as knob values of the search space (e.g. each
    strategy with its paper's settings); the sampler proposes the trials after them."""

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v):
        if isinstance(v, int):
            if v < 1:
                raise ValueError("must be >= 1")
            return list(range(v))
        if not v or len(set(v)) != len(v):
            raise ValueError("must be a non-empty list of distinct seeds")
        return v

    @field_validator("warm_starts")
    @classmethod
    def _warm_starts(cls, v):
        if v is not None and (not v or len(set(v)) != len(v) or min(v) < 0):
            raise ValueError("must be a non-empty list of distinct init seeds >= 0")
        return v

    @field_validator("target_accuracy")
    @classmethod
    def _target(cls, v):
        if isinstance(v, (int, float)) and not 0 < v <= 1:
            raise ValueError("must be in (0, 1] or auto")
        return v

    @property
    def fixed_target(self) -> float | None:
        """The target when the spec gives a number (None for `auto`, or when the base config's target applies)."""
        return None if self.target_accuracy in (None, "auto") else float(self.target_accuracy)

    @field_validator("search_space")
    @classmethod
    def _space(cls, v):
        if not v:
            raise ValueError("must hold at least one knob")
        return v

    @model_validator(mode="after")
    def _per_arm_lr(self) -> "StudySpec":
        """`lr_sweep`: lr as a log-range knob, every point at every lr (once: a stored spec is already expanded)."""
        lrs = self.lr_sweep
        if lrs is None:
            return self
        if len(lrs) < 2 or any(b <= a for a, b in zip(lrs, lrs[1:])) or lrs[0] <= 0:
            raise ValueError("lr_sweep: give two or more learning rates, positive and ascending")
        base_lr = float(self.base.get("lr", TrialConfig.model_fields["lr"].default))
        if not any(math.isclose(base_lr, v, rel_tol=1e-9) for v in lrs):
            raise ValueError(f"lr_sweep: must include the base lr ({base_lr:g}), the baseline's")
        if "lr" in self.search_space and self.search_space["lr"].choices is not None:
            raise ValueError("lr_sweep: lr is swept per arm; remove it from search_space")
        step = lr_step(lrs)
        self.search_space["lr"] = Dimension(
            low=lrs[0] / step**self.lr_extend * (1 - 1e-9), high=lrs[-1] * step**self.lr_extend * (1 + 1e-9), log=True
        )
        if self.points and all("lr" in p for p in self.points):
            return self  # expanded already (a stored spec read back), or every point names its own lr
        expanded = [point for p in self.points for point in ([p] if "lr" in p else [{**p, "lr": v} for v in lrs])]
        if self.baseline:
            try:
                on_policy = {k: v for k, v in self.baseline_params().items() if k != "lr"}
            except ConfigError:  # a base that does not build: `_check` says so in one line
                on_policy = None
            if on_policy is not None:
                _include_baseline(self)  # on-policy at the other lrs are points of the space: its values in its choices
                expanded = [
                    {**on_policy, "lr": v} for v in lrs if not math.isclose(v, base_lr, rel_tol=1e-9)
                ] + expanded
        self.points = expanded
        self.n_trials = max(self.n_trials, len(self.points) + int(self.baseline))
        return self

    def checkpoint_of(self, seed: int, base_init_seed: int = 0) -> int:
        """The warm start (`model.init_seed`) seed `seed` starts from (`seeds_per_checkpoint`)."""
        if self.seeds_per_checkpoint is None:
            return base_init_seed
        block = seeds.checkpoint_replicate(seed, self.seeds_per_checkpoint)
        if self.warm_starts is None:
            return seeds.checkpoint_seed(base_init_seed, block)
        if block < len(self.warm_starts):
            return self.warm_starts[block]
        left_out = (s for s in itertools.count() if s not in self.warm_starts)
        return next(itertools.islice(left_out, block - len(self.warm_starts), None))

    @property
    def seed_list(self) -> list[int]:
        return self.seeds  # type: ignore[return-value]

    @property
    def objectives(self) -> list[str]:
        return [self.objective] if isinstance(self.objective, str) else list(self.objective)

    @property
    def directions(self) -> list[str]:
        names = self.objectives
        table = SINGLE_OBJECTIVES if len(names) == 1 else MULTI_OBJECTIVES
        return [table[n] for n in names]

    def grid(self) -> dict[str, list[Any]]:
        return {k: d.grid_values() for k, d in self.search_space.items()}

    def trial_config(
        self,
        params: dict[str, Any],
        seed: int,
        mu: float | None = None,
        threads: int | None = None,
        tracking_uri: str | None = None,
        target: float | None = None,
    ) -> TrialConfig:
        """The trial config of one configuration and seed: base, then the sampled knobs, then study settings
        (`target`: the study's resolved target accuracy, when `target_accuracy` is `auto`)."""
        data = copy.deepcopy(self.base)
        for key, value in params.items():
            if key not in PSEUDO_KNOBS:
                set_dotted(data, key, value)
        if "x" in params:  # batch size and ratio only: the strategy's own checks need the capacity set below
            probe = build_config(
                {**data, "replay": {**data.get("replay", {}), "strategy": "uniform", "capacity": None}}
            )
            set_dotted(
                data,
                "replay.capacity",
                knobs.capacity(params["x"], probe.replay.ratio, probe.batch_size, distinct=False),
            )
        set_dotted(data, "seed", seed)
        if self.seeds_per_checkpoint is not None:
            set_dotted(
                data, "model.init_seed", self.checkpoint_of(seed, int(data.get("model", {}).get("init_seed", 0)))
            )
        target = target if target is not None else self.fixed_target
        if target is not None:
            set_dotted(data, "eval.target_accuracy", target)
        if mu is not None:
            set_dotted(data, "compute.mu", mu)
        if threads is not None:
            set_dotted(data, "threads", threads)
        if tracking_uri is not None:
            set_dotted(data, "tracking.uri", tracking_uri)
        set_dotted(data, "tracking.experiment", self.name)
        return build_config(data)

    def baseline_params(self) -> dict[str, Any]:
        """The on-policy configuration expressed in this space's knobs (ratio 1, capacity B, no horizon; with an
        asynchronous base, the `queue` strategy: a uniform buffer there replays at whatever ratio the split gives)."""
        base = build_config(self.base)
        params: dict[str, Any] = {}
        for key in self.search_space:
            if key == "replay.ratio":
                params[key] = 1 if self.search_space[key].is_int else 1.0
            elif key == "replay.capacity":
                params[key] = base.batch_size
            elif key == "x":
                params[key] = 1
            elif key == "replay.horizon":
                params[key] = None
            elif key == "replay.strategy":  # asynchronously, on-policy is the queue (each rollout trained once)
                params[key] = "queue" if base.pipeline.mode == "async" else "uniform"
            else:
                params[key] = _get_dotted(self.base_config_dict(), key)
        return {k: v for k, v in params.items() if self.search_space[k].active(params)}

    def base_config_dict(self) -> dict[str, Any]:
        return build_config(self.base).model_dump()


def fmt_params(params: dict[str, Any]) -> str:
    """Knob values as `key=value` pairs (floats in short form)."""
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def _get_dotted(data: dict[str, Any], key: str) -> Any:
    node: Any = data
    for part in key.split("."):
        node = node[part]
    return node


def probe_point(spec: StudySpec, knob: str, value: Any) -> dict[str, Any]:
    """A configuration that sets `knob` to `value`: earlier knobs chosen so that its condition holds, the other
    active knobs at their first probe value (so a strategy is probed together with its own parameters)."""
    want = spec.search_space[knob].when or {}
    point: dict[str, Any] = {}
    for key, dim in spec.search_space.items():
        if key == knob:
            point[key] = value
        elif key in want:
            point[key] = want[key][0] if isinstance(want[key], list) else want[key]
        elif dim.active(point):
            point[key] = dim.probe_values()[0]
    return {k: v for k, v in point.items() if spec.search_space[k].active(point)}


def lr_step(lrs: list[float]) -> float:
    """The factor between neighbouring learning rates of a sweep (its geometric mean step)."""
    return (lrs[-1] / lrs[0]) ** (1.0 / (len(lrs) - 1))


def _check(spec: StudySpec) -> None:
    """Cross-field checks that need the trial config: every knob is a real key and every probe value is valid."""
    try:
        build_config(spec.base)
    except ConfigError as err:
        raise ConfigError(f"base.{err}") from None
    for name in spec.objectives:
        table = SINGLE_OBJECTIVES if len(spec.objectives) == 1 else MULTI_OBJECTIVES
        if name not in table:
            raise ConfigError(f"objective: unknown {name!r}{did_you_mean(name, table)}; known: {', '.join(table)}")
    if len(spec.objectives) > 2 or (len(spec.objectives) == 2 and len(set(spec.objectives)) != 2):
        raise ConfigError("objective: a multi-objective study takes two distinct objectives")
    if spec.sampler not in SAMPLERS:
        hint = did_you_mean(spec.sampler, SAMPLERS)
        raise ConfigError(f"sampler: unknown {spec.sampler!r}{hint}; known: {', '.join(SAMPLERS)}")
    if spec.pruner and len(spec.objectives) > 1:
        raise ConfigError("pruner: Optuna cannot prune multi-objective studies")
    if spec.pruner == "compute" and spec.objectives != ["compute_to_target"]:
        raise ConfigError("pruner: compute needs the compute_to_target objective")
    if spec.warm_starts is not None and spec.seeds_per_checkpoint is None:
        raise ConfigError("warm_starts: names the warm start of each block of seeds_per_checkpoint seeds; set that too")
    if spec.seeds_per_checkpoint is not None:
        from workbench.trial.model_sources import model_source  # torch: loaded by validating, not by importing

        model = build_config(spec.base).model
        if not model_source(model).seeded:
            raise ConfigError(
                "seeds_per_checkpoint: varies a seeded model's warm start (model.init_seed, the embedded model);"
                f" base.model.source {model.source_name} is a fixed model"
            )
    for knob, dim in spec.search_space.items():
        for value in dim.probe_values():
            params = probe_point(spec, knob, value)
            if knob == "x" and "replay.ratio" not in params:
                params["replay.ratio"] = 1  # x alone: probe against on-policy
            try:
                spec.trial_config(params, seed=0)
            except ConfigError as err:
                msg = str(err)
                if msg.startswith(f"{knob}:") or msg.startswith(f"{knob}."):
                    raise ConfigError(f"search_space.{msg}") from None
                if "x" in params and "replay.capacity: must be >=" in msg:
                    continue  # infeasible (x, y) pairs are skipped at run time
                raise ConfigError(f"search_space.{knob}: value {value!r} gives an invalid trial ({msg})") from None
    keys = list(spec.search_space)
    for knob, dim in spec.search_space.items():
        for key, want in (dim.when or {}).items():
            if key not in keys or keys.index(key) >= keys.index(knob):
                raise ConfigError(f"search_space.{knob}.when: {key!r} must be a knob listed before {knob!r}")
            for value in want if isinstance(want, list) else [want]:
                other = spec.search_space[key]
                if other.choices is not None and value not in other.choices:
                    raise ConfigError(f"search_space.{knob}.when: {key} never takes the value {value!r}")
    if spec.sampler == "grid":
        if any(d.when for d in spec.search_space.values()):
            raise ConfigError(
                "sampler: grid cannot sample conditional knobs (`when`); list the configurations under points"
            )
        try:
            spec.grid()
        except ValueError as err:
            raise ConfigError(f"search_space: {err}") from None
    for i, point in enumerate(spec.points):
        check_point(spec, point, f"points[{i}]")


def check_point(spec: "StudySpec", point: dict[str, Any], where: str) -> None:
    """A configuration given as knob values: every knob known, every value allowed, conditions respected."""
    for key, value in point.items():
        if key not in spec.search_space:
            raise ConfigError(f"{where}.{key}: not a knob of search_space{did_you_mean(key, spec.search_space)}")
        dim = spec.search_space[key]
        if dim.choices is not None and value not in dim.choices:
            raise ConfigError(f"{where}.{key}: {value!r} is not among the choices {dim.choices}")
        if dim.choices is None and not (dim.low <= value <= dim.high):
            raise ConfigError(f"{where}.{key}: {value!r} is outside [{dim.low:g}, {dim.high:g}]")
    for key, dim in spec.search_space.items():
        active = dim.active(point)
        if active and key not in point:
            raise ConfigError(f"{where}: missing knob {key}")
        if not active and key in point:
            raise ConfigError(f"{where}.{key}: inactive here (its condition {dim.when} does not hold)")
    try:
        spec.trial_config(point, seed=0)
    except ConfigError as err:
        raise ConfigError(f"{where}: gives an invalid trial ({err})") from None


def load_spec(path: str | Path, overrides: dict[str, Any] | None = None) -> StudySpec:
    """Read and validate a study spec; `ConfigError` (one line naming the field) on any problem."""
    data = load_yaml_mapping(path, what="study spec")
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        spec = StudySpec.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, spec_keys(data))) from None
    _check(spec)
    if spec.baseline:
        _include_baseline(spec)
    return spec


def spec_keys(data: dict[str, Any]) -> list[str]:
    """The dotted keys a spec may hold, each knob of its search space named (for "did you mean")."""
    keys = [k.key for k in model_keys(StudySpec)]
    knobs = data.get("search_space") if isinstance(data.get("search_space"), dict) else {}
    return [k for k in keys if PLACEHOLDER not in k] + [
        k.replace(PLACEHOLDER, str(n)) for n in knobs for k in keys if PLACEHOLDER in k
    ]


def _include_baseline(spec: StudySpec) -> None:
    """Add the on-policy point to categorical knobs that lack it, so the baseline is a trial of the space itself."""
    for key, value in spec.baseline_params().items():
        dim = spec.search_space[key]
        if dim.choices is not None and value not in dim.choices:
            dim.choices.insert(0, value)


def feasible_space_size(spec: StudySpec) -> int | None:
    """Number of feasible configurations of a finite space (x >= y where x is searched), or None if infinite."""
    try:
        grid = spec.grid()
    except ValueError:
        return None
    keys = list(grid)
    default_ratio = build_config(spec.base).replay.ratio
    seen = set()
    for values in itertools.product(*grid.values()):
        point: dict[str, Any] = {}
        for key, value in zip(keys, values):
            if spec.search_space[key].active(point):
                point[key] = value
        if "x" in point and not knobs.feasible(point["x"], point.get("replay.ratio", default_ratio)):
            continue
        seen.add(tuple(sorted(point.items(), key=lambda kv: kv[0])))
    return len(seen)
