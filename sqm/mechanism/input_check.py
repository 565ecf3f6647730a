"""The server's check, on a covariance release, that each client's inputs respect its public bounds in aggregate.

A deviating client can share values far outside its public bounds (a 1000x scaling, a large offset): the shares
are uniform whatever the values, so no party sees it, and the release is off by many noise standard deviations.
It also breaks the privacy of the other clients: the cross terms x_c x_d^T then weigh client d's data against a
noise calibrated for bounded inputs.  Range proofs per record would catch every such value; they cost a bit
decomposition of every input.  This check costs nothing: it reads only the release the server receives anyway.

Every honest client's quantized sub-row in column group G satisfies ||x_hat_G||^2 <= N_G^2
(:func:`sqm.mechanism.sensitivity.quantized_norm_bound_sq`, exact), so the sum of the Gram's diagonal over client c's
columns, T_c = sum_i ||x_hat_c,i||^2, is at most n N_c^2 with N_c^2 = sum of N_G^2 over c's groups and n the
public record bound; and each diagonal entry G_jj = sum_i x_hat_ij^2 lies in [0, n ceil(gamma b_j)^2].  The release
adds independent Skellam noise Sk(mu) to each entry; :func:`sqm.mechanism.skellam.skellam_tail_bound` bounds it (and the
sum of d_c of them, Sk(d_c mu)) except with probability 2^-40.  A released entry or sum outside these ranges plus
the tail is refused before anything leaves the server, naming client c (an honest job passes except with
probability 2^-40).

What it catches: a deviation that adds more to c's squared values than the room honest data leaves (a 1000x
scaling unless c's honest data had a millionth of its bound's energy; a large offset on every value), and most
deviations so large that the field wraps: the field is sized to the honest result bound (p just above twice
it, :func:`sqm.mpc.shares.field.prime_for_bound`), so a wrapped diagonal entry lands outside its honest range in about
half the field, independently per column.  What it does not: values outside the bounds on a few records whose
total stays within n N_c^2 -- in particular a client concentrating its allowed energy on one targeted record,
which raises that record's sensitivity in the cross terms with the other clients (only per-record range proofs
would stop it) -- and anything in the cross terms alone.  The check reads only the noisy release, so it reveals
nothing beyond it (post-processing of what the server receives).
"""
from __future__ import annotations

import numpy as np

from sqm.mpc.net.abort import ProtocolError

from .sensitivity import quantized_norm_bound_sq
from .skellam import skellam_tail_bound

FALSE_ALARM_LOG2 = -40.0  # an honest client is refused with probability below 2^-40


class InputBoundsError(ProtocolError):
    """A client's inputs exceed its public bounds in aggregate (a deviating client); nothing is released.  The
    peers are told which client, not the released figures (they are the server's)."""


def energy_limits(plan) -> list[tuple[list[int], int]]:
    """Per client (in client order): its global columns and the largest sum of the Gram diagonal over them that
    honest inputs give, n N_c^2 (an exact integer, rounded up), plus the noise's tail bound."""
    owner = plan.owner
    out = []
    for c in range(plan.n_parties):
        cols = [j for j, o in enumerate(owner) if o == c]
        groups = [(g, b) for g, b in zip(plan.bounds.groups, plan.bounds.bounds, strict=False) if owner[g[0]] == c]
        energy = quantized_norm_bound_sq(plan.gamma, [b for _, b in groups], [len(g) for g, _ in groups])
        honest = -((-energy.numerator * int(plan.n_records)) // energy.denominator)  # ceil(n N_c^2)
        noise = skellam_tail_bound(plan.total_noise_mu * len(cols), plan.n_parties, FALSE_ALARM_LOG2) if cols else 0
        out.append((cols, honest + noise))
    return out


def entry_limits(plan) -> tuple[list[int], int]:
    """Per column j: the largest diagonal entry honest inputs give, n ceil(gamma b_j)^2 (every quantized value
    |x_hat_j| <= ceil(gamma b_j)); and the noise's tail bound for one entry (a union over the diagonal)."""
    n = int(plan.n_records)
    tail = skellam_tail_bound(plan.total_noise_mu, sum(plan.col_counts), FALSE_ALARM_LOG2)
    return [n * b * b for b in plan.int_col_bounds()], tail


def check_input_energy(plan, raw) -> None:
    """Raise :class:`InputBoundsError` naming the first client with a released diagonal entry outside
    [-tail, n ceil(gamma b_j)^2 + tail] or a diagonal sum above its limit (``raw``: the covariance release's
    signed integers, n_vars^2 of them, row-major)."""
    n = sum(plan.col_counts)
    G = np.asarray(raw, dtype=object).reshape(n, n)
    highs, tail = entry_limits(plan)
    owner = plan.owner
    for c, (cols, limit) in enumerate(energy_limits(plan)):
        bad = [j for j in cols if not -tail <= int(G[j, j]) <= highs[j] + tail]
        total = sum(int(G[j, j]) for j in cols)
        if not bad and total <= limit:
            continue
        what = (f"{len(bad)} of its {len(cols)} columns have a released sum of squares outside what "
                f"{int(plan.n_records)} records within its bounds give (e.g. column {bad[0] - owner.index(c) + 1}: "
                f"{_sci(int(G[bad[0], bad[0]]))} quantized units, allowed -{_sci(tail)} to "
                f"{_sci(highs[bad[0]] + tail)})"
                if bad else
                f"the released sum of its squared values is {_sci(total)} (quantized units), above what "
                f"{int(plan.n_records)} records within its bounds give plus the noise's tail ({_sci(limit)})")
        raise InputBoundsError(f"client {c + 1}'s inputs exceed its public bounds: {what}: a deviating client; "
                               f"nothing released",
                               public=f"client {c + 1}'s inputs exceed its public bounds (a deviating client); "
                                      f"nothing released")


def _sci(v: int) -> str:
    s = str(abs(int(v)))
    sign = "-" if v < 0 else ""
    return sign + (s if len(s) <= 6 else f"{s[0]}.{s[1:3]}e{len(s) - 1}")
