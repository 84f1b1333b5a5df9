"""`workbench results`: recompute every marked number of a results page from the per-run tables committed beside the
reports (`analysis.recompute`)."""

from __future__ import annotations

from pathlib import Path

from analysis.recompute import Check, check
from workbench.config import ConfigError


def recompute_page(docs: Path, reports: Path) -> list[Check]:
    """Each marker of `docs` (and each unmarked interval) as a check; a missing page is one line naming it."""
    if not Path(docs).is_file():
        raise ConfigError(f"--docs: no such file: {docs}")
    return check(Path(docs), Path(reports))
