"""Every registered strategy trains through the command line with no setting but its name: its defaults adapt to
the trial (e.g. its default capacity). The command runs in this process (`workbench.cli.main`, the console
script's entry point) to keep the suite short; the trials are real.

`rlep` is left out here: with no other setting it first builds its default pool (60 seed steps, then 2048 prompts
x 8 samples: ~21 s at toy size, the one expensive default). Its defaults are validated on the default trial in
tests/trial/test_strategies.py, its pool build and training are tested there with a small pool, and the full
default command (`workbench train --set replay.strategy=rlep --set budget.steps=12`) was run for issue 10."""

import json

import pytest
import yaml
from support.toy import toy_dict, tracked

from workbench.cli import main
from workbench.config import build_config
from workbench.registry import OBJECTIVES, STRATEGIES
from workbench.trial.loop import run_trial


@pytest.mark.slow
@pytest.mark.parametrize("strategy", sorted(set(STRATEGIES) - {"rlep"}))
def test_every_strategy_trains_with_its_defaults(strategy, tmp_path, capsys):
    config = tmp_path / "toy.yaml"
    config.write_text(yaml.safe_dump(toy_dict(budget={"compute_units": None, "steps": 3}, eval={"every": 3})))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = main(
        [
            "train",
            "--config",
            str(config),
            "--set",
            f"replay.strategy={strategy}",
            "--tracking-uri",
            uri,
            "--json",
            "--quiet",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    result = json.loads(out.out.strip().splitlines()[-1])
    assert result["metrics"]["final/steps"] == 3 and result["metrics"]["final/updates"] >= 1


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One real MLflow SQLite store for the module's in-process trials (a new store costs its migrations)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def _replay_trial(store: str, **sections):
    """A 3-step toy trial at y 2 (stale rollouts in its batches), evaluated at its start and end, in this process."""
    replay = {"ratio": 2, "capacity": 64, **sections.pop("replay", {})}
    cfg = build_config(
        toy_dict(budget={"compute_units": None, "steps": 3}, eval={"every": 3}, replay=replay, **sections)
    )
    return run_trial(tracked(cfg, store)).metrics


@pytest.mark.slow
@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_every_objective_trains_a_replay_trial_with_its_defaults(objective, store):
    """Each registered loss, no setting but its name, on a replaying buffer."""
    metrics = _replay_trial(store, objective={"name": objective})
    assert metrics["final/steps"] == 3 and metrics["final/updates"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("policy", [{"max_uses": 2}, {"recency_alpha": 3}, {"use_decay": 2}, {"min_ess": 0.99}])
def test_every_buffer_policy_trains_a_replay_trial(policy, store):
    """Each of the uniform buffer's policies (Marin's use cap and recency weights, Trinity-RFT's use-count decay,
    the ESS floor) at y 2, every other setting its default."""
    metrics = _replay_trial(store, replay={"uniform": policy})
    assert metrics["final/steps"] == 3 and metrics["final/replay_ratio"] == pytest.approx(2, rel=0.5)
