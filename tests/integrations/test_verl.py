"""verl's command line rendered from a trial config (`workbench.integrations.verl`; verl itself never runs here)."""

from __future__ import annotations

import pytest

from support.toy import toy_dict
from workbench.config import ConfigError, build_config
from workbench.config_names import foreign_name
from workbench.integrations.verl import command


def test_a_replay_point_renders_as_verl_epochs_and_mini_batches(tmp_path):
    # B 16 as 4 prompts x G 4; y 2, N 64 -> x = 64 * 2 / 16 = 8: 2 epochs over 4 mini-batches of 4 prompts
    cfg = build_config(toy_dict(replay={"ratio": 2, "capacity": 64}, budget={"steps": 40, "compute_units": None}))
    cfg.model.path = "/models/mine"  # verl's path, never opened here
    argv = command(cfg)
    assert argv[:3] == ["{python}", "-m", "verl.trainer.main_ppo"]
    got = dict(a.split("=", 1) for a in argv[3:])
    assert got["actor_rollout_ref.actor.ppo_epochs"] == "2"
    assert got["data.train_batch_size"] == "16"  # prompts a generation: 4 mini-batches of 4
    assert got["actor_rollout_ref.actor.ppo_mini_batch_size"] == "4"
    assert got["actor_rollout_ref.rollout.n"] == "4"
    assert got["actor_rollout_ref.actor.optim.lr"] == "0.0001"
    assert got["trainer.total_training_steps"] == "5"  # 40 optimizer steps, 8 a generation
    assert got["actor_rollout_ref.actor.clip_ratio_c"] == "3"
    # every verl name rendered that this project knows maps back to the knob it came from
    for key in got:
        f = foreign_name(key)
        if f is not None and f.ours is not None:
            assert f.framework == "verl", key


def test_a_point_verl_cannot_run_is_one_line():
    cfg = build_config(toy_dict(replay={"ratio": 1.5, "capacity": 48}))
    with pytest.raises(ConfigError, match="verl runs whole ppo_epochs"):
        command(cfg)
