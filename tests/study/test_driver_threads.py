"""How many threads the study driver gives the baseline: every core only while it runs alone (its mu or target still
to measure); in a calibrated study the other workers start at once, so the baseline gets a worker's share."""

import types

import pytest

from workbench.study import driver
from workbench.study.context import context
from workbench.study.spec import load_spec

SPEC = """name: threads
base: {{budget: {{steps: 2}}}}
search_space:
  replay.ratio: {{choices: [1, 2]}}
seeds: 1
n_trials: 2
{extra}
"""


class Recorded:
    """A worker process that exits at once, its command line kept."""

    commands: list[list[str]] = []

    def __init__(self, cmd, **kwargs):
        Recorded.commands.append(cmd)

    def poll(self):
        return 0

    returncode = 0


def _baseline_threads(tmp_path, monkeypatch, extra: str) -> list[int]:
    path = tmp_path / "s.yaml"
    path.write_text(SPEC.format(extra=extra))
    ctx = context(
        load_spec(path), f"sqlite:///{tmp_path / 'optuna.db'}", f"sqlite:///{tmp_path / 'mlflow.db'}", str(path)
    )
    Recorded.commands = []
    monkeypatch.setattr(driver, "subprocess", types.SimpleNamespace(Popen=Recorded))  # the driver's workers only
    monkeypatch.setattr(driver, "usable_cores", lambda: 4)
    monkeypatch.setattr(driver, "_watch", lambda *a, **k: None)
    driver.run_study(ctx, n_trials=2, workers=2)
    return [int(c[c.index("--baseline-threads") + 1]) for c in Recorded.commands]


@pytest.mark.parametrize(
    "extra, want",
    [("", [4, 2]), ("compute_mu: 0.5\ntarget_accuracy: 0.5", [2, 2])],
    ids=["baseline alone", "calibrated"],
)
def test_the_baseline_gets_every_core_only_when_it_runs_alone(tmp_path, monkeypatch, extra, want):
    assert _baseline_threads(tmp_path, monkeypatch, extra) == want
