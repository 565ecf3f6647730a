"""PBM-VFL as a scikit-learn classifier."""
from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, cast

import numpy as np

from sqm.apps.pbm_vfl.config import PBMJobParams, VFLConfig
from sqm.apps.pbm_vfl.privacy import method_privacy
from sqm.apps.pbm_vfl.training import train_vfl
from sqm.errors import UsageError

if TYPE_CHECKING:
    from sqm.apps.pbm_vfl.trainer import PBMVFL

try:
    from sklearn.base import BaseEstimator, ClassifierMixin
except ImportError:  # pragma: no cover - scikit-learn is a dependency
    BaseEstimator, ClassifierMixin = object, object


P = VFLConfig  # the declared defaults of PBMVFLClassifier's training parameters
ESTIMATED = tuple(name for name in P.names() if name not in ("n_classes", "eval_chunk"))  # the estimator's


class PBMVFLClassifier(ClassifierMixin, BaseEstimator):
    """PBM-VFL as a scikit-learn classifier (a thin estimator over :func:`train_vfl`).

    The columns of ``X`` are split among ``n_parties`` clients (``feature_blocks``: one list of column indices
    per client; default: contiguous near-equal blocks) and the server holds ``y``.  ``fit`` trains by the party
    programs on ``backend`` ('mpyc': real processes; 'plain': the same programs in this process);
    ``predict_proba`` has the clients release the records' embedding sums once through the same mechanism
    (``method``'s noise included: under PBM the server never sees a clean embedding) and applies the server's
    fusion model.  This object holds every party's data and trained model (it is where the job is launched);
    the parties themselves see only what the protocol sends them.  ``seed``: None for OS entropy, an int for
    reproducible experiments (then fit and each predict are deterministic).  Fitted: ``classes_``,
    ``n_features_in_``, ``feature_blocks_``, ``history_``, ``result_`` (:class:`TrainResult`), ``trainer_`` (the
    :class:`sqm.apps.pbm_vfl.PBMVFL` holding every party's trained torch model), ``states_`` (each party's model and
    optimizer state, server first) and ``privacy_`` (its releases' :func:`method_privacy`).
    """

    _parameter_constraints: ClassVar[dict] = {  # scikit-learn's tooling reads them
        **{name: c for name, c in P.parameter_constraints().items() if name in ESTIMATED},
        "secure_sum": PBMJobParams.parameter_constraints()["secure_sum"]}

    def __init__(self, n_parties=2, feature_blocks=None, method=P.method, b=P.b, beta=P.beta, epochs=P.epochs,
                 batch_size=P.batch_size, lr=P.lr, embedding_size=P.embedding_size, hidden=P.hidden,
                 optimizer=P.optimizer, C=P.C, delta=P.delta, secure_sum=PBMJobParams.secure_sum, backend="mpyc",
                 seed=None, device=P.device, timeout=3600.0):
        self.n_parties = n_parties
        self.feature_blocks = feature_blocks
        self.method = method
        self.b = b
        self.beta = beta
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.embedding_size = embedding_size
        self.hidden = hidden
        self.optimizer = optimizer
        self.C = C
        self.delta = delta
        self.secure_sum = secure_sum
        self.backend = backend
        self.seed = seed
        self.device = device
        self.timeout = timeout

    def _config(self, n_classes: int) -> VFLConfig:
        """The training configuration for ``n_classes`` classes (checked: a UsageError names the first parameter
        out of its declared domain)."""
        return VFLConfig(**{name: getattr(self, name) for name in ESTIMATED}, n_classes=n_classes)

    def _blocks(self, d: int) -> list[np.ndarray]:
        if self.feature_blocks is None:
            n = self.n_parties
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= d:
                raise UsageError(f"cannot split n_features = {d} columns among n_parties={n!r} clients")
            return np.array_split(np.arange(d), n)
        blocks = [np.asarray(b, dtype=np.int64).reshape(-1) for b in self.feature_blocks]
        cols = np.concatenate(blocks) if blocks else np.zeros(0, np.int64)
        if not blocks or any(b.size == 0 for b in blocks) or cols.min() < 0 or cols.max() >= d \
                or np.unique(cols).size != cols.size:
            raise UsageError(f"feature_blocks must give each client a non-empty set of distinct columns of the "
                             f"{d} columns, got {self.feature_blocks!r}")
        return blocks

    def fit(self, X, y):
        from sklearn.utils.multiclass import check_classification_targets
        from sklearn.utils.validation import validate_data

        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_, y_enc = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise UsageError(f"PBMVFLClassifier needs at least 2 classes in y, got {len(self.classes_)} class")
        cfg = self._config(len(self.classes_))
        self.feature_blocks_ = self._blocks(X.shape[1])
        blocks = [X[:, c] for c in self.feature_blocks_]
        self.result_ = train_vfl(blocks, [b[:0] for b in blocks], y_enc, y_enc[:0], cfg, backend=self.backend,
                                 seed=self.seed, secure_sum=self.secure_sum, timeout=self.timeout)
        self.trainer_ = cast("PBMVFL", self.result_.trainer)  # train_vfl always returns the trainer it used
        self.history_ = self.result_.history
        self.states_ = self.result_.states
        self.privacy_ = method_privacy(cfg, len(blocks))
        return self

    def predict_proba(self, X):
        from sklearn.utils.validation import check_is_fitted, validate_data

        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return self.trainer_.predict_proba([X[:, c] for c in self.feature_blocks_])

    def predict(self, X):
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

