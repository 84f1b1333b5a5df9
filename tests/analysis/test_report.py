"""The report as a reader meets it: its bottom line first, then the figures with their captions, then the tables, in
the Markdown and in the HTML page (checked in headless Chromium); every user string escaped."""

from __future__ import annotations

import dataclasses
import html
import json
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from analysis import plots
from analysis.report import FIGURES, analyze_data, html_page, markdown, write_report
from support.servers import require

SPEC = "studies/quickstart.yaml"


@pytest.fixture(scope="module")
def report(tmp_path_factory, study):
    """The report of a study on the quickstart's grid (on-policy, then y 2 at x 4 and 8; 3 seeds), `demo_prob` its
    curve: (result, its folder)."""
    out = tmp_path_factory.mktemp("report")
    result, data, fit = analyze_data(study(), whatif_mu=[5.28], bootstrap=3)
    write_report(result, data, fit, out, spec=SPEC)
    return result, out


def _png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])  # the IHDR chunk
    return width, height


def test_the_markdown_reads_bottom_line_then_captioned_figures_then_tables(report):
    result, out = report
    md = (out / "report.md").read_text()
    lines = md.splitlines()
    assert lines[0] == "# Study `toy`" and lines[2].startswith("**Bottom line.**")
    bottom = lines[2]
    # what it found, on which curve, with its interval and verdict, and the next command with the user's spec
    assert "the demo_prob target" in bottom and "3 paired seeds, 95% interval" in bottom
    assert re.search(
        r"y=2 x=[48] \(trial \d\)(, reaches the demo_prob target [\d.]+ with|,) \d\.\d\dx \[\d\.\d\d, \d\.\d\d\]",
        bottom,
    )
    assert f"`workbench study race {SPEC}`" in bottom or f"`workbench study confirm {SPEC}`" in bottom
    figures_at, first_table = md.index("## Figures"), md.index("\n|")
    assert md.index("**Bottom line.**") < figures_at < first_table
    for i, name in enumerate(FIGURES, 1):
        at = md.index(f"({name}.png)")
        assert figures_at < at < first_table
        assert md[at:].split("\n\n")[1].startswith(f"*Figure {i}.* ")  # its caption right under it
    assert all(_png_size(out / f"{name}.png")[1] >= 300 for name in FIGURES)  # none squashed (savings was ~40 px)


def test_the_runs_line_says_plainly_how_many_runs_reached_the_target(report):
    result, out = report
    md = (out / "report.md").read_text()
    assert result.n_censored_runs == 0
    assert "read on `demo_prob` (probability of the held-out demonstrations): every run reached the target 0.6." in md
    assert "never reached" not in md.split("## Figures")[0]


def test_the_whatif_section_says_it_re_accounts_the_same_runs(report):
    _, out = report
    md = (out / "report.md").read_text()
    section = md[md.index("## What if") :]
    section = section[: section.index("\n## ", 1)]
    assert "the same runs, re-accounted (not new measurements)" in section and "Nothing here was run again" in section
    assert "| 5.28 |" in section
    assert "informative pairs)" in section  # every comparison line states its pairs, re-accounted ones too
    table = md[md.index("## Every configuration") :]
    assert "informative pairs)" in table[: table.index("\n## ", 1)]


def test_laws_the_quickstart_grid_cannot_test_are_said_to_be_not_testable(report):
    result, out = report
    f1 = next(v for v in result.laws if v["law"] == "F1")
    assert f1["verdict"] == "not testable"
    md = (out / "report.md").read_text()
    assert (
        "- **F1** (the compute-optimal replay ratio rises like sqrt(mu)): *not testable*: the grid runs uniform replay at one ratio (y 2)"
        in md
    )
    assert "*falsified*." not in md and "*falsified*:" not in md


def test_the_pareto_front_is_read_on_the_studys_own_curve(report):
    result, out = report
    md = (out / "report.md").read_text()
    assert "## Pareto front (best `demo_prob` against compute to target)" in md and "| best demo_prob |" in md
    best = {c.trial_number: c for c in result.configurations}
    for r in result.pareto_front:
        # demo_prob's best, not greedy accuracy's (the synthetic study puts greedy accuracy 0.15 higher)
        assert r.best_reading == pytest.approx(best[r.trial_number].best_reading)
        assert r.best_reading < r.best_accuracy - 0.1


def test_the_heatmap_puts_an_optimum_beyond_the_grid_on_its_edge():
    assert plots._grid_position(4.29, [1.0, 2.0]) == (1.5, 1)  # above the largest y: the frame's top edge
    assert plots._grid_position(0.5, [1.0, 4.0, 8.0]) == (-0.5, -1)
    assert plots._grid_position(2.0, [1.0, 4.0, 8.0]) == (pytest.approx(0.5), 0)  # halfway between 1 and 4 in log
    assert plots._grid_position(4.0, [4.0]) == (0.0, 0)


def test_the_heatmap_caption_says_where_the_marker_is(study, tmp_path):
    configs = study().configs()
    beyond = plots.heatmap(configs, tmp_path, (4.29, 4.29), 0.9)
    assert "(x*=4.29, y*=4.29) lies beyond the grid; it is drawn on the frame's edge" in beyond.caption
    inside = plots.heatmap(configs, tmp_path, (2.0, 1.5), 0.9)
    assert "beyond" not in inside.caption and "(x*=2, y*=1.5), placed between the cells" in inside.caption


def test_log_axes_label_their_ticks_as_plain_numbers(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([15, 30], [15, 30])
    ax.set_xscale("log")
    ax.set_xlim(15, 30)
    plots._plain_log_ticks(ax.xaxis)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.xaxis.get_ticklabels(which="both") if t.get_text()]
    plt.close(fig)
    assert labels and all(re.fullmatch(r"[0-9.]+", label) for label in labels), labels  # 20, 30: never 3x10^1
    assert "20" in labels


def test_user_strings_are_escaped_in_the_html(report):
    result, out = report
    hostile = dataclasses.replace(result, study="<script>alert(1)</script>")
    figures = {
        name: plots.Figure(out / f"{name}.png", "a caption with <img src=x onerror=alert(1)>") for name in FIGURES
    }
    page = html_page(hostile, figures, spec="<b>x</b>.yaml")
    assert "<script>alert" not in page and "<img src=x" not in page and "<b>x</b>" not in page
    assert "&lt;script&gt;" in page and "&lt;img src=x" in page and "&lt;b&gt;x&lt;/b&gt;.yaml" in page
    assert markdown(hostile, figures).startswith(
        "# Study `<script>alert(1)</script>`"
    )  # Markdown keeps it: shown as code


class _Outline(HTMLParser):
    """The page's outline in document order: sections, figures (with their caption's text), tables."""

    def __init__(self):
        super().__init__()
        self.items, self.stack, self.caption = [], [], None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.stack.append(attrs.get("id"))
            self.items.append(("section", attrs.get("id")))
        elif tag in ("figure", "table", "h1"):
            self.items.append((tag, self.stack[-1] if self.stack else None))
        elif tag == "figcaption":
            self.caption = ""
        elif tag == "img" and self.items and self.items[-1][0] == "figure":
            self.items.append(("img", attrs.get("src", "").split(",")[0]))

    def handle_endtag(self, tag):
        if tag == "section":
            self.stack.pop()
        elif tag == "figcaption":
            self.items.append(("figcaption", self.caption.strip()))
            self.caption = None

    def handle_data(self, data):
        if self.caption is not None:
            self.caption += data
        elif (
            self.stack
            and self.stack[-1] == "bottom-line"
            and data.strip()
            and self.items[-1] == ("section", "bottom-line")
        ):
            self.items.append(("text", data.strip()))


LAYOUT = (
    "<script>window.addEventListener('load',()=>{const top=e=>e?Math.round(e.getBoundingClientRect().top+scrollY):-1;"
    "const figs=[...document.querySelectorAll('figure')];document.body.setAttribute('data-layout',JSON.stringify({"
    "bottom:top(document.querySelector('#bottom-line')),firstFigure:top(figs[0]),lastFigure:top(figs[figs.length-1]),"
    "firstTable:top(document.querySelector('table')),images:figs.map(f=>{const i=f.querySelector('img');"
    "return [i.complete&&i.naturalWidth>0,Math.round(i.getBoundingClientRect().height)]})}));});</script>"
)


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_report_html_in_headless_chromium_reads_bottom_line_then_captioned_figures_then_tables(report, tmp_path):
    browser = chromium()
    require(browser is not None, "Chromium (Debian package chromium)")
    _, out = report
    probed = tmp_path / "report.html"
    probed.write_text((out / "report.html").read_text().replace("</body>", LAYOUT + "</body>"))
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--no-first-run",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1400,900",
        "--virtual-time-budget=5000",
    ]
    dom = subprocess.run([browser, *flags, "--dump-dom", probed.as_uri()], capture_output=True, text=True, timeout=120)
    layout = re.search(r'data-layout="([^"]*)"', dom.stdout)
    assert layout, dom.stderr[-2000:]
    outline = _Outline()
    outline.feed(dom.stdout)
    items = outline.items
    assert [s for kind, s in items if kind == "section"] == ["bottom-line", "figures", "tables"]
    assert items[0] == ("h1", None) and items[1] == ("section", "bottom-line")
    assert items[2][0] == "text" and items[2][1].startswith("Bottom line.")
    figures = [i for i, (kind, _) in enumerate(items) if kind == "figure"]
    tables = [i for i, (kind, _) in enumerate(items) if kind == "table"]
    assert len(figures) == len(FIGURES) and tables and max(figures) < min(tables)
    assert all(items[i][1] == "figures" for i in figures) and all(items[i][1] == "tables" for i in tables)
    for n, i in enumerate(figures, 1):  # each figure: its image, then its caption
        assert items[i + 1] == ("img", "data:image/png;base64")
        assert (
            items[i + 2][0] == "figcaption"
            and items[i + 2][1].startswith(f"Figure {n}. ")
            and len(items[i + 2][1]) > 80
        )
    # as laid out at 1400 px: the same order down the page, every image drawn, none squashed
    drawn = json.loads(html.unescape(layout.group(1)))
    assert 0 <= drawn["bottom"] < drawn["firstFigure"] <= drawn["lastFigure"] < drawn["firstTable"]
    assert all(ok and height >= 250 for ok, height in drawn["images"]), drawn["images"]
