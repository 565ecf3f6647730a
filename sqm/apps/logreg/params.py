"""SQM logistic regression's parameters, declared once (:mod:`sqm.mechanism.params`): the estimator's defaults and
checks come from :class:`LogRegParams`; the job task's public parameters, the job file's task block and ``sqm
logreg``'s options from :class:`LogRegJobParams` (the same, and the label's column).  Standard library only
(``sqm --help`` and a party process import it).

The job's public tuple holds the label column between the schedule and the label party (the order the parties
have always agreed on): both dataclasses are built from three groups of fields, :class:`_Schedule`,
:class:`_LabelColumn` (the job's only) and :class:`_Model`, a dataclass listing its bases' fields from the last
base to the first."""
from __future__ import annotations

import dataclasses

from sqm.apps.logreg.texts import SOLVER_HELP
from sqm.mechanism.params import (
    DELTA,
    DOMAINS,
    EPSILON,
    GAMMA,
    PARTY_BOUNDS,
    POSITIVE,
    ROBUST_NOISE,
    VERIFY_INPUTS,
    VERIFY_SHARING,
    Boolean,
    Choice,
    Integer,
    Interval,
    Param,
    Params,
    Text,
    robust_noise_help,
    verify_sharing_help,
)

SOLVERS = ("auto", "moments", "sgd")

SAMPLING_RATE = Param(None, Interval(0, 1, "right"), "Poisson sampling rate (default: chosen from the record count "
                      "n: max(64, sqrt n) / n)", optional=True, option="q", label="sampling rate q")
EPOCHS = Param(None, Integer(1), "epochs (default: the paper's 2, 5, 8, 10, 10 for epsilon 0.5, 1, 2, 4, 8)",
               optional=True)
LEARNING_RATE = Param(None, POSITIVE, "learning rate for SQM, DPSGD and the Taylor reference (default 2)",
                      optional=True)
WEIGHT_BOUND = Param(None, POSITIVE, "project ||w||_2 <= W (the intercept's weight included) after each step, SQM "
                     "and DPSGD alike; W enters SQM's sensitivity (default 8)", optional=True)
BASE_RATE = Param(None, DOMAINS["base_rate"], "with --solver sgd: p0, the positive share the gradient's Taylor "
                  "expansion is taken at (the intercept-only model sigma(b0) = p0, b0 = logit p0 added to the "
                  "intercept): near the data's positive share, an imbalanced set's one-round direction loses the "
                  "bias sum x (1/2 - p0) that clipped, uncentered rows carry; public, chosen on validation data "
                  "(default 1/2, Eq. 19)", optional=True, label="base rate p0", public="tagged")
LABEL_COLUMN = Param("label", Text(), "with --job or --data FILE: the label column's name (default {default}); any "
                     "two values, the smaller mapped to 0 and the larger to 1 (said in the output)")
LABEL_PARTY = Param(None, Integer(0, note="a 0-based client index"), "with --job: 0-based client index holding the "
                    "label (default the last client)", optional=True)
FIT_INTERCEPT = Param(True, Boolean(), "fit no intercept (default: an intercept, as scikit-learn: the label party "
                      "appends a public constant column 1, counted in the sensitivity; every baseline fits one too)",
                      option="no_intercept", negate=True)
INTERCEPT_SCALING = Param(1.0, POSITIVE, option="")
SOLVER = Param("auto", Choice(*SOLVERS), SOLVER_HELP)
ROBUST_NOISE_HELP = robust_noise_help("solver moments")
VERIFY_SHARING_HELP = verify_sharing_help(
    "before the release (with --solver sgd: before every round's opening)",
    "two more exchanges are made, the seeds and the check (with --solver sgd: per round)")
VERIFY_INPUTS_HELP = VERIFY_INPUTS.help + "; the moments solver's release only (refused with --solver sgd)"


@dataclasses.dataclass(frozen=True)
class _Schedule(Params):
    """The privacy parameters and the sgd solver's schedule (None: chosen from the record count)."""

    epsilon: float = EPSILON.field()
    delta: float = DELTA.field()
    gamma: float = GAMMA.field(default=8192.0, help="quantization scale gamma (default {default} = 2^13)")
    sampling_rate: float | None = SAMPLING_RATE.field()
    epochs: int | None = EPOCHS.field()
    learning_rate: float | None = LEARNING_RATE.field()
    weight_bound: float | None = WEIGHT_BOUND.field()


@dataclasses.dataclass(frozen=True)
class _LabelColumn(Params):
    label_column: str = LABEL_COLUMN.field()


@dataclasses.dataclass(frozen=True)
class _Model(Params):
    """The label party, the intercept, the clients' norm shares, the solver and the deviating clients' options."""

    label_party: int | None = LABEL_PARTY.field()
    fit_intercept: bool = FIT_INTERCEPT.field()
    intercept_scaling: float = INTERCEPT_SCALING.field()
    party_bounds: tuple | None = PARTY_BOUNDS.field()
    solver: str = SOLVER.field()
    robust_noise: int = ROBUST_NOISE.field(public="always", help=ROBUST_NOISE_HELP)
    verify_sharing: bool = VERIFY_SHARING.field(public="always", help=VERIFY_SHARING_HELP)
    verify_inputs: bool = VERIFY_INPUTS.field(help=VERIFY_INPUTS_HELP)
    base_rate: float | None = BASE_RATE.field()  # the sgd solver's, last: the positional order stays as agreed


@dataclasses.dataclass(frozen=True)
class LogRegParams(_Model, _Schedule):
    """SQM-LR's release parameters (:class:`sqm.apps.logreg.estimator.SQMLogisticRegression`'s): epsilon, delta,
    gamma, the sgd solver's schedule (``sampling_rate`` q, ``epochs``, ``learning_rate``, ``weight_bound`` W,
    ``base_rate`` p0),
    ``label_party``, ``fit_intercept`` and ``intercept_scaling``, each client's share ``party_bounds``,
    ``solver``, ``robust_noise``, ``verify_sharing`` and ``verify_inputs`` (the moments solver's release only)."""

    statistic = "sqm-logreg"


@dataclasses.dataclass(frozen=True)
class LogRegJobParams(_Model, _LabelColumn, _Schedule):
    """A ``sqm logreg --job``'s parameters: the release's, and the label column of the label party's file."""

    statistic = "sqm-logreg"

    def release(self) -> LogRegParams:
        """The estimator's parameters (all but the label column)."""
        return LogRegParams(**{name: getattr(self, name) for name in LogRegParams.names()})
