"""End to end: a toy study over the asynchronous pipeline's split (W) and buffer, through the CLI, analysed and
reported (issue 14)."""

from __future__ import annotations

import json

import pytest

from support.cli import run_cli
from support.toy import TOY, toy_spec


@pytest.mark.slow
def test_a_study_over_the_split_and_the_buffer_is_run_analysed_and_reported(tmp_path):
    base = {k: v for k, v in TOY.items() if k != "threads"}
    spec = toy_spec(
        tmp_path, seeds=2, sampler="grid", n_trials=3,
        base={**base, "budget": {"compute_units": 8}, "eval": {**TOY["eval"], "every_units": 2, "target_accuracy": 0.2}},
        search_space={"pipeline.mode": {"choices": ["sync", "async"]}, "replay.strategy": {"choices": ["uniform", "queue"]},
                      "pipeline.generators": {"choices": [1, 2]}, "replay.capacity": {"choices": [16, 64]}},
        points=[{"pipeline.mode": "async", "replay.strategy": "queue", "pipeline.generators": 1, "replay.capacity": 64},
                {"pipeline.mode": "async", "replay.strategy": "uniform", "pipeline.generators": 2, "replay.capacity": 64}],
    )
    run = run_cli(["study", "run", str(spec)], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    out = tmp_path / "out"
    report = run_cli(["report", str(spec), "--bootstrap", "0", "--out", str(out)], tmp_path)
    assert report.returncode == 0, report.stderr[-3000:]
    result = json.loads((out / "analysis.json").read_text())
    rows = {(r["pipeline"], r["strategy"], r["generators"]): r for r in result["pipeline"]}
    assert set(rows) == {("sync", "uniform", 1), ("async", "queue", 1), ("async", "uniform", 2)}
    sync, queue, buffered = rows[("sync", "uniform", 1)], rows[("async", "queue", 1)], rows[("async", "uniform", 2)]
    assert sync["baseline"] and sync["seeds"] == queue["seeds"] == buffered["seeds"] == 2
    assert queue["replay_ratio"] <= 1.0 and buffered["replay_ratio"] > 0
    assert buffered["mu_d4"] == pytest.approx(2 * buffered["replay_ratio"], rel=0.2)  # (K_train/1)/(K_gen/2), medians
    assert queue["wall_to_target"] > 0 and "wall_ratio_to_baseline" in queue
    md = (out / "report.md").read_text()
    assert "## The asynchronous pipeline" in md and "| async | queue | 1 | 1 | 64 |" in md
    assert "W/T ≈" in md
