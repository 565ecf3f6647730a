"""The estimators' secure inference path: scores of records given as :class:`sqm.mechanism.vertical.VerticalData`
(client j holds ``blocks[j]``) computed without joining the blocks: each client's partial scores (its block
times its rows of the weights) go through the runtime's secure sum (:func:`sqm.mpc.protocols.secure_sum.secure_sum`,
Shamir shares over real party processes with backend 'mpyc'), and only the server's total is opened.  The scores
equal the plain ones within the fixed point's rounding (each partial rounded to 2^-frac_bits)."""
from __future__ import annotations

import numpy as np

from sqm.errors import UsageError
from sqm.mpc.protocols.secure_sum import secure_sum

from sqm.apps.inference.job import FRAC_BITS, SCORE_BOUND, encode_partial, sum_bound


def secure_scores(blocks, weights, intercepts, backend="mpyc", frac_bits: int = FRAC_BITS,
                  score_bound: float = SCORE_BOUND) -> np.ndarray:
    """(records x outputs) scores sum_j blocks[j] @ W_j + intercepts, W_j the rows of ``weights`` (columns x
    outputs) for client j's columns (the blocks' columns in order); at least two clients."""
    blocks = [np.asarray(b, dtype=np.float64) for b in blocks]
    W = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    if W.shape[0] != sum(b.shape[1] for b in blocks):
        raise UsageError(f"{W.shape[0]} weight rows for {sum(b.shape[1] for b in blocks)} columns")
    if len(blocks) < 2:
        raise UsageError("the secure sum needs at least two clients' blocks")
    unit = 1 << int(frac_bits)
    starts = np.cumsum([0] + [b.shape[1] for b in blocks])
    parts = []
    for j, b in enumerate(blocks):
        enc, problem = encode_partial(b @ W[starts[j]:starts[j + 1]], score_bound, frac_bits)
        if problem:
            raise UsageError(f"client {j + 1}: {problem}")
        assert enc is not None  # no problem: encoded
        parts.append(enc)
    bound = sum_bound(len(blocks), score_bound, frac_bits)
    total = secure_sum(parts, bound, backend).values
    scores = np.array([int(v) for v in np.asarray(total).reshape(-1)], dtype=np.float64) / unit
    return scores.reshape(parts[0].shape) + np.asarray(intercepts, dtype=np.float64)
