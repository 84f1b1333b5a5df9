"""The synchronous batch source: each step's fresh rollouts generated in the loop's own process (by the policy's
transformers decode or its vLLM engine), then the strategy's draw (`loop.train` does the rest)."""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

import numpy as np
import torch

from workbench import progress
from workbench import seeds
from workbench.config import TrialConfig
from workbench.trial.policy import Policy
from workbench.trial.record import WallClock, devices_in_use, fresh_metrics, mismatch_metrics
from workbench.trial.replay import Rollout, batch_stats
from workbench.trial.rollouts import PromptStream, generate_groups
from workbench.trial.source import Draw, Parts
from workbench.trial.step import train_step
from workbench.trial.tasks import Task
from workbench.processes import usable_cores


class InlineSource:
    """Generation and training in turn, in one process."""

    def __init__(self, cfg: TrialConfig):
        self.cfg = cfg
        self.tags: dict[str, str] = {}
        self.ages: Counter[int] = Counter()
        self.next_uid = 0

    def policy(self, task: Task) -> Policy:
        return Policy(self.cfg, task)

    def clock(self, policy: Policy):
        return WallClock(devices_in_use(policy.device, self.cfg.threads or usable_cores())), None

    @contextmanager
    def running(self, parts: Parts):
        self.p = parts
        n_train = len(parts.task.train)
        self.prompts = PromptStream(n_train, self.cfg.seed, parts.strategy.prompts(n_train))
        self.sampler = torch.Generator(device=parts.policy.device).manual_seed(seeds.rollout_sampler(self.cfg.seed))
        self.replay_rng = np.random.default_rng(seeds.replay_draws(self.cfg.seed))
        yield

    def evaluate(self, step: int, last: bool = False) -> None:
        self.p.evaluations(step, last)

    def begin(self) -> None:
        pass

    def more(self, step: int, budget_left: bool) -> bool:
        return budget_left

    def draw(self, step: int) -> Draw:
        p, meter = self.p, self.p.meter
        progress.ACTIVITY.begin(f"step {step}: generating", "tokens")
        groups = p.strategy.groups(step)
        fresh: list[Rollout] = []
        out = None
        if groups:
            engine = p.policy.engine
            with meter.timed("gen"):
                if engine is not None and step - engine.version >= self.cfg.generation.sync_every:
                    engine.sync(p.policy.model, step)  # weight transfer: generation-side cost
                fresh, out = generate_groups(
                    p.policy, p.task, self.prompts.take(groups), self.cfg.group_size, step, self.sampler, self.next_uid
                )
            self.next_uid += len(fresh)
            meter.gen_tokens += out.generated_tokens
            meter.prefill_tokens += out.prefill_tokens
        with meter.timed("train"):  # a strategy may score rollouts (rlep): training-side compute
            batch = p.strategy.batch(fresh, step, self.replay_rng)
        return Draw(fresh, batch, out)

    def train(self, step: int, batch: list[Rollout]) -> tuple[float, float, bool]:
        return train_step(self.p.policy, self.p.optimizer, batch, self.cfg, step, self.p.strategy.gate, self.p.cosine)

    def trained(self, step: int, draw: Draw) -> tuple[int, int]:
        if draw.batch:
            self.p.meter.train_tokens += sum(len(r.prompt_ids) + len(r.completion_ids) for r in draw.batch)
            self.ages.update(batch_stats(draw.batch, step).ages)
        return len(draw.fresh), len(draw.batch)

    def metrics(self, step: int, draw: Draw) -> dict[str, float]:
        engine, out = self.p.policy.engine, draw.state
        metrics: dict[str, float] = {}
        if draw.fresh and engine is not None:
            metrics.update(
                {
                    **mismatch_metrics(draw.fresh),
                    "mismatch/engine_lag": step - engine.version,
                    "mismatch/syncs": engine.syncs,
                }
            )
        if draw.fresh:
            metrics.update(fresh_metrics(draw.fresh, out.entropy_mean, out.generated_tokens))
        return metrics

    def final(self) -> dict[str, float]:
        return {}

    def histograms(self) -> dict[str, dict[str, int]]:
        return {"age_counts": {str(k): v for k, v in sorted(self.ages.items())}}
