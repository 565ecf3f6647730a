"""The message of a failed job, written for the person who ran it: a first line naming who failed and why (at
most :data:`HEADLINE_MAX` characters), then one line per party, each distinct cause once.

Every party of a failed job says something, but most only echo the first failure: "client 2 aborted the job:
client 2 refused: ...", "client 1 gave up the connect phase: ...".  The root cause is the failure of a party that
echoes nobody, the most telling first (:data:`sqm.errors.ROOT_CAUSE_ORDER`); the others' lines say whose failure
they followed instead of repeating it, and a party the launcher stopped says so.  Built from each party's exit
code and last words (its stderr, or :func:`sqm.mpc.net.party.failure`'s line in process), so the same text comes
from real party processes and from an in-process run.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from sqm.errors import EXIT_BAD_DATA, EXIT_OK, EXIT_REFUSED, NAMES, ROOT_CAUSE_ORDER

HEADLINE_MAX = 150  # the first line; ``sqm: `` before it keeps the printed line under 160 characters

_PREFIX = re.compile(r"^sqm\.mpc\.net\.party (?:server|client \d+): ")
# a party echoing another's failure: its abort notice, or its notice in the connect phase
_ECHO = re.compile(r"(?i)\b(?:the server \(party 0\)|the server|client (\d+)) (?:aborted the job|gave up the "
                   r"connect phase|refused:|failed \()")
_NOTICE_HEAD = re.compile(r"^:?\s*(?:(?:the server \(party 0\)|the server|client \d+) (?:refused: |failed \())?", re.I)
_IN_USE = re.compile(r"cannot listen on (\S+):(\d+): address in use")
_BOILERPLATE = ("; job aborted, nothing released", "; nothing released", " (see the detail above)",
                " (refused before any share was sent)", "; refused before any share was sent")  # the last two: the
# first line's (a party's own line keeps them)


def who(i: int) -> str:
    """A party as the first line names it: ``server`` or ``client I``."""
    return "server" if i == 0 else f"client {i}"


@dataclass
class Outcome:
    """How one party ended: its exit code (None: still running, negative: killed by that signal), its lines
    (its last words last) and whether the launcher stopped it after another party failed."""

    code: int | None
    lines: list[str]
    stopped: bool = False

    @property
    def last(self) -> str:
        return _PREFIX.sub("", self.lines[-1]) if self.lines else ""

    def echo_of(self) -> int | None:
        """The party whose failure this party's last words report (its abort or connect-phase notice), if any."""
        m = _ECHO.search(self.last)
        if m is None:
            return None
        return int(m.group(1)) if m.group(1) else 0

    def notice(self) -> tuple[str, str]:
        """(the notice this party was told, as it quotes it; its reason alone), for a party that echoes another."""
        m = _ECHO.search(self.last)
        if m is None:
            return "", ""
        told = _plain(self.last[m.start():], _BOILERPLATE)
        return told, _NOTICE_HEAD.sub("", self.last[m.end():]).strip()


def in_use(text: str) -> str | None:
    """``port P on HOST is in use`` for a party that could not listen on its address, else None."""
    m = _IN_USE.search(text)
    return f"port {m.group(2)} on {m.group(1)} is in use" if m else None


def _plain(text: str, junk=_BOILERPLATE[:3]) -> str:
    """``text`` without the phrases every failed party's line repeats (the details end with "no result released")."""
    for j in junk:
        text = text.replace(j, "")
    return text


def cause(o: Outcome) -> str:
    """A party's failure in a few words, without its name: what the first line says after it."""
    text = _plain(o.last, _BOILERPLATE)
    if o.code is not None and o.code < 0:  # killed by a signal, not by the launcher
        return f"killed by signal {-o.code}"  # its last words are from before it was killed
    port = in_use(text)
    if port:
        return port
    if o.code == EXIT_BAD_DATA and "refused its own input: " in text:
        return "refused: " + text.split("refused its own input: ", 1)[1]  # as its peers were told, detail added
    if text.startswith("timeout: "):
        return "timed out: " + text[len("timeout: "):]
    if o.code == EXIT_REFUSED and text and not text.lower().startswith(("refused", "the server", "client ")):
        return "refused: " + text  # its own refusal (a mismatch, a malformed message, its ledger): as peers say it
    return text or f"exited {o.code} ({NAMES.get(o.code or 0, 'error')}) without a message"


def root(outcomes: dict[int, Outcome]) -> int | None:
    """The party whose failure explains the job's: the most telling code (:data:`sqm.errors.ROOT_CAUSE_ORDER`)
    among parties that echo nobody and were not stopped; echoes only if every failure is one."""
    failed = {i: o for i, o in outcomes.items() if o.code not in (None, EXIT_OK) and not o.stopped}
    if not failed:
        return None

    def rank(i: int) -> tuple:
        o = outcomes[i]
        code = o.code if o.code in ROOT_CAUSE_ORDER else ROOT_CAUSE_ORDER[-1]  # a signal: as a lost party
        killed = o.code is not None and o.code < 0  # the cause of its peers' lost connections
        return (o.echo_of() is not None, ROOT_CAUSE_ORDER.index(code), not killed, in_use(o.last) is None, i)
    return min(failed, key=rank)


def headline(i: int, o: Outcome) -> str:
    """The first line: party ``i`` and its cause, at most :data:`HEADLINE_MAX` characters."""
    c = cause(o)
    rest = next((c[len(me):] for me in (("the server (party 0) ", "the server ") if i == 0 else (f"client {i} ",))
                 if c.startswith(me)), None)  # it names itself: said once
    if rest is not None:
        line = f"{who(i)} {rest}"
    elif c.startswith("refused: "):
        line = f"{who(i)} {c}"
    else:
        line = f"{who(i)}: {c}"
    return line if len(line) <= HEADLINE_MAX else line[:HEADLINE_MAX - 3].rstrip() + "..."


def report(outcomes: dict[int, Outcome]) -> tuple[str, list[str]]:
    """(first line, detail lines) of a failed job: per party (index order) its full last words where its cause is
    new, whose failure it followed where it echoes one, "stopped by the launcher" where it was stopped."""
    r = root(outcomes)
    if r is None:  # every failed party was stopped (the launcher's deadline)
        first = "the job did not finish in time: the launcher stopped every party still running"
        r_who = "the deadline"
    else:
        first, r_who = headline(r, outcomes[r]), who(r)
    details: list[str] = []
    seen: set[str] = set()
    notices: set[str] = set()
    for i in sorted(outcomes, key=lambda k: (k != r, k)):  # the root cause's party first
        o = outcomes[i]
        name = f"{who(i)} (party {i})"
        if o.code in (None, EXIT_OK):
            continue
        if o.stopped:
            details.append(f"{name}: stopped by the launcher after {r_who} failed")
            continue
        code = f"{name} exited {o.code}"
        if o.code < 0:
            details.append(f"{code}: killed by signal {-o.code} (not by the launcher)")
            continue
        src = o.echo_of()
        for _ in outcomes:  # a notice relayed: the party whose failure it reports
            nxt = outcomes[src].echo_of() if src in outcomes and src != r else None
            if nxt is None or nxt == src:
                break
            src = nxt
        if src is not None and src != i and i != r:
            told, reason = o.notice()
            said = _plain(outcomes[r].last, _BOILERPLATE) if r is not None else ""
            known = not reason or _plain(reason, _BOILERPLATE).rstrip(")") in said  # the root's words already
            relayed = any(prev and prev in reason for prev in notices)  # the same notice, passed on by a peer
            details.append(f"{code} ({NAMES.get(o.code, 'error')}): on {who(src)}'s notice"
                           + ("" if known or relayed else f": {told}"))
            notices.add(reason)
            continue
        text = _plain(o.last)
        if text in seen:
            details.append(f"{code} ({NAMES.get(o.code, 'error')}): the same cause")
            continue
        seen.add(text)
        details.append(f"{code}: {text}")
        if o.code == EXIT_BAD_DATA:  # the detail it kept from its peers (the file, the row, the column)
            details += [f"  {ln}" for ln in o.lines[:-1]]
    return first, details


__all__ = ["HEADLINE_MAX", "Outcome", "cause", "headline", "in_use", "report", "root", "who"]
