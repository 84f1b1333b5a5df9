"""verl, on paper: the command line of a verl GRPO run that trains a trial's setting (docs/trainers.md, "verl").

Not run here: verl needs GPUs and Ray, neither of which this project's CI has. `command(cfg)` renders the Hydra
overrides of `python -m verl.trainer.main_ppo` from a trial config, so a study's knobs reach verl by name. verl
reuses rollouts as TRL does (each generation trained `ppo_epochs` times over its mini-batches), not from a FIFO
buffer, so a point (x, y) maps to: `ppo_epochs` = y, mini-batches per generation = x / y (both whole numbers);
one verl training step is one generation and x optimizer steps. The names and what they mean here are
`workbench.config_names.FOREIGN`'s; a verl run reports to the trial protocol through an adapter of the user's (its
validation accuracy as `eval/accuracy`, its ledger as `compute/gen_rollouts` and `compute/train_rollouts`).
"""

from __future__ import annotations

from workbench import knobs
from workbench.config import ConfigError, TrialConfig

ENTRY = ["{python}", "-m", "verl.trainer.main_ppo"]


def reuse(cfg: TrialConfig) -> tuple[int, int]:
    """(ppo_epochs, mini-batches per generation) for the trial's (x, y); a point verl cannot run is a ConfigError."""
    y = cfg.replay.ratio
    x = knobs.staleness(cfg.replay.capacity, y, cfg.batch_size)
    if y != int(y) or x / y != int(x / y):
        raise ConfigError(
            f"replay: verl runs whole ppo_epochs (y) and mini-batches per generation (x / y); got x {x:g}, y {y:g}"
        )
    if cfg.replay.strategy != "uniform" or cfg.replay.horizon is not None:
        raise ConfigError("replay.strategy: verl reuses each generation in epochs; only uniform without horizon maps")
    return int(y), int(x / y)


def overrides(cfg: TrialConfig) -> list[str]:
    """verl's Hydra overrides for the trial (module docstring): B = ppo_mini_batch_size x rollout.n rollouts an
    optimizer step."""
    B, G = cfg.batch_size, cfg.group_size
    if B % G:
        raise ConfigError(f"batch_size: verl counts prompts; {B} is not a multiple of group_size {G}")
    epochs, minibatches = reuse(cfg)
    prompts = B // G
    per_generation = epochs * minibatches  # optimizer steps of one verl training step
    actor, rollout = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    out = [
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=False",
        f"data.train_batch_size={prompts * minibatches}",
        f"data.max_response_length={cfg.generation.max_new_tokens or 512}",
        f"data.seed={cfg.seed}",
        f"actor_rollout_ref.model.path={cfg.model.path}",
        f"{actor}.ppo_mini_batch_size={prompts}",
        f"{actor}.ppo_epochs={epochs}",
        f"{actor}.optim.lr={cfg.lr:g}",
        f"{actor}.optim.lr_warmup_steps={cfg.lr_warmup_steps}",
        f"{actor}.clip_ratio_low={cfg.objective.eps_low:g}",
        f"{actor}.clip_ratio_high={cfg.objective.eps_high:g}",
        f"{actor}.grad_clip={cfg.grad_clip:g}",
        f"{actor}.loss_agg_mode=token-mean",
        f"{actor}.use_kl_loss=False",
        f"{actor}.entropy_coeff=0",
        f"{rollout}.n={G}",
        f"{rollout}.temperature={cfg.generation.temperature:g}",
        "trainer.logger=['console','mlflow']",
    ]
    if cfg.objective.dual_clip is not None:
        out.append(f"{actor}.clip_ratio_c={cfg.objective.dual_clip:g}")
    if cfg.budget.steps is not None:
        out.append(f"trainer.total_training_steps={max(1, cfg.budget.steps // per_generation)}")
    if cfg.eval.every_units is None:
        out.append(f"trainer.test_freq={max(1, cfg.eval.every // per_generation)}")
    return out


def command(cfg: TrialConfig) -> list[str]:
    """The whole `trainer.command` of a verl trial."""
    return [*ENTRY, *overrides(cfg)]
