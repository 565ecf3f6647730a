"""One error system (issue 26, part 5; sqm.errors): every error class of the project descends from one root, its
exit code is its family's, and which of its text may leave a party follows one rule.  Walks every class."""
from __future__ import annotations

import importlib

import pytest

from sqm import errors
from sqm.errors import BadDataError, PeerLostError, RefusedError, SQMError, TimedOutError, UsageError
from sqm.errors import EXIT_BAD_DATA, EXIT_LOST, EXIT_REFUSED, EXIT_TIMEOUT, EXIT_USAGE, NAMES

MODULES = ["sqm.mpc.protocols.context", "sqm.mpc.net.liveness", "sqm.mpc.net.wire", "sqm.mpc.shares.field",
           "sqm.mpc.net.certs", "sqm.mpc.net.launch", "sqm.mpc.protocols.psi", "sqm.mpc.net.session",
           "sqm.mechanism.input_check", "sqm.mechanism.ledger", "sqm.data.datahome", "sqm.framework.tables",
           "sqm.framework.table_stream", "sqm.framework.alignment"]
FAMILIES = [(BadDataError, EXIT_BAD_DATA), (UsageError, EXIT_USAGE), (RefusedError, EXIT_REFUSED),
            (PeerLostError, EXIT_LOST), (TimedOutError, EXIT_TIMEOUT)]
SECRET = "patient-4711 at /home/bank/ids.csv"


def _classes():
    for m in MODULES:
        importlib.import_module(m)
    out, todo = [], [SQMError]
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return sorted(set(out), key=lambda c: f"{c.__module__}.{c.__qualname__}")


class _Budget:
    epsilon, delta = 1.0, 1e-5


def _instance(cls, public=None):
    special = {"ChecksumError": lambda: cls(SECRET, "aa", "bb"), "MPCError": lambda: cls(SECRET, {0: 3, 1: 4}),
               "PartyFileError": lambda: cls(SECRET, public or "its party file is empty"),
               "InputRefused": lambda: cls("its file holds NaN", SECRET), "FileChanged": lambda: cls(SECRET),
               "BadDataError": lambda: cls("its file holds NaN", SECRET),
               "BudgetExceeded": lambda: cls(SECRET, _Budget(), 1.0, 0.0, 2.0, 1)}
    if cls.__name__ in special:
        return special[cls.__name__]()
    if issubclass(cls, RefusedError) and public is not None:
        return cls(SECRET, public=public)
    return cls(SECRET)


def test_every_error_class_of_the_project_is_found():
    names = {c.__name__ for c in _classes()}
    assert {"ProtocolError", "InputRefused", "PartyAborted", "PartyLost", "PeerSilent", "WireError", "FieldTooSmall",
            "IdentityError", "MPCError", "PSIError", "ConnectError", "InputBoundsError", "BudgetError",
            "ChecksumError", "DataMissing", "PartyFileError", "FileChanged", "TooFewInCommon"} <= names


@pytest.mark.parametrize("cls", _classes(), ids=lambda c: c.__name__)
def test_each_class_exits_with_its_familys_code_everywhere(cls):
    from sqm.cli.command import error_exit
    from sqm.mpc.net.party import failure

    e = _instance(cls)
    if cls.__name__ == "MPCError":  # a whole job's root cause, from every party's code
        assert e.exit_code == EXIT_REFUSED and error_exit(e) == EXIT_REFUSED
        return
    family = next((code for base, code in FAMILIES if issubclass(cls, base)), None)
    if cls in (SQMError,):
        assert family is None and e.exit_code == 1
        return
    assert family is not None, f"{cls.__name__} belongs to no family"
    assert e.exit_code == family and errors.exit_code(e) == family and family in NAMES
    assert failure(e, "client 2", 60.0)[0] == family  # a party process
    assert error_exit(e) == family  # the sqm command


@pytest.mark.parametrize("cls", _classes(), ids=lambda c: c.__name__)
def test_one_rule_for_what_leaves_a_party(cls):
    """A shareable error sends its public text (or its message, built to hold no data); any other its class name
    only; a refusal's public text replaces its message; bad data keeps its detail at home."""
    from sqm.mpc.net.party import abort_reason

    e = _instance(cls)
    told = abort_reason(e, "client 2")
    if not e.shareable:
        assert SECRET not in told and type(e).__name__ in told
        assert errors.public_text(e) == type(e).__name__
    if issubclass(cls, BadDataError) and cls.__name__ != "PartyFileError":
        assert SECRET not in told  # the detail (column, line, path) is for this party's operator only
    if issubclass(cls, RefusedError) and cls.__name__ not in ("InputRefused", "FileChanged", "TooFewInCommon",
                                                              "BadDataError"):
        e = _instance(cls, public="client 3's ids differ")
        assert abort_reason(e, "client 2") == "client 2 refused: client 3's ids differ"


def test_the_kinds_are_also_the_standard_exceptions_callers_catch():
    assert issubclass(UsageError, ValueError) and issubclass(TimedOutError, TimeoutError)
    from sqm.mpc.net.abort import ProtocolError
    from sqm.mpc.net.wire import WireError

    assert issubclass(ProtocolError, RuntimeError) and issubclass(WireError, ValueError)


def test_an_exception_that_is_not_ours_is_a_bug_with_its_traceback():
    from sqm.cli.command import error_exit

    with pytest.raises(KeyError):
        error_exit(KeyError("x"))
    with pytest.raises(ValueError):  # a plain ValueError is not a usage error: ours are UsageError
        error_exit(ValueError("could not broadcast"))
    assert error_exit(UsageError("gamma must be > 0")) == EXIT_USAGE


def test_every_parameter_check_of_ours_raises_the_usage_error():
    """Issue 26: no module of the package raises a plain ValueError (exit 2 is for UsageError alone; a ValueError
    that is not ours is an internal error, exit 1).  UsageError is a ValueError, so callers' ``except
    ValueError`` still hold."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1] / "sqm"
    found = [f"{p.relative_to(root.parent)}:{i}" for p in sorted(root.rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"raise ValueError\b", line)]
    assert not found, found
    assert issubclass(UsageError, ValueError)
