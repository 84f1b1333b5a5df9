"""`workbench theory`: Theorem 4.5's optimum under the power-law variance (App. C.3.2) as the knobs that run it."""

from __future__ import annotations

from workbench.knobs import BufferSettings, to_knobs

from analysis.theory import closed_form_optimum


def theory(mu: float, rho: float, alpha: float, batch_size: int) -> tuple[dict, BufferSettings]:
    """The closed-form (x*, y*) at `mu`, `rho`, `alpha` as knobs at batch size B: the summary a `--json` reader
    gets, and the buffer settings."""
    x, y = closed_form_optimum(mu, rho, alpha)
    k = to_knobs(x, y, batch_size, mu)
    out = {
        "mu": mu,
        "rho": rho,
        "alpha": alpha,
        "batch_size": batch_size,
        "x_star": x,
        "y_star": y,
        "fresh_per_step": k.fresh_per_step,
        "capacity": k.capacity,
        "horizon": k.horizon,
        "workers_per_trainer": k.workers_per_trainer,
        "on_policy_optimal": y <= 1.0,
    }
    return out, k
