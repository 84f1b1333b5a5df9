"""One trial of `trainer.kind: trl`: the trial config mapped onto TRL's GRPOTrainer, trained, logged by the protocol.

The mapping (docs/trainers.md has the table): B = `per_device_train_batch_size` (one process, no gradient
accumulation), G = `num_generations`, the trial's lr, warm-up and Adam (the workbench's own optimizer and schedule,
passed to TRL), `max_grad_norm` = `grad_clip`, PPO-clip at `objective.eps_low` / `eps_high`, no KL term (`beta` 0),
`trainer.trl.loss_type` (TRL's `dapo` by default: the token mean over the batch, as the workbench's `ppo_clip`),
sampling at `generation.temperature` with top-p 1 and top-k 0 up to `generation.max_new_tokens` (or the task's),
bf16 where `train.autocast: bfloat16`. The model is the trial's starting checkpoint (`model.*`, loaded by the
workbench's model source), its prompts the task's train examples framed as the workbench frames them (checked
against TRL's tokenization before training), its reward the task's on the completion as the workbench decodes it.

Reuse, two ways, never both: the workbench's replay strategy as a plug-in (`replay.*`: `ReplayGRPOTrainer`), or TRL's
own knobs (`trainer.trl.num_iterations` = y, `steps_per_generation` x `num_iterations` = x: `LedgerGRPOTrainer`).
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass

import torch
from datasets import Dataset
from transformers import PrinterCallback
from transformers.utils import logging as hf_logging
from trl import GRPOConfig, GRPOTrainer

from workbench import seeds
from workbench.backends.hf import encode_prompts
from workbench.config import ConfigError, TrialConfig
from workbench.integrations.trl.ledger import Ledger
from workbench.integrations.trl.plugin import LedgerGRPOTrainer, ReplayGRPOTrainer, RewardMemory
from workbench.integrations.trl.protocol import ProtocolCallback, RunWriter
from workbench.registry import STRATEGIES
from workbench.trial.policy import Policy
from workbench.trial.step import make_lr_schedule, make_optimizer
from workbench.trial.strategies.base import StrategyContext
from workbench.trial.tasks import Task, load_task

log = logging.getLogger(__name__)

MAX_PROMPTS = 20_000
"""Train prompts handed to TRL's data loader (it cycles through them again past the end)."""
NO_STEP_LIMIT = 10**9
"""TRL's `max_steps`: the protocol callback stops training where the trial's budget ends."""


def uses_plugin(cfg: TrialConfig) -> bool:
    """Whether the trial replays through the workbench's strategy (anything but on-policy uniform at ratio 1)."""
    r = cfg.replay
    return r.strategy != "uniform" or r.ratio != 1 or r.capacity != cfg.batch_size or r.horizon is not None


def grpo_config(cfg: TrialConfig, task: Task, out_dir: str, device: torch.device) -> GRPOConfig:
    """The trial's settings as TRL's (module docstring)."""
    trl = cfg.trainer.trl
    return GRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=1,
        steps_per_generation=trl.steps_per_generation,
        num_iterations=trl.num_iterations,
        num_generations=cfg.group_size,
        max_completion_length=cfg.generation.max_new_tokens or task.max_new_tokens,
        temperature=cfg.generation.temperature,
        top_p=1.0,
        top_k=0,
        learning_rate=cfg.lr,
        beta=0.0,
        epsilon=cfg.objective.eps_low,
        epsilon_high=cfg.objective.eps_high,
        loss_type=trl.loss_type,
        scale_rewards="group",
        max_steps=cfg.budget.steps or NO_STEP_LIMIT,
        max_grad_norm=cfg.grad_clip,
        bf16=cfg.train.autocast == "bfloat16",
        fp16=False,
        gradient_checkpointing=cfg.train.gradient_checkpointing,
        use_cpu=device.type == "cpu",
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=seeds.torch_global(cfg.seed),
        dataloader_num_workers=0,
    )


def reward_function(task: Task, tokenizer, examples):
    """The task's reward on a completion as the workbench decodes it: EOS cut off, special tokens skipped, finished
    when it ended at EOS."""
    eos = tokenizer.eos_token_id

    def reward(completions, completion_ids, idx, **_):
        done = [len(ids) > 0 and ids[-1] == eos for ids in completion_ids]
        texts = tokenizer.batch_decode(
            [ids[:-1] if d else ids for ids, d in zip(completion_ids, done)], skip_special_tokens=True
        )
        return [task.reward(t, examples[i], d) for t, i, d in zip(texts, idx, done)]

    return reward


@dataclass
class Built:
    """A trial's TRL trainer, ready to `train()`, and what it logs with."""

    trainer: GRPOTrainer
    callback: ProtocolCallback
    ledger: Ledger


def build(cfg: TrialConfig, run_id: str, out_dir: str, protocol: bool = True) -> Built:
    """The trial's TRL trainer (the replay plug-in where the trial replays), logging the protocol to MLflow run
    `run_id`; TRL's own files (none are saved) under `out_dir`. Without `protocol`, TRL's stock `GRPOTrainer` on the
    same model, data, reward and optimizer, and nothing logged (what benchmarks/trl_overhead.py compares with)."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    hf_logging.disable_progress_bar()  # "Loading weights" bars in a study's log
    torch.manual_seed(seeds.torch_global(cfg.seed))
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    tokenizer, model = policy.tokenizer, policy.model
    model.generation_config.eos_token_id = tokenizer.eos_token_id  # stop where the workbench stops: its EOS only
    examples = task.train[: min(len(task.train), MAX_PROMPTS)]
    chat = cfg.task.chat_template
    prompts = [[{"role": "user", "content": e.prompt}] if chat else e.prompt for e in examples]
    data = Dataset.from_dict({"prompt": prompts, "idx": list(range(len(examples)))})
    ledger = Ledger()
    writer = RunWriter(cfg.tracking.uri, run_id)
    callback = ProtocolCallback(cfg, policy, task, ledger, writer)
    rewards = RewardMemory(reward_function(task, tokenizer, examples))
    optimizer = make_optimizer(model, cfg.lr)
    common = dict(
        model=model,
        reward_funcs=[rewards],
        args=grpo_config(cfg, task, out_dir, policy.device),
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[callback],
        optimizers=(optimizer, make_lr_schedule(optimizer, cfg.lr_warmup_steps)),
    )
    if not protocol:
        common["callbacks"] = []
        trainer = GRPOTrainer(**common)
        trainer.remove_callback(PrinterCallback)
        return Built(trainer, callback, ledger)
    if uses_plugin(cfg):
        strategy = STRATEGIES.lookup(cfg.replay.strategy)(
            cfg, StrategyContext(task, tokenizer, _no_rescore, policy.max_new_tokens)
        )
        trainer: LedgerGRPOTrainer = ReplayGRPOTrainer(
            **common, strategy=strategy, rewards=rewards, seed=seeds.torch_global(cfg.seed)
        )
    else:
        trainer = LedgerGRPOTrainer(**common)
    trainer.ledger = ledger
    trainer.remove_callback(PrinterCallback)  # TRL's log dicts on stdout: the protocol logs them to MLflow
    _check_prompts(trainer, prompts[:4], examples[:4], tokenizer, chat)
    writer.set_tags({"workbench.trl_trainer": type(trainer).__name__})
    return Built(trainer, callback, ledger)


def run(cfg: TrialConfig, run_id: str) -> None:
    """Train the trial with TRL, logging the protocol to MLflow run `run_id`."""
    with tempfile.TemporaryDirectory(prefix="workbench-trl-") as out:
        built = build(cfg, run_id, out)
        log.info(f"TRL {type(built.trainer).__name__}: B={cfg.batch_size} G={cfg.group_size} lr={cfg.lr:g}")
        built.trainer.train()
    if not built.callback.stopped_by_budget and cfg.budget.steps is None:
        raise RuntimeError("TRL stopped before the trial's budget was spent")


def _no_rescore(rollouts) -> None:
    raise ConfigError("replay.strategy: a strategy that rescores its buffer does not run on trainer.kind trl")


def _check_prompts(trainer, prompts, examples, tokenizer, chat: bool) -> None:
    """TRL's prompt tokens must be the workbench's, or the two trainers would not train on the same task."""
    theirs = [list(ids) for ids in trainer._tokenize_prompts(prompts)[0]]
    ours = encode_prompts(tokenizer, [e.prompt for e in examples], chat=chat)
    if theirs != ours:
        raise ConfigError("trainer.kind: TRL frames the task's prompts differently from the workbench (tokens differ)")
