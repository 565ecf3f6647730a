"""SQM-PCA (section 5.1 of the SQM paper) as a scikit-learn transformer, :class:`SQMPCA`.

The clients quantize their columns at scale gamma, add Skellam noise shares, and the secure evaluation
computes the noisy ``X^T X`` (the covariance polynomial, coefficients 1, no pre-processing); the server
rescales by 1 / gamma^2 and takes the top-k eigenvectors of its symmetric part.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from sqm.mechanism.vertical import VerticalData

from sqm.apps.pca.params import PCAParams
from sqm.apps.pca.utility import (as_matrix, check_components, components_from_covariance, covariance_release,
                                  pca_utility, utility_ratio)
from sqm.errors import UsageError


def _as_vertical(data, n_parties) -> VerticalData:
    """``data`` as the parties' column blocks: a :class:`VerticalData` as given, else a records x columns
    matrix split into ``n_parties`` near-equal column blocks (the vertical split of a local experiment)."""
    if isinstance(data, VerticalData):
        return data
    if isinstance(n_parties, bool) or not isinstance(n_parties, (int, np.integer)) or n_parties < 1:
        raise UsageError(f"n_parties must be an integer >= 1, got {n_parties!r}")
    X = as_matrix(data)
    if X.shape[1] < n_parties:
        raise UsageError(f"cannot split {X.shape[1]} feature(s) among n_parties={n_parties} clients "
                         f"(each client holds at least one column)")
    return VerticalData.split(X, int(n_parties))


P = PCAParams  # the declared defaults of SQMPCA's parameters


class SQMPCA(TransformerMixin, BaseEstimator):
    """Differentially private PCA over vertically partitioned data with SQM (a scikit-learn transformer).

    Parameters (stored unchanged; checked in :meth:`fit`): ``n_components`` (k), ``epsilon`` (server-observed,
    at ``delta``), ``gamma`` (quantization scale), ``row_norm_bound`` (c: every record's L2 norm; each party
    clips its sub-rows to c_j = c sqrt(n_j / n) unless ``party_bounds`` gives them), ``backend`` ('mpyc': real
    party processes; 'plain': the in-process simulation of the same party programs), ``seed`` (None: OS
    entropy), ``n_parties`` (how many clients a plain matrix's columns are split among; a
    :class:`~sqm.mechanism.vertical.VerticalData` brings its own split), ``backend_options``, ``robust_noise`` (k: the
    epsilon holds even if up to k clients add no noise, at n / (n - k) times the noise variance; default 0),
    ``verify_sharing`` (check every client's input sharing before the release; at least 3 clients),
    ``row_norm_check`` (whole rows bounded by c inside the secure evaluation, as a curator would clip them,
    instead of each party's sub-row by c_j: a secure comparison per record; at least 2 clients), ``chunk_rows``
    (records per chunk of the secure evaluation; never changes the result), ``verify_inputs`` (every client proves its
    quantized values and sub-row norms within the bounds the sensitivity uses, and its noise share is checked; a
    failing client is named).  The
    defaults and checks of the release's parameters are :class:`sqm.apps.pca.params.PCAParams`'s.

    After :meth:`fit`: ``components_`` (k x d, rows orthonormal, sklearn's layout), ``explained_variance_``
    (top-k eigenvalues of the noisy X^T X divided by the record count), ``covariance_`` (the noisy X^T X,
    symmetric part), ``report_`` (the :class:`sqm.mechanism.release.PrivacyReport`), ``n_features_in_``,
    ``seconds_``, ``bytes_sent_`` (per party, server first), ``clipped_`` (rows clipped per party),
    ``backend_``, ``raw_`` (the integers the server received).  PCA is uncentered, as in the paper.
    """

    # scikit-learn's constraints of the declared parameters (its tooling reads them; the declaration checks them)
    _parameter_constraints: ClassVar[dict] = P.parameter_constraints()

    def __init__(self, n_components=P.n_components, epsilon=P.epsilon, delta=P.delta, gamma=P.gamma,
                 row_norm_bound=P.row_norm_bound, backend="mpyc", seed=None, party_bounds=P.party_bounds, n_parties=2,
                 backend_options=None, robust_noise=P.robust_noise, verify_sharing=P.verify_sharing,
                 row_norm_check=P.row_norm_check, chunk_rows=P.chunk_rows, verify_inputs=P.verify_inputs):
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.gamma = gamma
        self.row_norm_bound = row_norm_bound
        self.backend = backend
        self.seed = seed
        self.party_bounds = party_bounds
        self.n_parties = n_parties
        self.backend_options = backend_options
        self.robust_noise = robust_noise
        self.verify_sharing = verify_sharing
        self.row_norm_check = row_norm_check
        self.chunk_rows = chunk_rows
        self.verify_inputs = verify_inputs

    def params(self) -> PCAParams:
        """This estimator's release parameters (checked: a UsageError names the first one out of its domain)."""
        return PCAParams(**{name: getattr(self, name) for name in PCAParams.names()})

    def mechanism(self, n_cols: int):
        """The SQM release of X^T X for ``n_cols`` columns (checks every privacy parameter)."""
        return covariance_release(n_cols, **self.params().mechanism_kwargs(), backend=self.backend, seed=self.seed,
                                  backend_options=self.backend_options)

    def fit(self, X, y=None) -> SQMPCA:
        """One SQM release of X^T X over ``X`` (a VerticalData, or a matrix split among ``n_parties``)."""
        data = _as_vertical(X, self.n_parties)
        k = check_components(self.n_components, data.n_cols)
        res = self.mechanism(data.n_cols).run(data)
        self.covariance_, self.explained_variance_, V = components_from_covariance(
            res.estimate, data.n_cols, k, data.n_records)
        self.components_ = np.ascontiguousarray(V.T)
        self.n_features_in_ = data.n_cols
        self.report_ = res.report
        self.seconds_ = res.seconds
        self.bytes_sent_ = list(res.bytes_sent)
        self.clipped_ = list(res.clipped)
        self.backend_ = res.backend
        self.raw_ = res.raw
        return self

    def transform(self, X) -> np.ndarray:
        """Project records onto the components: X V (records x k).  ``X`` a :class:`VerticalData` with
        ``backend='mpyc'``: through the runtime's secure sum of the clients' partial projections
        (:func:`sqm.apps.inference.secure.secure_scores`)."""
        check_is_fitted(self, "components_")
        if isinstance(X, VerticalData) and self.backend == "mpyc" and len(X.blocks) >= 2:
            from sqm.apps.inference.secure import secure_scores

            return secure_scores(X.blocks, self.components_.T, np.zeros(len(self.components_)), self.backend)
        X = as_matrix(X)
        if X.shape[1] != self.n_features_in_:
            raise UsageError(f"X has {X.shape[1]} features, but SQMPCA is expecting {self.n_features_in_} "
                             f"features as input")
        return X @ self.components_.T

    def fit_transform(self, X, y=None) -> np.ndarray:
        return self.fit(X).transform(X)

    def utility(self, X) -> float:
        """||X V||_F^2 on ``X``."""
        check_is_fitted(self, "components_")
        return pca_utility(as_matrix(X), self.components_.T)

    def utility_ratio(self, X) -> float:
        check_is_fitted(self, "components_")
        return utility_ratio(as_matrix(X), self.components_.T)
