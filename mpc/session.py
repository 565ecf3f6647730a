"""Starting a party's session: connecting to every other party of the job (on MPyC's runtime)."""
from __future__ import annotations

import asyncio


async def start(mpc, retry_s: float = 0.02) -> None:
    """``mpc.start()``, retrying refused connections every ``retry_s`` instead of MPyC's 0.1 s.

    Parties started together almost always find a peer not yet listening; MPyC's fixed 0.1 s pause was a
    fifth of a small job's wall time.  Only ``asyncio.sleep`` calls made while connecting are shortened.
    """
    orig = asyncio.sleep

    async def short(delay, result=None):
        return await orig(min(delay, retry_s), result)

    asyncio.sleep = short
    try:
        await mpc.start()
    finally:
        asyncio.sleep = orig
