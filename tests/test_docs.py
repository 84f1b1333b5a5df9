"""The documentation holds together: every study spec in `studies/` loads (the archive included), every relative link
and repository path in the README and the docs resolves, and no README, doc, spec comment or `--help` text cites a
document outside the repository."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from workbench.cli import build_parser
from workbench.config import TrialConfig, load_yaml_mapping
from workbench.study.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "studies").rglob("*.yaml"))
DOCS = sorted(
    {
        ROOT / "README.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "reports").rglob("README.md"),
        *(ROOT / "studies").rglob("README.md"),
    }
)

MD_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
"""A Markdown link or image: `[text](target)` or `[text](target "title")`; group 1 is the target."""
REPO_PATH = re.compile(r"(?<![\w./-])((?:docs|reports|studies|benchmarks|workbench|analysis|tests)/[\w./-]*)")
"""A path from the repository's root as the docs write them (`docs/theory.md`, `reports/quickstart/`), in code or
prose; not one inside a longer path (`../docs/x.md`, `.workbench/x/`)."""
OUTSIDE = re.compile(
    r"design\s*§|design\.md|replay-papers|\.\./shared|anchors\.md|environment\.md|prototype\.md"
    r"|\bissues?\s+#?\d+",
    re.IGNORECASE,
)
"""What cites a document outside the repository: the design notes, the paper notes, the shared folder, issue numbers."""


def _placeholder(path: str, after: str) -> bool:
    """`reports/NAME/report.md`, `studies/SPEC.yaml`, `studies/*.yaml`, `reports/<study>/`, `report.{md,html}`: a
    pattern for many paths, not one path."""
    if after and after in "<*{":
        return True
    return any(len(stem) > 1 and stem.isupper() for stem in (part.split(".")[0] for part in path.split("/")))


def repo_paths(text: str) -> list[str]:
    """Every path from the repository's root that `text` names, trailing punctuation removed, patterns left out."""
    found = []
    for match in REPO_PATH.finditer(text):
        path = match.group(1).rstrip(".,:;")
        if not _placeholder(path, text[match.end() : match.end() + 1]):
            found.append(path)
    return found


def link_targets(text: str) -> list[str]:
    """The relative targets of the Markdown links in `text`, without their `#fragment` (URLs and anchors left out)."""
    targets = []
    for target in MD_LINK.findall(text):
        if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
            continue
        targets.append(target.split("#", 1)[0])
    return targets


def test_the_path_readers_find_what_a_doc_names():
    text = (
        "See [the theory](theory.md#the-probe), ![fig](../reports/x/a.png), [site](https://example.org/a.md), "
        '[top](#bottom); `docs/results.md`, (docs/trial.md, "Tasks"), reports/quickstart/. '
        "Not: reports/NAME/report.md, studies/*.yaml, reports/<study>/, report.{md,html}, ../docs/x.md, "
        ".workbench/replay_grid/, workbench.trial.probe"
    )
    assert link_targets(text) == ["theory.md", "../reports/x/a.png"]
    assert repo_paths(text) == ["docs/results.md", "docs/trial.md", "reports/quickstart/"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_and_path_in_the_docs_resolves(doc):
    text = doc.read_text()
    missing = [t for t in link_targets(text) if t and not (doc.parent / t).exists()]
    missing += [p for p in repo_paths(text) if not (ROOT / p).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} names what is not in the repository: {missing}"


def _help_texts(parser: argparse.ArgumentParser, name: str = "workbench"):
    yield name, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _help_texts(sub, f"{name} {sub_name}")


def _field_docs(model: type, prefix: str = ""):
    """Every config key's doc string, as `workbench train --help` and a listing of the keys show them."""
    for name, field in model.model_fields.items():
        yield f"{prefix}{name}", field.description or ""
        kind = field.annotation
        if isinstance(kind, type) and hasattr(kind, "model_fields"):
            yield from _field_docs(kind, f"{prefix}{name}.")


def test_no_text_a_user_reads_cites_a_document_outside_the_repository():
    texts = [(str(p.relative_to(ROOT)), p.read_text()) for p in [*DOCS, *SPECS]]
    # the product's docstrings and comments too: a newcomer reads the code beside the docs
    texts += [
        (str(p.relative_to(ROOT)), p.read_text())
        for package in ("workbench", "analysis")
        for p in (ROOT / package).rglob("*.py")
    ]
    texts += list(_help_texts(build_parser()))
    texts += [(f"config key {key}", doc) for key, doc in _field_docs(TrialConfig)]
    cited = [f"{where}: {m.group()!r}" for where, text in texts for m in OUTSIDE.finditer(text)]
    assert not cited, "cites a document outside the repository: " + "; ".join(cited)


def _local_files_in_place(spec: Path) -> None:
    """Put what a spec's base trial names on disk (a model directory, a JSONL data file: `studies/gpu/` names a
    downloaded model and GSM8K's file) in the working directory: a sample file and a BPE Llama built on it."""
    from workbench.trial.subword import build_model_dir
    from workbench.trial.tasks import write_sample_jsonl

    base = load_yaml_mapping(spec, what="study spec").get("base") or {}
    data = (base.get("task") or {}).get("path")
    model = (base.get("model") or {}).get("path")
    if data and not Path(data).exists():
        write_sample_jsonl(data, n=700)
    if model and not Path(model).exists():
        if not data:
            data = "sample.jsonl"
            write_sample_jsonl(data, n=700)
        build_model_dir(model, data, vocab_size=300)


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_study_spec_loads_by_its_path(spec, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _local_files_in_place(spec)
    loaded = load_spec(spec)
    assert loaded.name == spec.stem
    assert loaded.n_trials >= 1 and loaded.search_space


def test_the_indexes_list_every_study_and_report():
    """`studies/README.md` and `reports/README.md` (and their archives') name every spec and report folder there."""
    for folder in ("studies", "studies/archive"):
        index = (ROOT / folder / "README.md").read_text()
        listed = {Path(t).name for t in link_targets(index)}
        assert {p.name for p in (ROOT / folder).glob("*.yaml")} <= listed, folder
    assert "gpu/gsm8k_first.yaml" in (ROOT / "studies" / "README.md").read_text()
    for folder in ("reports", "reports/archive"):
        index = (ROOT / folder / "README.md").read_text()
        listed = {t.split("/")[0] for t in link_targets(index)}
        assert {p.name for p in (ROOT / folder).iterdir() if p.is_dir() and p.name != "archive"} <= listed, folder


def test_the_readme_reads_in_five_minutes_and_defines_the_knobs_it_names():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    table = text.split("## The concepts, defined once", 1)[1].split("\n\n", 2)[1]
    for symbol in ("B", "N", "x", "H", "y", "mu"):  # the knobs and quantities every later section uses
        assert re.search(rf"^\| {re.escape(symbol)} \|", table, re.MULTILINE), symbol
    assert "Compute units" in text and "Two held-out curves" in text
