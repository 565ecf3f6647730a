"""One error system for the runtime, the mechanism and the applications: a root class, one subclass per exit code
(:mod:`sqm.runtime.exitcodes`), and ONE rule for which text may leave a party.

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
party knows more than a peer may learn (:class:`sqm.runtime.protocol.ProtocolError`).  Bad data (:class:`BadDataError`)
sends its short reason and keeps its ``detail`` (the column, the line) for this party's own operator.  Everything
else, usage errors and internal errors included, leaves as its class name only: its message may quote this party's
paths, values or ids.
"""
from __future__ import annotations

from .exitcodes import EXIT_BAD_DATA, EXIT_ERROR, EXIT_LOST, EXIT_REFUSED, EXIT_TIMEOUT, EXIT_USAGE


class SQMError(Exception):
    """The root of every error this project raises on purpose.  ``exit_code``: the process exit code
    (:mod:`sqm.runtime.exitcodes`); ``shareable``: whether the message may be sent to the other parties."""

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
