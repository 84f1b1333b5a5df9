"""End to end: a tiny study through the CLI into real stores, then `analyze`, `report` (checked in a real browser)
and `study verify` (the fitted optimum run as trials of the study)."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess

import pytest
from mlflow import MlflowClient

from support.toy import toy_spec
from support.cli import run_cli
from workbench.censoring import Outcome, level_interval
from support.servers import require


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    spec = toy_spec(
        tmp, n_trials=3, seeds=2, search_space={"replay.ratio": {"choices": [1, 2]}, "x": {"choices": [2, 4]}}
    )
    run = run_cli(["study", "run", str(spec)], tmp)
    assert run.returncode == 0, run.stderr[-3000:]
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    analyze = run_cli(["analyze", str(spec), "--bootstrap", "5", "--out", str(tmp / "out")], tmp)
    assert analyze.returncode == 0, analyze.stderr[-3000:]
    assert "predicted optimum: x" in analyze.stdout
    report = run_cli(
        ["report", "--study", "toy", "--tracking-uri", uri, "--bootstrap", "5", "--out", str(tmp / "out")], tmp
    )
    assert report.returncode == 0, report.stderr[-3000:]
    return tmp / "out", uri


@pytest.mark.slow
def test_analysis_json_matches_what_mlflow_holds(report_dir):
    out, uri = report_dir
    result = json.loads((out / "analysis.json").read_text())
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("toy")
    seeds = client.search_runs(
        [exp.experiment_id], filter_string="tags.`workbench.kind` = 'seed' and attributes.status = 'FINISHED'"
    )
    trials = client.search_runs([exp.experiment_id], filter_string="tags.`workbench.kind` = 'trial'")
    assert result["study"] == "toy" and result["n_runs"] == len(seeds) == 6
    assert result["n_configurations"] == len(trials) == 3
    assert result["baseline"]["trial_number"] == 0 and result["baseline"]["x"] == 1 and result["baseline"]["y"] == 1
    # the study's reference mu is tagged on its parent run (and on the baseline's trial run that measured it)
    study_run = client.search_runs([exp.experiment_id], filter_string="tags.`workbench.kind` = 'study'")[0]
    baseline_run = next(t for t in trials if t.data.params["baseline"] == "True")
    assert (
        result["reference_mu"]
        == float(study_run.data.tags["workbench.reference_mu"])
        == float(baseline_run.data.tags["workbench.reference_mu"])
    )
    assert sum(c["seeds"] for c in result["configurations"]) == 6
    assert result["n_censored_runs"] == sum(c["censored_seeds"] for c in result["configurations"])
    assert {"alpha", "rho", "tau0", "intervals", "loco", "r2_log"} <= set(result["fit"])
    assert result["predicted"]["knobs"]["capacity"] >= 16 and result["predicted"]["y"] >= 1
    assert "5.28" in result["whatif"] and result["whatif"]["5.28"]["mu"] == 5.28
    best = min(result["configurations"], key=lambda c: (c["censored_seeds"] / c["seeds"], c["compute_to_target"]))
    assert result["empirical"]["trial_number"] == best["trial_number"]


@pytest.mark.slow
def test_report_markdown_and_html_hold_the_tables_and_every_figure(report_dir):
    out, _ = report_dir
    md = (out / "report.md").read_text()
    result = json.loads((out / "analysis.json").read_text())
    assert md.startswith("# Study `toy`")
    assert "| on-policy baseline (trial 0) | 1 | 1 | 16 |" in md
    assert f"| alpha | {result['fit']['alpha']:.3g} |" in md
    for c in result["pareto_front"]:
        assert f"| {c['trial_number']} | " in md
    figures = [
        "accuracy_vs_compute",
        "savings",
        "pareto_front",
        "heatmap",
        "predicted_vs_measured",
        "entropy_vs_compute",
        "staleness_histogram",
    ]
    for name in figures:
        png = out / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
        assert f"({name}.png)" in md
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == len(figures)
    assert "<table>" in page and "on-policy baseline (trial 0)" in page
    # Every comparison with its interval, and what the study can and cannot resolve, with its measured noise.
    for c in result["configurations"]:
        assert c["verdict"] in md
        if c["seeds"] > 1 and not c["baseline"] and math.isfinite(c["ratio_to_baseline"]):
            assert f"{c['ratio_to_baseline']:.2f} [{c['ratio_ci_low']:.2f}, {c['ratio_ci_high']:.2f}]" in md
    assert "## What this study can and cannot resolve" in md and "What this study can and cannot resolve</h2>" in page
    assert "Per-run noise by estimator" in md and all(
        f"| {name} |" in md for name in ("first", "interpolated", "sustained", "fitted")
    )
    # the comparisons read on every curve the runs logged: the study's own at its target
    own = [r for r in result["by_reading"] if r["study_reading"]]
    assert own and all(r["reading"] == result["metric"] and r["target"] == result["target_accuracy"] for r in own)
    if len({r["reading"] for r in result["by_reading"]}) > 1:
        assert "## The same comparisons read on another curve" in md


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
def test_report_renders_every_figure_in_headless_chromium(report_dir, tmp_path):
    browser = chromium()
    require(browser is not None, "Chromium (Debian package chromium)")
    out, _ = report_dir
    page = (out / "report.html").read_text()
    probe = (
        "<script>window.addEventListener('load',()=>{const i=[...document.images];"
        "document.body.setAttribute('data-rendered',i.filter(x=>x.complete&&x.naturalWidth>0).length+'/'+i.length);});</script>"
    )
    probed = tmp_path / "probe.html"
    probed.write_text(page.replace("</body>", probe + "</body>"))
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=5000",
    ]
    dom = subprocess.run([browser, *flags, "--dump-dom", probed.as_uri()], capture_output=True, text=True, timeout=120)
    rendered = re.search(r'data-rendered="(\d+)/(\d+)"', dom.stdout)
    assert rendered, dom.stderr[-2000:]
    assert rendered.group(1) == rendered.group(2) == "7"
    shot = tmp_path / "report.png"
    subprocess.run(
        [browser, *flags, "--window-size=1100,2400", f"--screenshot={shot}", (out / "report.html").as_uri()],
        capture_output=True,
        timeout=120,
    )
    assert shot.stat().st_size > 20000


@pytest.fixture(scope="module")
def verified(report_dir):
    """The same study after `workbench study verify --force`: its fitted optimum run as a new trial."""
    out, uri = report_dir
    tmp = out.parent
    spec = tmp / "toy.yaml"
    run = run_cli(["study", "verify", str(spec), "--force", "--json"], tmp)
    assert run.returncode == 0, run.stderr[-3000:]
    again = run_cli(["analyze", str(spec), "--bootstrap", "0", "--out", str(tmp / "out_verified")], tmp)
    assert again.returncode == 0, again.stderr[-3000:]
    return (
        json.loads(run.stdout.strip().splitlines()[-1]),
        json.loads((tmp / "out_verified" / "analysis.json").read_text()),
        tmp,
        uri,
    )


@pytest.mark.slow
def test_study_verify_runs_the_fitted_optimum_as_a_new_trial_of_the_study(verified):
    import optuna

    v, result, tmp, uri = verified
    first = json.loads((tmp / "out" / "analysis.json").read_text())
    # The knobs run are the fitted optimum of the study as it stood, rounded to whole rollouts.
    assert v["knobs"]["replay.ratio"] == pytest.approx(max(1.0, first["predicted"]["y"]), rel=5e-3)
    assert v["knobs"]["replay.capacity"] == max(16, round(first["predicted"]["x"] * 16 / v["knobs"]["replay.ratio"]))
    study = optuna.load_study(study_name="toy", storage=f"sqlite:///{tmp / 'optuna.db'}")
    trial = study.trials[v["trial_number"]]
    assert trial.state.name == "COMPLETE" and trial.params == {} and trial.user_attrs["arm"] == "predicted"
    assert trial.value == pytest.approx(v["measured"]) and trial.user_attrs["knobs"] == v["knobs"]
    assert trial.user_attrs["predicted_compute_to_target"] == pytest.approx(v["predicted"])
    # MLflow: a trial run tagged as the predicted arm, under the study's parent, with one finished run per seed.
    client = MlflowClient(uri)
    run = client.get_run(trial.user_attrs["mlflow_run_id"])
    assert (
        run.data.tags["workbench.arm"] == "predicted"
        and run.data.tags["mlflow.parentRunId"] == study.user_attrs["mlflow_parent_run_id"]
    )
    assert run.data.metrics["study/predicted_compute_to_target"] == pytest.approx(v["predicted"])
    seeds = client.search_runs([run.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run.info.run_id}'")
    assert sorted(int(r.data.params["seed"]) for r in seeds) == [0, 1]
    assert {int(r.data.params["replay.capacity"]) for r in seeds} == {v["knobs"]["replay.capacity"]}
    # The next analysis holds it, measured against predicted; it does not count as a sampler trial.
    assert result["n_configurations"] == 4
    [row] = result["verified"]
    assert row["trial_number"] == v["trial_number"] and row["arm"] == "predicted"
    # The study ranks by the penalised value of censored seeds; the analysis reads them as censored at their total.
    per_seed = trial.user_attrs["per_seed"]
    runs = [Outcome(p["total_units"], True) if p["censored"] else Outcome(p["compute_to_target"]) for p in per_seed]
    assert row["compute_to_target"] == pytest.approx(level_interval(runs).estimate, rel=1e-6, nan_ok=True)
    if not any(p["censored"] for p in per_seed):
        assert row["compute_to_target"] == pytest.approx(v["measured"], rel=1e-6)
    assert row["predicted_when_run"] == pytest.approx(v["predicted"], rel=1e-6)
    status = run_cli(["study", "status", str(tmp / "toy.yaml"), "--table"], tmp)
    assert "3 complete" in status.stdout and "1 predicted" in status.stdout
    assert f"fitted optimum run as trial {v['trial_number']}" in status.stdout
    assert f"\n{v['trial_number']},COMPLETE,predicted," in status.stdout


@pytest.mark.slow
def test_study_verify_probe_runs_the_probes_optimum_or_says_why_not(verified):
    import optuna

    _, _, tmp, uri = verified
    run = run_cli(["study", "verify", str(tmp / "toy.yaml"), "--probe", "--force", "--json"], tmp)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("probe: 48 steps") and "at the study's mu" in run.stdout
    probe_runs = MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name("toy-probe").experiment_id])
    assert len(probe_runs) == 1 and "probe/rho" in probe_runs[0].data.metrics
    study = optuna.load_study(study_name="toy", storage=f"sqlite:///{tmp / 'optuna.db'}")
    arms = [t for t in study.trials if t.user_attrs.get("arm") == "probe"]
    if "no prediction:" in run.stdout:
        assert not arms
    else:
        v = json.loads(run.stdout.strip().splitlines()[-1])
        [trial] = arms
        assert trial.number == v["trial_number"] and trial.user_attrs["fit"]["probe_run"] == probe_runs[0].info.run_id
        analysis = run_cli(["analyze", str(tmp / "toy.yaml"), "--bootstrap", "0", "--out", str(tmp / "out_probe")], tmp)
        [row] = json.loads((tmp / "out_probe" / "analysis.json").read_text())["probe_verified"]
        assert (
            analysis.returncode == 0 and row["trial_number"] == v["trial_number"] and row["ratio_to_empirical_best"] > 0
        )


@pytest.mark.slow
def test_study_confirm_predicted_replicates_each_predicted_optimum_on_the_fresh_seeds(verified):
    import optuna

    _, _, tmp, _ = verified
    run = run_cli(
        ["study", "confirm", str(tmp / "toy.yaml"), "--top", "1", "--seeds", "2", "--predicted", "--json"], tmp
    )
    assert run.returncode == 0, run.stderr[-3000:]
    done = json.loads(run.stdout.strip().splitlines()[-1])
    study = optuna.load_study(study_name="toy", storage=f"sqlite:///{tmp / 'optuna.db'}")
    predictions = [
        t for t in study.trials if t.user_attrs.get("arm") in ("predicted", "probe") and t.state.name == "COMPLETE"
    ]
    assert predictions and all(
        d["seeds"] == [2, 3] for d in done
    )  # selection used seeds 0-1: the same fresh seeds for all
    reruns = [c for c in study.trials if c.user_attrs.get("arm") == "confirm" and c.state.name == "COMPLETE"]
    for t in (
        predictions
    ):  # each predicted optimum re-run once (a prediction equal to a confirmed configuration shares its re-run)
        assert [c.user_attrs["knobs"] for c in reruns].count(t.user_attrs["knobs"]) == 1
    assert any(d["confirms"] == predictions[0].number for d in done)


@pytest.mark.slow
def test_study_verify_model_runs_a_compared_models_optimum_or_says_why_not(verified):
    import optuna

    _, _, tmp, _ = verified
    wrong = run_cli(["study", "verify", str(tmp / "toy.yaml"), "--model", "nope"], tmp)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "--model" in wrong.stderr
    lone = run_cli(["study", "verify", str(tmp / "toy.yaml"), "--ridge"], tmp)
    assert lone.returncode == 2 and lone.stderr.count("\n") == 1 and "--ridge" in lone.stderr
    run = run_cli(["study", "verify", str(tmp / "toy.yaml"), "--model", "best", "--force", "--json"], tmp)
    assert run.returncode == 0, run.stderr[-3000:]
    if (
        "no prediction:" in run.stdout
    ):  # too few configurations, or the best model's optimum is refused: said, nothing run
        return
    name = re.match(r"model (\w+) \(leave-one-configuration-out", run.stdout).group(1)
    v = json.loads(run.stdout.strip().splitlines()[-1])
    trial = optuna.load_study(study_name="toy", storage=f"sqlite:///{tmp / 'optuna.db'}").trials[v["trial_number"]]
    assert trial.user_attrs["arm"] == "predicted" and trial.user_attrs["fit"]["model"] == name
    assert trial.user_attrs["predicted_compute_to_target"] == pytest.approx(v["predicted"])


@pytest.mark.slow
def test_recommend_through_the_cli_reads_the_study_at_its_mu_and_at_yours(report_dir):
    """`workbench recommend` on the small study: at the study's mu and at a user's (re-accounted, with a split), in
    words and as JSON, agreeing with the study's own paired comparisons; bad input exits 2 in one line."""
    out, uri = report_dir
    result = json.loads((out / "analysis.json").read_text())
    words = run_cli(["recommend", "--study", "toy", "--tracking-uri", uri], out)
    assert words.returncode == 0, words.stderr[-3000:]
    assert words.stdout.startswith(f"recommend at mu {result['reference_mu']:.3g} (from study toy")
    rec = json.loads(
        run_cli(["recommend", "--study", "toy", "--tracking-uri", uri, "--json"], out).stdout.splitlines()[-1]
    )
    assert rec["source"] == "study" and rec["mu"] == pytest.approx(result["reference_mu"])
    assert ("refused" in rec) != (rec["recommended"] is not None)
    if rec["recommended"] is not None:
        chosen = rec["recommended"]
        if chosen["strategy"] == "on-policy":  # no replay arm's interval lies below 1
            assert all(not (c["ratio_ci_high"] < 1) for c in result["configurations"] if not c["baseline"])
        else:
            c = next(c for c in result["configurations"] if c["trial_number"] == chosen["trial_number"])
            assert c["ratio_ci_high"] < 1 and rec["saving"]["share"] == pytest.approx(1 - c["ratio_to_baseline"])
    at = json.loads(
        run_cli(
            ["recommend", "--study", "toy", "--tracking-uri", uri, "--mu", "5.28", "--split", "3:1", "--json"], out
        ).stdout.splitlines()[-1]
    )
    assert at["mu"] == 5.28 and at["study_mu"] == pytest.approx(result["reference_mu"])
    if at["recommended"] is not None:
        assert at["recommended"]["given"]["replay_ratio"] == pytest.approx(5.28 / 3)
        assert any(n.startswith("re-accounted") for n in at["notes"])
    for argv, field in (
        (["--split", "0:1"], "--split"),
        (["--mu", "-1"], "--mu"),
        (["--gen-seconds", "1"], "--gen-seconds"),
    ):
        bad = run_cli(["recommend", "--study", "toy", "--tracking-uri", uri, *argv], out)
        assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and field in bad.stderr
    missing = run_cli(["recommend", "--probe", "0" * 32, "--tracking-uri", uri], out)
    assert missing.returncode == 2 and "--probe" in missing.stderr
