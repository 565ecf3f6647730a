"""The benchmarks stand apart from the installed command: ``python -m bench NAME`` runs them from a checkout's root,
and ``sqm`` knows nothing of them (no ``bench`` subcommand, no import of ``bench``, no benchmark module named in a
string for importlib, no checkout put on ``sys.path``).  The benchmark modules import one another without a circle."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path


from bench.command import BENCHMARKS, build_parser, main

ROOT = Path(__file__).resolve().parent.parent


def _python(*argv: str) -> subprocess.CompletedProcess:
    """``python ARGV`` in the checkout's root with no PYTHONPATH: what a user of the checkout types."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def bench_references(source: str) -> list[str]:
    """What in ``source`` reaches the benchmarks: an import of ``bench``, a string naming a benchmark module
    (``"bench.faults"``, for importlib), or a change of ``sys.path``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] == "bench"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "bench":
            found.append(f"{node.lineno}: from {node.module} import")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"bench(\.\w+)+",
                                                                                             node.value):
            found.append(f"{node.lineno}: names the module {node.value!r}")
        elif isinstance(node, ast.Attribute) and node.attr in ("append", "insert", "extend") and \
                isinstance(node.value, ast.Attribute) and node.value.attr == "path" and \
                isinstance(node.value.value, ast.Name) and node.value.value.id == "sys":
            found.append(f"{node.lineno}: changes sys.path")
    return sorted(found, key=lambda ref: int(ref.split(":")[0]))


def test_the_reference_check_can_fail():
    src = ("import importlib, sys\nsys.path.append('/x')\nimportlib.import_module('bench.faults')\n"
           "from bench.common import finish\nimport bench.psi\n\"\"\"run as python -m bench faults\"\"\"\n")
    assert bench_references(src) == ["2: changes sys.path", "3: names the module 'bench.faults'",
                                     "4: from bench.common import", "5: import bench.psi"]


def test_sqm_names_no_benchmark():
    """No module of the package (the face included) imports ``bench``, names one of its modules or extends
    ``sys.path`` to reach a checkout."""
    found = [f"{p.relative_to(ROOT)}:{ref}" for p in sorted((ROOT / "sqm").rglob("*.py"))
             for ref in bench_references(p.read_text(encoding="utf-8"))]
    assert found == []


def test_sqm_bench_only_launches_the_checkouts_benchmarks():
    """``sqm bench`` is a launcher: its parser takes every argument after it as the benchmark's (no benchmark is
    imported by the package: the test above), and ``sqm --help`` names it."""
    from sqm.cli.command import parse

    p = _python("-m", "sqm", "--help")
    assert p.returncode == 0 and p.stdout.startswith("usage: sqm"), p.stderr[-2000:]
    assert re.search(r"\bbench\b", p.stdout), p.stdout
    args = parse(["bench", "psi", "--no-such-option"])
    assert args.bench_args == ["--", "psi", "--no-such-option"]


def test_python_m_bench_help_from_the_checkout_root():
    p = _python("-m", "bench", "--help")
    assert p.returncode == 0 and p.stdout.startswith("usage: python -m bench"), p.stderr[-2000:]
    listed = re.findall(r"^ {4}(\S+)", p.stdout, re.M)
    assert listed == list(BENCHMARKS)
    faults = _python("-m", "bench", "faults", "--help")
    assert faults.returncode == 0 and faults.stdout.startswith("usage: python -m bench faults")
    assert "--cases" in faults.stdout and "jobfile-engine" in faults.stdout  # the trust attacks are its cases too


def test_no_name_prints_the_help(capsys):
    assert main([]) == 0
    assert capsys.readouterr().out.startswith("usage: python -m bench")


def test_every_benchmark_module_is_in_the_table():
    """The modules defining both ``add_arguments`` and ``cli`` are exactly the table's; each benchmark's JSON
    document is named ``bench NAME`` (its ``args.command``)."""
    runnable = set()
    for p in sorted((ROOT / "bench").glob("*.py")):
        tops = {n.name for n in ast.parse(p.read_text(encoding="utf-8")).body if isinstance(n, ast.FunctionDef)}
        if {"add_arguments", "cli"} <= tops:
            runnable.add(f"bench.{p.stem}")
    assert runnable == set(BENCHMARKS.values())
    from bench.command import parse

    args = parse(["psi", "--ids", "400"], build_parser())
    assert args.command == "bench psi" and not hasattr(args, "bench") and callable(args.func)


def _bench_graph() -> dict[str, set[str]]:
    """bench module -> the bench modules it imports (inside functions too)."""
    names = {p.stem for p in (ROOT / "bench").glob("*.py")}
    graph = {}
    for p in (ROOT / "bench").glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "bench":
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("bench."):
                deps.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                deps |= {a.name.split(".")[1] for a in node.names if a.name.startswith("bench.")}
        graph[p.stem] = (deps & names) - {p.stem}
    return graph


def _cycles(graph: dict[str, set[str]]) -> set[frozenset]:
    cycles = set()

    def walk(start, node, path):
        for d in graph.get(node, ()):
            if d == start:
                cycles.add(frozenset(path))
            elif d not in path:
                walk(start, d, path + [d])

    for m in graph:
        walk(m, m, [m])
    return cycles


def test_the_benchmarks_import_without_a_circle():
    """bench.faults takes the trust attacks from bench.attacks; both take the probe from bench.probe."""
    graph = _bench_graph()
    assert _cycles(graph) == set()
    assert graph["probe"] == set() and graph["attacks"] == {"probe"} and {"attacks", "probe"} <= graph["faults"]
    assert _cycles({"attacks": {"faults"}, "faults": {"attacks"}}) == {frozenset({"attacks", "faults"})}
