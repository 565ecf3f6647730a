"""sqm: private analytics and learning on vertically partitioned data with the Skellam Quantization Mechanism.

The one import package of the ``sqm-vfl`` distribution.  Its rooms, each importing only those below it
(``tests/test_layering.py`` holds the table)::

    sqm.cli         the face: the ``sqm`` command, its options, printing, progress bars, --json
    sqm.apps     PCA, linear and logistic regression, PBM-VFL, HDP-VFL: estimators, job tasks, experiments
    sqm.framework   the job framework: job files, the task contract, record alignment, party steps, runners
    sqm.data        the data home and the bundled and real data sets
    sqm.mechanism   SQM itself: quantization, Skellam noise, polynomials, sensitivity, accounting, the ledger
    sqm.mpc     the secret-sharing runtime (Shamir/BGW on MPyC party processes); it knows nothing of DP

The public API is re-exported here, flat (``__all__``); each name is imported on first use, so ``import sqm``
costs nothing a party process or ``sqm --help`` would notice::

    from sqm import SQMPCA, VerticalData
    pca = SQMPCA(n_components=2, epsilon=1.0, delta=1e-5).fit(VerticalData([X_bank, X_hospital]))
"""
from __future__ import annotations

import importlib

# public name -> the module that defines it
_API = {
    # estimators (scikit-learn conventions)
    "SQMPCA": "sqm.apps.pca.estimator",
    "SQMLinearRegression": "sqm.apps.linreg.estimator",
    "SQMLogisticRegression": "sqm.apps.logreg.estimator",
    "PBMVFLClassifier": "sqm.apps.pbm_vfl.estimator",
    "HDPLogisticRegression": "sqm.apps.hdp_vfl.estimator",
    # the mechanism on a polynomial of your own
    "SQM": "sqm.mechanism.release",
    "Polynomial": "sqm.mechanism.polynomial",
    "VerticalData": "sqm.mechanism.vertical",
    "ColumnBounds": "sqm.mechanism.vertical",
    # accounting: dp-accounting events, the accountant, the ledger
    "SkellamDpEvent": "sqm.mechanism.events",
    "ClientSkellamDpEvent": "sqm.mechanism.events",
    "PBMDpEvent": "sqm.mechanism.events",
    "SQMAccountant": "sqm.mechanism.events",
    "epsilon_delta": "sqm.mechanism.events",
    "calibrate_mu": "sqm.mechanism.accounting",
    "privacy_report": "sqm.mechanism.accounting",
    "Ledger": "sqm.mechanism.ledger",
    "Budget": "sqm.mechanism.ledger",
    # the job runner: a job file and a task, run through real party processes
    "load_job": "sqm.framework.spec",
    "write_job": "sqm.framework.spec",
    "run_job": "sqm.framework.runners",
    "JobTask": "sqm.framework.jobtask",
    "PCAJobTask": "sqm.apps.pca.job",
    "LinRegJobTask": "sqm.apps.linreg.job",
    "LRJobTask": "sqm.apps.logreg.job",
    # private inference with a released model (sqm score)
    "ScoringJobTask": "sqm.apps.inference.job",
    "ReleasedModel": "sqm.apps.inference.model",
    "load_model": "sqm.apps.inference.model",
    # data
    "load_dataset": "sqm.data.datasets",
    # one error system (sqm.errors): the root and its families, one exit code each
    "SQMError": "sqm.errors",
    "UsageError": "sqm.errors",
    "RefusedError": "sqm.errors",
    "BadDataError": "sqm.errors",
    "PeerLostError": "sqm.errors",
    "TimedOutError": "sqm.errors",
}

__all__ = sorted(_API) + ["__version__"]


def __getattr__(name: str):
    """A public name is imported on first use; ``sqm.__version__`` too (:mod:`importlib.metadata` costs tens of
    milliseconds, which every process importing :mod:`sqm` would pay for nothing)."""
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("sqm-vfl")  # one version: pyproject.toml's
        except PackageNotFoundError:  # pragma: no cover - running from a source tree that was never installed
            v = "0+unknown"
        globals()["__version__"] = v
        return v
    if name not in _API:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted([*globals(), *_API])
