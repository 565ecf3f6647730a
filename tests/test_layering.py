"""The layering (issue 26): one import package, ``sqm``, whose rooms import one way.  Every import in every module,
those inside functions included, read from the source, obeys the table below; the documentation's picture of
the structure (docs/explanation/code-layout.md, linked from the README) is the same table."""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROOMS = ("runtime", "mechanism", "framework", "data", "methods", "cli")
# room -> the rooms it may import (besides itself); bench/ (not installed) may import any room
ALLOWED = {
    "runtime": set(),
    "mechanism": {"runtime"},
    "framework": {"runtime", "mechanism"},
    "data": {"runtime", "framework"},
    "methods": {"runtime", "mechanism", "framework", "data"},
    "cli": {"runtime", "mechanism", "framework", "data", "methods"},
}
# the front door: sqm/__init__.py names the public API (as strings, imported on first use); sqm/__main__.py is
# ``python -m sqm``, the command for an environment without the console script
FRONT_DOOR = {"sqm/__init__.py", "sqm/__main__.py"}


def _imports(path: pathlib.Path):
    """(line, dotted module) of every absolute import in the file, ``from sqm.x import y`` as ``sqm.x.y``."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                yield node.lineno, f"{node.module}.{a.name}"


def _room(dotted: str) -> str | None:
    parts = dotted.split(".")
    return parts[1] if parts[0] == "sqm" and len(parts) > 1 and parts[1] in ROOMS else None


def _room_of(path: pathlib.Path) -> str:
    return path.relative_to(ROOT / "sqm").parts[0]


def _package_files():
    return sorted(p for p in (ROOT / "sqm").rglob("*.py") if str(p.relative_to(ROOT)) not in FRONT_DOOR)


def test_the_readme_draws_the_same_rooms():
    """The README's table of rooms (room | what it holds | may import) is this file's table."""
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `sqm\.(\w+)` \| [^|]+ \| ([^|]+) \|$", text, re.M)
    drawn = {room: set() if deps.strip() == "-" else set(ROOMS[:ROOMS.index(room)]) if deps.strip() == "all of the above"
             else {d.strip() for d in deps.split(",")} for room, deps in rows}
    assert drawn == ALLOWED


def test_one_top_level_package_and_the_benchmarks_beside_it():
    """The source tree holds one import package (``sqm``) and ``bench`` (shipped with a checkout, not installed)."""
    tops = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert tops == {"sqm", "bench"}, tops
    assert {p.name for p in (ROOT / "sqm").iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(ROOMS)


def test_every_import_follows_the_layers():
    bad = []
    for path in _package_files():
        room = _room_of(path)
        for line, mod in _imports(path):
            target = _room(mod)
            if mod.split(".")[0] == "bench":
                bad.append(f"{path.relative_to(ROOT)}:{line} imports the benchmarks ({mod})")
            elif target is None and mod.split(".")[0] == "sqm" and mod not in ("sqm.__version__",):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports the front door ({mod}): import the room")
            elif target and target != room and target not in ALLOWED[room]:
                bad.append(f"{path.relative_to(ROOT)}:{line} ({room}) imports {mod} ({target})")
    assert not bad, "\n".join(bad)


def test_the_table_can_fail():
    """The reader sees imports inside functions too (a lazy import is still a dependency), and names the room."""
    src = ROOT / "sqm" / "__main__.py"
    assert any(_room(m) == "cli" for _, m in _imports(src))
    assert _room("sqm.framework.spec.JobSpec") == "framework" and _room("sqm.__version__") is None


def test_the_face_is_imported_by_nothing_but_the_benchmarks_and_itself():
    users = {str(p.relative_to(ROOT)) for p in _package_files() if _room_of(p) != "cli"
             for _, m in _imports(p) if _room(m) == "cli"}
    assert not users, users


LIBRARY_ONLY = ("mechanism", "framework", "data", "methods")
# the runtime's party process and its certificate tool are programs of their own (python -m sqm.runtime.party,
# python -m sqm.runtime.certs): their argparse and their output are not the face's
RUNTIME_PROGRAMS = {"sqm/runtime/party.py", "sqm/runtime/certs.py"}


@pytest.mark.parametrize("room", LIBRARY_ONLY + ("runtime",))
def test_library_rooms_have_no_argparse_no_tqdm_no_print(room):
    """The methods, the framework, the data sets and the mechanism are a library: no argparse, no progress bar of
    their own (they ask :func:`sqm.framework.progress.make_bar`), no printing."""
    bad = []
    for path in sorted((ROOT / "sqm" / room).rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in RUNTIME_PROGRAMS:
            continue
        tops = {m.split(".")[0] for _, m in _imports(path)}
        bad += [f"{rel} imports {t}" for t in tops & {"argparse", "tqdm"}]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                bad.append(f"{rel}:{node.lineno} prints")
    assert not bad, bad


def test_the_mechanism_sends_no_frame():
    """The mechanism declares what it exchanges (``ctx.broadcast`` with a :mod:`sqm.runtime.wire` check); frames,
    sockets, sessions and MPyC are the runtime's."""
    bad = []
    for path in sorted((ROOT / "sqm" / "mechanism").rglob("*.py")):
        for line, mod in _imports(path):
            if mod.split(".")[0] in ("socket", "ssl", "asyncio", "mpyc", "struct") or mod.startswith(
                    ("sqm.runtime.session", "sqm.runtime.liveness", "sqm.runtime.mpyc_backend",
                     "sqm.runtime.sum_exchange", "sqm.runtime.masked_sum")):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {mod}")
        text = path.read_text()
        bad += [f"{path.relative_to(ROOT)} calls {c}" for c in ("._lap(", ".transfer(", ".send_message(") if c in text]
    assert not bad, bad


def _module_graph(folder: pathlib.Path, dotted: str) -> dict[str, set[str]]:
    graph = {}
    for path in folder.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(dotted + "."):
                deps.add(node.module[len(dotted) + 1:].split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == dotted:
                deps |= {a.name for a in node.names}
        graph[path.stem] = deps - {path.stem}
    return graph


# a method delegating to the module that implements it (Polynomial.compensate -> sqm.mechanism.compensation)
ALLOWED_CYCLES = {frozenset({"compensation", "polynomial"})}


def test_the_mechanism_has_no_import_circle():
    """Issue 26: the accounting circle (accounting <-> events <-> pbm) is opened: the formulas live in
    sqm.mechanism.rdp, a leaf; no other cycle among the mechanism's modules but the one allowed above."""
    graph = _module_graph(ROOT / "sqm" / "mechanism", "sqm.mechanism")
    cycles = set()

    def walk(start, node, path):
        for d in graph.get(node, ()):
            if d == start:
                cycles.add(frozenset(path))
            elif d not in path and d in graph and len(path) < 8:
                walk(start, d, path + [d])

    for m in graph:
        walk(m, m, [m])
    assert cycles <= ALLOWED_CYCLES, [sorted(c) for c in cycles - ALLOWED_CYCLES]
    assert not graph["rdp"] & {"accounting", "events", "pbm", "ledger"}


def test_only_the_runtime_touches_mpyc():
    """MPyC is the runtime's business: no module outside sqm.runtime imports it (the runtime's private hooks, e.g.
    PartyContext._lap, are not called from outside it either)."""
    bad = []
    files = [p for p in _package_files() if _room_of(p) != "runtime"] + sorted((ROOT / "bench").rglob("*.py"))
    for path in files:
        text = path.read_text()
        bad += [f"{path.relative_to(ROOT)} imports mpyc" for _, m in _imports(path) if m.split(".")[0] == "mpyc"]
        bad += [f"{path.relative_to(ROOT)} calls _lap" for _ in [0] if "._lap(" in text]
    assert not bad, bad


def test_the_public_api_is_flat_and_every_name_resolves():
    import sqm

    assert sqm.__all__ == sorted(sqm.__all__[:-1]) + ["__version__"]
    for name in sqm.__all__:
        assert getattr(sqm, name) is not None, name
    assert sqm.SQMPCA.__module__ == "sqm.methods.pca.estimator"
    with pytest.raises(AttributeError):
        sqm.no_such_name  # noqa: B018
