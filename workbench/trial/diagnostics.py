"""Per-step diagnostics of how stale a batch is from the learner's side, beside the importance weights'
(`objectives.ratio_stats`: the effective sample size, M2PO's second moment).

`GradientCosine`: the cosine between consecutive optimizer steps' gradients (GAC, arXiv 2603.01501, reports that
under staleness consecutive gradients stay highly aligned: the steps keep pushing the same way). Read after the
gradients are final for the step (averaged over trainers, not yet clipped: clipping rescales, the cosine is
scale-free).

`RunMeans`: each run's means of these per-step readings (and of the batch's mean age), logged as `final/*_mean`.
"""

from __future__ import annotations

import math

import torch


class GradientCosine:
    """Holds the previous step's gradient (one float32 vector) and reads the cosine of each new one against it."""

    def __init__(self) -> None:
        self.previous: torch.Tensor | None = None

    def __call__(self, model: torch.nn.Module) -> float | None:
        """The cosine between the model's current gradient and the last non-zero one read (None at the first read and
        for a zero gradient, which is not kept); the current one is kept for the next read."""
        grads = [p.grad.detach().reshape(-1) for p in model.parameters() if p.grad is not None]
        if not grads:
            return None
        current = torch.cat(grads).float()
        if current.norm() == 0:  # a batch with no signal (every advantage zero): nothing to compare, keep the last
            return None
        previous, self.previous = self.previous, current
        if previous is None or previous.numel() != current.numel():
            return None
        return float(torch.dot(previous, current) / (previous.norm() * current.norm()))


RUN_MEANS = {
    "offpolicy/ess": "final/ess_mean",
    "offpolicy/grad_cosine": "final/grad_cosine_mean",
    "replay/age_mean": "final/age_mean",
}
"""Per-step diagnostics whose mean over a run's steps is logged with its final metrics: the run-level readings that
the analysis sets against the run's saving (`analysis.stale_signals`)."""


class RunMeans:
    """The running means of `RUN_MEANS` over the steps that logged a finite value of each."""

    def __init__(self) -> None:
        self.sums = dict.fromkeys(RUN_MEANS, 0.0)
        self.counts = dict.fromkeys(RUN_MEANS, 0)

    def add(self, metrics: dict[str, float]) -> None:
        for key in RUN_MEANS:
            value = metrics.get(key)
            if value is not None and math.isfinite(value):
                self.sums[key] += float(value)
                self.counts[key] += 1

    def final(self) -> dict[str, float]:
        """`final/<name>_mean` for each diagnostic some step logged (none for one no step did)."""
        return {RUN_MEANS[k]: self.sums[k] / n for k, n in self.counts.items() if n}
