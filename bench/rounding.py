"""A client's rounding: dependent rounding (the kernel and its slow reference) against independent rounding.

    python -m bench rounding --rows 195666 --cols 117 --json rounding.json

Rounds one synthetic client block (records of norm at most 1, random radii, every value fractional unless
``--integral`` makes a share of them exact integers) at scale gamma, interleaved, ``--repeat`` times each, and keeps
each one's fastest CPU seconds (this process's ``time.process_time``: other load on the machine does not count):

* ``independent``: :func:`sqm.mechanism.quantize.stochastic_round` (the paper's Algorithm 2), its coins drawn from a
  seed (AES-128-CTR, as a client's are);
* ``dependent``: :func:`sqm.mechanism.quantize.dependent_round`, the clients' rounding, the same way, on the
  kernel it runs here (``kernel``: "compiled" where ``sqm/mechanism/_dependent_round.c`` was built and agrees
  with the numpy kernel, else "numpy");
* ``numpy``: the same with its numpy kernel (what ``SQM_ROUNDING_KERNEL=numpy`` runs);
* ``reference``: :func:`sqm.mechanism.quantize.dependent_round_reference`, the algorithm as first written;

and the same four with the coins drawn beforehand (``*_given``: the rounding alone).  Both kernels' integers are
checked equal to the reference's, bit for bit; the ratios to independent rounding are printed with the load
average, and the ratio with the coins drawn against the target :data:`TARGET` (``target_met``).
"""
from __future__ import annotations

import argparse
import os
import time

from .common import finish

TARGET = 1.5  # dependent rounding's CPU seconds at most this many times independent rounding's, coins drawn


def _independent_given(x, gamma: float, coins):
    """:func:`sqm.mechanism.quantize.stochastic_round`'s work with the coins given (its checks included)."""
    import numpy as np

    from sqm.mechanism.validation import check_finite, check_gamma

    check_finite(x, "data")
    check_gamma(gamma)
    scaled = x * float(gamma)
    if scaled.size and np.max(np.abs(scaled)) >= 2.0 ** 62:
        raise ValueError("too large")
    low = np.floor(scaled)
    up = coins < scaled - low
    return low.astype(np.int64) + up.astype(np.int64)


def _dependent_numpy(x, gamma: float, seed=None, coins=None):
    """:func:`sqm.mechanism.quantize.dependent_round` on its numpy kernel, whichever kernel it runs here."""
    from sqm.mechanism import quantize

    x, groups, coins = quantize._checked(x, gamma, None, seed, coins)
    return quantize._round_numpy(x, float(gamma), groups, coins)


def block(rows: int, cols: int, integral: float, seed: int):
    """A client's block: records of norm at most 1 (random directions and radii); a share ``integral`` of the
    values set to 0 (a column a chain skips)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, cols))
    x *= rng.random((rows, 1)) / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-300)
    if integral > 0:
        x[rng.random((rows, cols)) < integral] = 0.0
    return x


def run(rows: int = 195_666, cols: int = 117, gamma: float = 4096.0, integral: float = 0.0, repeat: int = 3,
        seed: int = 0) -> dict:
    import numpy as np

    from sqm.mechanism.quantize import (dependent_round, dependent_round_reference, kernel_backend, make_rng,
                                        stochastic_round)

    x = block(rows, cols, integral, seed)
    coins = make_rng(seed + 1).random(x.shape)
    cases = {
        "independent": lambda: stochastic_round(x, gamma, seed=seed + 1),
        "dependent": lambda: dependent_round(x, gamma, None, seed=seed + 1),
        "numpy": lambda: _dependent_numpy(x, gamma, seed=seed + 1),
        "reference": lambda: dependent_round_reference(x, gamma, None, seed=seed + 1),
        "independent_given": lambda: _independent_given(x, gamma, coins),
        "dependent_given": lambda: dependent_round(x, gamma, None, coins=coins),
        "numpy_given": lambda: _dependent_numpy(x, gamma, coins=coins),
        "reference_given": lambda: dependent_round_reference(x, gamma, None, coins=coins),
    }
    best = {k: float("inf") for k in cases}
    outs: dict = {}
    t_all = time.perf_counter()
    for _ in range(max(1, repeat)):
        for name, fn in cases.items():
            t0 = time.process_time()
            out = fn()
            best[name] = min(best[name], time.process_time() - t0)
            if not name.startswith("independent"):
                outs[name] = out
            del out
    same = all(np.array_equal(outs[f"{name}{tail}"], outs["reference"])
               for name in ("dependent", "numpy", "reference") for tail in ("", "_given"))
    rep = dict(rows=int(rows), cols=int(cols), values=int(rows * cols), gamma=float(gamma), integral=float(integral),
               repeat=int(repeat), seed=int(seed), kernel=kernel_backend(), same_integers=same,
               load_average=list(os.getloadavg()), seconds=time.perf_counter() - t_all)
    rep.update({f"{k}_cpu_seconds": v for k, v in best.items()})
    for tail in ("", "_given"):
        ind = max(best[f"independent{tail}"], 1e-9)  # a clock's tick at tiny shapes
        rep[f"dependent_ratio{tail}"] = best[f"dependent{tail}"] / ind
        rep[f"numpy_ratio{tail}"] = best[f"numpy{tail}"] / ind
        rep[f"reference_ratio{tail}"] = best[f"reference{tail}"] / ind
        rep[f"speedup{tail}"] = best[f"reference{tail}"] / best[f"dependent{tail}"]
    rep["target_ratio"] = TARGET
    rep["target_met"] = bool(rep["dependent_ratio"] <= TARGET)
    return rep


def print_table(rep: dict) -> None:
    print(f"{rep['rows']} x {rep['cols']} values ({rep['values']:,}), gamma {rep['gamma']:g}, "
          f"integral share {rep['integral']:g}; best of {rep['repeat']}, CPU seconds; load average "
          + ", ".join(f"{v:.2f}" for v in rep["load_average"]))
    print(f"dependent rounding's kernel here: {rep['kernel']}")
    print(f"{'':24s}{'coins drawn':>14s}{'coins given':>14s}")
    for name in ("independent", "dependent", "numpy", "reference"):
        print(f"{name:24s}{rep[f'{name}_cpu_seconds']:14.3f}{rep[f'{name}_given_cpu_seconds']:14.3f}")
    print(f"{'dependent / independent':24s}{rep['dependent_ratio']:14.2f}{rep['dependent_ratio_given']:14.2f}")
    print(f"{'numpy / independent':24s}{rep['numpy_ratio']:14.2f}{rep['numpy_ratio_given']:14.2f}")
    print(f"{'reference / independent':24s}{rep['reference_ratio']:14.2f}{rep['reference_ratio_given']:14.2f}")
    print(f"{'reference / dependent':24s}{rep['speedup']:14.2f}{rep['speedup_given']:14.2f}")
    print("same integers as the reference (both kernels): " + ("yes" if rep["same_integers"] else "NO"))
    print(f"target: dependent / independent (coins drawn) at most {rep['target_ratio']:g}, measured "
          f"{rep['dependent_ratio']:.2f} ({rep['kernel']} kernel): " + ("met" if rep["target_met"] else "NOT met"))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--rows", type=int, default=195_666, help="records (default 195666, the KDDCUP shape)")
    ap.add_argument("--cols", type=int, default=117, help="columns, one group (default 117, the KDDCUP shape)")
    ap.add_argument("--gamma", type=float, default=4096.0, help="scale gamma (default 4096)")
    ap.add_argument("--integral", type=float, default=0.0,
                    help="share of the values set to 0, an exact integer (default 0: every value fractional)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each, interleaved; the fastest is kept (default 3)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the data and the coins (default 0)")
    ap.add_argument("--json", help="write the figures to this JSON file")


def cli(args) -> int:
    rep = run(args.rows, args.cols, args.gamma, args.integral, args.repeat, args.seed)
    finish(rep, args, print_table)
    return 0 if rep["same_integers"] else 1
