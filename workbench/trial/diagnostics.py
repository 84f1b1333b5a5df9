"""Per-step diagnostics of how stale a batch is from the learner's side, beside the importance weights'
(`objectives.ratio_stats`: the effective sample size, M2PO's second moment).

`GradientCosine`: the cosine between consecutive optimizer steps' gradients (GAC, arXiv 2603.01501, reports that
under staleness consecutive gradients stay highly aligned: the steps keep pushing the same way). Read after the
gradients are final for the step (averaged over trainers, not yet clipped: clipping rescales, the cosine is
scale-free).
"""

from __future__ import annotations

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
