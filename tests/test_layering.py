"""The layering (DEVELOPERS.md: dependencies point one way, apps -> sqm -> mpc; issue 26): every import in every
module of the four packages, those inside functions included, read from the source, obeys the table below."""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
OURS = ("mpc", "sqm", "apps", "bench")
# package -> the packages of ours it may import (besides itself)
ALLOWED = {"mpc": set(), "sqm": {"mpc"}, "apps": {"sqm", "mpc"}, "bench": {"apps", "sqm", "mpc"}}
# the documented exceptions, each one file: ``python -m sqm`` is the command (apps.cli), for environments without
# the console script
EXCEPTIONS = {("sqm/__main__.py", "apps")}


def _imports(path: pathlib.Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


def test_every_import_follows_the_layers():
    bad = []
    for pkg in OURS:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            for line, top in _imports(path):
                if top in OURS and top != pkg and top not in ALLOWED[pkg] and (rel, top) not in EXCEPTIONS:
                    bad.append(f"{rel}:{line} imports {top}")
    assert not bad, "\n".join(bad)


def test_the_table_can_fail():
    """The reader sees imports inside functions too (a lazy import is still a dependency)."""
    src = ROOT / "sqm" / "__main__.py"
    assert (src.name, "apps") in {(src.name, top) for _, top in _imports(src)}


def _module_graph(pkg: str) -> dict[str, set[str]]:
    graph = {}
    for path in (ROOT / pkg).glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(pkg + "."):
                deps.add(node.module.split(".")[1])
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == pkg:
                deps |= {a.name for a in node.names}
        graph[path.stem] = deps - {path.stem}
    return graph


# a method delegating to the module that implements it (Polynomial.compensate -> sqm.compensation)
ALLOWED_CYCLES = {frozenset({"compensation", "polynomial"})}


def test_the_mechanism_has_no_import_circle():
    """Issue 26: the accounting circle (accounting <-> events <-> pbm) is opened: the formulas live in sqm.rdp, a
    leaf; no other cycle among sqm's modules but the one allowed above."""
    graph = _module_graph("sqm")
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


def test_the_job_framework_imports_no_command_line_module():
    """Issue 26: the framework (apps.jobfile, apps.jobtask) does not import the face (options, output, progress,
    the job-mode driver apps.job_cli)."""
    face = {"options", "output", "progress", "job_cli", "cli"}
    for mod in ("jobfile", "jobtask"):
        deps = _module_graph("apps")[mod]
        assert not deps & face, (mod, deps & face)


def test_only_the_runtime_touches_mpyc():
    """Issue 26: MPyC is the runtime's business: no module of sqm, apps or bench imports it (the runtime's private
    hooks, e.g. PartyContext._lap, are not called from outside mpc either)."""
    bad = []
    for pkg in ("sqm", "apps", "bench"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            text = path.read_text()
            bad += [f"{path.relative_to(ROOT)} imports mpyc" for _, top in _imports(path) if top == "mpyc"]
            bad += [f"{path.relative_to(ROOT)} calls _lap" for _ in [0] if "._lap(" in text]
    assert not bad, bad
