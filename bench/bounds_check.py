"""How often the server's bounds check (sqm.mechanism.input_check) catches a client sharing values beyond its bounds.

    python -m bench bounds-check                    # factors 1000, 10, 3 and offsets 1, 100; 20 seeds each
    python -m bench bounds-check --runs 50 --json bounds.json

Each run is one SQM covariance release in the in-process simulation (the ideal functionality reduces the result
mod p exactly as the real protocol's opening does): 2 clients, rows of norm 0.99 (every record near its bound:
the least room a deviation has), gamma 1024, epsilon 1.  Client 2 multiplies its clipped values by a factor or
adds an offset (real units; every bound is below 1) and skips its own bounds checks; a run counts as detected
when the release is refused naming client 2.  Honest runs (factor 1, offset 0) are included: none may be refused.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time

CASES = [(1.0, 0.0), (1000.0, 0.0), (10.0, 0.0), (3.0, 0.0), (1.5, 0.0), (1.0, 1.0), (1.0, 100.0)]


@contextlib.contextmanager
def deviating_client(factor: float, offset: float, victim: int = 1):
    """In-process runs within this block: client ``victim + 1`` (0-based ``victim``) multiplies its clipped values
    by ``factor``, adds ``offset`` (real units) and skips its own bounds checks; every other party is honest."""
    import numpy as np

    from sqm.mpc.protocols.evaluation import _Feed
    from sqm.mechanism.vertical import ColumnBounds

    honest_clip, honest_check, honest_checked = ColumnBounds.clip, _Feed.check_in_memory, _Feed._checked

    def clip(self, block, col_counts, party):
        out, k = honest_clip(self, block, col_counts, party)
        return (out * factor + offset, k) if party == victim else (out, k)

    ColumnBounds.clip = clip
    _Feed.check_in_memory = lambda self: None  # the deviating client skips its own checks (honest data passes them)
    _Feed._checked = lambda self, chunk, want: np.asarray(chunk, np.int64)
    try:
        yield
    finally:
        ColumnBounds.clip, _Feed.check_in_memory, _Feed._checked = honest_clip, honest_check, honest_checked


def run(runs: int = 20, rows: int = 500, cols: int = 8, gamma: float = 1024.0, progress: bool = True) -> dict:
    import numpy as np

    from sqm.mpc.net.launch import MPCError
    from sqm.mechanism.release import SQM
    from sqm.mechanism.polynomial import covariance
    from sqm.mechanism.vertical import VerticalData

    out, t0 = [], time.perf_counter()
    for factor, offset in CASES:
        detected = 0
        with deviating_client(factor, offset):
            for s in range(runs):
                rng = np.random.default_rng(s)
                X = rng.normal(size=(rows, cols))
                X /= np.linalg.norm(X, axis=1, keepdims=True) / 0.99
                try:
                    SQM(covariance(cols), gamma, epsilon=1.0, seed=s).run(VerticalData.split(X, 2))
                except MPCError as e:
                    if "client 2's inputs exceed its public bounds" not in str(e):
                        raise
                    detected += 1
        out.append({"factor": factor, "offset": offset, "runs": runs, "detected": detected,
                    "honest": factor == 1.0 and offset == 0.0})
        if progress:
            print(f"bounds-check: x{factor:g} +{offset:g}: {detected}/{runs}", file=sys.stderr, flush=True)
    return {"rows": rows, "cols": cols, "clients": 2, "gamma": gamma, "epsilon": 1.0, "cases": out,
            "seconds": round(time.perf_counter() - t0, 2)}


def print_table(rep: dict) -> None:
    print(f"Server's bounds check (sqm.mechanism.input_check), simulation: {rep['rows']} x {rep['cols']} rows "
          f"at 0.99 of the norm bound, 2 clients, gamma {rep['gamma']:g}; client 2 deviates")
    print(f"{'client 2 shares':<22} {'refused':>10}")
    for c in rep["cases"]:
        what = "honest values" if c["honest"] else (f"values x {c['factor']:g}" if c["offset"] == 0 else
                                                     f"values + {c['offset']:g}")
        print(f"{what:<22} {c['detected']:>4}/{c['runs']:<5}")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--runs", type=int, default=20, help="seeds per case (default 20)")
    ap.add_argument("--rows", type=int, default=500, help="records (default 500)")
    ap.add_argument("--cols", type=int, default=8, help="columns, split over 2 clients (default 8)")
    ap.add_argument("--json", help="write the figures to this JSON file")


def cli(args) -> int:
    from bench.common import finish

    rep = run(args.runs, args.rows, args.cols)
    return finish(rep, args, print_table)
