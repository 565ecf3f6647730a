"""``sqm bench NAME [options]``: the benchmarks of a source checkout (``python -m bench NAME``), from the command.

The benchmarks ship with the repository, not with the installed package (they compare against peers and write the
documentation's figures); this launcher finds the checkout the running ``sqm`` package was imported from (the
folder above it holding ``bench/command.py``) and runs ``python -m bench`` there with the same interpreter, the
arguments passed through unchanged (``sqm bench --help`` lists the benchmarks; ``sqm bench utility --help`` one's
options).  Without a checkout it stops with a usage error saying so.
"""
from __future__ import annotations

import argparse
from pathlib import Path


def checkout_root() -> Path | None:
    """The source checkout holding the imported ``sqm`` package and its ``bench`` package, or None."""
    root = Path(__file__).resolve().parents[2]  # sqm/cli/bench_cli.py -> the folder holding sqm/
    return root if (root / "bench" / "command.py").is_file() else None


def pass_through(argv: list[str]) -> list[str]:
    """``argv`` with ``--`` after a leading ``bench`` command (global options before it allowed), so that every
    argument after it, ``--help`` included, goes to the benchmark untouched."""
    for k, a in enumerate(argv):
        if not a.startswith("-"):
            return argv[:k + 1] + ["--"] + argv[k + 1:] if a == "bench" else argv
    return argv


def register(sub) -> None:
    b = sub.add_parser("bench", add_help=False, help="run a benchmark of a source checkout (python -m bench NAME; "
                                                     "sqm bench --help lists them)",
                       description="Run python -m bench NAME [options] in the source checkout this sqm comes from.")
    b.add_argument("bench_args", nargs=argparse.REMAINDER, help="the benchmark's name and its options")
    b.set_defaults(func=run)


def run(args) -> int:
    import os
    import subprocess
    import sys

    from sqm.errors import UsageError

    root = checkout_root()
    if root is None:
        raise UsageError("sqm bench runs the benchmarks of a source checkout (bench/ beside the sqm package); this "
                         "installation has none: run it from a clone of the repository (pip install -e .)")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root)] + [p for p in [env.get("PYTHONPATH", "")] if p])
    rest = list(args.bench_args)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    return subprocess.call([sys.executable, "-m", "bench", *rest], cwd=root, env=env)
