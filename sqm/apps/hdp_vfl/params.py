"""HDP-VFL's parameters, declared once (:mod:`sqm.mechanism.params`): :class:`HDPParams` gives
:class:`sqm.apps.hdp_vfl.estimator.HDPLogisticRegression` its defaults and checks and ``sqm hdp-vfl`` its
training options.  Standard library only (``sqm --help`` imports it)."""
from __future__ import annotations

import dataclasses
import math

from sqm.mechanism.params import (
    DELTA,
    DOMAINS,
    EPSILON,
    POSITIVE,
    Integer,
    Interval,
    Param,
    Params,
)


@dataclasses.dataclass(frozen=True)
class HDPParams(Params):
    """One HDP-VFL training run: each party's (epsilon, delta) (epsilon math.inf: no noise, the non-private
    reference), ``epochs`` e, ``batch_size`` b, the weight norm bound ``k``, the l2 penalty ``l2`` (lambda), the
    ``learning_rate`` eta and the value ``intercept`` u of the active party's constant column."""

    statistic = "hdp-vfl"

    epsilon: float = EPSILON.field(rule=DOMAINS["epsilon or inf"], label="epsilon")
    delta: float = DELTA.field(default=0.01)
    epochs: int = Param(10, Integer(1), "epochs e (default: {default})").field()
    batch_size: int = Param(3200, Integer(1), "mini-batch size b; the training size if smaller (default: "
                            "{default})").field()
    k: float = Param(1.0, Interval(0, math.inf, "neither"), "weight norm bound k > 0 (default: {default})",
                     option="weight_bound", label="the weight norm bound k").field()
    l2: float = Param(0.001, Interval(0, math.inf, "left"), "l2 regularization lambda (default: {default})",
                      label="l2 (lambda)").field()
    learning_rate: float = Param(0.5, POSITIVE, "learning rate eta (default: {default})").field()
    intercept: float = Param(0.5, Interval(0, 1, "left"), "value u in [0, 1) of a constant column the active party "
                             "prepends (its weight is the intercept; the features share the remaining row norm "
                             "sqrt(1 - u^2)); 0: none (default: {default})",
                             label="intercept (the constant column's value u)").field()
