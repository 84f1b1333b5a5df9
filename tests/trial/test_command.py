"""A trial trained by a command that follows the trial protocol (`workbench.trial.command`, docs/trainers.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow import MlflowClient

from support.toy import toy_dict
from workbench import tracking
from workbench.compute import units
from workbench.config import ConfigError, build_config
from workbench.trial.command import TrialCommandFailed, render
from workbench.trial.loop import TrialStopped, run_trial

TRAINER = str(Path(__file__).parents[1] / "support" / "protocol_trainer.py")


def command_cfg(tracking_uri: str, mode: str = "good", **sections):
    data = toy_dict(**sections)
    data["trainer"] = {"kind": "command", "command": ["{python}", TRAINER, "--mode", mode], "poll_s": 0.2}
    data["tracking"] = {"uri": tracking_uri}
    return build_config(data)


def test_a_command_trial_is_read_back_and_accounted_like_a_native_one(tracking_uri):
    cfg = command_cfg(tracking_uri, replay={"ratio": 2, "capacity": 32}, compute={"mu": 0.5})
    result = run_trial(cfg)
    steps, every, b = cfg.budget.steps, cfg.eval.every, cfg.batch_size
    assert [row["step"] for row in result.evals] == list(range(0, steps + 1, every))
    for row in result.evals:  # the ledger after s steps, read at the evaluation after s steps
        s = row["step"]
        assert row["train_rollouts"] == s * b and row["gen_rollouts"] == s * b / 2
        assert row["compute_units"] == pytest.approx(units(s * b, s * b / 2, b, 0.5))
    m = result.metrics
    assert m[tracking.FINAL_MU] == 0.5 and m[tracking.FINAL_MU_MEASURED] == pytest.approx(2.0)
    assert m[tracking.FINAL_COMPUTE_UNITS] == pytest.approx(result.evals[-1]["compute_units"])
    run = MlflowClient(tracking_uri).get_run(result.run_id)
    assert run.info.status == "FINISHED" and run.data.tags[tracking.TRAINER] == "command"
    assert run.data.params["replay.ratio"] == "2.0"
    curve = json.loads(
        Path(MlflowClient(tracking_uri).download_artifacts(result.run_id, tracking.CURVE_ARTIFACT)).read_text()
    )
    assert curve == result.evals


def test_without_compute_mu_the_reported_seconds_measure_it(tracking_uri):
    result = run_trial(command_cfg(tracking_uri))
    assert result.metrics[tracking.FINAL_MU] == pytest.approx(2.0)  # 0.02 s a generated rollout, 0.01 s a trained one


@pytest.mark.parametrize(
    "mode, says",
    [
        ("silent", "trial command reported no eval/accuracy, compute/gen_rollouts, compute/train_rollouts to its"),
        ("no-ledger", "trial command reported no compute/gen_rollouts, compute/train_rollouts to its MLflow run"),
        ("crash", "trial command exited with 3: protocol trainer: out of cheese"),
        ("late-start", "trial command's first eval/accuracy is at step 2: the protocol asks for one at step 0"),
    ],
)
def test_a_command_that_does_not_follow_the_protocol_fails_the_trial_in_one_line(tracking_uri, mode, says):
    with pytest.raises(TrialCommandFailed) as err:
        run_trial(command_cfg(tracking_uri, mode))
    assert str(err.value).startswith(says) and "\n" not in str(err.value)
    client = MlflowClient(tracking_uri)
    run = client.search_runs([client.get_experiment_by_name("workbench").experiment_id])[0]
    assert run.info.status == "FAILED" and says in run.data.tags[tracking.FAILURE]


def test_each_evaluation_reaches_the_hook_while_the_command_runs_and_a_stop_ends_it(tracking_uri):
    cfg = command_cfg(tracking_uri, "slow", budget={"steps": 40, "compute_units": None})
    seen = []

    def hook(row):
        seen.append(row["step"])
        if row["step"] >= 4:
            raise TrialStopped("pruned")

    with pytest.raises(TrialStopped):
        run_trial(cfg, on_eval=hook)
    assert seen[0] == 0 and seen[-1] >= 4 and seen[-1] < 40  # stopped long before the command's 40 steps


def test_a_placeholder_takes_the_trial_config_value_and_an_unknown_one_names_itself(tracking_uri):
    cfg = build_config(toy_dict(replay={"ratio": 2, "capacity": 32}, trainer={"kind": "command", "command": ["x"]}))
    assert render(["train", "--lr={lr}", "--y", "{replay.ratio}", "--seed={seed}"], cfg) == [
        "train",
        "--lr=0.0001",
        "--y",
        "2.0",
        "--seed=0",
    ]
    with pytest.raises(ConfigError, match=r"trainer.command: \{replay.ratoi\} names no trial config key"):
        render(["{replay.ratoi}"], cfg)


def test_the_trainer_section_refuses_what_cannot_run():
    with pytest.raises(ConfigError, match="trainer.command: kind command needs the command"):
        build_config(toy_dict(trainer={"kind": "command"}))
    with pytest.raises(ConfigError, match="trainer.trl: TRL's own reuse"):
        build_config(
            toy_dict(trainer={"kind": "trl", "trl": {"num_iterations": 2}}, replay={"ratio": 2, "capacity": 32})
        )


def test_a_native_runs_metric_history_rebuilds_its_curve(tracking_uri):
    """The one rule: the curve rebuilt from a native trial's metrics is its curve artifact (ledger and accuracy)."""
    cfg = build_config({**toy_dict(replay={"ratio": 2, "capacity": 32}), "tracking": {"uri": tracking_uri}})
    result = run_trial(cfg)
    rebuilt = tracking.curve_from_history(MlflowClient(tracking_uri), result.run_id)
    keys = ("step", "accuracy", "gen_rollouts", "train_rollouts")
    assert [{k: r[k] for k in keys} for r in rebuilt] == [{k: r[k] for k in keys} for r in result.evals]
