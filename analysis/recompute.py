"""Recompute every number a results page states from the committed per-run tables (`workbench results`).

A number in docs/results.md is a claim only if it can be recomputed, so each one carries a marker right after it:

    ... 1 [0.968, 1.04] (4 informative pairs) <!-- recompute: quickstart 1/0 -->

`quickstart 1/0`: trial 1's compute-to-target over trial 0's, paired by seed, from `reports/quickstart/runs.csv`
(`workbench.censoring.paired_ratio`); `quickstart 0`: trial 0's level over its seeds; an estimator name may follow
(`quickstart 1/0 first`), else the study's. Two studies run on the same seeds from the same warm starts (twins that
differ in one setting, such as the trainer) pair across their tables: `trl_quickstart 6 / trl_quickstart_native 8`
is trial 6 of the first over trial 8 of the second, refused where a common seed started from different warm starts. The text before the marker must contain the comparison exactly as
`Comparison.fmt()` writes it (a ratio with no estimate followed by its seeds' orders, `; seed by seed, ...` as
`censoring.Orders.fmt()` writes them). `check` returns one line per marker and whether it held, and fails a line that states
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
MARKER = re.compile(r"<!--\s*recompute:\s*([\w.-]+)\s+(\d+)(?:/(\d+)|\s+/\s+([\w.-]+)\s+(\d+))?(?:\s+([a-z]+))?\s*-->")


@dataclass(frozen=True)
class Check:
    line: int
    claim: str
    """The marker's reading (`quickstart 1/0`)."""
    recomputed: str
    held: bool

    def fmt(self) -> str:
        return f"{'ok  ' if self.held else 'FAIL'} line {self.line}: {self.claim}: {self.recomputed}"


def _table(reports: Path, study: str):
    path = Path(reports) / study / FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no per-run table (a number without one cannot be recomputed)")
    return read_runs_table(path)


def _warm_starts(table, trial: int) -> dict[int, int]:
    """Per seed of `trial`, its warm start (a table from before they were recorded: the first, 0)."""
    g = table[table["trial_number"] == trial]
    starts = g["checkpoint"].astype(int) if "checkpoint" in g else [0] * len(g)
    return dict(zip(g["seed"].astype(int), starts))


def recompute(
    reports: Path,
    study: str,
    arm: int,
    other: int | None,
    estimator: str | None,
    other_study: str | None = None,
) -> str:
    """The comparison a marker names, formatted as reports and docs print it (`other_study`: `other` is a trial of
    that study's table, paired with `arm` by seed)."""
    table = _table(reports, study)
    mine = outcomes(table, arm, estimator)
    if other is None:
        return censoring.level_interval(list(mine.values())).fmt()
    theirs_table = table if other_study is None else _table(reports, other_study)
    if other_study is not None:
        a, b = _warm_starts(table, arm), _warm_starts(theirs_table, other)
        if differ := sorted(s for s in set(a) & set(b) if a[s] != b[s]):
            raise KeyError(f"{study} {arm} / {other_study} {other}: seeds {differ} start from different warm starts")
    c = censoring.paired_ratio(mine, outcomes(theirs_table, other, estimator))
    return c.fmt() if c.orders is None else f"{c.fmt()}; seed by seed, {c.orders.fmt()}"


def check(markdown: Path, reports: Path) -> list[Check]:
    """Every marker of `markdown`, recomputed from `reports/<study>/runs.csv`."""
    out = []
    for i, text in enumerate(Path(markdown).read_text().splitlines(), 1):
        unmarked = len(INTERVAL.findall(text)) - len(MARKER.findall(text))
        if unmarked > 0:
            out.append(Check(i, "unmarked", f"{unmarked} interval(s) on this line without a recompute marker", False))
        for m in MARKER.finditer(text):
            study, arm, estimator = m.group(1), int(m.group(2)), m.group(6)
            other_study, other = m.group(4), m.group(3) or m.group(5)
            versus = f" / {other_study} {other}" if other_study else (f"/{other}" if other else "")
            claim = f"{study} {arm}{versus}" + (f" {estimator}" if estimator else "")
            try:
                got = recompute(reports, study, arm, int(other) if other else None, estimator, other_study)
            except (FileNotFoundError, KeyError) as err:
                out.append(Check(i, claim, str(err).strip("'\""), False))
                continue
            out.append(Check(i, claim, got, got in text[: m.start()]))
    return out
