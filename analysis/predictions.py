"""The analysis's predicted optima as `workbench.prediction.Prediction`s: what `workbench study verify` runs.

Three sources predict an optimum: the fitted model of the report (`analysis.fit`, its `predicted` block), any
compared model (`analysis.models`, its `optimum` or the simplest point of its flat ridge), and the probe
(`analysis.models.probe_prediction` and `probe_lr`). Each becomes a `Prediction` at the study's batch size, its
compute read at the knobs that will run it; `measured` gives the study's configurations as the analysis read them.
"""

from __future__ import annotations

import math

from workbench.prediction import Measured, Prediction

from analysis.result import Analysis, FittedOptimum, ModelSummary, Optimum, Point

FIT_PROVENANCE = ("alpha", "tau0", "rho", "scale", "mu", "r2_log")
"""The fitted model's parameters a `predicted` trial records as what predicted it."""


def measured(result: Analysis) -> tuple[Measured, ...]:
    """The study's configurations in an `analysis.report.analyze` result."""
    return tuple(
        Measured(
            int(c.trial_number),
            float(c.y),
            int(c.capacity),
            float(c.compute_to_target),
            None if c.lr is None else float(c.lr),
            bool(c.baseline),
        )
        for c in result.configurations
    )


def fitted(block: FittedOptimum, fit, batch_size: int) -> Prediction | None:
    """The fitted model's optimum (`block.predicted`, `fit.predict(x, y)`), or None where the fit found none."""
    p = block.predicted
    if not all(math.isfinite(v) and v > 0 for v in (p.x, p.y)):
        return None
    fitted_params = block.fit.to_json()
    return Prediction.at(
        "predicted", p.x, p.y, batch_size, fit.predict, provenance={k: fitted_params[k] for k in FIT_PROVENANCE}
    )


def of_model(summary: ModelSummary, point: Point | Optimum, batch_size: int, ridge: bool = False) -> Prediction:
    """A compared model's optimum (`summary`: its entry in the result's `models`; `point`: its `optimum`, or the
    simplest point of its ridge with `ridge`), at its own learning rate when it chose one."""
    fit = summary.fit()
    lr = point.lr
    provenance = {
        "model": summary.model,
        "params": summary.params,
        "mu": summary.mu,
        "loco": summary.loco_error,
        **({"ridge": True} if ridge else {}),
    }
    return Prediction.at(
        "predicted",
        point.x,
        point.y,
        batch_size,
        lambda x, y: fit.predict(x, y, lr),
        lr=lr,
        provenance=provenance,
    )


def of_probe(
    predicted: dict,
    sweep: list[dict] | None,
    run_id: str,
    mu: float,
    units: float,
    baseline_compute: float,
    batch_size: int,
) -> Prediction:
    """The probe's optimum (`predicted`: `analysis.models.probe_lr`'s, with `x`) at the study's `mu`; its compute is the
    sweep's at lr* times the point's relative compute, else relative to the study's measured baseline
    (`baseline_compute`). `units`: the probe's cost, its sweep included; `claims_beyond_sweep`: whether the point beats
    the sweep alone at equal compute (`analysis.null_models.probe_against_sweep`, where the prediction carries it)."""
    compute = predicted["compute"] if "compute" in predicted else predicted["relative_compute"] * baseline_compute
    provenance = {
        "probe_run": run_id,
        "rho": predicted["rho"],
        "c": predicted["c"],
        "mu": mu,
        "relative_compute": predicted["relative_compute"],
        "same_point": predicted.get("stability", {}).get("same_point"),
        "lr_source": predicted["lr_source"],
        "probe_units": units,
        **({"claims_beyond_sweep": bool(predicted["against_sweep"]["claims"])} if "against_sweep" in predicted else {}),
        **({"lr_sweep": [[p["lr"], p["compute_to_target"], p["censored"]] for p in sweep]} if sweep else {}),
    }
    return Prediction.at(
        "probe",
        predicted["x"],
        predicted["y"],
        batch_size,
        lambda x, y: compute,
        lr=predicted["lr"] if sweep else None,
        provenance=provenance,
    )
