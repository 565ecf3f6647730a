"""How far a 1-D Skellam shift is from a Gaussian one, in f-DP terms: the measured constant c(V) beside the proven
one that the accountant uses (sqm.mechanism.skellam_gdp.gdp_constant).

    python -m bench skellam-gdp                            # variances 2 .. 1e7, proven also at 1e12, 1e15, 1e17
    python -m bench skellam-gdp --variances 10,1e4 --json gdp.json

Why this number.  Let Z be Skellam with variance V (p(k) = e^-V I_k(V)), F its CDF and g = Phi^-1 o F.  The pair
(Z + s, Z), s a positive integer, is distinguished by threshold tests only (the pmf is log-concave, so the shift family
has monotone likelihood ratios), and the test "reject when Z >= w + 1" has type I error 1 - F(w) and type II error
F(w - s).  So the pair is at least as hard to tell apart as the Gaussian pair (N(c s / sqrt V, 1), N(0, 1)) (its
trade-off function lies above G_{c s / sqrt V}: linear interpolation between points above a convex curve stays above
it) exactly when g(w) - g(w - s) <= c s / sqrt V for every integer w.  A bound on the one-step increments,
g(w + 1) - g(w) <= c / sqrt V, gives that for every s at once.  If it holds with a constant c, then by the
composition theorem of f-DP (Dong, Roth and Su 2019) a release with Skellam noise on every coordinate is
c Delta2 / sqrt V -Gaussian-DP for any integer shift vector of L2 norm Delta2: the Gaussian's exact accounting,
with no Delta1 and no RDP conversion.

This bench measures c(V) = sqrt V max_w [g(w + 1) - g(w)] by enumerating the pmf in double precision (SciPy's
``ive``, tail sums in log space) over w in [-1, 25 sd] (``ive`` underflows near 37 sd, which spoils the last
increments).  The reference in the same run is the Gaussian itself (c = 1) and 1 + 1/(6V).  It is a measurement;
the releases use V of 1e12-1e17, where the pmf cannot be enumerated (above MEASURED_UP_TO only the proven constant
is printed).  The proven constant (docs/explanation/accounting.md, "Gaussian DP of Skellam releases") must lie above
the measured one wherever both exist: the table says whether it does.
"""
from __future__ import annotations

import argparse
import math
import sys
import time


def gdp_constant(variance: float, reach: float = 25.0) -> tuple[float, int]:
    """(c, the w where the largest increment sits): sqrt(V) max_w [Phi^-1(F(w + 1)) - Phi^-1(F(w))] over
    w in [-1, reach sd], for the Skellam of variance ``variance``."""
    import numpy as np
    from scipy.special import ive, ndtri_exp

    V = float(variance)
    sd = math.sqrt(V)
    top = int((reach + 12.0) * sd + 60)
    with np.errstate(divide="ignore"):
        logp = np.log(ive(np.arange(top + 1), V))  # log P(Z = k), k >= 0
    logp = logp[np.isfinite(logp)]
    log_at_least = np.logaddexp.accumulate(logp[::-1])[::-1]  # log P(Z >= k)
    g = -ndtri_exp(log_at_least[1:])  # g(w) = Phi^-1(F(w)) = -Phi^-1(P(Z >= w + 1)), w >= 0
    g = np.concatenate([[-g[0]], g])  # g(-1) = -g(0): Z is symmetric
    steps = np.diff(g)[: int(reach * sd) + 2]
    i = int(np.argmax(steps))
    return float(sd * steps[i]), i - 1


MEASURED_UP_TO = 1e8  # the enumeration holds (37 + 12) sqrt V values in memory


def run(variances=(2, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e12, 1e15, 1e17), progress: bool = True) -> dict:
    from sqm.mechanism.skellam_gdp import gdp_constant as proven

    t0, rows = time.perf_counter(), []
    for V in variances:
        c, w = gdp_constant(V) if V <= MEASURED_UP_TO else (None, None)
        p = proven(V)
        rows.append(dict(variance=float(V), c=c, at=w, proven=p if math.isfinite(p) else None, gaussian=1.0,
                         reference=1.0 + 1.0 / (6.0 * V), scaled_excess=None if c is None else 8.0 * V * (c - 1.0),
                         proven_above=None if c is None or not math.isfinite(p) else bool(p >= c)))
        if progress:
            print(f"skellam-gdp: variance {V:g} done", file=sys.stderr, flush=True)
    return {"rows": rows, "seconds": round(time.perf_counter() - t0, 1)}


def print_table(rep: dict) -> None:
    print("Skellam shift against the Gaussian, f-DP: c(V) = sqrt(V) x the largest one-step Gaussian-score increment")
    print(f"{'variance':>10} {'measured c(V)':>14} {'at w':>6} {'1 + 1/(6V)':>14} {'8V(c - 1)':>10} "
          f"{'proven c(V)':>14}")

    def cell(v, spec):
        return format(v, spec) if v is not None else format("-", spec.split(".")[0].rstrip("d"))

    for r in rep["rows"]:
        print(f"{r['variance']:>10g} {cell(r['c'], '>14.10f')} {cell(r['at'], '>6d')} {r['reference']:>14.10f} "
              f"{cell(r['scaled_excess'], '>10.4f')} {cell(r['proven'], '>14.10f')}")
    checked = [r["proven_above"] for r in rep["rows"] if r["proven_above"] is not None]
    print(f"proven >= measured wherever both exist: {'HOLDS' if all(checked) else 'FAILS'} ({len(checked)} variances); "
          "proven is '-' below 1e3 (no claim: RDP accounts there)")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--variances", default="2,10,100,1e3,1e4,1e5,1e6,1e7,1e12,1e15,1e17",
                    help="comma list of Skellam variances (default 2,10,100,1e3,1e4,1e5,1e6,1e7,1e12,1e15,1e17; "
                         "measured up to 1e8, proven from 1e3)")
    ap.add_argument("--json", help="write the figures to this JSON file")


def cli(args) -> int:
    from bench.common import finish

    rep = run([float(v) for v in args.variances.split(",") if v.strip()], progress=not getattr(args, "quiet", 0))
    return finish(rep, args, print_table)
