"""PBM-VFL's public configuration, declared once (:mod:`sqm.mechanism.params`): the methods (PBM-VFL and its
baselines) and the hyperparameters every party must agree on (:class:`VFLConfig`), and a run's other public
parameters (:class:`PBMJobParams`: the secure sum, the public split and the mini-batch seed).  From them come the
checks, :class:`sqm.apps.pbm_vfl.estimator.PBMVFLClassifier`'s defaults and constraints, the job task's public
parameters, the job file's task block and ``sqm pbm-vfl``'s options.  Standard library only (``sqm --help``
imports it)."""
from __future__ import annotations

import dataclasses

from sqm.mechanism.params import (
    DELTA,
    POSITIVE,
    Choice,
    Integer,
    Interval,
    Param,
    Params,
)
from sqm.mpc import SECURE_SUMS

METHODS = ("pbm", "npq", "ldp", "ldp_eq")
METHOD_LABELS = {"pbm": "PBM-VFL", "npq": "NPQ", "ldp": "LDP (paper)", "ldp_eq": "LDP (equal eps)"}
OPTIMIZERS = ("adam", "sgd")
FLOAT_BITS = 32
STATISTIC = "pbm-vfl (feature-level)"  # what a job's ledgers charge


def _count(default: int, help: str = "", **kw) -> Param:
    """A whole number >= 1 (an error names it as ``label``, the option's spelling where it has two words)."""
    return Param(default, Integer(1), help, **kw)


@dataclasses.dataclass(frozen=True)
class VFLConfig(Params):
    """PBM-VFL's training configuration: the ``method``, PBM's trials ``b``, ``beta`` and clipping bound ``C``,
    ``epochs``, ``batch_size``, learning rate ``lr``, ``embedding_size`` P, the default models' ``hidden`` width,
    the ``optimizer``, ``n_classes`` K (None: a job's server derives it from its labels), the torch ``device`` (each
    party's own business, not public), the records per evaluation chunk ``eval_chunk``, and ``delta`` of PBM's
    accounted guarantee (which the equal-epsilon LDP baseline matches).  The counts are held as ints."""

    statistic = "pbm-vfl"

    method: str = Param("pbm", Choice(*METHODS), option="",
                        error=f"unknown method {{value}}; choose one of {METHODS}").field()
    b: int = Param(16, Integer(1), "PBM trials b >= 1 (default: {default})",
                   error="PBM needs an integer number of trials b >= 1, got {value}").field()
    beta: float = Param(0.15, Interval(0, 0.25, "right"), "PBM beta in (0, 1/4] (default: {default})",
                        error="PBM needs beta in (0, 1/4], got {value}").field()
    epochs: int = _count(10, "training epochs (default: {default})").field()
    batch_size: int = _count(100, "mini-batch size B (default: {default})", label="batch-size").field()
    lr: float = Param(0.01, POSITIVE, "learning rate (default: {default})", option="learning_rate",
                      label="learning rate").field()
    embedding_size: int = _count(16, "embedding size P (default: {default})", label="embedding-size").field()
    hidden: int = _count(64, "hidden width of the party MLPs (default: {default})").field()
    optimizer: str = Param("adam", Choice(*OPTIMIZERS), "optimizer (default: {default})",
                           error="optimizer must be 'adam' or 'sgd', got {value}").field()
    C: float = Param(1.0, POSITIVE, option="", error="PBM needs a clipping bound C > 0, got {value}").field()
    n_classes: int | None = Param(2, Integer(2), optional=True, option="",
                                  error="need at least 2 classes, got {value}").field()
    device: str = Param("cpu", option="", public="never").field()
    eval_chunk: int = _count(4000, option="", label="eval-chunk").field()
    delta: float = DELTA.field(help="delta for (epsilon, delta) (default: 1e-5)")

    def __post_init__(self):
        super().__post_init__()
        for name, p in self.declared():  # counts as ints (numpy's and integer-valued floats are accepted)
            if isinstance(p.rule, Integer) and getattr(self, name) is not None:
                object.__setattr__(self, name, int(getattr(self, name)))

    def public(self) -> dict:  # type: ignore[override]  # the parties have always agreed on it by name
        """What every party must agree on, by name in declaration order, as given (the device is each party's
        own business)."""
        return {name: getattr(self, name) for name, p in self.declared() if p.public != "never"}


@dataclasses.dataclass(frozen=True)
class PBMJobParams(Params):
    """A run's public parameters besides :class:`VFLConfig`: the ``secure_sum``, the public split (a job's
    ``test_fraction`` of the records in common, by ``split_seed``) and the public mini-batch seed ``batch_seed``
    (None on the command line: fresh, derived from the seed, or a job's from its job id)."""

    statistic = STATISTIC

    secure_sum: str = Param(
        "bgw", Choice(*SECURE_SUMS),
        "'bgw' (default) Shamir-shared sum on the mpc runtime; 'masked' the paper's Protocol 0, pairwise masks modulo "
        "2^k > b M (k bits per value), SHAKE-256 streams of keys the clients agree on by X25519 (fresh per run)",
        error=f"secure sum must be one of {SECURE_SUMS}, got {{value}}").field()
    test_fraction: float = Param(
        0.2, Interval(0, 1, "left", says="be in [0, 1)"),
        "with --job: the fraction of the records in common held out for the server's test metrics (a public split "
        "of their positions by --split-seed; default {default}; 0: none)", label="--test-fraction").field()
    split_seed: int = Param(0, Integer(0), "public train/test split seed (default: {default})").field()
    batch_seed: int | None = Param(None, Integer(0), "PUBLIC seed of the mini-batch order (default: fresh; with "
                                   "--seed, derived one way from it)", optional=True).field()
