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
        tmp_path,
        seeds=2,
        sampler="grid",
        n_trials=3,
        base={
            **base,
            "budget": {"compute_units": 8},
            "eval": {**TOY["eval"], "every_units": 2, "target_accuracy": 0.2},
        },
        search_space={
            "pipeline.mode": {"choices": ["sync", "async"]},
            "replay.strategy": {"choices": ["uniform", "queue"]},
            "pipeline.generators": {"choices": [1, 2]},
            "replay.capacity": {"choices": [16, 64]},
        },
        points=[
            {"pipeline.mode": "async", "replay.strategy": "queue", "pipeline.generators": 1, "replay.capacity": 64},
            {"pipeline.mode": "async", "replay.strategy": "uniform", "pipeline.generators": 2, "replay.capacity": 64},
        ],
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
    # paired in wall time against the baseline, with its pairs counted (no estimate where too few runs reached the target)
    assert (queue["wall_to_target"] is None or queue["wall_to_target"] > 0) and "wall_ratio_to_baseline" in queue
    assert "wall_informative_pairs" in queue
    md = (out / "report.md").read_text()
    assert "## The asynchronous pipeline" in md and "| async | queue | 1 | 1 | 64 |" in md
    assert "W/T ≈" in md


@pytest.mark.slow
def test_studies_at_two_slowdowns_are_read_together_and_recommended_from(tmp_path):
    """Two asynchronous studies (generator slowdown 1 and 4), the queue at two lrs and a buffer: `workbench regime`
    pairs every arm with the queue at its best lr, in compute and wall time, per mu and finds the crossover;
    `workbench recommend` answers on an asynchronous study."""
    base = {k: v for k, v in TOY.items() if k != "threads"}
    stores = {"storage": f"sqlite:///{tmp_path / 'optuna.db'}", "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    specs = []
    for s in (1, 4):
        folder = tmp_path / f"s{s}"
        folder.mkdir()
        specs.append(
            toy_spec(
                folder,
                name=f"regime_s{s}",
                seeds=2,
                n_trials=3,
                **stores,
                base={
                    **base,
                    "lr": 1e-3,
                    "budget": {"compute_units": 6},
                    "eval": {**TOY["eval"], "every_units": 2, "target_accuracy": 0.2},
                    "pipeline": {"mode": "async", "generator_slowdown": s},
                },
                search_space={
                    "replay.strategy": {"choices": ["queue", "uniform"]},
                    "replay.capacity": {"choices": [16, 64]},
                    "lr": {"choices": [1e-3, 2e-3]},
                },
                points=[
                    {"replay.strategy": "queue", "replay.capacity": 16, "lr": 2e-3},
                    {"replay.strategy": "uniform", "replay.capacity": 64, "lr": 1e-3},
                ],
            )
        )
        run = run_cli(["study", "run", str(specs[-1])], tmp_path)
        assert run.returncode == 0, run.stderr[-3000:]
    out = tmp_path / "regime"
    regime = run_cli(["regime", *map(str, specs), "--out", str(out)], tmp_path)
    assert regime.returncode == 0, regime.stderr[-3000:]
    assert regime.stdout.startswith("crossover: compute ")
    result = json.loads((out / "regime.json").read_text())
    slow, fast = result["studies"][1], result["studies"][0]
    assert [s["slowdown"] for s in result["studies"]] == [1, 4] and slow["mu"] > 2 * fast["mu"]
    for study in result["studies"]:
        arms = {(a["strategy"], a["lr"]): a for a in study["arms"]}
        assert set(arms) == {("queue", 1e-3), ("queue", 2e-3), ("uniform", 1e-3)}
        assert (
            arms[("queue", 1e-3)]["baseline"] and arms[("queue", 2e-3)]["on_policy"] and arms[("queue", 1e-3)]["y"] == 1
        )
        buffer = arms[("uniform", 1e-3)]
        # paired over both seeds: informative pairs, and pairs where neither run reached the target (left out, counted)
        assert (
            not buffer["on_policy"]
            and _pairs(buffer["against_tuned"]) == 2
            and _pairs(buffer["against_tuned_device_time"]) == 2
        )
        assert sum(a["tuned_queue"] for a in study["arms"]) == 1
        assert study["recommendation"]["lines"][0].startswith("recommend at mu")
    assert max(a["y_of_split"] for a in slow["arms"]) > max(a["y_of_split"] for a in fast["arms"])
    assert set(result["crossover"]) == {"compute", "device_time", "theory", "reaccounted"}
    md = (out / "regime.md").read_text()
    assert "## The crossover" in md and "| queue, lr 0.002 |" in md and "| uniform N 64, lr 0.001 |" in md
    assert (out / "compute_vs_y.png").stat().st_size > 0 and (out / "crossover.png").stat().st_size > 0
    verify = run_cli(
        ["study", "verify", str(specs[1]), "--force"], tmp_path
    )  # y emerges: the prediction runs as a split
    assert verify.returncode == 0, verify.stderr[-3000:]
    regime = run_cli(["regime", *map(str, specs), "--out", str(tmp_path / "regime2")], tmp_path)
    assert regime.returncode == 0, regime.stderr[-3000:]
    predicted = [
        a
        for a in json.loads((tmp_path / "regime2" / "regime.json").read_text())["studies"][1]["arms"]
        if a["arm"] == "predicted"
    ]
    assert len(predicted) == 1 and _pairs(predicted[0]["against_tuned"]) == 2 and predicted[0]["generators"] >= 1
    rec = run_cli(["recommend", str(specs[1]), "--json"], tmp_path)
    assert rec.returncode == 0, rec.stderr[-3000:]
    answer = json.loads(rec.stdout.splitlines()[-1])
    assert answer["mu"] == pytest.approx(slow["mu"]) and ("refused" in answer) != (answer["recommended"] is not None)


def _pairs(comparison: dict) -> int:
    """The seeds a comparison paired: its informative pairs and the both-censored ones it left out."""
    return comparison["seeds"] + comparison["both_censored_pairs"]
