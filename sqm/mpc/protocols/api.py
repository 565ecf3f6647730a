"""What applications may call on a party's runtime: the names, as :class:`typing.Protocol` classes.

:class:`Transport` is what every party program receives (:class:`sqm.mpc.net.transport.PartyTransport`, or the
in-process simulation's); :class:`PartyAPI` adds the secure evaluation of a job
(:class:`sqm.mpc.protocols.context.PartyContext`).  The sharing primitives of secure kernels of their own are
functions over a transport (:mod:`sqm.mpc.protocols.sharing`).  Anything else (a leading underscore, MPyC's
runtime ``rt``) is the runtime's own.
"""
from __future__ import annotations

from typing import Any, Protocol
from collections.abc import Callable

import numpy as np


class Transport(Protocol):
    """One party's messages, agreement and accounting (:mod:`sqm.mpc.net.transport`)."""

    pid: int  # this party's index: 0 the server, 1..M-1 the clients
    M: int  # the party count
    t: int  # the threshold, (M - 1) // 2
    clients: list[int]
    rng: np.random.Generator  # this party's share randomness
    points: list[int]  # the parties' evaluation points, in party order
    phases: dict[str, float]
    session: Any  # how this party's session was started (sqm.mpc.net.session.SessionSettings), or None
    output_shares_sent: bool
    before_output_shares: Callable[[], None] | None
    on_progress: Callable[[str, int, int | None], object] | None  # where progress goes (set by the party's program)

    @property
    def is_server(self) -> bool: ...

    def phase(self, name: str) -> None: ...

    def bytes_sent(self) -> int: ...

    def progress(self, step: str, done: int, total: int | None = None) -> None: ...

    async def send_recv(self, outgoing: dict, senders, expect, step: str = "message") -> list: ...

    async def broadcast(self, obj, expect, sender: int = 0, receivers=None, step: str = "broadcast") -> object: ...

    async def agree(self, public, what: str = "job") -> None: ...

    async def check_clients(self, value, what: str, expect, problem: str | None = None) -> None: ...

    async def clients_key(self, contribution: bytes | None) -> bytes | None: ...

    def output_shares_next(self) -> None: ...

    def require_threshold(self) -> None: ...


class PartyAPI(Transport, Protocol):
    """A transport with the secure evaluation of a job (:class:`sqm.mpc.protocols.context.PartyContext`)."""

    async def evaluate(self, job, my_input=None, outputs_to_clients: bool = False,
                       outputs_to=None) -> np.ndarray | None: ...


__all__ = ["PartyAPI", "Transport"]
