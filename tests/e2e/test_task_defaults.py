"""Every registered task trains through the command line with no setting but its name (and, for `jsonl`, its
file): real warm start, generation, checker and update at toy size. The command runs in this process
(`workbench.cli.main`) to keep the suite short."""

import json

import pytest
import yaml
from support.toy import toy_dict

from workbench.cli import main
from workbench.trial.tasks import TASKS, write_sample_jsonl


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_task_trains_with_its_defaults(task, tmp_path, capsys):
    settings = {"name": task, "digits": 2, "n_eval": 64}
    if task == "jsonl":
        settings["path"] = str(write_sample_jsonl(tmp_path / "sample.jsonl", n=120))
    model = {"warm_start": {"target_accuracy": 0.2, "steps": 40}}  # a short warm start: the trial, not its skill
    config = tmp_path / "toy.yaml"
    config.write_text(
        yaml.safe_dump(
            toy_dict(task=settings, model=model, budget={"compute_units": None, "steps": 2}, eval={"every": 2})
        )
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = main(["train", "--config", str(config), "--tracking-uri", uri, "--json", "--quiet"])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    result = json.loads(out.out.strip().splitlines()[-1])
    assert result["metrics"]["final/steps"] == 2 and result["metrics"]["final/updates"] >= 1
    assert 0.0 <= result["metrics"]["final/accuracy"] <= 1.0
