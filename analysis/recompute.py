"""Recompute every number a results page states from the committed per-run tables (`workbench results`).

A number in docs/results.md is a claim only if it can be recomputed, so each one carries a marker right after it:

    ... 1 [0.968, 1.04] (4 informative pairs) <!-- recompute: quickstart 1/0 -->

`quickstart 1/0`: trial 1's compute-to-target over trial 0's, paired by seed, from `reports/quickstart/runs.csv`
(`workbench.censoring.paired_ratio`); `quickstart 0`: trial 0's level over its seeds; an estimator name may follow
(`quickstart 1/0 first`), else the study's. The text before the marker must contain the comparison exactly as
`Comparison.fmt()` writes it. `check` returns one line per marker and whether it held, and fails a line that states
more intervals than it has markers: a number that cannot be recomputed does not belong on the page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from analysis.runs_table import FILE, outcomes, read_runs_table
from workbench import censoring

INTERVAL = re.compile(r"\d[\d.]*x? \[[\d.]+(?:e-?\d+)?, (?:[\d.]+(?:e-?\d+)?|inf)\]")
"""A number with its interval as the docs print one (`1.05 [0.91, 1.22]`, `0.70x [0.69, 0.72]`)."""
MARKER = re.compile(r"<!--\s*recompute:\s*([\w.-]+)\s+(\d+)(?:/(\d+))?(?:\s+(\w+))?\s*-->")


@dataclass(frozen=True)
class Check:
    line: int
    claim: str
    """The marker's reading (`quickstart 1/0`)."""
    recomputed: str
    held: bool

    def fmt(self) -> str:
        return f"{'ok  ' if self.held else 'FAIL'} line {self.line}: {self.claim}: {self.recomputed}"


def recompute(reports: Path, study: str, arm: int, other: int | None, estimator: str | None) -> str:
    """The comparison a marker names, formatted as reports and docs print it."""
    path = Path(reports) / study / FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no per-run table (a number without one cannot be recomputed)")
    table = read_runs_table(path)
    mine = outcomes(table, arm, estimator)
    if other is None:
        return censoring.level_interval(list(mine.values())).fmt()
    return censoring.paired_ratio(mine, outcomes(table, other, estimator)).fmt()


def check(markdown: Path, reports: Path) -> list[Check]:
    """Every marker of `markdown`, recomputed from `reports/<study>/runs.csv`."""
    out = []
    for i, text in enumerate(Path(markdown).read_text().splitlines(), 1):
        unmarked = len(INTERVAL.findall(text)) - len(MARKER.findall(text))
        if unmarked > 0:
            out.append(Check(i, "unmarked", f"{unmarked} interval(s) on this line without a recompute marker", False))
        for m in MARKER.finditer(text):
            study, arm, other, estimator = m.group(1), int(m.group(2)), m.group(3), m.group(4)
            claim = f"{study} {arm}" + (f"/{other}" if other else "") + (f" {estimator}" if estimator else "")
            try:
                got = recompute(reports, study, arm, int(other) if other else None, estimator)
            except (FileNotFoundError, KeyError) as err:
                out.append(Check(i, claim, str(err).strip("'\""), False))
                continue
            out.append(Check(i, claim, got, got in text[: m.start()]))
    return out
