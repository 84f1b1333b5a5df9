"""The rollout ledger of a trainer the workbench does not run itself: generated = trained at least once + discarded
untrained + held untrained, with the seconds each phase took (docs/trainers.md)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Ledger:
    gen_rollouts: int = 0
    """Rollouts generated so far."""
    train_rollouts: int = 0
    """Rollout uses trained on so far (a rollout in two batches counts twice)."""
    trained_once: int = 0
    """Distinct rollouts trained on at least once."""
    held_untrained: int = 0
    """Rollouts in the buffer that no batch has used yet."""
    gen_seconds: float = 0.0
    """Sampling, rewarding and scoring the fresh rollouts."""
    draw_seconds: float = 0.0
    """The replay plug-in's own work: the strategy's draw and the batch's collation."""
    step: dict[str, float] = field(default_factory=dict)
    """What the current optimizer step did (fresh, trained, gen seconds, the buffer's metrics), reset at its start."""

    @property
    def discarded_rollouts(self) -> int:
        """Generated, never trained on, and no longer held: evicted by capacity or horizon."""
        return self.gen_rollouts - self.trained_once - self.held_untrained

    def begin_step(self) -> None:
        self.step = {"fresh": 0, "trained": 0, "gen_seconds": 0.0}

    def generated(self, n: int, seconds: float) -> None:
        self.gen_rollouts += n
        self.gen_seconds += seconds
        self.step["fresh"] = self.step.get("fresh", 0) + n
        self.step["gen_seconds"] = self.step.get("gen_seconds", 0.0) + seconds

    def trained(self, n: int, first_uses: int | None = None) -> None:
        """`n` rollout uses trained on, `first_uses` of them a rollout's first (default: all of them)."""
        self.train_rollouts += n
        self.trained_once += n if first_uses is None else first_uses
        self.step["trained"] = self.step.get("trained", 0) + n
