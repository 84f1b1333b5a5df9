"""Final answers of math word problems: where a completion states its answer, and whether it equals the reference.

Numbers are compared exactly first (`1,000` == `1000` == `1000.0`, fractions by value), which is all a GSM8K-style
answer needs and costs nothing; anything else goes to Hugging Face's `math-verify` (the answer checker of the field:
LaTeX, fractions, roots, units, sets, equations such as `x = 5`), so a MATH-style file is judged as its users expect.
The reference is the text after a line's last `####`; a completion's answer is the text after its last `####`, else
its last `\\boxed{...}`, else its last number.
"""

from __future__ import annotations

import re
import threading
from fractions import Fraction

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
_BOXED = "\\boxed{"
MATH_VERIFY_TIMEOUT = 5
"""Seconds math-verify may spend on one parse or comparison (a signal alarm: only on a process's main thread)."""


def _boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (braces balanced), or None."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth, i = 1, start + len(_BOXED)
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def final_answer(text: str) -> str | None:
    """A completion's stated answer: after the last `####` (to the end of that line), else the last `\\boxed{}`,
    else the last number; None when it states none."""
    if "####" in text:
        tail = text.rsplit("####", 1)[1].strip().splitlines()
        return tail[0].strip() if tail and tail[0].strip() else None
    boxed = _boxed(text)
    if boxed is not None:
        return boxed.strip() or None
    found = _NUMBER.findall(text)
    return found[-1] if found else None


def as_number(s: str) -> Fraction | None:
    """`s` as an exact number (`1,000`, `2.50`, `3/4`, `-7.`), or None when it is not a plain number."""
    s = s.strip().replace(",", "").rstrip(".")
    if not _NUMBER.fullmatch(s):
        return None
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def _math_verify(predicted: str, reference: str) -> bool:
    from math_verify import parse, verify  # imported on first use: sympy and its LaTeX parser cost ~1 s

    seconds = MATH_VERIFY_TIMEOUT if threading.current_thread() is threading.main_thread() else None
    gold = parse(f"${reference}$", parsing_timeout=seconds)
    if not gold:
        return predicted.strip() == reference.strip()
    guess = parse(f"${predicted}$", parsing_timeout=seconds)
    return bool(guess) and verify(gold, guess, timeout_seconds=seconds)


def answers_equal(predicted: str | None, reference: str) -> bool:
    """Whether a stated answer equals the reference: exactly as numbers when both are plain numbers, else by
    math-verify (a reference it cannot parse is compared as a string)."""
    if predicted is None or not predicted.strip():
        return False
    p, r = as_number(predicted), as_number(reference)
    if p is not None and r is not None:
        return p == r
    return _math_verify(predicted, reference)
