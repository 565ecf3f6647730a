"""Rebuild the benchmarks pages from their stored figures: plots, per-task tables, the peers' figures.

    python -m bench site                # draw docs/benchmarks/img/*.png, rewrite the generated tables
    python -m bench site --refresh      # first re-run the quick benchmarks into docs/benchmarks/data/*.json
    python -m bench site --check        # exit 1 if a page or an image is not what the stored figures give

Every figure the benchmarks pages quote lives in ``docs/benchmarks/data/NAME.json``: a record saying how it was
obtained (``"how"``: ``measured`` by the command it names, on the machine it names; ``transcribed`` from the
project's earlier measurement notes where a re-run takes too long; ``published``: the peers' papers' figures), and
the figures themselves under ``"report"``.
The pages hold the generated tables between marker comments::

    <!-- generated:pca-table -->
    ...
    <!-- /generated -->

so that the tables are the stored figures' and nothing else (``tests/test_bench_site.py`` checks that a page equals
what this command writes).  The tables are :mod:`bench.site_tables`', the plots :mod:`bench.site_plots`' (which
reuse each benchmark's own ``plot``).
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
DATA = DOCS / "benchmarks" / "data"
IMG = DOCS / "benchmarks" / "img"
PAGES = ("benchmarks.md", "benchmarks/cost.md")  # relative to docs/: the pages holding generated blocks
BLOCK = re.compile(r"(<!-- generated:([a-z0-9-]+) -->\n)(.*?)(<!-- /generated -->)", re.S)


def load(name: str, data: Path = DATA) -> dict:
    """The stored record ``data/NAME.json`` (its ``how``, ``command``, ``machine`` and ``report``)."""
    return json.loads((data / f"{name}.json").read_text())


def load_all(data: Path = DATA) -> dict[str, dict]:
    """Every stored record, by name."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(data.glob("*.json"))}


def render(text: str, blocks: dict[str, str], page: str = "page") -> str:
    """``text`` with each generated block's body replaced by ``blocks[name]``; a block this generator does not
    know is an error (its name and page in the message)."""
    def one(m: re.Match) -> str:
        name = m.group(2)
        if name not in blocks:
            raise KeyError(f"{page}: generated block {name!r} is not one bench/site_tables.py makes")
        return m.group(1) + blocks[name].rstrip("\n") + "\n" + m.group(4)
    return BLOCK.sub(one, text)


def block_names(text: str) -> list[str]:
    """The generated blocks' names in ``text``, in order."""
    return [m.group(2) for m in BLOCK.finditer(text)]


def pages(docs: Path = DOCS, data: Path = DATA) -> dict[str, tuple[str, str]]:
    """Each page's (current text, text with its generated blocks rebuilt from ``data``)."""
    from bench.site_tables import blocks

    made = blocks(load_all(data))
    out = {}
    for page in PAGES:
        text = (docs / page).read_text()
        out[page] = (text, render(text, made, page))
    return out


def refresh(data: Path = DATA) -> None:
    """Re-run the quick benchmarks and store their figures."""
    from bench.site_refresh import refresh_all

    refresh_all(data)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--refresh", action="store_true",
                    help="first re-run the quick benchmarks (PCA utility and release time, logistic and linear "
                         "regression per epsilon, the PBM-VFL grid, the gamma sweeps; several minutes) and store "
                         "their JSON under docs/benchmarks/data; the slow ones keep their stored figures")
    ap.add_argument("--check", action="store_true",
                    help="write nothing: exit 1 if a page's generated tables differ from the stored figures' or "
                         "a plot is missing")
    ap.add_argument("--no-plots", action="store_true", help="rewrite the tables only")


def cli(args) -> int:
    from bench.site_plots import draw_all, expected_images

    if args.refresh:
        refresh()
    stale = [page for page, (old, new) in pages().items() if old != new]
    if args.check:
        missing = [str(p.relative_to(ROOT)) for p in expected_images(IMG) if not p.is_file()]
        for what in stale + missing:
            print(f"stale: {what} (run python -m bench site)")
        return 1 if stale or missing else 0
    for page, (old, new) in pages().items():
        if old != new:
            (DOCS / page).write_text(new)
            print(f"rewrote {page}")
    if not args.no_plots:
        for path in draw_all(load_all(), IMG):
            print(f"drew {path.relative_to(ROOT)}")
    return 0
