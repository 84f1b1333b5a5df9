"""Where `workbench report` writes (`analysis.destination`): beside the study's MLflow store by default, and never
over files git tracks unless asked; the real command line on a git checkout leaves `git status` clean."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from analysis import destination, report
from workbench.cli import main
from workbench.config import ConfigError

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A git checkout with a committed report, as this repository's reports/quickstart/ is."""
    repo = tmp_path / "repo"
    (repo / "reports" / "toy").mkdir(parents=True)
    _git(repo, "init", "-q")
    for name in report.OUTPUT_FILES:
        (repo / "reports" / "toy" / name).write_text("committed\n")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a committed report")
    return repo


def test_the_default_folder_is_beside_the_mlflow_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert (
        destination.default_out("q", f"sqlite:///{tmp_path}/stores/mlflow.db")
        == tmp_path / "stores" / "reports-out" / "q"
    )
    assert destination.default_out("q", "sqlite:///mlflow.db") == Path("reports-out/q")
    assert destination.default_out("q", f"file://{tmp_path}/mlruns") == tmp_path / "reports-out" / "q"
    assert destination.default_out("q", "http://127.0.0.1:5000") == tmp_path / "reports-out" / "q"  # a server: here


@needs_git
def test_tracked_files_are_refused_unless_forced(checkout):
    out = checkout / "reports" / "toy"
    with pytest.raises(
        ConfigError,
        match=r"^--out: .* holds files git tracks \(report\.md, report\.html, analysis\.json and 8 more\); pass --force",
    ):
        destination.prepare(out, "toy", "sqlite:///mlflow.db", list(report.OUTPUT_FILES), force=False)
    assert destination.prepare(out, "toy", "sqlite:///mlflow.db", list(report.OUTPUT_FILES), force=True) == out
    # a folder of untracked files is written without asking
    assert destination.prepare(
        checkout / "elsewhere", "toy", "sqlite:///mlflow.db", ["report.md"], force=False
    ).is_dir()


def test_outside_a_git_checkout_nothing_counts_as_tracked(tmp_path):
    assert destination.tracked([tmp_path / "report.md"]) == []
    assert (
        destination.prepare(None, "toy", f"sqlite:///{tmp_path}/mlflow.db", ["report.md"], force=False)
        == tmp_path / "reports-out" / "toy"
    )


@needs_git
def test_workbench_report_on_a_checkout_leaves_git_status_clean(checkout, study, monkeypatch, capsys):
    """The real command line (`workbench report --study toy`) run in a checkout whose MLflow store sits at its root:
    the report lands in reports-out/toy/, the committed reports/toy/ is untouched, and `git status` says nothing."""
    monkeypatch.chdir(checkout)
    monkeypatch.setattr(report, "load_study", lambda name, uri: study(name=name))  # the study's runs without training
    uri = f"sqlite:///{checkout / 'mlflow.db'}"
    assert main(["report", "--study", "toy", "--tracking-uri", uri, "--bootstrap", "2"]) == 0
    said = capsys.readouterr()
    assert said.out.startswith("Bottom line. ") and "reports-out/toy/report.html" in said.out
    assert "fitting the model to 9 runs (2 bootstrap refits" in said.err and "drawing 7 figures: done" in said.err
    for name in report.OUTPUT_FILES:
        assert (checkout / "reports-out" / "toy" / name).stat().st_size > 0
        assert (checkout / "reports" / "toy" / name).read_text() == "committed\n"
    assert _git(checkout, "status", "--porcelain", "--untracked-files=all") == ""
    # asked to write over the committed report: one line, exit 2, nothing written; with --force it is written
    assert main(["report", "--study", "toy", "--tracking-uri", uri, "--out", "reports/toy"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" in err
    assert _git(checkout, "status", "--porcelain") == ""
    assert (
        main(["report", "--study", "toy", "--tracking-uri", uri, "--bootstrap", "2", "--out", "reports/toy", "--force"])
        == 0
    )
    assert "report.html" in _git(checkout, "status", "--porcelain")
