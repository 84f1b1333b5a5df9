"""A predicted optimum, handed from the analysis to the study as typed data (torch-free).

The analysis predicts a compute-optimal configuration: a fitted model's (x*, y*) and, for a model that uses it, a
learning rate (`analysis.models`), or the probe's (`analysis.models.probe_prediction`). `workbench study verify`
runs it as new trials of the study (`workbench.study.verify`). What crosses between the two is a `Prediction`
(the point, the knobs that run it at the study's batch size, the compute predicted there, what predicted it) and
the study's `Measured` configurations as the analysis read them (a prediction already measured is not run again).
The analysis builds both (`analysis.predictions`), writes the fitted model's prediction into `analysis.json`, and
`from_json` reads it back; the study never reads the analysis's dict.

The probe's prediction is typed here too, as the trial records it (`probe/probe.json`, `workbench.trial.probe.record`)
and the workflow reads it: a `ProbePrediction` (the point its measurements predict, or why it refuses one, with its
`ProbeStability` over bootstrap draws), priced by the on-policy learning-rate sweep (each run a `SweepPoint`, which
`workbench.trial.lr_sweep` runs, and the `LrOptimum` they locate) and held against that sweep alone
(`AgainstSweep`). `Record` is the frozen JSON block these and `analysis.result`'s types share: `to_json()` (the
plain dict the JSON has always held), `from_json()` (its inverse) and `lines()` (what the command line prints).
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Callable, ClassVar, Union

from workbench import knobs

Json = Any
"""A plain JSON block (dicts, lists, numbers, strings) kept as it was built."""


def omitted(default: Any = None) -> Any:
    """A field left out of the JSON where it is None (the dict had no such key)."""
    return field(default=default, metadata={"omit_none": True})


def _plain(value: Any) -> Any:
    if isinstance(value, (Record, Prediction)):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _decode(tp: Any, value: Any) -> Any:
    """`value` (from JSON) as the annotation `tp` says: records and predictions rebuilt, lists as tuples."""
    if value is None:
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        return _decode(kinds[0], value) if len(kinds) == 1 else value
    if isinstance(tp, type) and issubclass(tp, Record):
        return tp.from_json(value)
    if tp is Prediction:
        return Prediction.from_json(value)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v) for v in value)
        return tuple(_decode(a, v) for a, v in zip(args, value))
    if origin is dict:
        return {k: _decode(args[1], v) for k, v in value.items()}
    return value


class Record:
    """What every frozen JSON block shares: its JSON, read back by its annotations."""

    JSON_ORDER: ClassVar[tuple[str, ...]] = ()
    """The keys' order in the JSON where it is not the fields' order."""

    def to_json(self) -> dict[str, Any]:
        """A plain JSON-able dict (tuples as lists, nested types as their JSON)."""
        by_name = {f.name: f for f in fields(self)}
        out = {}
        for name in self.JSON_ORDER or by_name:
            value = getattr(self, name)
            if value is None and by_name[name].metadata.get("omit_none"):
                continue
            out[name] = _plain(value)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]):
        """The record `to_json` wrote (a missing required key: `KeyError`, which `analysis.result.load` reports in
        one line)."""
        hints = typing.get_type_hints(cls)
        kwargs = {f.name: _decode(hints[f.name], data[f.name]) for f in fields(cls) if f.name in data}
        missing = [
            f.name
            for f in fields(cls)
            if f.name not in kwargs and f.default is MISSING and f.default_factory is MISSING
        ]
        if missing:
            raise KeyError(f"{cls.__name__}: {', '.join(missing)}")
        return cls(**kwargs)

    def lines(self) -> list[str]:
        raise NotImplementedError


ARMS = ("predicted", "probe")
"""The arms a prediction is recorded as: a fitted model's optimum, the probe's."""


@dataclass(frozen=True)
class Prediction:
    """An optimum to run, at the batch size it was predicted for."""

    arm: str
    """`predicted` (a fitted model) or `probe`."""
    x: float
    """The predicted staleness horizon x* = N/R, before rounding to whole rollouts."""
    y: float
    """The predicted replay ratio y* = B/R."""
    batch_size: int
    """B: the study's batch size, which turns (x, y) into knobs."""
    compute: float
    """Predicted compute to target at the knobs that run it (`run_x`, `ratio`, `lr`)."""
    lr: float | None = None
    """The learning rate it runs at (a learning-rate-aware model's, or the probe's after its sweep); None: the study's."""
    provenance: dict[str, Any] = field(default_factory=dict)
    """What predicted it, as JSON (a fitted model's parameters and error, the probe's run and measurements)."""

    def __post_init__(self):
        if self.arm not in ARMS:
            raise ValueError(f"arm: must be one of {', '.join(ARMS)}, got {self.arm!r}")
        if not (math.isfinite(self.x) and math.isfinite(self.y) and self.x > 0 and self.y > 0):
            raise ValueError(f"x, y: must be positive numbers, got {self.x!r}, {self.y!r}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size: must be >= 1, got {self.batch_size}")

    @classmethod
    def at(
        cls,
        arm: str,
        x: float,
        y: float,
        batch_size: int,
        predict: Callable[[float, float], float],
        lr: float | None = None,
        provenance: dict[str, Any] | None = None,
    ) -> "Prediction":
        """The prediction of (x, y) with its compute read from `predict(x, y)` at the knobs that run it (the ratio
        to 3 digits, the capacity in whole rollouts), not at the unrounded point."""
        point = cls(arm, x, y, batch_size, math.nan, lr, dict(provenance or {}))
        return cls(arm, x, y, batch_size, float(predict(point.run_x, point.ratio)), lr, dict(provenance or {}))

    @property
    def ratio(self) -> float:
        """The `replay.ratio` it runs at (`workbench.knobs.runnable_ratio`)."""
        return knobs.runnable_ratio(self.y)

    @property
    def capacity(self) -> int:
        """The `replay.capacity` it runs at: N = x·B / ratio in whole rollouts, at least B."""
        return knobs.capacity(self.x, self.ratio, self.batch_size)

    @property
    def run_x(self) -> float:
        """The x its knobs really give (the capacity is whole rollouts)."""
        return knobs.staleness(self.capacity, self.ratio, self.batch_size)

    def split_knobs(self, mu: float, trainers: int = 1) -> dict[str, Any]:
        """The knobs that run it asynchronously, where y is not set but emerges from the split (y ≈ mu·T/W): W =
        mu·T/y* generators (whole, at least one) and the buffer N = x*·B/y*; the queue where y* rounds to on-policy.
        First order only (the paper's Fig. 2 exceeds the mapping by up to 2.6x at aggressive replay)."""
        generators = max(1, round(knobs.workers_per_trainer(self.y, mu) * trainers))
        if self.ratio <= 1:
            out: dict[str, Any] = {
                "replay.strategy": "queue",
                "replay.capacity": self.batch_size,
                "pipeline.generators": generators,
            }
        else:
            out = {"replay.strategy": "uniform", "replay.capacity": self.capacity, "pipeline.generators": generators}
        if self.lr is not None:  # the predicted lr runs with the split, on-policy's included
            out["lr"] = float(f"{self.lr:.3g}")
        return out

    @property
    def knobs(self) -> dict[str, float | None]:
        """The knob values a study trial runs it with (no age limit; the lr to 3 digits when it has one)."""
        out: dict[str, float | None] = {
            "replay.ratio": self.ratio,
            "replay.capacity": self.capacity,
            "replay.horizon": None,
        }
        if self.lr is not None:
            out["lr"] = float(f"{self.lr:.3g}")
        return out

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (`from_json` reads it back); the knobs it runs with are included for a reader."""
        return {**asdict(self), "knobs": self.knobs, "run_x": self.run_x}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Prediction":
        """A prediction as `to_json` wrote it (the derived `knobs` and `run_x` are recomputed, not read)."""
        lr = data.get("lr")
        return cls(
            str(data["arm"]),
            float(data["x"]),
            float(data["y"]),
            int(data["batch_size"]),
            float(data["compute"]),
            None if lr is None else float(lr),
            dict(data.get("provenance") or {}),
        )


@dataclass(frozen=True)
class Measured:
    """A configuration of the study as the analysis read it: what a prediction is checked against before it runs."""

    trial_number: int
    y: float
    """Its `replay.ratio`."""
    capacity: int
    """Its `replay.capacity`."""
    compute_to_target: float
    """Its measured compute to target (the geometric mean over seeds)."""
    lr: float | None = None
    """Its learning rate, where the analysis read one."""
    baseline: bool = False
    """The on-policy baseline."""

    def runs(self, prediction_knobs: dict[str, Any], base_lr: float | None = None) -> bool:
        """Whether this configuration is the one `prediction_knobs` would run: the same ratio and capacity, at the
        learning rate the prediction runs at (its own `lr` knob, else the study's `base_lr`: a model that does not
        use the learning rate predicts at the base one)."""
        lr = prediction_knobs.get("lr", base_lr)
        same_lr = lr is None or self.lr is None or math.isclose(self.lr, lr, rel_tol=1e-6)
        return (
            math.isclose(self.y, prediction_knobs["replay.ratio"], rel_tol=1e-6)
            and self.capacity == prediction_knobs["replay.capacity"]
            and same_lr
        )


def twin(
    measured: list[Measured] | tuple[Measured, ...], prediction_knobs: dict[str, Any], base_lr: float | None = None
) -> Measured | None:
    """The first measured configuration that runs `prediction_knobs` (`Measured.runs`), if any."""
    return next((m for m in measured if m.runs(prediction_knobs, base_lr)), None)


# ---------------------------------------------------------------- the probe's prediction


@dataclass(frozen=True)
class SweepPoint(Record):
    """One run of the probe's on-policy learning-rate sweep (`workbench.trial.lr_sweep.run_lr_sweep`)."""

    lr: float
    compute_to_target: float
    """Its compute to the target; where `censored`, the budget it stopped at (a lower bound)."""
    censored: bool
    budget: float
    """The compute units it was given."""
    run_id: str | None = omitted()
    """Its MLflow run."""

    def lines(self) -> list[str]:
        return [f"lr {self.lr:.3g}: {'>' if self.censored else ''}{self.compute_to_target:.3g}"]


@dataclass(frozen=True, kw_only=True)
class LrOptimum(Record):
    """On-policy's best learning rate located by the sweep (`analysis.models.lr_optimum`): the vertex in log lr and
    the compute there, or `refused` and why, with the cheapest run's lr and compute where one reached the target."""

    lr: float | None = omitted()
    compute: float | None = omitted()
    refused: str | None = omitted()
    bounded_by_censored: bool | None = omitted()
    """A censored neighbour entered at its budget: lr* is then an upper bound."""
    points: int | None = omitted()
    """The sweep's runs."""

    def lines(self) -> list[str]:
        if self.refused:
            return [f"no lr*: {self.refused}"]
        return [f"lr* {self.lr:.3g} ({self.compute:.3g} units)"]


@dataclass(frozen=True, kw_only=True)
class ProbeStability(Record):
    """The probe's point over bootstrap resamples of its groups: the share of draws at the same point and the 95%
    range of x and y over the draws."""

    draws: int
    same_point: float
    x_95: tuple[float, float]
    y_95: tuple[float, float]

    def covers(self, x: float, y: float) -> bool:
        """Whether (x, y) lies within the draws' 95% range (y to 0.01, the points' rounding)."""
        return self.x_95[0] <= x <= self.x_95[1] and self.y_95[0] - 0.01 <= y <= self.y_95[1] + 0.01

    def lines(self) -> list[str]:
        return [
            f"stability over {self.draws} bootstrap resamples of the probe's groups: the same point in"
            f" {self.same_point:.0%}; 95% of draws within x {self.x_95[0]:g}-{self.x_95[1]:g},"
            f" y {self.y_95[0]:.3g}-{self.y_95[1]:.3g}"
        ]


@dataclass(frozen=True, kw_only=True)
class AgainstSweep(Record):
    """The probe's point against the null it contains, its sweep alone at equal compute
    (`analysis.null_models.probe_against_sweep`): whether it claims its point, why, and the costs compared."""

    sweep_units: float
    gradient_units: float | None = None
    """The probe's gradient phase; None where it was not given."""
    sweep_lr: float | None = None
    sweep_compute: float | None = None
    claims: bool
    probe_compute: float | None = omitted()
    probe_path: float | None = omitted()
    sweep_path: float | None = omitted()
    reason: str

    def lines(self) -> list[str]:
        """What the probe claims against its null, in one line. Where it does not beat the sweep alone (its point is
        on-policy at the sweep's lr*, it refused a point, or its gradient phase costs more than its point saves), it
        claims nothing beyond its lr sweep; with no sweep, nothing against tuned on-policy."""
        if self.claims:
            return [f"against its lr sweep at equal compute, the probe {self.reason}"]
        if self.sweep_units:
            return [f"the probe claims nothing beyond its lr sweep: {self.reason.removeprefix('no claim: ')}"]
        return [
            "the probe claims nothing against tuned on-policy: no on-policy lr sweep ran to compare its point with"
            " (--lr-sweep runs one)"
        ]


@dataclass(frozen=True, kw_only=True)
class ProbePrediction(Record):
    """The optimum a probe's measurements predict (`analysis.models.probe_prediction`, priced by its sweep with
    `analysis.models.probe_lr`): the point and its compute relative to on-policy's, the learning rate it runs at, the
    range within 5% of its compute, its stability; or `refused` and why (the argmin kept where there was one). The
    workflow adds the knobs that run it (`capacity`, `ratio`) and how it fares against its sweep alone."""

    x: float | None = omitted()
    y: float | None = omitted()
    relative_compute: float | None = omitted()
    """Its compute to target over on-policy's, each at its own tuned lr."""
    lr_factor: float | None = omitted()
    """Its best lr over on-policy's."""
    near_x: tuple[float, float] | None = omitted()
    near_y: tuple[float, float] | None = omitted()
    at_edge: bool | None = omitted()
    """The minimum is at the largest horizon the probe measured."""
    refused: str | None = omitted()
    c: float | None = omitted()
    """The within-group correlation a batch of whole groups keeps: group_correlation·(G - 1)."""
    rho: float | None = omitted()
    mu: float | None = omitted()
    stability: ProbeStability | None = omitted()
    lr_sweep: tuple[SweepPoint, ...] | None = omitted()
    lr_optimum: LrOptimum | None = omitted()
    lr: float | None = omitted()
    lr_source: str | None = omitted()
    compute: float | None = omitted()
    """Its compute to target in units: relative_compute x the sweep's at lr*."""
    capacity: int | None = omitted()
    ratio: float | None = omitted()
    against_sweep: AgainstSweep | None = omitted()

    @property
    def has_point(self) -> bool:
        """It located a point (run only where it is not `refused` too)."""
        return self.x is not None

    def lines(self) -> list[str]:
        """What `workbench probe` prints of it: the sweep, the point, its stability, the refusal, the claim."""
        out = []
        if self.lr_sweep is not None and self.lr_optimum is not None:
            runs = ", ".join(p.lines()[0] for p in self.lr_sweep)
            out.append(f"on-policy lr sweep, compute to target: {runs}; {self.lr_optimum.lines()[0]}")
        if self.has_point:
            what = "best point measured" if self.refused else "predicted optimum"
            capacity = f" (capacity {self.capacity})" if self.capacity is not None else ""
            lr = (
                f", lr {self.lr:.3g} ({self.lr_source}; x{self.lr_factor:.2f} on-policy's)"
                if self.lr is not None
                else ""
            )
            units = f" ({self.compute:.3g} units)" if self.compute is not None else ""
            (x0, x1), (y0, y1) = self.near_x, self.near_y
            out.append(
                f"{what} at a tuned lr: x {self.x:.3g}, y {self.y:.3g}{capacity}{lr}, {self.relative_compute:.2f}x"
                f" on-policy's compute{units}; within 5%: x {x0:g}-{x1:g}, y {y0:.3g}-{y1:.3g}"
            )
        if self.stability is not None:
            out += self.stability.lines()
        if self.refused:
            out.append(f"no prediction: {self.refused}")
        if self.against_sweep is not None:
            out += self.against_sweep.lines()
        return out
