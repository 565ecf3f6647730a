"""HDP-VFL (Wang et al., "Hybrid differentially private federated learning on vertically partitioned data"):
l2-regularized logistic regression trained by an active party (labels + its features) and a passive party (its
features) exchanging Gaussian-perturbed intermediate results (Algorithm 1), the baseline SQM-LR is compared with.

Rows (Algorithm 1 line 2) are bounded party by party, so no party needs the other's columns: the active party
prepends a constant column of value u (``intercept``, default 0.5; its weight is the model's intercept) and
each party clips its feature sub-rows to c_A, c_B with u^2 + c_A^2 + c_B^2 = 1 (split by column counts), so
every whole row has ||x|| <= 1.  Weights start at 0 and are projected to ||w_A||, ||w_B|| <= k after each step.
Runtime roles: party 0 = active, party 1 = passive (see :mod:`sqm.apps.hdp_vfl.party`).
The guarantee, the sensitivities and the noise: :mod:`sqm.apps.hdp_vfl.privacy`.
"""
from __future__ import annotations

import math
import time
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from sqm.mechanism.calibration import gaussian_sigma
from sqm.mechanism.report import PrivacyReport
from sqm.mechanism.rng import spawn_seeds
from sqm.mechanism.vertical import clip_rows
from sqm.apps.hdp_vfl.params import HDPParams
from sqm.apps.hdp_vfl.party import ACTIVE, PASSIVE, HDPConfig, HDPParty
from sqm.apps.hdp_vfl.privacy import LOGISTIC, active_sensitivity, max_learning_rate, passive_sensitivity
from sqm.mpc import BACKENDS, runner
from sqm.errors import UsageError


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and not math.isnan(v)


def check_params(m: HDPLogisticRegression) -> None:
    """The estimator's parameters, checked when it is used (scikit-learn's convention), each naming the problem:
    each inside its declared domain (:class:`sqm.apps.hdp_vfl.params.HDPParams`), then how they combine."""
    m.params()
    top = max_learning_rate(m.l2)
    if m.learning_rate > top:
        raise UsageError(f"learning_rate {m.learning_rate:g} exceeds 2 / (beta + gamma) = {top:.4g} (beta = 0.25 + "
                         f"l2, gamma = l2), which the paper's sensitivity lemmas assume")
    if m.backend not in BACKENDS:
        raise UsageError(f"backend must be 'plain' or 'mpyc', got {m.backend!r}")
    if not (_is_real(m.timeout) and m.timeout > 0):
        raise UsageError(f"timeout must be > 0 seconds, got {m.timeout!r}")


P = HDPParams  # the declared defaults of HDPLogisticRegression's training parameters


class HDPLogisticRegression(ClassifierMixin, BaseEstimator):
    """HDP-VFL logistic regression, a scikit-learn binary classifier.

    ``fit(X, y)`` gives the first ``active_features`` columns of X (default: half, rounded down, at least 1) and
    the labels to the active party and the rest to the passive party; ``fit_parties(X_active, y, X_passive)``
    takes the two blocks directly.  Labels may be any two values (``classes_``; ``classes_[1]`` is the positive
    class, +1 in the protocol); ``predict`` answers in them.  Each party clips its feature sub-rows to c_A, c_B
    with u^2 + c_A^2 + c_B^2 = 1 (Algorithm 1 line 2, done locally), where u = ``intercept`` is the value of a
    constant column the active party prepends (its weight, clipped with the others to k, gives
    ``intercept_``).  The parties are :class:`sqm.apps.hdp_vfl.party.HDPParty` programs: ``backend="mpyc"`` runs them as
    two OS processes exchanging the noisy intermediate results over the mpc runtime's TCP channels (party 0 =
    active, party 1 = passive), ``backend="plain"`` runs the same programs in this process
    (:func:`sqm.mpc.protocols.inprocess.run_in_process`, a labelled simulation: the same model for the same seed).
    ``seed=None`` (default) draws every party's randomness from OS entropy (AES-CTR keyed by ``secrets``); a
    seed is for reproducible experiments: each party is handed only its own seed from
    :func:`sqm.mechanism.rng.spawn_seeds`, but whoever knows the root seed can regenerate both parties' noise.
    ``timeout``: seconds before the job is abandoned.

    Fitted: ``classes_``, ``coef_`` (features, active columns first), ``intercept_``, ``coef_active_``,
    ``coef_passive_``, ``weights_active_`` / ``weights_passive_`` (as trained; the active one has the intercept
    column's weight first when ``intercept`` > 0), ``config_`` (:class:`sqm.apps.hdp_vfl.party.HDPConfig`),
    ``privacy_`` (the parties' :class:`sqm.mechanism.report.PrivacyReport`), ``seconds_``, ``bytes_sent_`` (per party).
    """

    _parameter_constraints: ClassVar[dict] = P.parameter_constraints()  # scikit-learn's tooling reads them

    def __init__(self, epsilon: float = P.epsilon, delta: float = P.delta, epochs: int = P.epochs,
                 batch_size: int = P.batch_size, k: float = P.k, l2: float = P.l2,
                 learning_rate: float = P.learning_rate, backend: str = "plain", seed=None,
                 active_features: int | None = None, intercept: float = P.intercept, progress: bool = False,
                 timeout: float = 3600.0):
        self.epsilon, self.delta, self.epochs, self.batch_size = epsilon, delta, epochs, batch_size
        self.k, self.l2, self.learning_rate, self.backend, self.seed = k, l2, learning_rate, backend, seed
        self.active_features, self.intercept = active_features, intercept
        self.progress, self.timeout = progress, timeout

    def params(self) -> HDPParams:
        """This estimator's training parameters (checked: a UsageError names the first one out of its domain)."""
        return HDPParams(**{name: getattr(self, name) for name in HDPParams.names()})

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False  # one logistic model: binary labels only
        tags.non_deterministic = self.seed is None  # OS entropy unless seeded
        tags.classifier_tags.poor_score = self.epsilon != math.inf  # DP noise: no accuracy promise on tiny data
        return tags

    # ----- configuration ---------------------------------------------------------------------------
    def config(self, n_records: int, active_features: int, passive_features: int) -> HDPConfig:
        """The public configuration for ``n_records`` records: batch size, iterations, sensitivities, sigmas."""
        check_params(self)
        if n_records < 1:
            raise UsageError("no records to train on")
        b, epochs = min(int(self.batch_size), n_records), int(self.epochs)  # integers (declared), maybe as floats
        T = epochs * (n_records // b)
        dA = active_sensitivity(epochs, T, self.learning_rate, b, self.k, **LOGISTIC)
        dB = passive_sensitivity(epochs, T, self.learning_rate, b, self.k, L=LOGISTIC["L"])
        return HDPConfig(n_records=n_records, active_features=active_features, passive_features=passive_features,
                         batch_size=b, epochs=epochs, k=float(self.k), l2=float(self.l2),
                         learning_rate=float(self.learning_rate),
                         sigma_active=gaussian_sigma(dA, self.epsilon, self.delta),
                         sigma_passive=gaussian_sigma(dB, self.epsilon, self.delta), intercept=float(self.intercept))

    def privacy(self, cfg: HDPConfig) -> tuple:
        """Each party's guarantee as a :class:`sqm.mechanism.report.PrivacyReport` (the active party's records, then the
        passive party's), its event the one Gaussian release its composed sequence amounts to (module doc)."""
        from sqm.mechanism.events import gaussian_event

        out = []
        for who, lemma, dl, s in (
                ("active", 4, active_sensitivity(cfg.epochs, cfg.iterations, cfg.learning_rate, cfg.batch_size,
                                                 cfg.k, **LOGISTIC), cfg.sigma_active),
                ("passive", 3, passive_sensitivity(cfg.epochs, cfg.iterations, cfg.learning_rate, cfg.batch_size,
                                                   cfg.k), cfg.sigma_passive)):
            other = "passive" if who == "active" else "active"
            note = (f"the {who} party's records (one record replaced) against the {other} party's view of its "
                    f"{cfg.iterations} noisy intermediate results: Lemma {lemma} sensitivity, the composed sequence "
                    f"as one Gaussian release" + ("; its received residual clipped to [-1, 1]"
                                                  if who == "passive" else "") +
                    "; under zero-out neighbours (one record's values replaced by zeros, the relation of every "
                    "method here): the lemma's replace-one sensitivity bounds that change too, the zero record "
                    "being an admissible record, so the guarantee holds as stated (up to 2x conservative)")
            out.append(PrivacyReport(method=f"HDP-VFL ({who} party)", epsilon_server=float(self.epsilon),
                                     delta=float(self.delta), sigma=float(s), l2_sensitivity=float(dl),
                                     n_parties=2, rounds=cfg.iterations, notes=note,
                                     events=() if s == 0 else (gaussian_event(s, dl),)))
        return tuple(out)

    # ----- training --------------------------------------------------------------------------------
    def fit(self, X, y):
        """Train on X (the first ``active_features`` columns at the active party, the others at the passive
        party) and labels y (at the active party)."""
        from sklearn.utils.validation import validate_data

        check_params(self)
        X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_features=2)
        d = X.shape[1]
        a = self.active_features if self.active_features is not None else max(1, d // 2)
        if not (_is_int(a) and 1 <= a < d):
            raise UsageError(f"active_features must be an integer in [1, {d - 1}], got {a!r}")
        return self._train(X[:, :a], y, X[:, a:])

    def fit_parties(self, X_active, y, X_passive):
        """Train on the two parties' blocks; their record counts are checked by the parties themselves."""
        from sklearn.utils.validation import check_array, check_X_y

        check_params(self)
        XA, y = check_X_y(X_active, y, dtype=np.float64)
        XB = check_array(X_passive, dtype=np.float64)
        self.n_features_in_ = XA.shape[1] + XB.shape[1]
        self.__dict__.pop("feature_names_in_", None)  # blocks carry no column names
        return self._train(XA, y, XB)

    def _train(self, XA, y, XB):
        from sklearn.utils.multiclass import check_classification_targets

        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if len(self.classes_) != 2:
            raise UsageError(f"Only binary classification is supported: HDP-VFL trains one logistic model, and the "
                             f"labels hold {len(self.classes_)} class(es)")
        y_pm = np.where(y == self.classes_[1], 1.0, -1.0)
        cfg = self.config(XA.shape[0], XA.shape[1], XB.shape[1])
        # each party gets only its own seed (entry 0 the active party's, 1 the passive's); none: OS entropy
        seed_a, seed_b = spawn_seeds(self.seed, 2) if self.seed is not None else (None, None)
        bar = None
        if self.progress and self.backend == "plain":
            from sqm.framework.progress import make_bar

            bar = make_bar(total=cfg.epochs, desc="HDP-VFL epochs")
        programs = [HDPParty(ACTIVE, cfg, XA, y_pm, seed_a, on_epoch=bar and (lambda: bar.update(1))),
                    HDPParty(PASSIVE, cfg, XB, None, seed_b)]
        t0 = time.perf_counter()
        try:
            res = runner(self.backend)(programs, timeout=float(self.timeout))
        finally:
            if bar is not None:
                bar.close()
        self.seconds_ = time.perf_counter() - t0
        self.bytes_sent_ = [int(r.get("bytes_sent", 0)) for r in res]
        self.config_ = cfg
        wA, wB = np.asarray(res[ACTIVE]["result"]["w"]), np.asarray(res[PASSIVE]["result"]["w"])
        self.weights_active_, self.weights_passive_ = wA, wB  # as trained (active: intercept weight first)
        lead = 1 if cfg.intercept else 0
        self.intercept_ = float(cfg.intercept * wA[0]) if lead else 0.0
        self.coef_active_, self.coef_passive_ = wA[lead:], wB
        self.coef_ = np.concatenate([self.coef_active_, self.coef_passive_])
        self.privacy_ = self.privacy(cfg)
        return self

    # ----- evaluation (joint scores: for measuring the trained model, not part of the private protocol) --
    def _rows(self, X) -> np.ndarray:
        from sklearn.utils.validation import check_is_fitted, validate_data


        check_is_fitted(self, "coef_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        cA, cB = self.config_.row_bounds()
        a = self.coef_active_.shape[0]
        return np.hstack([clip_rows(X[:, :a], cA)[0], clip_rows(X[:, a:], cB)[0]])

    def decision_function(self, X) -> np.ndarray:
        """Scores: > 0 for ``classes_[1]``."""
        return self._rows(X) @ self.coef_ + self.intercept_

    def predict(self, X) -> np.ndarray:
        """Labels, in the training labels' space (``classes_``)."""
        positive = self.decision_function(X) > 0
        return self.classes_[positive.astype(int)]
