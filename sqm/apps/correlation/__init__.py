"""A private correlation matrix over vertically partitioned data: one SQM release of the Gram of [X 1]
(:mod:`~sqm.apps.correlation.statistic`), from which the server computes the column means, covariances and
correlations.  :mod:`~sqm.apps.correlation.params` its parameters, declared once;
:mod:`~sqm.apps.correlation.estimator` :class:`SQMCorrelation` (scikit-learn style, in one process);
:mod:`~sqm.apps.correlation.job` :class:`CorrelationJobTask`, the job-file task; :mod:`sqm.cli.correlation`
``sqm correlation``.  Names are re-exported here on first use (a party process does not import scikit-learn)."""
from __future__ import annotations

import importlib

_LAZY = {"CorrelationParams": "params", "correlation_release": "statistic", "correlation_from_gram": "statistic",
         "with_constant": "statistic", "SQMCorrelation": "estimator", "CorrelationJobTask": "job"}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
