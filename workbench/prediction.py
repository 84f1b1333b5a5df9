"""A predicted optimum, handed from the analysis to the study as typed data (torch-free).

The analysis predicts a compute-optimal configuration: a fitted model's (x*, y*) and, for a model that uses it, a
learning rate (`analysis.models`), or the probe's (`analysis.models.probe_prediction`). `workbench study verify`
runs it as new trials of the study (`workbench.study.verify`). What crosses between the two is a `Prediction`
(the point, the knobs that run it at the study's batch size, the compute predicted there, what predicted it) and
the study's `Measured` configurations as the analysis read them (a prediction already measured is not run again).
The analysis builds both (`analysis.predictions`), writes the fitted model's prediction into `analysis.json`, and
`from_json` reads it back; the study never reads the analysis's dict.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from workbench import knobs

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
