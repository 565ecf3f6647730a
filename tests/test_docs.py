"""The documentation site (mkdocs.yml, docs/) and the README: the site builds with warnings as errors, every
internal link of every built page resolves, the search index lists every page, headless Chromium renders the
key pages with the Material theme, the README stays short and its Python example runs as written, and every
``sqm`` command line shown in a bash block parses with the real ``sqm`` parser."""
from __future__ import annotations

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
            else:
                build_parser().parse_args(words[1:])
        except SystemExit as e:
            if e.code:
                errors.append(f"{command}: exit {e.code}")
    return errors


def test_a_bad_command_is_found(capsys):
    assert parse_errors(["sqm pca --components 2", "sqm pca [--backend mpyc]", "sqm nonsense", "sqm bench psi",
                         "python -m bench psi --ids 400", "python -m bench psi --no-such-option"]) == [
        "sqm pca [--backend mpyc]: exit 2", "sqm nonsense: exit 2", "sqm bench psi: exit 2",
        "python -m bench psi --no-such-option: exit 2"]


def test_every_sqm_command_shown_parses(capsys):
    commands = {f"{md.relative_to(ROOT)}: {c}": c for md in markdown_files()
                for c in sqm_commands(md.read_text(encoding="utf-8"))}
    assert len(commands) >= 40
    errors = [f"{where} -> {err}" for where, c in commands.items() for err in parse_errors([c])]
    assert errors == []
