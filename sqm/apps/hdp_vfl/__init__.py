"""HDP-VFL (Wang et al.), the baseline SQM-LR is compared with: an active and a passive party exchanging
Gaussian-perturbed intermediate results to train logistic regression (Algorithm 1).

:mod:`~sqm.apps.hdp_vfl.party` the one party program and the parties' steps (all a party process imports),
:mod:`~sqm.apps.hdp_vfl.privacy` the guarantee, the sensitivity lemmas and the noise, :mod:`~sqm.apps.hdp_vfl.estimator`
the scikit-learn classifier :class:`HDPLogisticRegression`, :mod:`~sqm.cli.hdp_vfl` the ``sqm hdp-vfl`` command
and its reference methods.  Every name is re-exported on first use, so a party process unpickling its
:class:`HDPParty` does not import scikit-learn, and ``sqm --help`` (which imports this package to register the
command) imports neither numpy nor SciPy.
"""
from __future__ import annotations

import importlib

_LAZY = {"ACTIVE": "party", "PASSIVE": "party", "ActiveParty": "party", "HDPConfig": "party", "HDPParty": "party",
         "PassiveParty": "party", "check_labels": "party", "HDPLogisticRegression": "estimator",
         "check_params": "estimator",
         "LOGISTIC": "privacy", "GUARANTEE": "privacy", "active_sensitivity": "privacy",
         "passive_sensitivity": "privacy", "max_learning_rate": "privacy",
         "DATASETS": "experiment", "load_split": "experiment", "reference_accuracies": "experiment",
         "sqm_accuracy": "experiment"}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
