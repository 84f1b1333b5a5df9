"""Replay strategies, registered by name (`replay.strategy`): what is generated and what is trained each step.

A strategy owns its buffer and answers four questions of the trainer loop (design §2):

    groups = strategy.groups(step)                 # how many GRPO groups to sample now
    batch  = strategy.batch(fresh, step, rng)      # what to train on (may edit advantages / log-probs)
    gated  = strategy.gate(model, step)            # after backward, before the optimizer step (dgg)
    strategy.metrics()                             # strategy-specific metrics of the step

Registered: `uniform` (Arnal et al.), `positive_bias` (Arnal et al. §5.5), `prioritized` (Yoo et al.),
`rlep` (Zhang et al.), `dgg` (Miao et al.). Each is documented in `docs/strategies/`. A new strategy subclasses
`Strategy` and registers with `@register_strategy("name")`; its parameters live in `replay.<name>` of the config.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from workbench.replay import FreshCredit, ReplayBuffer, Rollout, group_advantages


@dataclass
class StrategyContext:
    """What a strategy may use besides the config: the task, the tokenizer, and the current policy's scorer."""

    task: object
    tokenizer: object
    rescore: Callable[[list[Rollout]], None]
    """Replace the rollouts' behaviour log-probs by the current policy's (no grad)."""
    log: Callable[[str], None] = lambda msg: None
    max_new_tokens: int = 64


STRATEGIES: dict[str, type["Strategy"]] = {}


def register_strategy(name: str):
    """Register a `Strategy` subclass under `name` (the value of `replay.strategy`)."""

    def wrap(cls):
        cls.name = name
        STRATEGIES[name] = cls
        return cls

    return wrap


def is_correct(r: Rollout) -> bool:
    """A verified success: the task's verifier gave full reward (rewards are 0/1 on the built-in tasks)."""
    return r.reward >= 1.0 - 1e-9


class Strategy:
    name = ""
    fresh_anchored = False
    """Generates a whole fresh batch (B rollouts) whenever it needs one; `replay.ratio` must then stay 1."""

    def __init__(self, cfg, ctx: StrategyContext | None = None):
        self.cfg, self.ctx = cfg, ctx
        self.B, self.G = cfg.batch_size, cfg.group_size
        self._metrics: dict[str, float] = {}

    # -- hooks for the config
    @classmethod
    def default_capacity(cls, cfg) -> int:
        """`replay.capacity: null` means this (the batch size: on-policy for uniform at ratio 1)."""
        return cfg.batch_size

    @classmethod
    def validate(cls, cfg) -> None:
        """Raise ValueError("field: reason") if the config does not suit this strategy."""
        if cls.fresh_anchored and cfg.replay.ratio != 1:
            raise ValueError(f"replay.ratio: must be 1 with replay.strategy {cls.name} (its reuse is set by replay.{cls.name}.*)")

    # -- hooks for the trainer
    def prompts(self, n_train: int) -> list[int] | None:
        """The train prompts this strategy trains on (None: all of them)."""
        return None

    def groups(self, step: int) -> int:
        raise NotImplementedError

    def batch(self, fresh: list[Rollout], step: int, rng: np.random.Generator) -> list[Rollout]:
        raise NotImplementedError

    def gate(self, model, step: int) -> bool:
        """Called after backward and before the optimizer step; True drops this update (dgg)."""
        return False

    def size(self) -> int:
        return 0

    def ages(self, step: int) -> list[int]:
        return []

    def metrics(self) -> dict[str, float]:
        return self._metrics


def uniform_draw(items, batch_size: int, rng: np.random.Generator, with_replacement: bool = False) -> list[Rollout]:
    """B rollouts uniformly from `items`, distinct unless `with_replacement`, returned in buffer order."""
    n = len(items)
    if n < batch_size and not with_replacement:
        raise RuntimeError(f"buffer holds {n} rollouts, fewer than batch_size {batch_size}")
    idx = rng.choice(n, size=batch_size, replace=with_replacement)
    return [items[i] for i in np.sort(idx)]


@register_strategy("uniform")
class Uniform(Strategy):
    """Arnal et al.: a FIFO buffer of capacity N; each step B rollouts drawn uniformly, kept for later batches.

    Fresh rollouts arrive at R = B / y per step through the fresh credit; the first batches borrow credit so the
    buffer holds B distinct rollouts. With ratio 1 and capacity B the batch is exactly the fresh rollouts:
    on-policy GRPO.
    """

    def __init__(self, cfg, ctx=None):
        super().__init__(cfg, ctx)
        self.buffer = ReplayBuffer(cfg.capacity, cfg.replay.horizon)
        self.credit = FreshCredit(cfg.fresh_per_step, self.G)

    def groups(self, step: int) -> int:
        groups = self.credit.accrue()
        short = self.B - self.size() - groups * self.G  # the first batches need B distinct rollouts in the buffer
        if short > 0 and not self.cfg.replay.with_replacement:
            extra = math.ceil(short / self.G)
            self.credit.borrow(extra)
            groups += extra
        return groups

    def batch(self, fresh, step, rng):
        self.buffer.add(fresh)
        self.buffer.evict(step)
        return uniform_draw(self.buffer.items, self.B, rng, self.cfg.replay.with_replacement)

    def size(self) -> int:
        return len(self.buffer)

    def ages(self, step: int) -> list[int]:
        return self.buffer.ages(step)


@register_strategy("positive_bias")
class PositiveBias(Uniform):
    """Arnal et al. §5.5 (replay-papers §1.6 item 5): the freshest (1 - delta)·N rollouts plus the freshest
    delta·N correct rollouts not among them; batches drawn uniformly from that set.

    `stratified` (default): round(delta·B) of the batch is drawn from the set's correct rollouts and the rest
    uniformly from the others, so every batch holds at least a delta share of successes when the set has them
    (the paper's plain uniform draw gives that share only on average; `stratified: false` is the plain draw).
    """

    def __init__(self, cfg, ctx=None):
        super().__init__(cfg, ctx)
        pb = cfg.replay.positive_bias
        self.n_pos = int(round(pb.delta * cfg.capacity))
        self.buffer = ReplayBuffer(cfg.capacity - self.n_pos, cfg.replay.horizon)
        self.positives: deque[Rollout] = deque()
        self.delta, self.stratified = pb.delta, pb.stratified

    @classmethod
    def validate(cls, cfg) -> None:
        recent = cfg.capacity - int(round(cfg.replay.positive_bias.delta * cfg.capacity))
        if recent < cfg.batch_size:
            raise ValueError(f"replay.positive_bias.delta: the fresh part (1 - delta)·capacity = {recent} must be >= batch_size ({cfg.batch_size})")

    def batch(self, fresh, step, rng):
        self.buffer.add(fresh)
        for r in self.buffer.evict(step):
            if is_correct(r) and (self.buffer.horizon is None or r.age(step) <= self.buffer.horizon):
                self.positives.append(r)  # pushed out of the fresh part: kept if it was a success
        while len(self.positives) > self.n_pos:
            self.positives.popleft()
        while self.positives and self.buffer.horizon is not None and self.positives[0].age(step) > self.buffer.horizon:
            self.positives.popleft()
        pool = list(self.buffer.items) + list(self.positives)
        correct = [i for i, r in enumerate(pool) if is_correct(r)]
        if self.stratified:
            k = min(int(round(self.delta * self.B)), len(correct))
            take = set(rng.choice(correct, size=k, replace=False).tolist()) if k else set()
            rest = [i for i in range(len(pool)) if i not in take]
            take |= set(rng.choice(rest, size=self.B - k, replace=False).tolist())
            batch = [pool[i] for i in sorted(take)]
        else:
            batch = uniform_draw(pool, self.B, rng)
        self._metrics = {"replay/positives": len(self.positives), "replay/pool_correct": len(correct),
                         "replay/batch_correct_share": float(np.mean([is_correct(r) for r in batch]))}
        return batch

    def size(self) -> int:
        return len(self.buffer) + len(self.positives)

    def ages(self, step: int) -> list[int]:
        return self.buffer.ages(step) + [r.age(step) for r in self.positives]


def drop_zero_variance(rollouts: list[Rollout]) -> list[Rollout]:
    """Remove whole groups whose rewards are all equal (their advantages are all zero)."""
    by_group: dict[int, list[Rollout]] = {}
    for r in rollouts:
        by_group.setdefault(r.group, []).append(r)
    keep = {g for g, rs in by_group.items() if len({r.reward for r in rs}) > 1}
    return [r for r in rollouts if r.group in keep]


@register_strategy("prioritized")
class Prioritized(Strategy):
    """Yoo et al. (replay-papers §2.3): rollout-level storage with age eviction, fresh-anchored batches.

    Each step: B fresh rollouts; zero-variance groups dropped; the buffer evicts every rollout older than
    `tau_max` steps; the batch is the surviving fresh rollouts plus round(replay_fraction · survivors) rollouts
    drawn without replacement with probability ∝ (|A| + eps)^alpha (none during the first `warmup_steps`);
    the survivors then join the buffer, advantages and behaviour log-probs frozen at birth.
    """

    fresh_anchored = True

    def __init__(self, cfg, ctx=None):
        super().__init__(cfg, ctx)
        self.p = cfg.replay.prioritized
        horizon = self.p.tau_max if cfg.replay.horizon is None else min(self.p.tau_max, cfg.replay.horizon)
        self.buffer = ReplayBuffer(cfg.capacity, horizon)
        self.credit = FreshCredit(cfg.batch_size, self.G)

    @classmethod
    def default_capacity(cls, cfg) -> int:
        # A FIFO backstop that "rarely binds" (Yoo et al.): room for every survivor younger than tau_max.
        return cfg.batch_size * (cfg.replay.prioritized.tau_max + 2)

    def groups(self, step: int) -> int:
        return self.credit.accrue()

    def batch(self, fresh, step, rng):
        survivors = drop_zero_variance(fresh) if self.p.drop_zero_variance else list(fresh)
        self.buffer.evict(step)
        replay: list[Rollout] = []
        n = len(self.buffer)
        if step >= self.p.warmup_steps and n:
            k = min(int(round(self.p.replay_fraction * len(survivors))), n)
            if k:
                pri = (np.abs([r.advantage for r in self.buffer.items]) + self.p.eps) ** self.p.alpha
                idx = rng.choice(n, size=k, replace=False, p=pri / pri.sum())
                replay = [self.buffer.items[i] for i in np.sort(idx)]
        self.buffer.add(survivors)
        self._metrics = {"replay/fresh_survivors": len(survivors), "replay/replayed": len(replay),
                         "replay/dropped_zero_variance": len(fresh) - len(survivors)}
        return survivors + replay

    def size(self) -> int:
        return len(self.buffer)

    def ages(self, step: int) -> list[int]:
        return self.buffer.ages(step)


@register_strategy("rlep")
class Rlep(Strategy):
    """RLEP (replay-papers §3.2): each prompt's fresh group of G is mixed with M verified successes from a pool
    collected by a seed policy; advantages over the mixed group, old log-probs recomputed by the current policy.

    The pool is a JSONL file (`replay.rlep.pool`) or, when null, built once from the embedded warm start after a
    short RL run and cached (`workbench rlep-pool` builds one explicitly). A prompt with fewer than M pooled
    successes gets the ones it has (none: a plain group of G), never empty padding (RLEP's code quirk, §3.6).
    Training prompts are the first `replay.rlep.n_prompts` of the train split, the ones the pool was collected on.
    """

    fresh_anchored = True

    def __init__(self, cfg, ctx: StrategyContext):
        super().__init__(cfg, ctx)
        from workbench.rlep_pool import ensure_pool, load_pool

        self.r = cfg.replay.rlep
        path = self.r.pool or ensure_pool(cfg, ctx.task, ctx.log)
        self.pool = load_pool(path, ctx.task, ctx.tokenizer, ctx.max_new_tokens)
        ctx.log(f"rlep: pool {path}: {sum(len(v) for v in self.pool.values())} successes for {len(self.pool)} prompts")
        self.credit = FreshCredit(cfg.batch_size, self.G)
        self.next_uid = -1
        # What phases 0-1 cost when the pool is built here (RLEP's step counts leave it out): the seed run's
        # on-policy steps plus the sampled rollouts, in compute units at this trial's mu (1 when measured).
        mu = cfg.compute.mu or 1.0
        n = min(self.r.n_prompts, len(ctx.task.train))
        self.pool_units = 0.0 if self.r.pool else self.r.seed_rl_steps + n * self.r.samples * mu / (cfg.batch_size * (1 + mu))

    def prompts(self, n_train: int) -> list[int]:
        return list(range(min(self.r.n_prompts, n_train)))

    def groups(self, step: int) -> int:
        return self.credit.accrue()

    def batch(self, fresh, step, rng):
        out: list[Rollout] = []
        replayed = 0
        groups: dict[int, list[Rollout]] = {}
        for r in fresh:
            groups.setdefault(r.group, []).append(r)
        for members in groups.values():
            first = members[0]
            cands = self.pool.get(first.prompt_index, [])
            m = min(self.r.m, len(cands))
            example = self.ctx.task.train[first.prompt_index]
            for j in (np.sort(rng.choice(len(cands), size=m, replace=False)) if m else []):
                ids = cands[int(j)]
                text = self.ctx.tokenizer.decode(ids, skip_special_tokens=True)
                members.append(Rollout(
                    uid=self.next_uid, prompt_index=first.prompt_index, group=first.group, prompt_ids=first.prompt_ids,
                    completion_ids=list(ids), behaviour_logprobs=torch.zeros(len(ids)),
                    reward=self.ctx.task.reward(text, example, True), advantage=0.0, group_mean_reward=0.0,
                    birth_step=step, source="pool",
                ))
                self.next_uid -= 1
                replayed += 1
            advantages = group_advantages([r.reward for r in members])
            mean = float(np.mean([r.reward for r in members]))
            for r, a in zip(members, advantages):
                r.advantage, r.group_mean_reward = a, mean
            out.extend(members)
        self.ctx.rescore(out)  # RLEP recomputes old_log_prob for the whole mixed group with the current actor
        self._metrics = {"rlep/replayed": replayed, "rlep/group_size_mean": len(out) / max(len(groups), 1), "rlep/pool_units": self.pool_units}
        return out


@register_strategy("dgg")
class Dgg(Strategy):
    """Dynamic gradient gating (replay-papers §4.3): each fresh batch reused for up to K optimizer passes; a pass
    is gated (its gradients zeroed before the optimizer step, and reuse of the batch stopped) when a running
    z-score of the lm_head gradient energy g = ||grad W_lm_head||² (or of its increment) exceeds tau.

    The first pass of a batch is never gated, nor any pass before the window of `window` ungated passes is full.
    Gated values do not enter the window. "Zeroed before the optimizer step" is done by setting the gradients to
    None, which makes torch's Adam skip the step entirely, so its moments are not touched.
    """

    fresh_anchored = True

    def __init__(self, cfg, ctx=None):
        super().__init__(cfg, ctx)
        self.d = cfg.replay.dgg
        self.credit = FreshCredit(cfg.batch_size, self.G)
        self.current: list[Rollout] = []
        self.passes, self.done = 0, True
        self.energies: deque[float] = deque(maxlen=self.d.window)
        self.increments: deque[float] = deque(maxlen=self.d.window)
        self.prev: float | None = None
        self.gated_total = 0

    def groups(self, step: int) -> int:
        if not self.done:
            return 0
        groups = 0
        while groups * self.G < self.B:  # one whole fresh batch (whole groups) per reuse cycle
            groups += self.credit.accrue()
        return groups

    def batch(self, fresh, step, rng):
        if fresh:
            self.current, self.passes, self.done = list(fresh), 0, False
        self.passes += 1
        return self.current

    @staticmethod
    def _z(value: float | None, window) -> float:
        if value is None or len(window) < 2:
            return 0.0
        mean, std = float(np.mean(window)), float(np.std(window))
        return (value - mean) / std if std > 0 else (0.0 if value == mean else math.copysign(math.inf, value - mean))

    def gate(self, model, step: int) -> bool:
        weight = model.get_output_embeddings().weight
        energy = float((weight.grad.detach().double() ** 2).sum()) if weight.grad is not None else 0.0
        increment = None if self.prev is None else energy - self.prev
        z_energy, z_increment = self._z(energy, self.energies), self._z(increment, self.increments)
        armed = self.passes > 1 and len(self.energies) >= self.d.window
        signal = {"energy": z_energy, "increment": z_increment, "either": max(z_energy, z_increment)}[self.d.signal]
        gated = armed and signal > self.d.tau
        if not gated:
            self.energies.append(energy)
            if increment is not None:
                self.increments.append(increment)
            self.prev = energy
        if gated or self.passes >= self.d.max_reuse:
            self.done = True
        self.gated_total += int(gated)
        self._metrics = {"dgg/energy": energy, "dgg/z_energy": z_energy, "dgg/z_increment": z_increment,
                         "dgg/pass": self.passes, "dgg/gated": float(gated), "dgg/gated_total": self.gated_total}
        return gated


def make_strategy(cfg, ctx: StrategyContext | None = None) -> Strategy:
    return STRATEGIES[cfg.replay.strategy](cfg, ctx)
