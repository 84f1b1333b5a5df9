"""The project's own source read as code: for tests that a rule is written in one place only."""

from __future__ import annotations

import functools
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("workbench", "analysis")


SKIPPED = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)


def _tokens(text: str) -> list[tuple[int, str]]:
    """(line, token) of `text`'s code: comments dropped, a string as `STR`, an f-string as `STR` followed by the
    code of its replacement fields (what it computes is code; its words are not)."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in SKIPPED:
            continue
        if tok.type != tokenize.STRING:
            out.append((tok.start[0], tok.string))
            continue
        out.append((tok.start[0], "STR"))
        if re.match(r"[rRbB]?[fF]", tok.string):
            for field in re.findall(r"(?<!\{)\{([^{}]+)\}", tok.string):
                try:
                    out += [(tok.start[0], t) for _, t in _tokens(re.split(r"[:!](?![^\[]*\])", field)[0])]
                except (tokenize.TokenError, IndentationError, SyntaxError):
                    continue
    return out


@functools.cache
def code_lines(path: Path) -> list[tuple[int, str]]:
    """Each line of a Python file as its code tokens joined by single spaces (`_tokens`: comments dropped, strings
    as `STR`, f-strings' fields kept): a formula a docstring or a message states in words is not a copy of it."""
    lines: dict[int, list[str]] = {}
    for n, token in _tokens(path.read_text()):
        lines.setdefault(n, []).append(token)
    return [(n, " ".join(parts)) for n, parts in sorted(lines.items())]


def occurrences(pattern: str, home: str) -> list[str]:
    """`path:line: code` for every line of the packages' code matching `pattern` (a regex over `code_lines`'
    spacing), outside the rule's `home` (a path relative to the repository root)."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == home:
                continue
            found += [f"{rel}:{n}: {code}" for n, code in code_lines(path) if re.search(pattern, code)]
    return found
