"""The scikit-learn regressor: :class:`SQMLinearRegression`, one SQM release of the joint Gram, then the server's
ridge solve (:mod:`sqm.apps.linreg.statistic`)."""
from __future__ import annotations

import math
import warnings
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_array, check_is_fitted, check_X_y

from sqm.mechanism.vertical import VerticalData

from sqm.apps.linreg.params import LinRegParams
from sqm.apps.linreg.statistic import MEAN_NOTE, JointGram, guarded_solve, joint_bounds, joint_matrix
from sqm.errors import UsageError


P = LinRegParams  # the declared defaults of SQMLinearRegression's parameters


class SQMLinearRegression(RegressorMixin, BaseEstimator):
    """Differentially private ridge regression over vertically partitioned data with SQM (a scikit-learn
    regressor): one SQM release of [X 1 y]^T [X 1 y], then the server solves (:func:`solve_ridge`).

    Parameters (stored unchanged; checked in :meth:`fit`): ``alpha`` (ridge penalty, on the record-sum scale
    like :class:`sklearn.linear_model.Ridge`; None, the default: from public quantities only,
    :func:`sqm.apps.linreg.statistic.noise_penalty`, on top of the solve's eigenvalue floor at the released
    noise's spectral norm), ``epsilon`` (server-observed, at ``delta``), ``gamma``,
    ``feature_bound`` c_x (every record's ||x||; each party clips its feature sub-row to c_x sqrt(n_p / d)),
    ``label_bound`` c_y (|y| <= c_y, clipped on its own), ``fit_intercept``, ``n_parties`` (clients among whom
    the columns of [X 1 y] are split, the last holding y), ``backend`` ('mpyc' real party processes, 'plain' the
    in-process simulation of the same programs), ``seed`` (None: OS entropy), ``backend_options``,
    ``verify_inputs`` (every client proves its values and row norms within the release's bounds, and its noise
    drawn as committed, before anything is released: :class:`sqm.mechanism.release.SQM`'s).

    After :meth:`fit`: ``coef_``, ``intercept_``, ``alpha_`` (the penalty used), ``noise_std_`` (the released Gram's
    noise std per entry, public), ``shrinkage_`` (the factor t pulling the fitted model toward the released mean:
    :func:`sqm.apps.linreg.statistic.shrinkage`), ``r2_released_``, ``r2_std_``, ``r2_lower_`` and ``r2_upper_``
    (the released model's training R^2, its standard error and interval, computed from the release alone:
    :func:`sqm.apps.linreg.statistic.r2_interval`; post-processing, no privacy cost), ``mean_returned_`` (True
    when nothing beyond chance was left and the released mean is the model:
    :data:`sqm.apps.linreg.statistic.MEAN_NOTE`), ``gram_`` (the noisy joint Gram), ``report_``
    (:class:`sqm.mechanism.report.PrivacyReport`), ``clipped_`` (rows clipped per client), ``seconds_``,
    ``bytes_sent_``, ``backend_``, ``raw_``, ``n_features_in_``."""

    # scikit-learn's constraints of the declared parameters (its tooling reads them; the declaration checks them)
    _parameter_constraints: ClassVar[dict] = P.parameter_constraints()

    def __init__(self, alpha=P.alpha, epsilon=P.epsilon, delta=P.delta, gamma=P.gamma, feature_bound=P.feature_bound,
                 label_bound=P.label_bound, fit_intercept=P.fit_intercept, n_parties=2, backend="mpyc", seed=None,
                 backend_options=None, verify_inputs=P.verify_inputs):
        self.alpha = alpha
        self.epsilon = epsilon
        self.delta = delta
        self.gamma = gamma
        self.feature_bound = feature_bound
        self.label_bound = label_bound
        self.fit_intercept = fit_intercept
        self.n_parties = n_parties
        self.backend = backend
        self.seed = seed
        self.backend_options = backend_options
        self.verify_inputs = verify_inputs

    def params(self) -> LinRegParams:
        """This estimator's release parameters (checked: a UsageError names the first one out of its domain)."""
        return LinRegParams(**{name: getattr(self, name) for name in LinRegParams.names()})

    def mechanism(self, col_counts):
        """The SQM release of the joint Gram over clients holding ``col_counts`` columns of [X 1 y]."""
        from sqm.mechanism.release import SQM

        p = self.params()
        bounds = joint_bounds(col_counts, p.feature_bound, p.label_bound, bool(p.fit_intercept))
        return SQM(JointGram(int(sum(col_counts))), **p.mechanism_kwargs(), column_bounds=bounds,
                   backend=self.backend, seed=self.seed, backend_options=self.backend_options)

    def fit(self, X, y):
        X, y = check_X_y(X, y, dtype=np.float64, y_numeric=True)
        Z = joint_matrix(X, y, bool(self.fit_intercept))
        n = self.n_parties
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= Z.shape[1]:
            raise UsageError(f"n_parties must be an integer in 1..{Z.shape[1]} (the columns of [X 1 y]), got {n!r}")
        data = VerticalData.split(Z, int(n))
        res = self.mechanism(data.col_counts).run(data)
        self.gram_ = res.estimate.reshape(Z.shape[1], Z.shape[1])
        std = math.sqrt(2.0 * res.report.mu) / res.scale
        fit = guarded_solve(self.gram_, None if self.alpha is None else float(self.alpha), std,
                            bool(self.fit_intercept), n_records=X.shape[0])
        self.coef_, self.intercept_, self.alpha_, self.noise_std_ = fit["coef"], fit["intercept"], fit["alpha"], std
        self.shrinkage_, self.mean_returned_ = fit["shrinkage"], fit["mean_returned"]
        self.r2_released_, self.r2_std_ = fit["r2_released"], fit["r2_std"]
        self.r2_lower_, self.r2_upper_ = fit["r2_lower"], fit["r2_upper"]
        if self.mean_returned_:
            warnings.warn(f"{MEAN_NOTE} (the fit's training R^2 {fit['r2_fit']:.3f}, chance-corrected "
                          f"{fit['r2_corrected']:.3f}; post-processing, no privacy cost)", UserWarning, stacklevel=2)
        self.n_features_in_ = X.shape[1]
        self.report_, self.clipped_, self.seconds_ = res.report, list(res.clipped), res.seconds
        self.bytes_sent_, self.backend_, self.raw_ = list(res.bytes_sent), res.backend, res.raw
        return self

    def predict(self, X) -> np.ndarray:
        """X w + intercept.  ``X`` a :class:`VerticalData` with ``backend='mpyc'``: through the runtime's secure
        sum of the clients' partial predictions (:func:`sqm.apps.inference.secure.secure_scores`)."""
        check_is_fitted(self, "coef_")
        if isinstance(X, VerticalData) and self.backend == "mpyc" and len(X.blocks) >= 2:
            from sqm.apps.inference.secure import secure_scores

            return secure_scores(X.blocks, np.asarray(self.coef_)[:, None], [self.intercept_], self.backend)[:, 0]
        X = X.to_matrix() if isinstance(X, VerticalData) else X
        X = check_array(X, dtype=np.float64)
        if X.shape[1] != self.n_features_in_:
            raise UsageError(f"X has {X.shape[1]} features, but SQMLinearRegression is expecting "
                             f"{self.n_features_in_} features as input")
        return X @ self.coef_ + self.intercept_
