"""HDP-VFL (Wang et al.), the baseline SQM-LR is compared with: an active and a passive party exchanging
Gaussian-perturbed intermediate results to train logistic regression (Algorithm 1).

:mod:`~apps.hdp_vfl.party` the one party program and the parties' steps (all a party process imports),
:mod:`~apps.hdp_vfl.privacy` the guarantee, the sensitivity lemmas and the noise, :mod:`~apps.hdp_vfl.estimator`
the scikit-learn classifier :class:`HDPLogisticRegression`, :mod:`~apps.hdp_vfl.cli` the ``sqm hdp-vfl`` command
and its reference methods.  The estimator's and the command's names are re-exported on first use, so a party
process unpickling its :class:`HDPParty` does not import scikit-learn.
"""
from __future__ import annotations

import importlib

from apps.hdp_vfl.party import ACTIVE, PASSIVE, ActiveParty, HDPConfig, HDPParty, PassiveParty, check_labels

_LAZY = {"HDPLogisticRegression": "estimator", "check_params": "estimator",
         "LOGISTIC": "privacy", "GUARANTEE": "privacy", "active_sensitivity": "privacy",
         "passive_sensitivity": "privacy", "max_learning_rate": "privacy",
         "DATASETS": "cli", "load_split": "cli", "reference_accuracies": "cli", "sqm_accuracy": "cli",
         "register": "cli", "run": "cli"}

__all__ = ["ACTIVE", "PASSIVE", "ActiveParty", "HDPConfig", "HDPParty", "PassiveParty", "check_labels", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
