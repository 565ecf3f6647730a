"""Refusals and aborts between parties: the refusal errors a peer may be told of, and the frames of an abort notice
and of a heartbeat (their message labels lie outside MPyC's program counters).  Below the sessions, the liveness
watch and every protocol, which all send or read them."""
from __future__ import annotations

import hashlib

from sqm.errors import BadDataError, RefusedError
from sqm.mpc.net import wire


class ProtocolError(RefusedError):
    """A party refused the job (mismatched configuration or inputs); nothing was released (exit REFUSED,
    :mod:`sqm.errors`).

    ``public`` (optional): what the abort notice to every peer says instead of ``str(e)``, where this party
    may know more than some peer may learn (a client knows which client's ids differ; the server must not)."""


def refused(reason: str) -> Exception:
    """The exception a task raises to refuse its job before any share is sent (every party exits "refused",
    naming ``reason``, which reaches every peer: no data in it)."""
    return ProtocolError(f"refused before any share was sent: {reason}")


class InputRefused(ProtocolError, BadDataError):
    """This party refuses its OWN input (its file, values or labels are unusable): the party exits BAD_DATA
    (:mod:`sqm.errors`) and the others REFUSED.  ``str(e)`` is a short reason holding no data (no value,
    path or header), e.g. "its label column holds values other than 0 and 1": it is sent to every peer, which
    shows "client 2 refused: <reason>".  ``detail`` (optional) is for this party's own operator only."""

    def __init__(self, reason: str, detail: str | None = None):
        BadDataError.__init__(self, reason, detail)


ABORT_PC = -(1 << 62)  # the message label of an abort notice (MPyC labels are non-negative program counters)
HEARTBEAT_PC = ABORT_PC + 1  # the label of a heartbeat frame (its payload: sqm.mpc.net.liveness.heartbeat_payload)


def printable(text: str, n: int) -> str:
    """At most ``n`` characters of a peer's text, control characters replaced (it is printed to a terminal)."""
    return "".join(c if c.isprintable() else "?" for c in str(text))[:n]


def abort_notice(reason: str, kind: str = "refused", **extra) -> bytes:
    """The frame of an abort notice (sent on the label ABORT_PC): the reason (no data), its kind ("refused",
    "timeout", "silent") and public extras (``party``: the silent peer)."""
    return wire.encode({"abort": printable(reason, 500), "kind": kind, **extra})


def read_abort_notice(payload) -> dict:
    """A peer's abort notice as {"abort": printable reason, "kind": ..., "party": ...}; a malformed notice is
    still an abort (its reason says it was unreadable)."""
    try:
        notice = wire.decode(payload)
        return {"abort": printable(notice["abort"], 500), "kind": notice.get("kind"), "party": notice.get("party")}
    except Exception:  # noqa: BLE001
        return {"abort": "(an unreadable abort notice)", "kind": None, "party": None}


def party_label(pid: int) -> str:
    return "the server (party 0)" if pid == 0 else f"client {pid}"


class PartyAborted(ProtocolError):
    """Another party aborted the job and said why (its notice is a frame holding one short string)."""


def public_digest(public) -> str:
    """SHA-256 of a public parameter tree in the wire encoding (typed, so equal digests mean equal values)."""
    return hashlib.sha256(wire.encode(public)).hexdigest()
