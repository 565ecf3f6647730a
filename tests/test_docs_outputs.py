"""Every output the documentation shows is what its command prints today.

Scope: ``README.md``, ``docs/tutorials/*.md`` and ``docs/how-to/*.md`` (the benchmarks pages are rebuilt by their
own benches).  Every ``text``, ``json`` or ``console`` block there, and every fence that names no language,
carries a marker on the line above its fence:

- ``<!-- output -->``: the block is what the nearest ``bash`` (or ``python``) block above it prints on stdout,
  run in a fresh folder after the page's setup blocks that come before that command, in order.  The command
  states its seed, so the figures are exact; stderr (progress, warnings) is not compared.
- ``<!-- output-setup -->`` (above a ``bash`` block): the block makes what the page's outputs need (files, a
  job file); it runs, its output is not compared.
- ``<!-- output: checked by tests/NAME.py -->``: what another test prints anyway (an excerpt of a real-process
  run, checked line by line with :func:`excerpt_missing`; one log line wrapped, compared word for word); that
  test reads the block through :func:`blocks` and names the page.
- ``<!-- not-output: REASON -->``: not an output (a file's lines, a job file, commands to type).

What legitimately varies is written in the docs as ``...``, and only where these rules put it (the test applies
the same rules to what the command prints, so nothing else may vary):

- the fresh folder the command ran in (a path under it shows as ``.../demo/bank.csv``);
- durations: a table's ``seconds`` column and any ``N s``;
- a loopback port ``127.0.0.1:N`` in a command runs on a port of this test worker's own range (outputs show no
  port).

Lines are compared with runs of spaces taken as one (a table's column widths follow its widest cell).

Regenerate every ``<!-- output -->`` block after a change that is meant to change what a command prints, from
the repository root with ``$SQM_DATA`` set: ``python -m tests.test_docs_outputs --record``.
"""
from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECORD_COMMAND = "python -m tests.test_docs_outputs --record"
OUTPUT_LANGS = ("text", "json", "console", "")  # "": a fence that names no language
COMMAND_LANGS = ("bash", "python")
OUTPUT, SETUP = "<!-- output -->", "<!-- output-setup -->"
ELSEWHERE = re.compile(r"<!-- output: checked by (tests/\w+\.py) -->")
NOT_OUTPUT = re.compile(r"<!-- not-output: \S.* -->")
MASK = "..."
TIMEOUT = 300
# pages whose output-like blocks are not marked yet (keep this empty: mark their blocks instead)
UNMARKED_PAGES: tuple[str, ...] = ()


def pages() -> list[Path]:
    docs = ROOT / "docs"
    return [ROOT / "README.md", *sorted((docs / "tutorials").glob("*.md")), *sorted((docs / "how-to").glob("*.md"))]


@dataclass
class Block:
    page: Path
    lang: str
    line: int  # 1-based line of the opening fence
    end: int  # 1-based line of the closing fence
    body: str
    marker: str  # the HTML comment on the line above the fence, or ""
    setup: list[Block] = field(default_factory=list)  # for an output: the setup blocks before its command
    command: Block | None = None  # for an output: the command block above it

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, each with the marker comment on the line above its fence."""
    lines = page.read_text(encoding="utf-8").split("\n")
    found, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        above = lines[i - 1].strip() if i else ""
        found.append(Block(page, m.group(1), i + 1, j + 1, "\n".join(lines[i + 1:j]),
                           above if above.startswith("<!--") else ""))
        i = j + 1
    return found


def outputs(page: Path) -> list[Block]:
    """The page's ``<!-- output -->`` blocks, each with its command block and the setup blocks before it."""
    out, setup, command = [], [], None
    for b in blocks(page):
        if b.lang in COMMAND_LANGS:
            if b.marker == SETUP:
                setup.append(b)
            command = b
        elif b.marker == OUTPUT:
            assert command is not None, f"{b.where}: an <!-- output --> block with no bash or python block above"
            b.command, b.setup = command, [s for s in setup if s is not command]
            out.append(b)
    return out


def unmarked() -> list[str]:
    """Output-like blocks (text, json, console) in scope that carry none of the markers."""
    return [b.where for p in pages() if str(p.relative_to(ROOT)) not in UNMARKED_PAGES for b in blocks(p)
            if b.lang in OUTPUT_LANGS and not _marked(b)]


def _marked(b: Block) -> bool:
    return b.marker == OUTPUT or bool(ELSEWHERE.fullmatch(b.marker) or NOT_OUTPUT.fullmatch(b.marker))


# ------------------------------------------------------------------------------------------ normalisation
def _mask_seconds_columns(lines: list[str]) -> list[str]:
    """A table's ``seconds`` column (its header above a dashed rule or a row) shows as ``...``: every number
    under the header's span, in the rows that follow it up to a blank or indented line."""
    out, span = [], None
    for line in lines:
        if span is not None and (not line.strip() or line[0].isspace()):
            span = None
        if span is not None and not re.fullmatch(r"[-\s]+", line):
            for m in re.finditer(r"\S+", line):
                if m.start() < span[1] and m.end() > span[0] and re.fullmatch(r"\d+(\.\d+)?(e[-+]?\d+)?", m.group()):
                    line = line[:m.start()] + MASK.rjust(m.end() - m.start()) + line[m.end():]
        h = re.search(r"(?<!\S)seconds(?!\S)", line)
        if h and not line[0].isspace():
            span = (h.start(), h.end())
        out.append(line)
    return out


def normalise(text: str, folder: str | None = None) -> str:
    """What a command printed, with what legitimately varies written as the docs write it (see the module
    docstring): the run's folder, durations, a table's seconds column."""
    if folder:
        for f in sorted({folder, os.path.realpath(folder)}, key=len, reverse=True):
            text = text.replace(f, MASK)
    text = re.sub(r"(?<![\w.])\d+(\.\d+)? s\b", f"{MASK} s", text)
    lines = _mask_seconds_columns([line.rstrip() for line in text.split("\n")])
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def _key(text: str) -> list[str]:
    lines = [re.sub(r"\s+", " ", line.strip()) for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def difference(shown: str, printed: str) -> str | None:
    """None when the block shows what was printed (runs of spaces taken as one), else a unified diff."""
    a, b = _key(shown), _key(printed)
    if a == b:
        return None
    return "\n".join(difflib.unified_diff(a, b, "the docs show", "the command prints", lineterm="", n=1))


def excerpt_missing(shown: str, printed: str) -> list[str]:
    """The lines of an excerpt (``...`` lines skipped) that ``printed`` does not hold in that order ([] when all
    do); runs of spaces count as one."""
    have, k, missing = _key(printed), 0, []
    for line in _key(shown):
        if line == MASK:
            continue
        try:
            k = have.index(line, k) + 1
        except ValueError:
            missing.append(line)
    return missing


# ------------------------------------------------------------------------------------------ running
def _ports(text: str) -> str:
    """Loopback ports of a command moved into the top of this worker's ``$SQM_LOCAL_PORTS`` range, so parallel
    test workers never share one (unchanged without the variable)."""
    span = os.environ.get("SQM_LOCAL_PORTS", "")
    if not re.fullmatch(r"\d+-\d+", span):
        return text
    hi = int(span.split("-")[1])
    return re.sub(r"127\.0\.0\.1:(\d+)", lambda m: f"127.0.0.1:{hi - 99 + int(m.group(1)) % 100}", text)


def run(block: Block, folder: str) -> str:
    """Run an output block's setup and command in ``folder``; what the command printed on stdout, normalised."""
    assert block.command is not None
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    log = os.path.join(folder, ".setup.log")
    if block.command.lang == "python":
        argv = [sys.executable, "-c", block.command.body]
        assert not block.setup, f"{block.where}: a python command takes no setup blocks"
    else:
        script = ["set -euo pipefail"]
        script += [f"{{\n{_ports(s.body)}\n}} >> {log!r} 2>&1" for s in block.setup]
        script.append(_ports(block.command.body))
        argv = ["bash", "-c", "\n".join(script)]
    proc = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if proc.returncode != 0:
        setup = Path(log).read_text()[-2000:] if os.path.exists(log) else ""
        raise AssertionError(f"{block.where}: the command at {block.command.where} exited {proc.returncode}\n"
                             f"{setup}{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return normalise(proc.stdout, folder)


def every_output() -> list[Block]:
    return [b for p in pages() for b in outputs(p)]


# ------------------------------------------------------------------------------------------ tests
def test_every_output_block_is_marked():
    """No output-like block escapes: each is checked here, checked by a named test, or says it is no output."""
    assert unmarked() == [], ("mark each block <!-- output -->, <!-- output: checked by tests/NAME.py --> or "
                              "<!-- not-output: REASON --> (see tests/test_docs_outputs.py)")
    assert len(every_output()) >= 4


def test_excerpts_name_a_test_that_checks_them():
    for p in pages():
        for b in blocks(p):
            m = ELSEWHERE.fullmatch(b.marker)
            if m:
                test = (ROOT / m.group(1)).read_text(encoding="utf-8")
                assert "test_docs_outputs" in test and p.name in test, f"{b.where}: {m.group(1)} does not check it"


def test_the_rules_mask_only_what_varies(tmp_path):
    printed = ("method   utility  seconds    bytes\n-------  -------  -------  -------\n"
               "SQM       948.7    0.685  2,436\ncentral   943.3   12.113        -\n  a note 1.25 0.685\n"
               f"client 1 ({tmp_path}/demo/bank.csv): rows 560\n(5, 64) components in 0.6 s, 2,436,714 bytes sent\n\n")
    assert normalise(printed, str(tmp_path)).split("\n") == [
        "method   utility  seconds    bytes", "-------  -------  -------  -------", "SQM       948.7      ...  2,436",
        "central   943.3      ...        -", "  a note 1.25 0.685", "client 1 (.../demo/bank.csv): rows 560",
        "(5, 64) components in ... s, 2,436,714 bytes sent"]


def test_a_changed_figure_is_found():
    shown = "SQM   948.7287  1.2499\nnon-private  991.0917"
    assert difference(shown, "SQM 948.7287   1.2499\nnon-private  991.0917\n") is None  # spacing only
    diff = difference(shown, "SQM   950.9867  1.2499\nnon-private  991.0917")
    assert diff is not None and "-SQM 948.7287 1.2499" in diff and "+SQM 950.9867 1.2499" in diff
    assert difference(shown, shown + "\nan extra line") is not None
    assert excerpt_missing("a\n...\nc", "a\nb\nc\n") == [] and excerpt_missing("c\n...\na", "a\nb\nc") == ["a"]


def test_blocks_find_their_command_and_setup(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("<!-- output-setup -->\n```bash\nmkdir d && cd d\n```\n\n```bash\necho hi\n```\n\n<!-- output -->\n"
                    "```text\nhi\n```\n<!-- not-output: a file -->\n```text\nx\n```\n```json\n{}\n```\n")
    out = outputs(page)
    assert [(b.line, b.command.line, [s.line for s in b.setup]) for b in out] == [(11, 6, [2])]
    assert [b.line for b in blocks(page) if b.lang in OUTPUT_LANGS and not b.marker] == [18]
    assert run(out[0], str(tmp_path)) == "hi"


@pytest.mark.slow
@pytest.mark.parametrize("block", every_output(), ids=lambda b: b.where)
def test_the_docs_show_what_the_command_prints(block, tmp_path):
    printed = run(block, str(tmp_path))
    diff = difference(block.body, printed)
    assert diff is None, (f"{block.where}: the output block (lines {block.line}-{block.end}) differs from what the "
                          f"command at {block.command.where} prints:\n{diff}\nIf the change is meant, regenerate "
                          f"every output block from the repository root: {RECORD_COMMAND}")


# ------------------------------------------------------------------------------------------ --record
def record() -> None:
    """Run every output block's command and write what it printed (normalised) into the page."""
    done = 0
    for page in pages():
        found = outputs(page)
        if not found:
            continue
        lines = page.read_text(encoding="utf-8").split("\n")
        for b in reversed(found):  # bottom up: earlier line numbers stay valid
            with tempfile.TemporaryDirectory() as folder:
                printed = run(b, folder)
            lines[b.line:b.end - 1] = printed.split("\n")
            done += 1
            print(f"{b.where}: {'unchanged' if difference(b.body, printed) is None else 'rewritten'}")
        page.write_text("\n".join(lines), encoding="utf-8")
    print(f"recorded {done} output blocks")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit(f"usage: {RECORD_COMMAND}  (rewrites every <!-- output --> block of the docs)")
    record()
