"""MPyC's stock path, for comparison in benchmarks only: secure integer arrays and ``mpc.np_matmul``.

Benchmark reference, not a deployment path: MPyC's stock ``input`` of secure arrays pickles the shares it
sends and unpickles what peers send (``mpyc.runtime``), which a malicious peer can exploit.  The framework's
own runtime (:mod:`sqm.mpc.protocols.context`) sends typed frames only (:mod:`sqm.mpc.net.wire`).
"""
from __future__ import annotations

import numpy as np

from sqm.mpc.net.party import PartyProgram


class StockGram(PartyProgram):
    """X^T X with MPyC's own secure arrays (Python-integer object arrays inside); clients input column blocks."""

    def __init__(self, block, col_counts, n_records: int, bit_length: int):
        self.block, self.col_counts, self.n_records, self.bit_length = block, list(col_counts), n_records, bit_length

    async def run(self, ctx):
        mpc = ctx.rt
        secint = mpc.SecInt(self.bit_length)
        parts = []
        for j, k in enumerate(self.col_counts, start=1):
            mine = self.block if ctx.pid == j else np.zeros((self.n_records, k), dtype=object)
            x = secint.array(np.asarray(mine, dtype=object)) if ctx.pid == j else None
            parts.append(mpc.input(x if x is not None else secint.array(mine), senders=j))
        X = mpc.np_hstack(parts)
        G = mpc.np_matmul(mpc.np_transpose(X), X)
        out = await mpc.output(G, receivers=[0])
        return None if out is None else np.asarray(out, dtype=object).astype(object)
