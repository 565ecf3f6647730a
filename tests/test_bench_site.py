"""The benchmarks pages (docs/benchmarks.md, docs/benchmarks/*.md) and ``python -m bench site``: every image they
show exists and is a valid PNG or SVG, every generated table equals what the generator makes from the stored
JSON (so a page cannot drift from its figures: ``python -m bench site`` rewrites them), each of the four tasks has
its table of epsilon against quality and time, and every peers' row names its source.  No benchmark is re-run."""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench import site, site_plots, site_tables

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "docs" / p for p in site.PAGES]
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
QUALITY = re.compile(r"utility|accuracy|AUC|AUPRC|R\^2", re.I)
TIME = re.compile(r"\btime\b|\bs\)|seconds|\bms\b", re.I)


def images(page: Path) -> list[Path]:
    return [(page.parent / m).resolve() for m in IMAGE.findall(page.read_text())]


def valid_image(path: Path) -> bool:
    data = path.read_bytes()
    if path.suffix == ".png":
        # the signature, then an IHDR chunk of 13 bytes with a non-zero width and height, and an IEND at the end
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        return data[:8] == PNG_MAGIC and data[12:16] == b"IHDR" and width > 0 and height > 0 and \
            data[-8:-4] == b"IEND"
    if path.suffix == ".svg":
        return ET.fromstring(data).tag.endswith("svg")
    return False


def block(page_text: str, name: str) -> str:
    m = re.search(rf"<!-- generated:{name} -->\n(.*?)<!-- /generated -->", page_text, re.S)
    assert m, f"no generated block {name}"
    return m.group(1)


def header_and_rows(md: str) -> tuple[list[str], list[list[str]]]:
    """The first markdown table of ``md``: its header cells and its body rows' cells."""
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    cells = [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines]
    return cells[0], cells[2:]


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    return {p: (ROOT / "docs" / p).read_text() for p in site.PAGES}


def test_every_image_the_pages_show_exists_and_is_valid():
    shown = [img for page in PAGES for img in images(page)]
    assert len(shown) >= 8
    for img in shown:
        assert img.is_file(), f"{img.relative_to(ROOT)} is shown but missing (run python -m bench site)"
        assert valid_image(img), f"{img.relative_to(ROOT)} is not a valid PNG or SVG"


def test_every_drawn_plot_is_shown_and_every_shown_plot_drawn():
    shown = {img for page in PAGES for img in images(page)}
    assert shown == {p.resolve() for p in site_plots.expected_images(site.IMG)}


def test_image_check_rejects_a_truncated_png(tmp_path):
    good = site_plots.expected_images(site.IMG)[0]
    bad = tmp_path / "bad.png"
    bad.write_bytes(good.read_bytes()[:100])
    assert valid_image(good) and not valid_image(bad)


def test_the_pages_are_what_the_generator_makes_from_the_json():
    for page, (text, made) in site.pages().items():
        assert text == made, f"docs/{page} is stale: run python -m bench site"


def test_every_block_on_the_pages_is_generated_and_every_generated_block_shown(texts):
    names = [n for t in texts.values() for n in site.block_names(t)]
    assert sorted(names) == sorted(site_tables.MAKERS), "each block once, and none unknown"


def test_a_changed_figure_makes_the_page_stale(tmp_path):
    """The equality above can fail: one stored figure changed gives a different page."""
    data = tmp_path / "data"
    data.mkdir()
    for p in site.DATA.glob("*.json"):
        (data / p.name).write_text(p.read_text())
    rec = json.loads((data / "linreg.json").read_text())
    rec["report"]["rows"][0]["sqm_r2"] += 0.5
    (data / "linreg.json").write_text(json.dumps(rec))
    stale = [page for page, (text, made) in site.pages(data=data).items() if text != made]
    assert stale == ["benchmarks.md"]


def test_an_unknown_block_is_refused():
    with pytest.raises(KeyError, match="p.md: generated block 'nope'"):
        site.render("<!-- generated:nope -->\nx\n<!-- /generated -->\n", {}, "p.md")


@pytest.mark.parametrize("task", sorted(site_tables.TASK_TABLES))
def test_each_task_has_a_table_of_epsilon_quality_and_time(texts, task):
    header, rows = header_and_rows(block(texts["benchmarks.md"], site_tables.TASK_TABLES[task]))
    assert any(re.search(r"\bepsilon\b", h) for h in header), header
    assert any(QUALITY.search(h) for h in header), header
    assert any(TIME.search(h) for h in header), header
    assert len(rows) >= 2 and all(len(r) == len(header) for r in rows)
    eps = header.index(next(h for h in header if re.search(r"\bepsilon\b", h)))
    assert len({r[eps] for r in rows}) == len(rows), "one row per epsilon (or per setting)"


@pytest.mark.parametrize("task", sorted(site_tables.PEER_TABLES))
def test_every_peer_row_carries_its_source(texts, task):
    header, rows = header_and_rows(block(texts["benchmarks.md"], site_tables.PEER_TABLES[task]))
    assert header[-1] == "source" and rows
    for r in rows:
        assert re.search(r"(paper, (Sections?|Tables?|Figures?|Appendix) \S+)|measured here", r[-1]), r


def test_every_record_says_how_it_was_obtained():
    for name, rec in site.load_all().items():
        assert rec["how"] in ("measured", "transcribed", "published"), name
        assert rec["command"] and rec["machine"], name
        if rec["how"] == "measured":
            assert len(rec["load_average"]) == 2, name


def test_bench_site_is_registered():
    from bench.command import BENCHMARKS, parse

    assert BENCHMARKS["site"] == "bench.site"
    args = parse(["site", "--check"])
    assert args.check and not args.refresh
