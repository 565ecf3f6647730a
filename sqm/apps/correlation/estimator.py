"""The private correlation matrix in one process, scikit-learn style: :class:`SQMCorrelation`."""
from __future__ import annotations

from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_array

from sqm.mechanism.vertical import VerticalData
from sqm.apps.correlation.params import CorrelationParams
from sqm.apps.correlation.statistic import correlation_from_gram, correlation_release, with_constant
from sqm.errors import UsageError

P = CorrelationParams  # the declared defaults of SQMCorrelation's parameters


class SQMCorrelation(BaseEstimator):
    """Differentially private correlation matrix over vertically partitioned data with SQM: one release of the
    Gram of [X 1] (:mod:`sqm.apps.correlation.statistic`), then the server's correlations.

    Parameters (stored unchanged; checked in :meth:`fit`, as :class:`CorrelationParams` declares them):
    ``epsilon`` (server-observed, at ``delta``), ``gamma``, ``row_norm_bound`` c (every record's ||x||; each
    client clips its sub-row to c sqrt(n_p / d) unless ``party_bounds`` gives the c_j), ``robust_noise``,
    ``verify_sharing``, ``verify_inputs``; ``n_parties`` (clients among whom a matrix's columns are split, the
    last also holding the constant column), ``backend`` ('mpyc' real party processes, 'plain' the in-process
    simulation), ``seed`` (None: OS entropy), ``backend_options``.

    After :meth:`fit`: ``correlation_`` (d x d), ``mean_``, ``n_records_`` (the noisy count), ``gram_``,
    ``report_`` (:class:`sqm.mechanism.report.PrivacyReport`), ``clipped_``, ``raw_``, ``n_features_in_``."""

    # scikit-learn's constraints of the declared parameters (its tooling reads them; the declaration checks them)
    _parameter_constraints: ClassVar[dict] = P.parameter_constraints()

    def __init__(self, epsilon=P.epsilon, delta=P.delta, gamma=P.gamma, row_norm_bound=P.row_norm_bound,
                 party_bounds=P.party_bounds, robust_noise=P.robust_noise, verify_sharing=P.verify_sharing,
                 n_parties=2, backend="mpyc", seed=None, backend_options=None, verify_inputs=P.verify_inputs):
        self.epsilon = epsilon
        self.delta = delta
        self.gamma = gamma
        self.row_norm_bound = row_norm_bound
        self.party_bounds = party_bounds
        self.robust_noise = robust_noise
        self.verify_sharing = verify_sharing
        self.n_parties = n_parties
        self.backend = backend
        self.seed = seed
        self.backend_options = backend_options
        self.verify_inputs = verify_inputs

    def params(self) -> CorrelationParams:
        return CorrelationParams(**{name: getattr(self, name) for name in CorrelationParams.names()})

    def fit(self, X, y=None) -> SQMCorrelation:
        """One release over ``X`` (a :class:`VerticalData`, or a matrix split among ``n_parties`` clients)."""
        params = self.params()
        if isinstance(X, VerticalData):
            blocks = [np.asarray(b, np.float64) for b in X.blocks]
        else:
            X = check_array(X, dtype=np.float64, ensure_min_features=2)
            n = self.n_parties
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= X.shape[1]:
                raise UsageError(f"n_parties must be an integer in 1..{X.shape[1]} (the columns), got {n!r}")
            blocks = VerticalData.split(X, int(n)).blocks
        counts = [b.shape[1] for b in blocks]
        data = VerticalData(blocks[:-1] + [with_constant(blocks[-1])])
        res = correlation_release(counts, params, self.backend, self.seed, self.backend_options).run(data)
        d = sum(counts)
        self.correlation_, self.mean_, self.n_records_ = correlation_from_gram(res.estimate, d)
        self.gram_ = res.estimate.reshape(d + 1, d + 1)
        self.n_features_in_ = d
        self.report_, self.clipped_, self.raw_ = res.report, list(res.clipped), res.raw
        return self
