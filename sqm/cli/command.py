"""The ``sqm`` command.  Its exit codes are the table in :mod:`sqm.errors` (2: bad usage, 3: refused,
4: lost party, 5: timeout, 6: a party's own data unusable, 1: other error).

Each application registers its own subcommand from its own module (a ``register(subparsers)`` function), so
adding one touches only its module and the table below.

Building the parser imports every command's module, so those modules import only argparse-level
code at their top: numpy, scikit-learn, SciPy, dp-accounting, torch and the runtime are imported inside the
functions that run a command (``sqm --help`` answers without them; tests/test_fast_start.py checks it).
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from sqm.cli import progress
from sqm.cli.options import add_verbosity, log_level
from sqm.framework.extras import MissingExtra
from sqm.mpc.net import logs
from sqm.errors import SQMError, UsageError
from sqm.errors import EXIT_USAGE, NAMES

log = logging.getLogger("sqm")

# subcommand modules: each defines register(subparsers)
COMMANDS = ["sqm.cli.demo", "sqm.cli.pca", "sqm.cli.linreg", "sqm.cli.correlation", "sqm.cli.logreg", "sqm.cli.pbm_vfl",
            "sqm.cli.hdp_vfl", "sqm.cli.score", "sqm.cli.budget", "sqm.cli.data_cli", "sqm.cli.keys", "sqm.cli.audit",
            "sqm.cli.bench_cli"]

def _available(modules):
    for name in modules:
        try:
            yield name, importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:  # the module exists but one of its imports is missing: a real error
                raise


class _Version(argparse._VersionAction):
    """argparse's ``--version`` action with the version looked up when asked for (:mod:`importlib.metadata`
    costs tens of milliseconds that building the parser for any other command need not pay)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from sqm import __version__  # importlib.metadata: paid only when asked

        self.version = f"sqm {__version__}"
        super().__call__(parser, namespace, values, option_string)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sqm",
        description="Private analytics and learning on vertically partitioned data with the Skellam "
                    "Quantization Mechanism (SQM) over a BGW secret-sharing runtime (MPyC).")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for _, mod in _available(COMMANDS):
        mod.register(sub)
    _add_verbosity(p)
    return p


def _add_verbosity(parser: argparse.ArgumentParser, depth: int = 0) -> None:
    """-v/-q on ``parser`` and on every subcommand below it (:func:`sqm.cli.options.add_verbosity`)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not any("--verbose" in a.option_strings for a in parser._actions):
        add_verbosity(parser, f"_{depth}" if subs else "")
    for a in subs:
        for child in dict.fromkeys(a.choices.values()):  # aliases map to the same parser
            _add_verbosity(child, depth + 1)


def parse(argv=None, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """``sqm ARGV``'s options as its commands receive them: -v/-q totalled into ``args.verbose`` and
    ``args.quiet`` and the logging level they choose in ``args.log_level`` (nothing configured yet).  Tests
    call a command as ``parse([...]).func(args)``, so its errors raise instead of becoming exit codes."""
    from sqm.cli.bench_cli import pass_through

    parser = parser or build_parser()
    given = list(argv if argv is not None else sys.argv[1:])
    args = parser.parse_args(pass_through(given))
    args.log_level = log_level(args)
    args.argv = given  # a job file's task block reads what was given
    return args


def given_options(parser: argparse.ArgumentParser, argv) -> set[str]:
    """The destinations of the options ``argv`` gives (not those left at their defaults): what a job file's task
    block is compared with (:func:`sqm.cli.job_cli.apply_task_block`, only for a job file with a block).  ``argv`` is
    parsed again with every default suppressed (restored after)."""
    saved: list = []

    def suppress(p):
        saved.append((p, None, dict(p._defaults)))
        p._defaults.clear()
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for child in dict.fromkeys(a.choices.values()):
                    suppress(child)
            elif a.dest != "help":
                saved.append((None, a, a.default))
                a.default = argparse.SUPPRESS

    try:
        suppress(parser)
        return set(vars(parser.parse_args(argv))) - {"command"}
    finally:
        for p, a, value in saved:
            if p is not None:
                p._defaults.update(value)
            else:
                a.default = value


def main(argv=None) -> int:
    parser = build_parser()
    return dispatch(parser, parse(argv, parser))


def dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run a parsed command (``sqm``'s, or another entry's such as ``python -m bench``): logging at the level its
    -v/-q chose, progress bars, the help when no subcommand was named, and its exit code (errors through
    :func:`error_exit`)."""
    logs.configure(args.log_level)
    progress.install(quiet=bool(getattr(args, "quiet", 0)))
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except Exception as e:  # noqa: BLE001  (what is not ours is re-raised by error_exit)
        return error_exit(e)


FIRST_LINE_MAX = 159  # a message's first line: who failed and why, readable at a glance


def short_first_line(text: str, limit: int = FIRST_LINE_MAX) -> str:
    """``text`` with its first line at most ``limit`` characters: a longer one is broken at its last clause
    boundary (``": "``, ``"; "`` or ``" ("``) that fits, the rest on an indented line of its own (nothing is
    dropped: joining the lines with a space gives ``text`` back); a line with no such boundary at all is broken at
    its last space that fits."""
    first, _, rest = text.partition("\n")
    if len(first) <= limit:
        return text
    cut = max(first.rfind(sep, 0, limit - len(sep) + 1) for sep in (": ", "; ", " ("))
    if cut < 20:
        cut = first.rfind(" ", 0, limit)
    if cut <= 0:
        return text
    head, tail = first[:cut + (first[cut] in ":;")], first[cut:].lstrip(":; ")
    return "\n".join([head, "  " + tail] + ([rest] if rest else []))


def error_exit(e: BaseException) -> int:
    """Log the error a command ended with and return its exit code (one table, :mod:`sqm.errors`); re-raise an
    exception that is none of ours (a bug: its traceback is the report)."""
    from sqm.mpc.net.launch import MPCError  # the launcher is not part of building the parser (sqm --help)

    if isinstance(e, MPCError):  # a party refused, had bad data, was lost or timed out: nothing was released
        code = e.exit_code  # the job's root cause (sqm.errors.job_exit_code of every party's code)
        # who failed and why first (under 160 characters), then each party's line (sqm.mpc.net.failures)
        log.error("\n  ".join([f"sqm: {e.headline}", *e.details, f"exit {code}: {NAMES.get(code, 'error')}"]))
        return code
    if isinstance(e, (UsageError, MissingExtra)):  # bad options, parameters or job file, before anything is sent
        log.error(short_first_line(f"sqm: error: {e}"))
        return EXIT_USAGE
    if isinstance(e, SQMError):  # this process's own refusal, bad data, lost peer or timeout
        code = e.exit_code
        detail = getattr(e, "detail", None)  # a refusal's own detail, for this party's operator only
        suffix = f" ({detail})" if detail else ""
        log.error(short_first_line(f"sqm: {e}{suffix}") + f"\n  exit {code}: {NAMES.get(code, 'error')}")
        return code
    raise e  # none of ours (a plain ValueError too): an internal error, exit 1, its traceback the report


if __name__ == "__main__":
    sys.exit(main())
