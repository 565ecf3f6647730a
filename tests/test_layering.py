"""The layering: one import package, ``sqm``, whose rooms import one way.  Every import in every module, those
inside functions included, read from the source, obeys the table below; no room holds an import circle; the
runtime (``sqm.mpc``) has three rooms of its own that import one way too, and names no application.  The
documentation's picture of the structure (docs/explanation/code-layout.md, linked from the README) is the same
table."""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROOMS = ("mpc", "mechanism", "framework", "data", "apps", "cli")
# room -> the rooms it may import (besides itself and the floor, sqm.errors); bench/ (not installed) may import any
ALLOWED = {
    "mpc": set(),
    "mechanism": {"mpc"},
    "framework": {"mpc", "mechanism"},
    "data": {"mpc", "framework"},
    "apps": {"mpc", "mechanism", "framework", "data"},
    "cli": {"mpc", "mechanism", "framework", "data", "apps"},
}
FLOOR = "sqm.errors"  # the errors and exit codes, below every room
# the runtime's own rooms, bottom up: each may import those below it (sqm/mpc/__init__.py, the runtime's door, any)
MPC_ROOMS = ("shares", "net", "protocols")
# the front door: sqm/__init__.py names the public API (as strings, imported on first use); sqm/__main__.py is
# ``python -m sqm``, the command for an environment without the console script
FRONT_DOOR = {"sqm/__init__.py", "sqm/__main__.py"}


def _imports(path: pathlib.Path, typing_only: bool = True):
    """(line, dotted module) of every import in the file, ``from sqm.x import y`` as ``sqm.x.y``, relative ones
    made absolute; ``typing_only=False`` leaves out those under ``if TYPE_CHECKING:`` (annotations only)."""
    tree = ast.parse(path.read_text())
    rel = path.relative_to(ROOT).with_suffix("").parts
    package = rel[:-1]
    skip = set()
    if not typing_only:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                skip |= {id(n) for b in node.body for n in ast.walk(b)}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                yield node.lineno, f"{node.module}.{a.name}"
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            base = ".".join(package[:len(package) - node.level + 1] + ((node.module,) if node.module else ()))
            for a in node.names:
                yield node.lineno, f"{base}.{a.name}"


def _room(dotted: str) -> str | None:
    parts = dotted.split(".")
    return parts[1] if parts[0] == "sqm" and len(parts) > 1 and parts[1] in ROOMS else None


def _floor(dotted: str) -> bool:
    return dotted == FLOOR or dotted.startswith(FLOOR + ".")


def _room_of(path: pathlib.Path) -> str:
    return path.relative_to(ROOT / "sqm").parts[0]


def _package_files():
    return sorted(p for p in (ROOT / "sqm").rglob("*.py") if str(p.relative_to(ROOT)) not in FRONT_DOOR)


def test_the_readme_draws_the_same_rooms():
    """The README's table of rooms (room | what it holds | may import) is this file's table."""
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `sqm\.(\w+)` \| [^|]+ \| ([^|]+) \|$", text, re.M)
    drawn = {room: set() if deps.strip() == "-"
             else set(ROOMS[:ROOMS.index(room)]) if deps.strip() == "all of the above"
             else {d.strip() for d in deps.split(",")} for room, deps in rows}
    assert drawn == ALLOWED


def test_one_top_level_package_and_the_benchmarks_beside_it():
    """The source tree holds one import package (``sqm``) and ``bench`` (shipped with a checkout, not installed)."""
    tops = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert tops == {"sqm", "bench"}, tops
    assert {p.name for p in (ROOT / "sqm").iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(ROOMS)
    assert {p.name for p in (ROOT / "sqm" / "mpc").iterdir() if (p / "__init__.py").exists()} == set(MPC_ROOMS)


def test_every_import_follows_the_layers():
    bad = []
    for path in _package_files():
        room = _room_of(path)
        for line, mod in _imports(path):
            target = _room(mod)
            if mod.split(".")[0] == "bench":
                bad.append(f"{path.relative_to(ROOT)}:{line} imports the benchmarks ({mod})")
            elif _floor(mod):
                continue
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


LIBRARY_ONLY = ("mechanism", "framework", "data", "apps")
# the runtime's party process and its certificate tool are programs of their own (python -m sqm.mpc.net.party,
# python -m sqm.mpc.net.certs): their argparse and their output are not the face's
RUNTIME_PROGRAMS = {"sqm/mpc/net/party.py", "sqm/mpc/net/certs.py"}


@pytest.mark.parametrize("room", LIBRARY_ONLY + ("mpc",))
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
    """The mechanism declares what it exchanges (``ctx.broadcast`` with a :mod:`sqm.mpc.net.wire` check); frames,
    sockets, sessions and MPyC are the runtime's."""
    bad = []
    for path in sorted((ROOT / "sqm" / "mechanism").rglob("*.py")):
        for line, mod in _imports(path):
            if mod.split(".")[0] in ("socket", "ssl", "asyncio", "mpyc", "struct") or mod.startswith(
                    ("sqm.mpc.net.session", "sqm.mpc.net.liveness", "sqm.mpc.protocols.mpyc_backend",
                     "sqm.apps.pbm_vfl.sum_exchange", "sqm.mpc.protocols.masked_sum")):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {mod}")
        text = path.read_text()
        bad += [f"{path.relative_to(ROOT)} calls {c}" for c in ("._lap(", ".transfer(", ".send_message(") if c in text]
    assert not bad, bad


def _module_of(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _module_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (any import, inside functions too, but not those for annotations
    only; ``from a import b`` counts as ``a.b`` when that is a module, else ``a``)."""
    modules = {_module_of(p): p for p in (ROOT / "sqm").rglob("*.py")}
    graph = {}
    for mod, path in modules.items():
        deps = set()
        for _, dotted in _imports(path, typing_only=False):
            while dotted and dotted not in modules:
                dotted = dotted.rpartition(".")[0]
            if dotted and dotted != mod:
                deps.add(dotted)
        graph[mod] = deps
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _inner_room(mod: str) -> str:
    """The room a module is in, the runtime's own rooms apart (sqm.mpc.net, sqm.mpc.shares, ...)."""
    parts = mod.split(".")
    if len(parts) > 2 and parts[1] == "mpc" and parts[2] in MPC_ROOMS:
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def test_no_room_holds_an_import_circle():
    """No circle of imports among a room's modules, nor among the whole package's: a room that needs another
    module's names imports them one way."""
    graph = _module_graph()
    circles = _circles(graph)
    assert not circles, circles


def test_the_circle_finder_can_fail():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_the_runtime_rooms_import_one_way():
    """Inside the runtime: the shares import nothing of the network or the protocols; the network imports the
    shares at most; the protocols both."""
    bad = []
    for mod, deps in _module_graph().items():
        if not mod.startswith("sqm.mpc.") or mod.count(".") < 2:
            continue
        room = _inner_room(mod)
        below = {f"sqm.mpc.{r}" for r in MPC_ROOMS[:MPC_ROOMS.index(room.split(".")[2]) + 1]} | {"sqm.mpc"}
        for d in deps:
            if d.startswith("sqm.mpc") and _inner_room(d) not in below:
                bad.append(f"{mod} ({room}) imports {d}")
    assert not bad, bad


# the applications' names and their own words ("vfl" as in "PBM-VFL", not as in the distribution's name, sqm-vfl)
APPLICATION_WORDS = re.compile(r"\b(pca|linreg|logreg|logistic|regression|pbm|hdp|(?<!sqm-)vfl|gradient|taylor|"
                               r"principal|embedding|estimator)\b", re.I)


def test_the_runtime_names_no_application():
    """The runtime knows no application: neither its code nor its docstrings name one (the applications build on
    its public primitives)."""
    bad = []
    for path in sorted((ROOT / "sqm" / "mpc").rglob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            for m in APPLICATION_WORDS.finditer(line):
                bad.append(f"{path.relative_to(ROOT)}:{i}: {m.group(0)}")
    assert not bad, "\n".join(bad)


def test_only_the_runtime_touches_mpyc():
    """MPyC is the runtime's business: no module outside sqm.mpc imports it (the runtime's private hooks, e.g.
    a phase timer's former ``_lap``, are not called from outside it either)."""
    bad = []
    files = [p for p in _package_files() if _room_of(p) != "mpc"] + sorted((ROOT / "bench").rglob("*.py"))
    for path in files:
        text = path.read_text()
        bad += [f"{path.relative_to(ROOT)} imports mpyc" for _, m in _imports(path) if m.split(".")[0] == "mpyc"]
        bad += [f"{path.relative_to(ROOT)} calls _lap" for _ in [0] if "._lap(" in text]
    assert not bad, bad


# a party's runtime objects as the library's code names them: what applications hold of sqm.mpc
RUNTIME_HANDLES = ("ctx", "transport", "evaluation", "self.ctx", "self.tr", "link.ctx")


def _private_runtime_uses(path: pathlib.Path) -> list[str]:
    """Where a module outside sqm.mpc reaches into the runtime's own names: ``from sqm.mpc... import _x``,
    ``module._x`` of an imported sqm.mpc module, or ``ctx._x`` (any of :data:`RUNTIME_HANDLES`)."""
    tree = ast.parse(path.read_text())
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    aliases = set()  # local names bound to sqm.mpc modules
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("sqm.mpc"):
            for a in node.names:
                if a.name.startswith("_"):
                    bad.append(f"{rel}:{node.lineno} imports {node.module}.{a.name}")
                aliases.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names if a.name.startswith("sqm.mpc") and a.asname}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = ast.unparse(node.value)
            if owner in RUNTIME_HANDLES or owner in aliases:
                bad.append(f"{rel}:{node.lineno} uses {owner}.{node.attr}")
    return bad


def test_applications_use_the_runtime_s_public_names_only():
    """No module of the library outside sqm.mpc imports a private name of the runtime, or reads a private
    attribute of a runtime module or of a party's context, transport or evaluation: applications build on the
    public primitives (:mod:`sqm.mpc.protocols.sharing`, :mod:`sqm.mpc.protocols.api`).  The benchmarks' fault
    injection (bench/) deliberately reaches inside and is not held to it."""
    bad = []
    for path in _package_files():
        if _room_of(path) != "mpc":
            bad += _private_runtime_uses(path)
    assert not bad, "\n".join(bad)


def test_the_private_use_finder_can_fail(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from sqm.mpc.protocols import sharing\nfrom sqm.mpc.protocols.evaluation import _Feed\n"
                     "async def f(ctx):\n    ctx._lap('x')\n    sharing._r\n    ctx.phase('x')\n")
    found = sorted(b.split(" ", 1)[1] for b in _private_runtime_uses(probe))
    assert found == ["imports sqm.mpc.protocols.evaluation._Feed", "uses ctx._lap", "uses sharing._r"]


def test_the_public_api_is_flat_and_every_name_resolves():
    import sqm

    assert sqm.__all__ == sorted(sqm.__all__[:-1]) + ["__version__"]
    for name in sqm.__all__:
        assert getattr(sqm, name) is not None, name
    assert sqm.SQMPCA.__module__ == "sqm.apps.pca.estimator"
    with pytest.raises(AttributeError):
        sqm.no_such_name  # noqa: B018
