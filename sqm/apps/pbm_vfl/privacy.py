"""Each PBM-VFL method's noise and privacy: PBM's accounted guarantee, the LDP baselines' per-client Gaussian
sigma (the paper's matched variance, and calibrated to PBM's epsilon) and their exact epsilon, one
:class:`sqm.mechanism.report.PrivacyReport` per method."""
from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import Any

from sqm.mechanism import pbm
from sqm.mechanism.calibration import gaussian_epsilon, gaussian_sigma
from sqm.mechanism.report import PrivacyReport
from sqm.apps.pbm_vfl.config import METHOD_LABELS, METHODS, VFLConfig
from sqm.errors import UsageError


def ldp_sigma(b: int, beta: float, M: int, C: float = 1.0) -> float:
    """The paper's LDP baseline: per-client Gaussian noise of variance 2 M C^2 / (b beta^2) (PBM's variance
    bound per client, doubled): matched variance, NOT calibrated to an epsilon."""
    pbm.check_params(b, beta, C)
    return math.sqrt(2.0 * M * C * C / (b * beta * beta))


def ldp_sensitivity(embedding_size: int, uses: int, C: float = 1.0) -> float:
    """L2 sensitivity of one client's ``uses`` releases of its P-dim embedding in [-C, C]^P (one feature row
    replaced: 2 C sqrt(P) per release; ``uses`` Gaussian releases compose exactly as one with sensitivity
    multiplied by sqrt(uses))."""
    return 2.0 * C * math.sqrt(embedding_size * uses)


def pbm_privacy(cfg: VFLConfig, M: int):
    """PBM's accounted guarantee for this training (:func:`sqm.mechanism.pbm.privacy_report`, each record used once per
    epoch)."""
    return pbm.privacy_report(cfg.b, cfg.beta, M, cfg.embedding_size, uses=cfg.epochs, delta=cfg.delta)


def ldp_sigma_equal_epsilon(cfg: VFLConfig, M: int) -> float:
    """Per-client Gaussian sigma at PBM's feature-level (epsilon, delta) over the same releases."""
    eps = pbm_privacy(cfg, M).epsilon_feature
    return gaussian_sigma(ldp_sensitivity(cfg.embedding_size, cfg.epochs, cfg.C), eps, cfg.delta)


def ldp_epsilon(sigma: float, cfg: VFLConfig) -> float:
    """Feature-level epsilon (at ``cfg.delta``) of a client's Gaussian releases with this sigma over training
    (exact, :func:`sqm.mechanism.calibration.gaussian_epsilon`)."""
    return gaussian_epsilon(sigma, ldp_sensitivity(cfg.embedding_size, cfg.epochs, cfg.C), cfg.delta)


def noise_sigma(cfg: VFLConfig, M: int) -> float:
    """The per-client Gaussian sigma of an LDP method (0 for PBM and NPQ)."""
    if cfg.method == "ldp":
        return ldp_sigma(cfg.b, cfg.beta, M, cfg.C)
    if cfg.method == "ldp_eq":
        return ldp_sigma_equal_epsilon(cfg, M)
    return 0.0


EMBEDDING_NOTE = ("a guarantee for the embeddings taken as given, NOT for the records' features: each client's "
                  "model is trained on its raw features, so one record changes later releases of other records "
                  "(measured: one changed record changed 25 of 240 released sums with identical coins), which this "
                  "epsilon does not count; no end-to-end (record-level) option is offered: its floor, PBM's "
                  "sample-level epsilon, is in the notes, and at beta 0.005 (sample-level 10.9) PBM-VFL learns "
                  "nothing on digits (docs/how-to/pbm-vfl.md)")


def method_privacy(cfg: VFLConfig, M: int):
    """The privacy of ``cfg.method``'s releases over training, as a :class:`sqm.mechanism.report.PrivacyReport`.

    PBM: feature-level (one client's embedding changes) epsilon against the server, RDP composed over the
    ``cfg.epochs`` releases of each record (its sample-level epsilon in the notes).  LDP: the same feature-level
    epsilon of each client's Gaussian releases (which the server sees directly): for the paper's sigma it is
    much smaller than PBM's (that noise matches PBM's variance, not its privacy); the equal-epsilon baseline is
    calibrated to PBM's.  NPQ: no privacy."""
    common: dict[str, Any] = dict(method=METHOD_LABELS[cfg.method], n_parties=M, rounds=cfg.epochs)
    if cfg.method == "npq":
        return PrivacyReport(epsilon_server=math.inf, delta=0.0, notes="no privacy, no quantization",
                             neighbouring="none", **common)
    rep = pbm_privacy(cfg, M)
    trained = VFLAccountant(cfg, M)
    trained.record(cfg.epochs)
    events = tuple(trained.events())
    if cfg.method == "pbm":
        return PrivacyReport(epsilon_server=rep.epsilon_feature, delta=cfg.delta, events=events,
                             neighbouring="embedding",
                             notes=f"feature-level, b={cfg.b}, beta={cfg.beta:g}, P={cfg.embedding_size}; "
                                   f"sample-level epsilon {rep.epsilon_sample:.4g}; {EMBEDDING_NOTE}", **common)
    sigma = trained.sigma
    eps = rep.epsilon_feature if cfg.method == "ldp_eq" else ldp_epsilon(sigma, cfg)
    how = ("Gaussian calibrated to PBM's epsilon" if cfg.method == "ldp_eq" else
           "the paper's sigma^2 = 2 M C^2 / (b beta^2): matched variance, not calibrated to epsilon")
    return PrivacyReport(epsilon_server=eps, epsilon_client=eps, delta=cfg.delta, sigma=sigma, neighbouring="embedding",
                         l2_sensitivity=ldp_sensitivity(cfg.embedding_size, cfg.epochs, cfg.C), events=events,
                         notes=f"feature-level, per client; exact Gaussian epsilon (the events' RDP composition "
                               f"is looser); {how}; {EMBEDDING_NOTE}", **common)


def privacy_reports(cfg: VFLConfig, M: int) -> dict:
    """:func:`method_privacy` of every method, keyed by method."""
    return {m: method_privacy(replace(cfg, method=m), M) for m in METHODS}



class VFLAccountant:
    """The privacy spent so far by a training that may stop and resume: each record's releases (``uses``: one per
    epoch, one per prediction) under ``cfg.method`` with ``M`` clients, with a state to save and load.

    ``epsilon()``: feature-level epsilon against the server at ``cfg.delta`` (PBM:
    :func:`sqm.mechanism.pbm.privacy_report`; LDP: the exact Gaussian epsilon of the method's sigma, calibrated to the
    PLANNED ``cfg.epochs``; NPQ: inf); ``events()``: the same releases as accounting events
    (:mod:`sqm.mechanism.events`, one per method's release composed ``uses`` times; :func:`method_privacy`'s too) for a
    budget ledger."""

    def __init__(self, cfg: VFLConfig, M: int):
        self.cfg, self.M, self.uses = cfg, int(M), 0

    @functools.cached_property
    def sigma(self) -> float:
        """The per-client Gaussian sigma of an LDP method (0 for PBM and NPQ): :func:`noise_sigma`, once."""
        return noise_sigma(self.cfg, self.M)

    def record(self, uses: int = 1) -> None:
        if isinstance(uses, bool) or int(uses) != uses or uses < 0:
            raise UsageError(f"releases per record must be an integer >= 0, got {uses!r}")
        self.uses += int(uses)

    def epsilon(self) -> float:
        cfg = self.cfg
        if self.uses == 0:
            return 0.0
        if cfg.method == "npq":
            return math.inf
        if cfg.method == "pbm":
            return pbm.privacy_report(cfg.b, cfg.beta, self.M, cfg.embedding_size, uses=self.uses,
                                      delta=cfg.delta).epsilon_feature
        return ldp_epsilon(self.sigma, replace(cfg, epochs=self.uses))

    def events(self) -> list:
        from dp_accounting.dp_event import SelfComposedDpEvent

        from sqm.mechanism.events import PBMDpEvent, gaussian_event

        cfg = self.cfg
        if self.uses == 0 or cfg.method == "npq":
            return []
        if cfg.method == "pbm":
            one = PBMDpEvent(cfg.b, cfg.beta, self.M, cfg.embedding_size, "feature")
        else:
            one = gaussian_event(self.sigma, ldp_sensitivity(cfg.embedding_size, 1, cfg.C))
        return [SelfComposedDpEvent(one, self.uses)]

    def _mechanism(self) -> dict:
        cfg = self.cfg
        return {"method": cfg.method, "b": int(cfg.b), "beta": float(cfg.beta), "C": float(cfg.C),
                "clients": self.M, "embedding_size": int(cfg.embedding_size), "delta": float(cfg.delta),
                "planned_epochs": int(cfg.epochs)}

    def state_dict(self) -> dict:
        return {**self._mechanism(), "uses": self.uses}

    def load_state_dict(self, state: dict) -> None:
        """Take over ``state``'s releases; refused (ValueError) if it accounts another mechanism."""
        mine = self._mechanism()
        theirs = {k: state.get(k) for k in mine}
        if theirs != mine:
            diff = {k: (theirs[k], mine[k]) for k in mine if theirs[k] != mine[k]}
            raise UsageError(f"the checkpoint's accountant is for another mechanism (checkpoint, this trainer): {diff}")
        self.uses = int(state["uses"])
