"""The layout document (docs/explanation/code-layout.md) lists every module of every package, each under its
package's heading as a ``- `name`: what it holds`` line, and names no module that is not there."""
from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "explanation" / "code-layout.md"


def _sections(text: str) -> dict[str, set[str]]:
    """package (dotted, from a ``## `sqm.x``` or ``### `sqm.x.y``` heading) -> the modules its list names."""
    out: dict[str, set[str]] = {}
    current = None
    for line in text.splitlines():
        head = re.match(r"^#{2,3} `([\w.]+)`", line)
        if head:
            current = head.group(1)
            out.setdefault(current, set())
            continue
        item = re.match(r"^- `(\w+)`: ", line)
        if item and current:
            out[current].add(item.group(1))
    return out


def _packages() -> dict[str, set[str]]:
    """package (dotted) -> its modules (file stems, ``__init__`` aside), for every package holding modules."""
    out = {}
    for init in (ROOT / "sqm").rglob("__init__.py"):
        folder = init.parent
        mods = {p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")}
        if mods:
            out[".".join(folder.relative_to(ROOT).parts)] = mods
    return out


def test_every_module_is_in_the_layout_document_and_no_other():
    drawn = {pkg: mods for pkg, mods in _sections(DOC.read_text(encoding="utf-8")).items() if mods}
    real = _packages()
    real.pop("sqm", None)  # the package's own modules (errors, the front door) have a paragraph, not a list
    assert drawn == real


def test_the_reader_can_fail():
    text = "## `sqm.x`\n\n- `a`: one.\n- `b`: two.\n\n### `sqm.x.y`\n\n- `c`: three.\n"
    assert _sections(text) == {"sqm.x": {"a", "b"}, "sqm.x.y": {"c"}}
