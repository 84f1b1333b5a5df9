"""A pruner that knows about compute (`pruner: compute`).

Optuna's median pruner compares held-out accuracy at equal *steps*, the wrong axis when arms spend compute at
different rates (a y = 2 arm takes ~1.4x more steps per unit of compute than on-policy). This one watches the
first seed's accuracy-compute curve, at the study's reference mu, and stops a trial when

- **it is already beaten**: it has spent more compute than the upper end of the incumbent's 95% interval of
  compute-to-target without reaching the target; its compute-to-target can only be larger, so it cannot be
  the best; or
- **it is hopeless**: past `MIN_SHARE` of its budget, the saturating curve fitted to its evaluations so far
  (`workbench.estimators.fit_sigmoid`) stays below the target by more than two residual standard deviations at
  the end of the budget.

The baseline and arms (`predicted`, `confirm`) are never pruned: they measure, they do not compete.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.estimators import fit_sigmoid

MIN_SHARE = 0.4
"""The share of the budget after which a fitted curve may declare a trial hopeless."""
MIN_EVALS = 6


@dataclass
class ComputePruner:
    target: float
    budget: float | None
    incumbent_high: float | None
    """The upper end of the best trial's 95% interval of compute-to-target (None before any trial finished)."""
    spent: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)

    def observe(self, compute: float, accuracy: float) -> str | None:
        """Add one evaluation; return why the trial should stop, or None."""
        self.spent.append(compute)
        self.accuracy.append(accuracy)
        if max(self.accuracy) >= self.target:
            return None
        if self.incumbent_high is not None and compute > self.incumbent_high:
            return (
                f"beaten: {compute:.4g} units spent without reaching {self.target:g}, past the incumbent's"
                f" 95% interval (<= {self.incumbent_high:.4g})"
            )
        if self.budget and compute >= MIN_SHARE * self.budget and len(self.spent) >= MIN_EVALS:
            fit = fit_sigmoid(self.spent, self.accuracy)
            if fit is not None:
                reach = float(fit(self.budget))
                if reach + 2 * fit.rmse < self.target:
                    return (
                        f"hopeless: its fitted curve reaches {reach:.3f} (± {2 * fit.rmse:.3f}) at the budget,"
                        f" below the target {self.target:g}"
                    )
        return None
