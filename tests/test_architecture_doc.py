"""docs/architecture.md names every module of the product: a newcomer reading it finds where each one lives."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def _sections(text: str) -> dict[str, str]:
    """The text about each package: its table row (`| \\`workbench.study\\` | ...`) or a paragraph that opens with its
    name (`` `analysis` reads ...``)."""
    out: dict[str, str] = {}
    for block in [*text.splitlines(), *text.split("\n\n")]:
        m = re.match(r"\|?\s*`([\w.]+)`", block.strip())
        if m:
            out[m.group(1)] = out.get(m.group(1), "") + " " + block
    return out


def _named(path: Path, text: str, sections: dict[str, str]) -> bool:
    rel = path.relative_to(ROOT)
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    dotted, stem = ".".join(parts), parts[-1]
    if str(rel) in text or dotted in text:
        return True
    return any(
        re.search(rf"\b{re.escape(stem)}\b", sections.get(".".join(parts[:i]), ""))
        for i in range(len(parts) - 1, 0, -1)
    )


def test_every_module_under_workbench_and_analysis_is_named_in_the_architecture_doc():
    text = DOC.read_text()
    sections = _sections(text)
    modules = sorted(p for package in ("workbench", "analysis") for p in (ROOT / package).rglob("*.py"))
    missing = [str(p.relative_to(ROOT)) for p in modules if not _named(p, text, sections)]
    assert not missing, f"docs/architecture.md does not name: {', '.join(missing)}"


def test_a_module_the_doc_does_not_name_is_caught():
    sections = _sections("| `workbench.study` | Optuna: spec, worker |")
    assert _named(ROOT / "workbench" / "study" / "worker.py", "", sections)
    assert not _named(ROOT / "workbench" / "study" / "placement.py", "", sections)
