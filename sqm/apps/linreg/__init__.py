"""Private linear / ridge regression with SQM: ONE release of the joint Gram [X 1 y]^T [X 1 y], then the server
solves the ridge normal equations.  Baselines: central DP on the same sufficient statistics (a trusted curator
adds symmetric Gaussian noise at the same epsilon and delta, :func:`sqm.mechanism.release.calibration.gaussian_sigma`)
and non-private ridge (scikit-learn).  ``sqm linreg`` compares them on a held-out split (R^2, RMSE), or runs one
real multi-party job from a job file (``--job``), like ``sqm pca``.

- :mod:`.statistic`: the statistic (:class:`JointGram` with its sensitivity, :func:`joint_bounds`,
  :func:`joint_matrix`, :func:`solve_ridge`);
- :mod:`.estimator`: :class:`SQMLinearRegression` (scikit-learn regressor);
- :mod:`.baselines`: central DP and non-private ridge;
- :mod:`.job`: :class:`LinRegJobTask`, the task of a job file;
- :mod:`.cli`: ``register``/``run`` of ``sqm linreg``, the comparison and its table.
"""
import importlib

# loaded on first use: a party process unpickling a JointGram imports only .statistic (no scikit-learn)
_LAZY = {"SQMLinearRegression": "estimator", "LinRegJobTask": "job", "compare": "experiment"}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
