"""Private linear / ridge regression with SQM: ONE release of the joint Gram [X 1 y]^T [X 1 y], then the server
solves the ridge normal equations.  Baselines: central DP on the same sufficient statistics (a trusted curator
adds symmetric Gaussian noise at the same epsilon and delta, :func:`sqm.calibration.gaussian_sigma`) and
non-private ridge (scikit-learn).  ``sqm linreg`` compares them on a held-out split (R^2, RMSE), or runs one
real multi-party job from a job file (``--job``), like ``sqm pca``.

- :mod:`.statistic`: the statistic (:class:`JointGram` with its sensitivity, :func:`joint_bounds`,
  :func:`joint_matrix`, :func:`solve_ridge`);
- :mod:`.estimator`: :class:`SQMLinearRegression` (scikit-learn regressor);
- :mod:`.baselines`: central DP and non-private ridge;
- :mod:`.cli`: ``register``/``run`` of ``sqm linreg``, the comparison and its table, :class:`LinRegJobTask`.
"""
from .cli import LinRegJobTask, register, run
from .estimator import SQMLinearRegression

__all__ = ["SQMLinearRegression", "LinRegJobTask", "register", "run"]
