"""The errors and exit codes of every room, below all of them: a root class, one subclass per exit code (the table
below), and ONE rule for which text may leave a party.

==================  ====  ==========================================================================================
class               exit  raised when
==================  ====  ==========================================================================================
:class:`UsageError`    2  a parameter, option or job file is wrong (found before anything is sent); a ValueError
:class:`RefusedError`  3  a party refuses the job: configurations differ, a malformed or unexpected message, a
                          deviating peer, another party's abort
:class:`BadDataError`  6  this party's own input is unusable (its file, its values, its labels)
:class:`PeerLostError` 4  a peer's connection dropped before the job was done
:class:`TimedOutError` 5  the job, a phase of it, or a peer did not answer in time; a TimeoutError
==================  ====  ==========================================================================================

Any other exception is an internal error (exit 1).

**What may leave a party** (:func:`public_text`): an error's text is sent to the other parties only when its
class says the text is built to hold no data (``shareable``): refusals, lost and timed-out peers, whose messages
name parties, steps and public counts.  A refusal may carry a shorter ``public`` text for the others where this
party knows more than a peer may learn (:class:`sqm.mpc.net.abort.ProtocolError`).  Bad data (:class:`BadDataError`)
sends its short reason and keeps its ``detail`` (the column, the line) for this party's own operator.  Everything
else, usage errors and internal errors included, leaves as its class name only: its message may quote this party's
paths, values or ids.

**Exit codes** of party processes (``python -m sqm.mpc.net.party``) and of the ``sqm`` command: one table.

==== ============ =================================================================================================
code name         meaning
==== ============ =================================================================================================
0    OK           the job finished; this party's result was released to it
1    ERROR        an unexpected error (a bug, an operating-system error); peers are told only its type
2    USAGE        bad command-line options, parameters or job file, found before any party process starts
                  (argparse's convention)
3    REFUSED      a party refused the job: the parties' configurations differ, a peer sent a malformed message,
                  the clients' records disagree (counts, ids), or another party aborted the job (its notice, e.g.
                  "client 2 refused: its file contains NaN or infinite values", is printed)
4    LOST         a peer vanished: its connection dropped before the job was done (process killed, host down)
5    TIMEOUT      the job, or a phase of it, did not finish in time
6    BAD_DATA     this party's own input is unusable: its file is missing or unreadable, lacks the id column,
                  holds a value that is not a number, NaN or infinity, a magnitude above 1e150
                  (:data:`sqm.framework.tables.MAX_ABS_VALUE`), repeated ids, or labels other than 0 and 1; the other
                  parties exit REFUSED naming this party and a data-free reason
==== ============ =================================================================================================

In every non-zero case nothing was released.  ``sqm pca|logreg --job`` with ``--index I`` exits with party I's
code; run all-local (no ``--index``, or without ``--job`` on the ``mpyc`` backend) it exits with the code of the
job's root cause, :func:`job_exit_code`: the first of BAD_DATA, USAGE, TIMEOUT, ERROR, REFUSED, LOST that some
party exited with (a party killed by a signal counts as LOST): one client's bad file makes it exit BAD_DATA and
the others REFUSED, and the job is a BAD_DATA job.
"""
from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1  # an unexpected error
EXIT_USAGE = 2  # bad command-line options, parameters or job file (argparse's convention)
EXIT_REFUSED = 3  # a party refused the job (mismatched configuration, a malformed message, another party aborted)
EXIT_LOST = 4  # a peer's connection dropped
EXIT_TIMEOUT = 5  # the job did not finish in time
EXIT_BAD_DATA = 6  # this party's own input is unusable (file, values, labels)

NAMES = {EXIT_OK: "ok", EXIT_ERROR: "error", EXIT_USAGE: "bad usage", EXIT_REFUSED: "refused", EXIT_LOST: "lost",
         EXIT_TIMEOUT: "timed out", EXIT_BAD_DATA: "bad data"}

# the root cause of a failed job, most telling first: a party's own bad input or options explain the others'
# refusals; a timeout or an unexpected error explain the lost connections and abort notices that follow them
ROOT_CAUSE_ORDER = (EXIT_BAD_DATA, EXIT_USAGE, EXIT_TIMEOUT, EXIT_ERROR, EXIT_REFUSED, EXIT_LOST)


def job_exit_code(codes) -> int:
    """The exit code of a whole job from its parties' exit codes (a dict party -> code, or a list).

    0 if every party exited 0; otherwise the first code of :data:`ROOT_CAUSE_ORDER` that some party exited
    with.  A negative code (killed by a signal) counts as LOST; a code outside the table as ERROR."""
    values = list(codes.values()) if isinstance(codes, dict) else list(codes)
    seen = set()
    for c in values:
        if c is None or c == EXIT_OK:
            continue
        c = int(c)
        seen.add(EXIT_LOST if c < 0 else c if c in NAMES else EXIT_ERROR)
    for c in ROOT_CAUSE_ORDER:
        if c in seen:
            return c
    return EXIT_OK


class SQMError(Exception):
    """The root of every error this project raises on purpose.  ``exit_code``: the process exit code
    (:mod:`sqm.errors`); ``shareable``: whether the message may be sent to the other parties."""

    exit_code = EXIT_ERROR
    shareable = False


class UsageError(SQMError, ValueError):
    """A wrong parameter, option or job file, found before anything is sent (exit 2)."""

    exit_code = EXIT_USAGE


class RefusedError(SQMError, RuntimeError):
    """A party refused the job; nothing was released (exit 3).  ``public``: the text the other parties are told
    instead of the message, when this party may know more than they may learn."""

    exit_code = EXIT_REFUSED
    shareable = True

    def __init__(self, message: str = "", public: str | None = None):
        super().__init__(message)
        self.public = public


class BadDataError(RefusedError):
    """This party's own input is unusable (exit 6; the others exit 3).  The message is a short reason holding
    no data; ``detail`` is for this party's own operator only."""

    exit_code = EXIT_BAD_DATA

    def __init__(self, reason: str = "", detail: str | None = None, public: str | None = None):
        super().__init__(reason, public)
        self.detail = detail


class PeerLostError(SQMError, RuntimeError):
    """A peer's connection dropped before the job was done (exit 4)."""

    exit_code = EXIT_LOST
    shareable = True


class TimedOutError(SQMError, TimeoutError):
    """The job, a phase of it, or a peer did not answer in time (exit 5)."""

    exit_code = EXIT_TIMEOUT
    shareable = True


def exit_code(e: BaseException) -> int:
    """The exit code of a party or command that ended with ``e``."""
    import asyncio

    if isinstance(e, SQMError):
        return int(e.exit_code)
    if isinstance(e, (TimeoutError, asyncio.TimeoutError)):
        return EXIT_TIMEOUT
    return EXIT_ERROR


def public_text(e: BaseException) -> str:
    """What of ``e`` may be sent to the other parties (the module's rule): a shareable error's ``public`` text or
    message, anything else its class name."""
    if isinstance(e, SQMError) and e.shareable:
        return str(getattr(e, "public", None) or e)
    return type(e).__name__
