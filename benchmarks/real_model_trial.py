"""One trial on a fetched real model (`workbench fetch-model`), its time split, mu and peak memory: the GPU check of
reports/gpu_real_model/ (`python benchmarks/real_model_trial.py MODEL_DIR DATA.jsonl cuda STEPS MLFLOW_URI DECODE`)."""

import json
import sys
import time
import torch
from workbench.config import build_config
from workbench.trial.loop import run_trial
from workbench import progress

model, data, device, steps, uri, decode = (
    sys.argv[1],
    sys.argv[2],
    sys.argv[3],
    int(sys.argv[4]),
    sys.argv[5],
    sys.argv[6],
)
progress.setup_logging()
cfg = build_config(
    {
        "model": {"path": model, "device": device},
        "task": {"name": "jsonl", "path": data, "chat_template": True, "n_eval": 60},
        "batch_size": 32,
        "group_size": 4,
        "generation": {"max_new_tokens": 96, "decode": decode},
        "budget": {"steps": steps, "compute_units": None},
        "eval": {"every": steps},
        "tracking": {"uri": uri},
    }
)
t0 = time.perf_counter()
res = run_trial(cfg)
wall = time.perf_counter() - t0
keep = [
    "accuracy",
    "steps",
    "gen_seconds",
    "train_seconds",
    "eval_seconds",
    "mu",
    "mu_measured",
    "working_seconds",
    "startup_seconds",
]
out = {k: v for k, v in res.metrics.items() if any(k == f"final/{w}" for w in keep)}
out["wall_s"] = wall
out["curve"] = [{k: r.get(k) for k in ("step", "accuracy", "pass_at_k", "compute_units", "seconds")} for r in res.evals]
if torch.cuda.is_available():
    out["peak_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
    out["device"] = torch.cuda.get_device_name(0)
print("RESULT " + json.dumps(out))
