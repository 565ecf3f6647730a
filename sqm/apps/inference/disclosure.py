"""Which of a client's columns a scoring job's requester can solve for.

The requester learns, per scored record, the scores ``x W + b``; it knows the intercepts and its own columns, so
it learns ``x_rest W_rest`` where ``rest`` is every column the requester does not hold (every client's but its
own; all of them when the server requests) and ``W_rest`` their rows of the weights.  A record's ``x_rest`` is
then known up to adding any ``z`` with ``z W_rest = 0`` (the left null space of ``W_rest``), so its coordinate
``j`` is determined exactly when every such ``z`` has ``z_j = 0``: when the unit vector ``e_j`` lies in the
column space of ``W_rest``.  As many independent outputs as the rest's columns, or more, determine every one of
them; one output (a regression's score) determines a column only if it is the rest's only column with a weight.

Numerically (:func:`determined_columns`): each row of ``W_rest`` is scaled to unit norm (a column's units do not
change which columns are determined, only the numbers), singular values below :data:`RANK_TOL` times the
largest count as zero, and ``e_j`` is in the column space when its distance to it is at most :data:`DIST_TOL`.
A column whose weights are all zero is never determined (the scores do not depend on it).
"""
from __future__ import annotations

import numpy as np

RANK_TOL = 1e-9  # relative singular value below which a direction of W_rest counts as absent
DIST_TOL = 1e-6  # distance of e_j to the column space of W_rest (rows at unit norm) at or below which j is determined


def determined_columns(weights, rest, own) -> list[int]:
    """The rows in ``own`` (indices into ``weights``, columns x outputs) whose values the requester can solve for
    from the scores, ``rest`` being the rows of every column it does not hold (``own`` a subset of it)."""
    rest = list(rest)
    W = np.asarray(weights, dtype=np.float64)[rest]
    if W.size == 0:
        return []
    norms = np.linalg.norm(W, axis=1)
    live = norms > 0
    W = np.where(live[:, None], W / np.where(live, norms, 1.0)[:, None], 0.0)
    U, S, _ = np.linalg.svd(W, full_matrices=False)
    rank = int(np.count_nonzero(RANK_TOL * S[0] < S)) if S.size and S[0] > 0 else 0
    inside = np.sum(U[:, :rank] ** 2, axis=1)  # squared norm of e_j's projection on the column space
    dist = np.sqrt(np.clip(1.0 - inside, 0.0, None))
    at = {r: k for k, r in enumerate(rest)}
    return [j for j in own if live[at[j]] and dist[at[j]] <= DIST_TOL]
