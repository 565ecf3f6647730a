"""Two generated party files for trying a job before bringing your own (``sqm data example FOLDER``): the
"Your own data" tutorial (docs/tutorials/own-data.md) runs on them, and ``tests/test_guide.py`` runs the guide's
commands on them.

- ``bank.csv``: ``id, age, income, balance`` (a bank's columns for its ``records`` customers);
- ``clinic.csv``: ``id, bmi, glucose, systolic, outcome`` (a clinic's columns and a 0/1 label, about 27%
  positives, for its ``records`` patients), in another row order.  The two organisations hold different
  people: ``overlap`` of each one's records (default 70%) are people the other holds too, so a job runs on
  those (the record alignment's private set intersection).

The label follows a logistic model of age, bmi, glucose and income.  Generated, not real: nobody's data.
:func:`imbalanced_records` is the generated imbalanced table of ``python -m bench lr-defaults``.
"""
from __future__ import annotations

import os

import numpy as np
from sqm.errors import UsageError

FILES = ("bank.csv", "clinic.csv")


def write_example_files(folder, records: int = 800, seed: int = 7, overlap: float = 0.7) -> list[str]:
    """Write :data:`FILES` into ``folder`` (made if missing; existing files of those names are refused) and
    return their paths: ``records`` people at each organisation, ``round(overlap * records)`` of them at both."""
    if not isinstance(records, int) or records < 10:
        raise UsageError(f"records must be an integer >= 10, got {records!r}")
    if not 0 < overlap <= 1:
        raise UsageError(f"overlap must be in (0, 1], got {overlap!r}")
    os.makedirs(folder, exist_ok=True)
    paths = [os.path.join(folder, f) for f in FILES]
    present = [p for p in paths if os.path.exists(p)]
    if present:
        raise UsageError(f"{', '.join(present)} already exist: choose an empty folder")
    rng = np.random.default_rng(seed)
    common = int(round(overlap * records))
    m = 2 * records - common  # people: the bank holds 0 .. records-1, the clinic records-common .. m-1
    age = rng.integers(18, 90, m).astype(float)
    income = np.round(np.exp(rng.normal(10.6, 0.5, m)), -2)
    balance = np.round(rng.normal(8000, 15000, m), 0)
    bmi = np.round(rng.normal(27, 5, m).clip(15, 55), 1)
    glucose = np.round(rng.normal(105, 25, m).clip(50, 300), 0)
    systolic = np.round(rng.normal(128, 17, m).clip(85, 210), 0)
    z = 0.06 * (age - 50) + 0.12 * (bmi - 27) + 0.035 * (glucose - 105) - 0.4e-4 * (income - 40000) - 1.6
    outcome = (rng.random(m) < 1 / (1 + np.exp(-z))).astype(int)
    ids = rng.permutation(10 * m)[:m] + 10 * m  # one id per person at both organisations (e.g. a national id)
    bank, clinic = range(records), range(records - common, m)
    with open(paths[0], "w") as f:
        f.write("id,age,income,balance\n")
        f.writelines(f"{ids[r]},{age[r]:g},{income[r]:g},{balance[r]:g}\n" for r in bank)
    with open(paths[1], "w") as f:
        f.write("id,bmi,glucose,systolic,outcome\n")
        f.writelines(f"{ids[r]},{bmi[r]:g},{glucose[r]:g},{systolic[r]:g},{outcome[r]}\n"
                     for r in rng.permutation(np.array(clinic)))
    return paths


def imbalanced_records(m: int, d: int = 9, positive: float = 0.25, separation: float = 2.5, seed: int = 1):
    """(X, y): ``m`` generated records in raw units, a fraction ``positive`` of positives (y = 1), the classes
    shifted by ``separation`` standard deviations along a random direction, then each column stretched
    (x 0.5-20) and offset (+-5): data that needs scaling, as a user's own."""
    rng = np.random.default_rng(seed)
    y = (rng.random(m) < positive).astype(float)
    w = rng.normal(size=d)
    X = rng.normal(size=(m, d)) + separation * np.outer(y - positive, w / np.linalg.norm(w))
    return X * rng.uniform(0.5, 20, size=d) + rng.uniform(-5, 5, size=d), y
