"""`workbench results`: every number docs/results.md states is recomputed from the committed per-run tables."""

from pathlib import Path

from analysis.recompute import check
from analysis.runs_table import FILE

ROOT = Path(__file__).resolve().parents[1]


def test_every_number_in_the_results_page_is_recomputed_from_committed_files():
    checks = check(ROOT / "docs" / "results.md", ROOT / "reports")
    assert checks, "docs/results.md states no recomputable number"
    assert [c.fmt() for c in checks if not c.held] == []


def test_every_report_under_reports_has_its_per_run_table():
    reports = [p for p in (ROOT / "reports").iterdir() if p.is_dir() and p.name != "archive"]
    assert reports and [p.name for p in reports if not (p / FILE).is_file()] == []


def _page(tmp_path, text: str) -> Path:
    reports = tmp_path / "reports" / "toy"
    reports.mkdir(parents=True)
    (reports / FILE).write_text(
        "trial_number,seed,compute_to_target,censored,total_units\n"
        "0,0,30,0,60\n0,1,25,0,60\n0,2,33,0,60\n0,3,60,1,60\n"
        "1,0,21,0,60\n1,1,17.6,0,60\n1,2,23.4,0,60\n1,3,60,1,60\n"
    )
    page = tmp_path / "results.md"
    page.write_text(text)
    return page


def test_a_marked_number_holds_only_as_recomputed(tmp_path):
    ok = _page(
        tmp_path,
        "x: 0.704 [0.693, 0.716] (3 informative pairs; 1 both-censored left out) <!-- recompute: toy 1/0 -->\n",
    )
    assert [c.held for c in check(ok, tmp_path / "reports")] == [True]
    wrong = _page(tmp_path / "b", "x: 0.68 [0.6, 0.7] (3 informative pairs) <!-- recompute: toy 1/0 -->\n")
    (c,) = check(wrong, tmp_path / "b" / "reports")
    assert not c.held and c.recomputed.startswith("0.704 [0.693, 0.716]")


def test_an_interval_without_a_marker_or_a_table_fails(tmp_path):
    page = _page(
        tmp_path, "y 2 saved 29%: 0.71x [0.63, 0.81] on demo_prob\nz: 1 [0.9, 1.1] <!-- recompute: other 1/0 -->\n"
    )
    checks = check(page, tmp_path / "reports")
    assert [c.held for c in checks] == [False, False]
    assert "without a recompute marker" in checks[0].recomputed and "no per-run table" in checks[1].recomputed


def test_twin_studies_pair_across_their_tables_only_from_the_same_warm_starts(tmp_path):
    page = _page(
        tmp_path,
        "w: 0.704 [0.693, 0.716] (3 informative pairs; 1 both-censored left out) <!-- recompute: twin 1 / toy 0 -->\n",
    )
    reports = tmp_path / "reports"
    (reports / "twin").mkdir()
    head = "trial_number,seed,compute_to_target,censored,total_units,checkpoint\n"
    (reports / "twin" / FILE).write_text(head + "1,0,21,0,60,0\n1,1,17.6,0,60,0\n1,2,23.4,0,60,0\n1,3,60,1,60,0\n")
    (c,) = check(page, reports)
    assert c.held and c.claim == "twin 1 / toy 0"  # toy's table records no warm start: the first for every seed
    (reports / "twin" / FILE).write_text(head + "1,0,21,0,60,0\n1,1,17.6,0,60,0\n1,2,23.4,0,60,1\n1,3,60,1,60,1\n")
    (c,) = check(page, reports)
    assert not c.held and "seeds [2, 3] start from different warm starts" in c.recomputed
