"""The documentation site (mkdocs.yml, docs/) and the README: the site builds with warnings as errors, every
internal link of every built page resolves, the search index lists every page, headless Chromium renders the
key pages with the Material theme, the README stays short and its Python example runs as written, and every
``sqm`` command line shown in a bash block parses with the real ``sqm`` parser."""
from __future__ import annotations

import argparse
import html.parser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
CHROMIUMS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# bash lines whose `sqm` command holds a shell placeholder the test cannot resolve (keep this list small)
PLACEHOLDERS: tuple[str, ...] = ()


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def built_pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if p.name != "404.html")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """``mkdocs build --strict`` into a fresh folder: any warning (a broken link, a docstring mkdocstrings
    cannot parse, a page outside the nav) fails the build."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert (out / "index.html").is_file()
    return out


# ------------------------------------------------------------------------------------------ links and search
class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.links.append(value)


def broken_links(site: Path) -> list[str]:
    """Every internal href/src of every built page that does not resolve to a file of the site."""
    broken = []
    for page in built_pages(site):
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        for link in parser.links:
            url = urllib.parse.urlsplit(link)
            if url.scheme or url.netloc or link.startswith(("#", "mailto:", "javascript:", "data:")):
                continue  # external, or an anchor on the same page
            path = urllib.parse.unquote(url.path)
            target = (site / path.lstrip("/")) if path.startswith("/") else (page.parent / path)
            target = target.resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file() or site.resolve() not in target.parents:
                broken.append(f"{page.relative_to(site)}: {link}")
    return broken


@pytest.mark.slow
def test_every_internal_link_resolves(site):
    assert len(built_pages(site)) >= 20
    assert broken_links(site) == []


def _lists_glued_to_a_paragraph(text: str) -> list[int]:
    """Lines that start a top-level list right under a paragraph's line (no blank line between): Python-Markdown
    renders them as the paragraph's text, GitHub as a list."""
    lines, hits, fence = text.split("\n"), [], False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fence = not fence
        if fence or i == 0:
            continue
        prev = lines[i - 1]
        if (re.match(r"^(- |\d+\. )", line) and prev.strip() and not prev.startswith("|")
                and not re.match(r"^(\s*[-*] |\s*\d+\. |\s+\S)", prev)):
            hits.append(i + 1)
    return hits


def test_no_list_is_glued_to_the_paragraph_above():
    """Every page's lists start after a blank line, so the site renders them as lists (four did not, and showed
    as text); the check itself finds a glued list."""
    assert _lists_glued_to_a_paragraph("Some text:\n- an item") == [2]
    assert _lists_glued_to_a_paragraph("Some text:\n\n- an item\n  - nested\n- another") == []
    pages = [p for p in sorted(DOCS.rglob("*.md")) if "site" not in p.relative_to(DOCS).parts] + [ROOT / "README.md"]
    glued = {str(p.relative_to(ROOT)): h for p in pages if (h := _lists_glued_to_a_paragraph(p.read_text("utf-8")))}
    assert glued == {}


@pytest.mark.slow
def test_nested_lists_render_nested(site):
    """The pages (like GitHub) indent a nested list by 2 spaces; the site renders it as a list inside its item
    (mdx_truly_sane_lists, nested_indent 2), not as siblings of its parent."""
    page = (site / "how-to" / "record-alignment" / "index.html").read_text(encoding="utf-8")
    parent = page.index("With <code>--solver sgd</code>:")
    child = page.index("the server deals the indicator's Shamir shares")
    between = page[parent:child]
    assert "<ul>" in between and "</li>" not in between


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "index.html").write_text('<a href="../b/">b</a><a href="../c/">c</a><a href="#x">x</a>'
                                              '<a href="https://example.org/">e</a><img src="../img.png">')
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "index.html").write_text("<p>b</p>")
    assert broken_links(tmp_path) == ["a/index.html: ../c/", "a/index.html: ../img.png"]


@pytest.mark.slow
def test_search_index_lists_every_page(site):
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    indexed = {doc["location"].split("#")[0] for doc in index["docs"]}
    pages = {str(p.relative_to(site).parent).replace(os.sep, "/") + "/" for p in built_pages(site)}
    pages = {"" if p == "./" else p for p in pages}
    assert pages <= indexed, sorted(pages - indexed)
    assert any("Skellam" in doc["text"] for doc in index["docs"])


@pytest.mark.slow
def test_reference_documents_the_public_api(site):
    """Every name of ``sqm.__all__`` has its entry (mkdocstrings' anchor ``module.name``) on a reference page."""
    import sqm

    text = "".join(p.read_text(encoding="utf-8") for p in (site / "reference").rglob("*.html"))
    missing = [n for n, mod in sqm._API.items() if f'id="{mod}.{n}"' not in text]
    assert missing == []


# ------------------------------------------------------------------------------------------ headless Chromium
def chromium() -> str | None:
    found = next((shutil.which(c) for c in CHROMIUMS if shutil.which(c)), None)
    if found is None:
        if os.environ.get("SQM_REQUIRE_CHROMIUM"):
            pytest.fail("SQM_REQUIRE_CHROMIUM is set but no chromium binary is on the PATH")
        pytest.skip("no chromium on the PATH: apt-get install chromium")
    return found


@pytest.mark.slow
@pytest.mark.parametrize("page, title", [
    ("index.html", "sqm-vfl"),
    ("tutorials/own-data/index.html", "Your own data"),
    ("reference/estimators/index.html", "SQMPCA"),
])
def test_chromium_renders_the_page(site, tmp_path, page, title):
    """Chromium loads the built page from disk and the DOM it ends with holds the page's title, the Material
    theme's content area, its navigation and its search box, and shows that the theme's scripts ran."""
    binary = chromium()
    proc = subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=3000", "--dump-dom",
                           (site / page).as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    dom = proc.stdout
    assert title in dom
    for part in ('class="md-content"', 'class="md-nav', 'class="md-search"', 'class="md-header'):
        assert part in dom, part
    assert re.search(r"<h1[^>]*>", dom)
    html_tag = re.search(r"<html[^>]*>", dom).group(0)
    assert "no-js" not in html_tag and "js-focus-visible" in html_tag, html_tag  # the theme's scripts ran


# ------------------------------------------------------------------------------------------ the README
def test_readme_is_short_and_links_into_the_docs():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 200
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert links and all((ROOT / link).is_file() for link in links), links


def test_readme_keeps_the_two_setup_commands():
    text = README.read_text(encoding="utf-8")
    assert ("python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/sqm pca --dataset digits --parties 3 "
            "--components 5 --epsilon 1 --delta 1e-5 --gamma 4096\n") in text
    assert (".venv/bin/pip install torch==2.13.0 && .venv/bin/pip install -e '.[test]' && "
            ".venv/bin/python -m pytest -q -n 3\n") in text
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".venv/bin/pip install torch==2.13.0\n" in ci and ".venv/bin/pip install -e '.[test]'\n" in ci
    assert ".venv/bin/python -m pytest -q -n 3 " in ci  # the README's test command, in parallel as there


@pytest.mark.slow
def test_readme_example_runs_as_written(tmp_path):
    """The README's Python example, through real party processes."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1 and len(blocks[0].splitlines()) <= 35
    proc = subprocess.run([sys.executable, "-c", blocks[0]], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "utility ratio" in proc.stdout and "epsilon 1.00 against the server" in proc.stdout


# ------------------------------------------------------------------------------------------ sqm commands
def bash_lines(text: str) -> list[str]:
    """The logical lines of every bash block (backslash continuations joined), here-documents left out."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        heredoc, buf = None, ""
        for line in block.splitlines():
            if heredoc is not None:
                if line.strip() == heredoc:
                    heredoc = None
                continue
            m = re.search(r"<<-?\s*'?\"?(\w+)", line)
            if m:
                heredoc = m.group(1)
            if line.rstrip().endswith("\\"):
                buf += line.rstrip()[:-1] + " "
                continue
            lines.append(buf + line)
            buf = ""
    return lines


def _is_bench(words: list[str]) -> bool:
    """``python -m bench ...`` (any interpreter): a benchmark of the checkout, not an ``sqm`` command."""
    return len(words) >= 3 and os.path.basename(words[0]).startswith("python") and words[1:3] == ["-m", "bench"]


def sqm_commands(text: str) -> list[str]:
    """Every ``sqm ...`` command of the bash blocks (``.venv/bin/sqm`` too) and every ``python -m bench ...``, split
    at ``&&``, ``;`` and ``|``."""
    commands = []
    for line in bash_lines(text):
        for part in re.split(r"&&|\|\||;|\|", line):
            words = shlex.split(part, comments=True)
            if words and (words[0] == "sqm" or words[0].endswith("/bin/sqm") or _is_bench(words)):
                commands.append(part.strip())
    return commands


def test_command_extraction():
    text = "```bash\nsqm data example demo && cd demo\nsqm pca --job j.json \\\n  --index 0   # server\n" \
           "cat > x <<'EOF'\nsqm not-a-command\nEOF\n.venv/bin/sqm pca --dataset digits\n" \
           "python -m bench psi --ids 400\npython -m compileall -q sqm bench\n```\n"
    assert sqm_commands(text) == ["sqm data example demo", "sqm pca --job j.json    --index 0   # server",
                                  ".venv/bin/sqm pca --dataset digits", "python -m bench psi --ids 400"]


def parse_errors(commands: list[str]) -> list[str]:
    from bench.command import build_parser as bench_parser
    from sqm.cli.command import build_parser

    errors = []
    for command in commands:
        if any(p in command for p in PLACEHOLDERS):
            continue
        words = shlex.split(command, comments=True)
        try:
            if _is_bench(words):
                bench_parser().parse_args(words[3:])
            elif words[:2] == ["sqm", "bench"]:  # sqm bench NAME ...: python -m bench NAME ... (sqm.cli.bench_cli)
                bench_parser().parse_args(words[2:])
            else:
                build_parser().parse_args(words[1:])
        except SystemExit as e:
            if e.code:
                errors.append(f"{command}: exit {e.code}")
    return errors


def test_a_bad_command_is_found(capsys):
    assert parse_errors(["sqm pca --components 2", "sqm pca [--backend mpyc]", "sqm nonsense", "sqm bench psi",
                         "sqm bench psi --no-such-option", "python -m bench psi --ids 400",
                         "python -m bench psi --no-such-option"]) == [
        "sqm pca [--backend mpyc]: exit 2", "sqm nonsense: exit 2", "sqm bench psi --no-such-option: exit 2",
        "python -m bench psi --no-such-option: exit 2"]


def test_every_sqm_command_shown_parses(capsys):
    commands = {f"{md.relative_to(ROOT)}: {c}": c for md in markdown_files()
                for c in sqm_commands(md.read_text(encoding="utf-8"))}
    assert len(commands) >= 40
    errors = [f"{where} -> {err}" for where, c in commands.items() for err in parse_errors([c])]
    assert errors == []


# ------------------------------------------------------------------------------------------ options named in prose
PROSE_DIRS = ("tutorials", "how-to", "reference")  # the benchmarks pages are rebuilt by their benches


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every ``sqm`` command's parser by its words (``""`` for ``sqm`` itself): ``"pca"``, ``"keys request"``,
    ``"budget show"``, ..., and every benchmark's as ``"bench NAME"`` (``python -m bench NAME``)."""
    from sqm.cli.command import build_parser

    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser, words):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    found[" ".join([*words, name])] = child
                    walk(child, [*words, name])
    top = build_parser()
    found[""] = top  # `sqm --help`, `sqm -v`
    walk(top, [])
    from bench.command import build_parser as bench_parser

    for action in bench_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update({f"bench {name}": child for name, child in action.choices.items()})
    return found


def prose(text: str) -> str:
    """A page's text outside its fenced blocks and HTML comments, its lines joined by spaces."""
    text = re.sub(r"^```.*?^```", " ", text, flags=re.S | re.M)
    return re.sub(r"\s+", " ", re.sub(r"<!--.*?-->", " ", text, flags=re.S))


def command_of(span: str, parsers: dict) -> str | None:
    """The longest command a code span ``sqm WORDS ...`` names (``.venv/bin/sqm`` too; ``python -m bench NAME``
    as ``bench NAME``), or None."""
    words = span.split()
    if _is_bench(words):
        return f"bench {words[3]}" if len(words) > 3 and f"bench {words[3]}" in parsers else None
    if not words or not (words[0] == "sqm" or words[0].endswith("/bin/sqm")):
        return None
    for k in range(len(words), 0, -1):
        if " ".join(words[1:k]) in parsers:
            return " ".join(words[1:k])
    return None


def _shown(command: str) -> str:
    return f"python -m {command}" if command.startswith("bench ") else f"sqm {command}".strip()


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return dict(parser._option_string_actions)


# what follows an option's code span when the prose claims its default: "`--x` (default 10)", "`--x N`, default 20",
# "`--x` (its own, default 10)", "`--x`, 60 s by default", "`--x` (digits by default)", "`--x moments` (the default)"
_DEFAULT = re.compile(r"^(?:\s*\(|,)[^`()]{0,30}?\bdefault:? (?P<claim>[^`);,.]*(?:`[^`]*`[^`);,.]*)*)"
                      r"|^,? \(?(?P<by>[\w.^-]+)(?: s)? by default"
                      r"|^ ?[(,] ?(?:the|its) default\b(?P<itself>)")


def _claim_holds(claim: str, action: argparse.Action) -> bool:
    """A prose default (``100``, ``1e-5``, ``10^9``, ``label``, ``the last client``) agrees with the parser: the
    same number or word as the parser's default, or the same words as the option's ``--help``.  An option whose
    parser default is None (chosen at run time: "a column named `id`, if any", "its data home's") needs only a
    ``--help`` that states its default."""
    claim = claim.replace("`", "").replace("'", "").strip()
    first = re.split(r"[ ,;:]", claim)[0]
    num = re.sub(r"^(\d+)\^(\d+)$", lambda m: str(int(m.group(1)) ** int(m.group(2))), first)
    default = action.default
    if default is None:
        return "default" in (action.help or "").lower()
    if default is not None and not isinstance(default, bool):
        try:
            if float(num) == float(default):
                return True
        except (TypeError, ValueError):
            if first == str(default):
                return True
    words = lambda s: re.sub(r"[`'\"]", "", re.sub(r"\s+", " ", s)).lower()  # noqa: E731
    said, help_ = re.escape(words(claim)), words(action.help or "")  # "(default: X" or "X (..., default)"
    return bool(re.search(rf"default:? {said}|{said}[^,;]{{0,24}}\bdefault\b", help_))


def option_spans(body: str) -> list[tuple[str, str]]:
    """Every code span of a page's prose that holds an option, with the 80 characters after it."""
    return [(m.group(1), body[m.end():m.end() + 80]) for m in re.finditer(r"`([^`]*--[a-z][\w-]*[^`]*)`", body)]


def prose_option_errors(pages: dict[str, str], parsers: dict) -> list[str]:
    """Every option named in prose (a code span holding ``--name``) that its command lacks, and every default
    claimed for one (``(default X)`` or ``X by default`` right after it) that the parser or its ``--help``
    contradicts.  A span ``sqm CMD ... --name`` names its command; a bare ``--name`` belongs to the commands the
    page names (in spans or bash blocks), and must exist in at least one of them (else in some ``sqm`` command:
    a benchmark's page names the options it passes to its parties) and hold its claim in one that has it."""
    errors = []
    for where, text in pages.items():
        named = {c for s in re.findall(r"`([^`]+)`", prose(text)) if (c := command_of(s, parsers))}
        named |= {c for s in sqm_commands(text) if (c := command_of(s, parsers))}
        candidates = sorted(named) or sorted(parsers)
        body = prose(text)
        for span, after in option_spans(body):
            command = command_of(span, parsers)
            words = span.split()
            if command is None and (words[0] == "sqm" or words[0].endswith("/bin/sqm") or _is_bench(words)):
                errors.append(f"{where}: `{span}`: no such command")
                continue
            if command is None and (words[0] in ("python", "pip", "mkdocs", "pytest") or "*" in span):
                continue  # another program's options, or a pattern (`--sqm-*`)
            names = re.findall(r"(?<![\w-])(--[a-z][\w-]*)", span)
            scope = [command] if command else candidates
            for name in names:
                if command is None and not any(name in _options(parsers[c]) for c in scope):
                    scope = [c for c in sorted(parsers) if not c.startswith("bench ")]  # an sqm option the page's
                if not any(name in _options(parsers[c]) for c in scope):  # bench passes to its parties
                    errors.append(f"{where}: `{span}`: {name} is no option of {' / '.join(map(_shown, scope))}")
            d = _DEFAULT.match(after)
            if d and len(names) == 1:
                value = re.search(re.escape(names[0]) + r"[ =](\S+)", span)
                claim = d.group("claim") or d.group("by") or (value.group(1) if value else "")
                actions = {c: a for c in scope if (a := _options(parsers[c]).get(names[0])) is not None}
                if actions and not any(_claim_holds(claim, a) for a in actions.values()):
                    errors += [f"{where}: `{span}` (default {claim}): {_shown(c)}'s default is {a.default!r} and "
                               f"its --help says {a.help!r}" for c, a in actions.items()]
    return errors


def test_prose_option_checks_find_mistakes():
    parsers = command_parsers()
    assert {"pca", "keys request", "budget show", "data example"} <= set(parsers)
    page = ("Run `sqm pca --components 2` with `--epsilon` (default 1) and `--delta` (default 1e-5); "
            "`--connect-timeout`, 60 s by default; `--min-intersection` (default 100), `--max-set-ratio R` (its own, "
            "default 10), `sqm logreg --solver auto` (the default), `--dataset` (digits by default).")
    assert prose_option_errors({"ok": page}, parsers) == []
    bad = ("Run `sqm pca --component 2`, `--epsilon` (default 2), `sqm keys make --out x`, "
           "`--connect-timeout`, 30 s by default, and `--no-such-thing`. `sqm logreg --solver sgd` (the default).")
    errors = prose_option_errors({"bad": bad}, parsers)
    assert list(dict.fromkeys(e.split(": ", 2)[1] for e in errors)) == [
        "`sqm pca --component 2`", "`--epsilon` (default 2)", "`sqm keys make --out x`",
        "`--connect-timeout` (default 30)",
        "`--no-such-thing`", "`sqm logreg --solver sgd` (default sgd)"], errors


def test_every_option_named_in_prose_exists_with_its_default():
    """Options and defaults the tutorials, how-to guides and reference pages name in their text are the
    parser's (``--help``'s): a renamed option or a changed default fails here, naming the page."""
    parsers = command_parsers()
    pages = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
             for d in PROSE_DIRS for p in sorted((DOCS / d).glob("*.md"))}
    spans = [s for t in pages.values() for s in option_spans(prose(t))]
    assert len(spans) >= 100 and sum(bool(_DEFAULT.match(after)) for _, after in spans) >= 15
    assert prose_option_errors(pages, parsers) == []
