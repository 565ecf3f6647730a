"""Pinned releases: for fixed seeds, the integers the server receives in a PCA, a linear-regression, a
logistic-regression (each solver) and a PBM-VFL run, as a job-file job and through the estimator, are those
recorded in ``tests/data/release_digests.json``; the float outputs computed from them (components,
coefficients, training history) are the recorded ones too.

What is recorded per run: a SHA-256 of the integers the server received, in order, with how many releases
and integers there were, and the run's float outputs.  The integers of an SQM release are each release's
integers at the server (every server-side :class:`sqm.mechanism.release.RoundOutput`: one release for PCA,
linear regression and the moments solver, one per round for the sgd solver); PBM-VFL's are every embedding sum
the server decoded, of which its result carries the digest (``sum_digest``).  The integers are compared
exactly; the floats to a relative 1e-6, which allows the last-bit differences of linear-algebra and torch
kernels between machines.

Every run goes through the in-process simulation (the same party programs as real party processes, whose
equality with it bit for bit other tests prove), seeded, on a small table of exact numbers (multiples of 1/64
from an integer formula: no random generator, no transcendental function), and leaves every parameter at its
default except what makes it small and seeded, so a default that drifts changes a digest.

Re-record only when a change is meant to change what is released (and say so in its commit message): from the
repository root, ``python -m tests.test_release_digests --record``.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys

import numpy as np
import pytest

RECORD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "release_digests.json")
SEED = 5
CASES = ("pca job", "pca estimator", "linreg job", "linreg estimator", "logreg moments job",
         "logreg moments estimator", "logreg sgd job", "logreg sgd estimator", "pbm-vfl job",
         "pbm-vfl estimator")


def table(m: int = 48, d: int = 6) -> np.ndarray:
    """``m`` records of ``d`` columns, multiples of 1/64 in [-1/2, 1/2], every sixth record twice as large (beyond
    the norm bounds, so clipping takes part), from an integer formula: the same numbers on every machine."""
    i, j = np.arange(m)[:, None], np.arange(d)[None, :]
    return (((i * 7919 + j * 104729 + 1) * 2654435761) % 65 - 32) / np.where(i % 6 == 0, 32.0, 64.0)


def labels(X: np.ndarray) -> np.ndarray:
    return (X[:, 0] - X[:, -1] > 0).astype(np.float64)


@contextlib.contextmanager
def server_releases():
    """The integers of every SQM release the server receives while inside, in order (one list per release)."""
    from sqm.mechanism import release

    seen: list[list[int]] = []
    original = release.RoundOutput

    class Recorded(original):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if self.raw is not None:  # the server's output (a client's carries its clip count only)
                seen.append([int(v) for v in np.asarray(self.raw).reshape(-1)])

    release.RoundOutput = Recorded
    try:
        yield seen
    finally:
        release.RoundOutput = original


def _floats(*values) -> list[float]:
    return [float(v) for x in values for v in np.asarray(x, dtype=np.float64).reshape(-1)]


def _history(history: list[dict]) -> list[float]:
    return [float(h[k]) for h in history for k in sorted(h)]


def _job(folder: str, data: np.ndarray, col_counts) -> str:
    from sqm.framework.spec import write_party_csvs

    return write_party_csvs(data, folder, col_counts=col_counts, min_intersection=1)


def _simulate(job: str, task) -> dict:
    from sqm.framework.runners import simulate
    from sqm.framework.spec import load_job

    return simulate(load_job(job), task)[0]["result"]


def _pbm_job(folder: str, X: np.ndarray, y: np.ndarray) -> str:
    """A PBM-VFL job: the server's table holds the labels, two clients three columns each."""
    from sqm.framework.spec import load_job, write_job

    spec = load_job(_job(folder, np.c_[y, X], [1, 3, 3]))
    files = [p.file for p in spec.parties[1:]]
    return write_job(os.path.join(folder, "pbm.json"), spec.addresses[:3], files[1:], server_file=files[0],
                     min_intersection=1)


def run(case: str, folder: str) -> dict:
    """One pinned run: ``{"releases", "integers", "sha256", "outputs"}`` (see the module docstring)."""
    X = table()
    y = labels(X)
    Xy = np.c_[X, y]
    with server_releases() as seen:
        if case == "pca job":
            from sqm.apps.pca import PCAJobTask

            r = _simulate(_job(folder, X, [3, 3]), PCAJobTask(2, 1.0, seed=SEED, insecure_reproducible=True))
            outputs = _floats(r["components"], r["explained_variance"])
        elif case == "pca estimator":
            from sqm.apps.pca import SQMPCA

            m = SQMPCA(2, backend="plain", seed=SEED).fit(X)
            outputs = _floats(m.components_, m.explained_variance_)
        elif case == "linreg job":  # the estimator's split of [X 1 y]: 4 columns each
            from sqm.apps.linreg import LinRegJobTask, SQMLinearRegression

            task = LinRegJobTask(SQMLinearRegression(seed=SEED), label_column="x6", insecure_reproducible=True,
                                 label_range=(0, 1))  # the labels' range: scaled by 1, nothing clamped
            r = _simulate(_job(folder, Xy, [4, 3]), task)
            outputs = _floats(r["coef"], r["intercept"], r["r2_released"], r["r2_lower"])
        elif case == "linreg estimator":
            from sqm.apps.linreg import SQMLinearRegression

            m = SQMLinearRegression(backend="plain", seed=SEED).fit(X, y)
            outputs = _floats(m.coef_, m.intercept_, m.r2_released_, m.r2_lower_)
        elif case in ("logreg moments job", "logreg sgd job"):
            from sqm.apps.logreg import LRJobTask

            task = LRJobTask(1.0, label_column="x6", seed=SEED, insecure_reproducible=True, solver=case.split()[1])
            r = _simulate(_job(folder, Xy, [3, 4]), task)
            outputs = _floats(r["coef"], r["intercept"])
        elif case in ("logreg moments estimator", "logreg sgd estimator"):
            from sqm.apps.logreg import SQMLogisticRegression

            m = SQMLogisticRegression(backend="in-process", n_parties=2, seed=SEED, solver=case.split()[1]).fit(X, y)
            outputs = _floats(m.coef_, m.intercept_)
        elif case == "pbm-vfl job":
            from sqm.apps.pbm_vfl import VFLConfig
            from sqm.apps.pbm_vfl.job import PBMVFLJobTask

            task = PBMVFLJobTask(VFLConfig(epochs=2), seed=SEED, insecure_reproducible=True)
            r = _simulate(_pbm_job(folder, X, y), task)
            return _pbm(r["sum_digest"], r["stats"]["iterations"], r["history"])
        elif case == "pbm-vfl estimator":
            from sqm.apps.pbm_vfl import PBMVFLClassifier

            m = PBMVFLClassifier(epochs=2, backend="plain", seed=SEED).fit(X, y)
            return _pbm(m.result_.sum_digest, m.result_.iterations, m.history_)
        else:
            raise ValueError(f"no pinned run {case!r}")
    return {"releases": len(seen), "integers": sum(map(len, seen)), "sha256": _digest(seen), "outputs": outputs}


def _digest(releases: list[list[int]]) -> str:
    return hashlib.sha256(json.dumps(releases).encode()).hexdigest()


def _pbm(sum_digest: str, iterations: int, history: list[dict]) -> dict:
    """A PBM-VFL run's record: the server's digest of the sums it decoded (training and evaluation, in order),
    its training iterations and the history's figures."""
    return {"releases": int(iterations), "integers": None, "sha256": sum_digest, "outputs": _history(history)}


def recorded() -> dict:
    with open(RECORD) as f:
        return json.load(f)


def test_every_pinned_run_is_recorded():
    assert sorted(recorded()) == sorted(CASES)


@pytest.mark.parametrize("case", CASES)
def test_releases_are_the_recorded_ones(case, tmp_path):
    want, got = recorded()[case], run(case, str(tmp_path))
    assert got["releases"] >= 1  # something was seen
    assert (got["releases"], got["integers"], got["sha256"]) == (want["releases"], want["integers"], want["sha256"])
    np.testing.assert_allclose(got["outputs"], want["outputs"], rtol=1e-6, atol=1e-12)


def test_a_changed_release_changes_the_digest(tmp_path):
    """The digest sees the integers: the same PCA job at another gamma records another digest."""
    from sqm.apps.pca import PCAJobTask

    X = table()
    with server_releases() as seen:
        _simulate(_job(str(tmp_path), X, [3, 3]), PCAJobTask(2, 1.0, gamma=2048.0, seed=SEED,
                                                              insecure_reproducible=True))
    assert len(seen) == 1 and _digest(seen) != recorded()["pca job"]["sha256"]


def record() -> None:
    """Run every pinned run and write the record file (see the module docstring for when this is allowed)."""
    import tempfile

    out = {}
    for case in CASES:
        with tempfile.TemporaryDirectory() as folder:
            out[case] = run(case, folder)
    os.makedirs(os.path.dirname(RECORD), exist_ok=True)
    with open(RECORD, "w") as f:  # one line per run
        f.write("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in out.items()) + "\n}\n")
    print(f"recorded {len(out)} runs in {RECORD}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python -m tests.test_release_digests --record  (only when releases are meant to change)")
    record()
