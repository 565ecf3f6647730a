"""Where log records go: the one configuration of :mod:`logging`, made by an entry point only (``sqm``'s
:func:`sqm.cli.command.main`, a party process's :func:`sqm.mpc.net.party.main`, ``python -m sqm.mpc.net.certs``), never
by library code, which only logs to its module's logger (``logging.getLogger(__name__)``).

Records go to the process's current ``sys.stderr``, one line each: the message alone (its own prefix such as
``sqm: error:`` or ``sqm.mpc.net.party client 1:`` names its source), and in a party process prefixed by the party's
role, ``[server] ...``, ``[client 2] ...``.  A party process logs at the level of the ``sqm`` command that
started it (:func:`party_level_args`, passed on its command line as every other option).
"""
from __future__ import annotations

import logging
import re
import sys

# what a party tells its operator before it acts (the job it is about to run, sqm.framework.party): shown by default,
# hidden by -q (a script's stderr then holds warnings and errors only)
NOTICE = 25
logging.addLevelName(NOTICE, "NOTICE")
LEVELS = ("DEBUG", "INFO", "NOTICE", "WARNING", "ERROR")


class _Stderr(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a record is emitted (a test's capture included)."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


_installed: list[logging.Handler] = []


def configure(level: int | str = NOTICE, role: str | None = None) -> None:
    """Send records at ``level`` and above to stderr, prefixed ``[role] `` when given.  Called again, it
    replaces its own previous handler (and leaves any other, e.g. a test runner's, alone)."""
    root = logging.getLogger()
    for h in _installed:
        root.removeHandler(h)
    _installed.clear()
    h = _Stderr()
    h.setFormatter(logging.Formatter(f"[{role}] %(message)s" if role else "%(message)s"))
    level = logging.getLevelName(level) if isinstance(level, str) else int(level)
    if level > logging.DEBUG:  # MPyC logs its own progress to the root logger: shown at DEBUG only
        h.addFilter(lambda r: r.name != "root" or r.levelno >= logging.WARNING)
    root.addHandler(h)
    root.setLevel(level)
    _installed.append(h)


def role(index: int) -> str:
    """A party's role in log lines: ``server`` (party 0) or ``client I``."""
    return "server" if index == 0 else f"client {index}"


def strip_role(line: str) -> str:
    """``line`` without a leading ``[role] `` prefix (a message quoted after the party is already named)."""
    return _ROLE.sub("", line, count=1)


_ROLE = re.compile(r"^\[(?:server|client \d+)\] ")


def party_level_args() -> list[str]:
    """``--log-level NAME`` for a party process: the level this process's root logger is enabled for."""
    level = logging.getLogger().getEffectiveLevel()
    name = next((n for n in LEVELS if logging.getLevelName(n) >= level), "ERROR")
    return ["--log-level", name]
