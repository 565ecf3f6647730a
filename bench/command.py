"""``python -m bench NAME [options]``: the benchmarks, run from a source checkout (they are not installed).

Each benchmark is a module of this package defining ``add_arguments(parser)`` and ``cli(args) -> int``, listed in
:data:`BENCHMARKS` under the name it runs as; adding one touches its module and that table.  ``python -m bench
--help`` lists them, each with its module docstring's first line.

Building the parser imports every benchmark's module, so those modules import only argparse-level code at their
top: numpy, scikit-learn, SciPy, torch and the runtime are imported inside the functions that run a benchmark
(``python -m bench --help`` answers without them; tests/test_fast_start.py checks it).  Errors end the run as the
``sqm`` command's do (:func:`sqm.cli.command.error_exit`: the same exit codes and messages).
"""
from __future__ import annotations

import argparse
import importlib

from sqm.cli.options import add_verbosity, log_level

PROG = "python -m bench"

# python -m bench NAME -> module defining add_arguments(parser) and cli(args) -> int
BENCHMARKS = {
    "bgw-cost": "bench.bgw_cost",
    "pca-utility": "bench.pca_utility",
    "lr-utility": "bench.lr_utility",
    "linreg-utility": "bench.linreg_utility",
    "lr-gamma": "bench.lr_gamma",
    "lr-cost": "bench.lr_cost",
    "lr-defaults": "bench.lr_defaults",
    "pbm-vfl": "bench.pbm_vfl",
    "pbm-vfl-device": "bench.pbm_vfl_device",
    "pbm-vfl-seeds": "bench.pbm_vfl_seeds",
    "hdp-vfl": "bench.hdp_vfl",
    "faults": "bench.faults",
    "bounds-check": "bench.bounds_check",
    "lr-threshold": "bench.lr_threshold",
    "skellam-gdp": "bench.skellam_gdp",
    "latency": "bench.latency",
    "scale": "bench.scale",
    "psi": "bench.psi",
    "start": "bench.start",
    "peers": "bench.peers",
    "sql-memory": "bench.sql_memory",
    "site": "bench.site",
    "rounding": "bench.rounding",
    "job": "bench.job",
    "warm": "bench.warm",
    "release": "bench.release",
    "lr-tuned": "bench.lr_tuned",
    "lr-constants": "bench.lr_constants",
    "utility": "bench.utility",
    "verify": "bench.verify",
    "pbm-tuned": "bench.pbm_tuned",
    "lr-select": "bench.lr_select",
}


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m bench``: one subcommand per entry of :data:`BENCHMARKS`, each with -v/-q."""
    p = argparse.ArgumentParser(
        prog=PROG, description="Benchmarks: each prints a table and writes JSON (--json) and plots (--plot).  They "
                               "run from a source checkout (git clone, then pip install -e .), not from an "
                               "installed wheel.")
    add_verbosity(p, "_0")  # a subcommand's defaults overwrite its parent's values: log_level adds both up
    sub = p.add_subparsers(dest="bench", metavar="NAME")
    for name, module in BENCHMARKS.items():
        mod = importlib.import_module(module)
        doc = (mod.__doc__ or name).strip().splitlines()[0]
        bp = sub.add_parser(name, help=doc, description=doc)
        mod.add_arguments(bp)
        add_verbosity(bp)
        bp.set_defaults(func=mod.cli)
    return p


def parse(argv=None, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """``python -m bench ARGV``'s options as a benchmark receives them: -v/-q totalled into ``args.verbose`` and
    ``args.quiet``, the logging level they choose in ``args.log_level``, and ``args.command`` the name its JSON
    document records (``"bench NAME"``, :func:`sqm.cli.output.command_name`).  Tests call a benchmark as
    ``parse([...]).func(args)``, so its errors raise instead of becoming exit codes."""
    parser = parser or build_parser()
    args = parser.parse_args(argv)
    args.log_level = log_level(args)
    name = vars(args).pop("bench")
    args.command = f"bench {name}" if name else None
    return args


def main(argv=None) -> int:
    """Run ``python -m bench ARGV``; its exit code (0 with the help when no benchmark is named)."""
    from sqm.cli.command import dispatch

    parser = build_parser()
    return dispatch(parser, parse(argv, parser))

