"""Packaging and logging (issue 14, parts 2 and 3): the core install runs PCA and logistic regression without the
optional extras, ``python -m sqm`` / ``python -m sqm`` work, -v/-q are accepted by every command, and party
processes prefix their lines with their role at the level the user chose."""
from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sqm.mpc.net import logs

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

# a meta-path finder that makes the optional extras' modules missing, as in a core install
BLOCKER = """
import importlib.abc, sys
BLOCKED = {"torch", "opacus", "matplotlib", "pyarrow"}
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Blocker())
"""

WITHOUT_EXTRAS = BLOCKER + """
from sqm.cli.command import main
for argv in (["pca", "--dataset", "iris", "--components", "2", "--backend", "plain", "-q", "--seed", "1"],
             ["logreg", "--epochs", "1", "--backend", "plain", "-q", "--seed", "1"],
             ["pbm-vfl", "--backend", "plain", "-q"]):
    code = main(argv)
    print(f"=== {argv[0]} exit {code}", flush=True)
    print(f"=== {argv[0]} exit {code}", file=sys.stderr, flush=True)
assert not BLOCKED & set(sys.modules), BLOCKED & set(sys.modules)
"""


def _sections(text: str) -> dict:
    out, cur = {}, []
    for line in text.splitlines():
        if line.startswith("=== "):
            _, name, _, code = line.split()
            out[name] = (int(code), "\n".join(cur))
            cur = []
        else:
            cur.append(line)
    return out


def test_pca_and_logreg_run_without_torch_opacus_matplotlib_pyarrow():
    res = subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS], capture_output=True, text=True, env=ENV,
                         cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    out, err = _sections(res.stdout), _sections(res.stderr)
    assert out["pca"][0] == 0 and "SQM (plain)" in out["pca"][1] and "central DP" in out["pca"][1]
    code, text = out["logreg"]
    assert code == 0, err["logreg"][1]
    assert "DPSGD (not run)" in text and "non-private" in text
    assert "not run: DPSGD (Opacus) needs the [vfl] extra: pip install 'sqm-vfl[vfl]'" in text
    code, text = err["pbm-vfl"]  # needs torch: a clear error naming the extra, no traceback
    assert code == 2 and "sqm: error: sqm pbm-vfl needs the [vfl] extra: pip install 'sqm-vfl[vfl]'" in text
    assert "Traceback" not in res.stderr


def test_missing_extra_is_an_import_error_naming_the_extra():
    from sqm.framework.extras import MissingExtra, missing, require

    with pytest.raises(ValueError, match="unknown extra 'gpu'"):
        require("gpu", "x")
    assert missing("parquet", "x") is None  # installed here (pyarrow)
    with pytest.raises(MissingExtra, match=r"^--y needs the \[vfl\] extra: pip install 'sqm-vfl\[vfl\]' "
                                           r"\(no module named 'no_such_module_sqm'\)$"):
        require("vfl", "--y", ("no_such_module_sqm",))
    assert issubclass(MissingExtra, ImportError)


def test_python_m_sqm_and_the_console_script_run_the_sqm_command(tmp_path):
    script = os.path.join(os.path.dirname(sys.executable), "sqm")
    procs = {m: subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                                 env=ENV) for m, argv in (("python -m sqm", [sys.executable, "-m", "sqm", "--help"]),
                                                          ("sqm", [script, "--help"]))}  # side by side
    for m, p in procs.items():
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, (m, err)
        assert out.startswith("usage: sqm ") and "pca" in out and "-v, --verbose" in out, m


@pytest.mark.slow
def test_the_wheel_installs_one_top_level_package_and_its_console_script(tmp_path):
    """Issue 26: ``pip install .`` puts ``sqm`` (and the ``sqm`` script) into site-packages, nothing else: no
    ``bench``, ``tests`` or generic names; the output schema and the typing marker ship inside it."""
    import zipfile

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                    str(tmp_path), root], check=True, env=ENV, cwd=tmp_path, timeout=600)
    (wheel,) = tmp_path.glob("sqm_vfl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"sqm"}, tops
    assert {"sqm/cli/output.schema.json", "sqm/py.typed", "sqm/apps/pca/estimator.py"} <= set(names)
    meta = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "sqm = sqm.cli.command:main" in zipfile.ZipFile(wheel).read(meta).decode()


def _commands(parser: argparse.ArgumentParser, path=()):
    yield path, parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, child in a.choices.items():
                yield from _commands(child, path + (name,))


def test_every_command_accepts_v_and_q():
    from bench.command import build_parser as bench_parser
    from sqm.cli.command import build_parser

    commands = list(_commands(build_parser()))
    names = {" ".join(p) for p, _ in commands}
    assert {"", "pca", "logreg", "linreg", "pbm-vfl", "hdp-vfl", "budget", "demo"} <= names
    benches = [(("bench",) + p, parser) for p, parser in _commands(bench_parser())]  # python -m bench NAME
    assert {"bench", "bench faults"} <= {" ".join(p) for p, _ in benches}
    commands += benches
    for path, parser in commands:
        text = parser.format_help()
        assert "-v, --verbose" in text and "-q, --quiet" in text, " ".join(path)


@pytest.mark.parametrize("argv, level, quiet", [
    ([], logs.NOTICE, 0),
    (["-q"], logging.WARNING, 1),
    (["-qq"], logging.ERROR, 2),
    (["--quiet", "--quiet"], logging.ERROR, 2),
    (["-v"], logging.INFO, 0),
    (["-vv"], logging.DEBUG, 0),
])
def test_v_and_q_before_and_after_the_command_add_up(argv, level, quiet):
    from sqm.cli.command import build_parser
    from sqm.cli.options import log_level

    p = build_parser()
    for where in ("before", "after", "split"):
        if where == "before":
            full = argv + ["pca"]
        elif where == "after":
            full = ["pca"] + argv
        else:  # -vv as "-v pca -v"
            flags = [f for a in argv for f in ([a] if a.startswith("--") else [f"-{c}" for c in a[1:]])]
            full = flags[:1] + ["pca"] + flags[1:]
        args = p.parse_args(full)
        assert log_level(args) == level and args.quiet == quiet, full
    args = p.parse_args(["-q", "budget", "-q", "list", "-q"])  # a nested command: three levels add up
    assert log_level(args) == logging.ERROR and args.quiet == 3


def test_quiet_hides_info_and_verbose_shows_it(capsys):
    from sqm.cli.options import log_level
    from sqm.cli.command import build_parser
    from sqm.mpc.net import logs

    p = build_parser()
    try:
        logs.configure(log_level(p.parse_args(["pca", "-q"])))
        logging.getLogger("sqm.mpc.net.launch").info("an info line")
        logging.getLogger("sqm.mpc.net.launch").warning("a warning line")
        assert logs.party_level_args() == ["--log-level", "WARNING"]
        err = capsys.readouterr().err
        assert "an info line" not in err and "a warning line" in err
        logs.configure(log_level(p.parse_args(["-v", "pca"])))
        logging.getLogger("sqm.mpc.net.launch").info("an info line")
        assert logs.party_level_args() == ["--log-level", "INFO"]
        assert "an info line" in capsys.readouterr().err
    finally:
        logs.configure(logging.WARNING)


def _party(*extra):
    cmd = [sys.executable, "-m", "sqm.mpc.net.party", "--program", "/nonexistent", "--index", "2", "--parties",
           "127.0.0.1:9001", "--job-id", "0" * 32, "--insecure-pcg64-shares", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=60)


def test_a_party_prefixes_its_lines_with_its_role_at_the_level_it_is_given():
    res = _party()
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and lines == [
        "[client 2] sqm.mpc.net.party: WARNING: party 2 draws its share randomness from PCG64 "
        "(--insecure-pcg64-shares, benchmark only): its shares are not cryptographically hidden",
        "[client 2] sqm.mpc.net.party: error: need at least 2 parties (a server and a client)"], res.stderr
    res = _party("--log-level", "ERROR")  # sqm -qq: the warning is not shown, the error is
    assert res.returncode == 2
    assert res.stderr.strip() == "[client 2] sqm.mpc.net.party: error: need at least 2 parties (a server and a client)"


@pytest.mark.slow
def test_verbose_real_run_shows_each_partys_lines_with_its_role(capfd):
    from sqm.cli.command import main

    try:
        assert main(["-v", "pca", "--dataset", "iris", "--parties", "2", "--components", "2", "--seed", "3"]) == 0
    finally:
        from sqm.mpc.net import logs

        logs.configure(logging.WARNING)
    err = capfd.readouterr().err
    for role in ("server", "client 1", "client 2"):
        assert f"[{role}] connected to 2 parties in " in err, err
        assert any(ln.startswith(f"[{role}] finished in ") and " bytes; phases " in ln for ln in err.splitlines())
    assert "starting 3 party processes (server and 2 clients)" in err
