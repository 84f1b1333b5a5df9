"""Where each process of an asynchronous trial runs: trainers first, then generators, one device each.

A worker of a study is given W + T devices (`study run --devices`, docs/studies.md "Devices"): on a GPU machine its
CUDA_VISIBLE_DEVICES lists them, so here they are `cuda:0` .. `cuda:W+T-1`; trainer rank r takes `cuda:r` and
generator w takes `cuda:T+w`. With fewer visible GPUs than processes they share `cuda:0` (one line says so). On a
CPU every process runs on the cores the worker was given, its torch threads a share of them
(`generator.process_threads`). A `model.device` other than `auto` is taken as given.
"""

from __future__ import annotations

import logging

import torch

from workbench.config import TrialConfig

log = logging.getLogger(__name__)


def role_index(cfg: TrialConfig, role: str, index: int) -> int:
    """The process's slot among the trial's W + T: trainer rank r is r, generator w is T + w."""
    return index if role == "trainer" else cfg.pipeline.trainers + index


def place(cfg: TrialConfig, role: str, index: int, local: tuple[int, int] | None = None) -> TrialConfig:
    """`cfg` with this process's device: its own GPU where the worker was given enough, else unchanged. `local`:
    (this process's slot, the processes) on its machine when a launcher started them (torchrun's LOCAL_RANK and
    LOCAL_WORLD_SIZE: `distributed`), instead of the trial's W + T on one machine. A trainer
    never starts a generation engine: with `generation.backend: vllm` the generators sample through one each, and
    a trainer samples only to evaluate, with its own decoder as every trainer does."""
    if role == "trainer" and cfg.generation.backend != "hf":
        cfg = cfg.model_copy(deep=True)
        cfg.generation.backend = "hf"
    if cfg.model.device != "auto" or not torch.cuda.is_available():
        return cfg
    slot, total = local or (role_index(cfg, role, index), cfg.pipeline.generators + cfg.pipeline.trainers)
    count = torch.cuda.device_count()
    if count < total:
        if slot == 0:
            log.warning(f"pipeline: {total} processes share cuda:0 ({count} GPU(s) visible; give each process one)")
        return cfg
    placed = cfg.model_copy(deep=True)
    placed.model.device = f"cuda:{slot}"
    return placed
