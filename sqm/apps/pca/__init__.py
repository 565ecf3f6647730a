"""Multi-party PCA with SQM (section 5.1 of the SQM paper), its baselines and the ``sqm pca`` command.

:mod:`~sqm.apps.pca.utility` the linear algebra, the paper's utility and the SQM release of X^T X;
:mod:`~sqm.apps.pca.estimator` the scikit-learn transformer :class:`SQMPCA`; :mod:`~sqm.apps.pca.baselines` central DP
(Analyze Gauss), the VFL local-DP baseline and non-private PCA; :mod:`~sqm.apps.pca.job` :class:`PCAJobTask`, the
job-file task (all a party process imports, with ``utility``); :mod:`~sqm.cli.pca` the comparison, its table
and ``sqm pca``.  Names are re-exported here on first use, so a party process unpickling its task does not
import scikit-learn.
"""
from __future__ import annotations

import importlib

_LAZY = {"check_components": "utility", "top_eigen": "utility", "pca_utility": "utility",
         "optimal_utility": "utility", "utility_ratio": "utility", "components_from_covariance": "utility",
         "covariance_release": "utility", "SQMPCA": "estimator", "BaselineResult": "baselines",
         "central_dp_pca": "baselines", "local_dp_pca": "baselines", "nonprivate_pca": "baselines",
         "symmetric_gaussian": "baselines", "PCAJobTask": "job", "compare": "experiment",
         "table_rows": "experiment"}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
