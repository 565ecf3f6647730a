"""SQM logistic regression on vertically partitioned data (Section 5.2 of the SQM paper) and its baselines.

    party.py       THE party program (:class:`LRParty`), its plan (:class:`LRPlan`), batch cap, sampling, ``train``
    estimator.py   the scikit-learn classifier :class:`SQMLogisticRegression`
    baselines.py   DPSGD (Opacus), VFL local DP, non-private, the noiseless Taylor gradient
    job.py         the job-file task :class:`LRJobTask` (real multi-party runs, each party reading its own CSV)
    cli.py         ``sqm logreg``: ``register``, ``run``, the comparison driver and its table

The names below are re-exported lazily: a party process unpickling its :class:`LRParty` imports
:mod:`sqm.apps.logreg.party` alone (no scikit-learn, torch or argparse).
"""
from __future__ import annotations

import importlib

_EXPORTS = {"LRParty": "party", "LRPlan": "party", "train": "party", "SQMLogisticRegression": "estimator",
            "LRJobTask": "job", "compare": "experiment",
            "unit_ball_split": "experiment"}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_EXPORTS])
