"""What the package's sources say: what and why, not history.  Issue numbers belong to git's history, not to the
code (docstrings' measured figures live in docs/benchmarks.md, "Figures behind design choices")."""
from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
ISSUE = re.compile(r"\bissues? \d+", re.I)


def _hits(text: str) -> list[int]:
    return [i for i, line in enumerate(text.splitlines(), 1) if ISSUE.search(line)]


def test_the_package_names_no_issue_number():
    bad = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "sqm").rglob("*.py")) for i in _hits(p.read_text())]
    assert not bad, bad


def test_the_check_can_fail():
    assert _hits("ok\nthe connect phase (issue 43): ...\nissues 29 and 43") == [2, 3]
    assert _hits("a tissue 3 cm") == []
