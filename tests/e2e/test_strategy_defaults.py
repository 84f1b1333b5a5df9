"""Every registered strategy runs a trial through the command line with no setting but its name (its defaults
adapt to the trial, e.g. its default capacity)."""

import json

import pytest
import yaml
from support.cli import run_cli
from support.toy import toy_dict

from workbench.registry import STRATEGIES


@pytest.mark.slow
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_every_strategy_trains_with_its_defaults(strategy, tmp_path):
    config = tmp_path / "toy.yaml"
    config.write_text(yaml.safe_dump(toy_dict(budget={"compute_units": None, "steps": 4}, eval={"every": 2})))
    proc = run_cli(["train", "--config", str(config), "--set", f"replay.strategy={strategy}", "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["metrics"]["final/steps"] == 4 and out["metrics"]["final/updates"] >= 1
