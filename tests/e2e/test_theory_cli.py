"""`workbench theory`: the closed-form optimum from the command line."""

import json

import pytest
from support.cli import run_cli

from analysis.theory import closed_form_optimum


def test_theory_cli_prints_the_optimum_and_rejects_bad_input():
    run = lambda *a: run_cli(["theory", *a], cwd=None, timeout=60)  # noqa: E731
    out = run("--mu", "5.28", "--rho", "0.1", "--alpha", "0.2", "--batch-size", "60", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    x, y = closed_form_optimum(5.28, 0.1, 0.2)
    assert got["x_star"] == pytest.approx(x) and got["y_star"] == pytest.approx(y)
    assert got["fresh_per_step"] == pytest.approx(60 / y) and got["workers_per_trainer"] == pytest.approx(5.28 / y)
    text = run("--mu", "5.28", "--rho", "0.1", "--alpha", "0.2").stdout
    assert "x* = N/R" in text and "W/T" in text
    bad = run("--mu", "5.28", "--rho", "0.1", "--alpha", "0.7")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [bad.stderr.strip()] and "--alpha" in bad.stderr
