"""The probe measures a real replay run without changing it."""

import math

from mlflow import MlflowClient

from workbench.trial.loop import run_trial
from workbench.trial.probe import probe_config, probe_plan, run_probe

from support.logs import captured_logs
from support.toy import toy_dict, tracked


def _cfg(tracking_uri):
    over = toy_dict()
    over.pop("budget")
    return tracked(probe_config(over, x=4, ratio=2, steps=14), tracking_uri)


def test_the_probe_reads_noise_by_age_and_leaves_the_run_as_an_unprobed_one(tracking_uri):
    cfg = _cfg(tracking_uri)
    assert cfg.replay.strategy == "uniform" and cfg.replay.warmup == "fill" and cfg.replay.capacity == 32
    with captured_logs() as records:
        res, probed = run_probe(cfg, every=2, sketch=256)
    # progress: the plan first, then a line per probe with its count of rollout gradients, adding up to the plan's
    plan, lines = probe_plan(cfg, every=2), [r.getMessage() for r in records]
    assert plan.describe() in lines and plan.probe_steps == [6, 8, 10, 12] and plan.rho_steps == [6, 8, 10]
    done = [line for line in lines if " rollout gradients in " in line]
    assert len(done) == len(plan.probe_steps) + len(plan.rho_steps)
    assert sum(int(line.split(": ")[-1].split()[0]) for line in done) == plan.gradients == 4 * 32 + 3 * 16
    assert res.probes >= 3 and res.steps == 14
    ages = [a["age"] for a in res.noise]
    assert len(ages) >= 3 and min(ages) == 0 and max(ages) <= 4
    assert all(a["sigma2"] >= 0 and a["n"] >= 2 for a in res.noise)
    assert -1.0 <= res.rho <= 1.0 and math.isfinite(res.group_correlation) and res.mu > 0
    assert res.rho_lag == 2  # x/y by default: capacity 32 over B 16, the mean gap between two uses of a rollout
    assert [t["x"] for t in res.horizon][:3] == [1, 2, 3] and all(math.isfinite(t["cross"]) for t in res.horizon)
    # groups resampled: the 50 draws are not all one (two given draws may coincide when few groups carry a gradient)
    assert len(res.horizon_draws) == 50 and any(d != res.horizon_draws[0] for d in res.horizon_draws[1:])

    plain = run_trial(_cfg(tracking_uri))
    client = MlflowClient(tracking_uri)

    def loss(run_id):
        return [m.value for m in sorted(client.get_metric_history(run_id, "train/loss"), key=lambda m: m.step)]

    assert loss(probed.run_id) == loss(plain.run_id)  # gradients measured in eval mode, no random draws consumed
    assert probed.metrics["final/accuracy"] == plain.metrics["final/accuracy"]
    assert client.get_metric_history(probed.run_id, "probe/reuse_correlation")


def test_the_default_probe_takes_the_gradients_the_docs_state_on_one_thread_unless_told():
    cfg = probe_config({})
    plan = probe_plan(cfg)
    assert (plan.probe_steps, plan.rho_steps, plan.lag) == ([24, 28, 32, 36, 40, 44], [24, 28, 32, 36], 8)
    assert plan.gradients == 6 * 1024 + 4 * 128 == 6656  # docs/performance.md, "The probe's time"
    assert (
        cfg.threads == 1
        and probe_config({"threads": 2}).threads == 2
        and probe_config({"threads": None}).threads is None
    )
