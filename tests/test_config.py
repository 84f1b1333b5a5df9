import subprocess
import sys

import pytest

from workbench.config import ConfigError, build_config, flatten, load_config


def test_default_config_is_on_policy_grpo():
    cfg = build_config()
    assert cfg.replay.ratio == 1 and cfg.replay.capacity == cfg.batch_size and cfg.replay.horizon is None
    assert cfg.fresh_per_step == cfg.batch_size
    flat = flatten(cfg)
    assert (
        flat["replay.capacity"] == 128 and flat["objective.name"] == "ppo_clip" and flat["budget.compute_units"] == 300
    )


def test_overrides_are_typed_and_dotted():
    cfg = load_config(
        None, ["replay.ratio=2", "replay.capacity=512", "replay.horizon=null", "lr=3e-4", "task.scratchpad=false"]
    )
    assert cfg.replay.ratio == 2.0 and cfg.replay.capacity == 512 and cfg.replay.horizon is None
    assert cfg.lr == pytest.approx(3e-4) and cfg.task.scratchpad is False


def test_yaml_file_then_overrides(tmp_path):
    path = tmp_path / "trial.yaml"
    path.write_text("batch_size: 64\nreplay:\n  ratio: 4\n  capacity: 256\n")
    cfg = load_config(path, ["replay.ratio=2"])
    assert (cfg.batch_size, cfg.replay.ratio, cfg.replay.capacity) == (64, 2.0, 256)


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["replay.capacity=0"], "replay.capacity"),
        (["replay.capacity=64"], "replay.capacity"),  # below batch_size
        (["replay.ratio=0.5"], "replay.ratio"),
        (["replay.horizon=-1"], "replay.horizon"),
        (["replay.strategy=nope"], "replay.strategy"),
        (["objective.name=nope"], "objective.name"),
        (["replay.bogus=1"], "replay.bogus"),
        (["bogus=1"], "bogus"),
        (["batch_size=many"], "batch_size"),
        (["eval.target_accuracy=1.5"], "eval.target_accuracy"),
        (["eval.target_accuracy=0"], "eval.target_accuracy"),
        (["model.path=/no/such/dir"], "model.path"),
        (["budget.compute_units=null", "budget.steps=null"], "budget"),
        (["task.name=jsonl"], "task.path"),
        (["batch_size=1=2"], "batch_size"),
    ],
)
def test_bad_values_name_their_field(overrides, field):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    msg = str(err.value)
    assert msg.startswith(field + ":") or msg.startswith(field + "."), msg
    assert "\n" not in msg


def test_bad_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("batch_size: 64\nreplay: [1,\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:\d+: invalid YAML"):
        load_config(path)


@pytest.mark.parametrize(
    "args, field",
    [
        (["--set", "replay.capacity=0"], "replay.capacity"),
        (["--set", "replay.ratio=0.5"], "replay.ratio"),
        (["--set", "replay.horizon=-3"], "replay.horizon"),
        (["--set", "nope.key=1"], "nope"),
        (["--set", "model.path=/does/not/exist"], "model.path"),
        (["--config", "/no/such.yaml"], "/no/such.yaml"),
    ],
)
def test_cli_bad_config_exits_2_with_one_line(args, field, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "train", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert field in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "mlflow.db").exists()  # stopped before any work
