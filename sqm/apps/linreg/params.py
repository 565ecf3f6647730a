"""SQM ridge regression's parameters, declared once (:mod:`sqm.mechanism.params`): the estimator's defaults and
checks come from :class:`LinRegParams`; the job task's public parameters, the job file's task block and
``sqm linreg``'s options from :class:`LinRegJobParams` (the same, and the label's column).  Standard library
only (``sqm --help`` and a party process import it)."""
from __future__ import annotations

import dataclasses
import math

from sqm.mechanism.params import DELTA, EPSILON, GAMMA, Boolean, Interval, Param, Params, Text

POSITIVE = Interval(0, math.inf, "neither", says="be > 0")


@dataclasses.dataclass(frozen=True)
class LinRegParams(Params):
    """One SQM release of the joint Gram [X 1 y]^T [X 1 y] and the server's ridge solve: ``alpha`` (the ridge
    penalty, on the record-sum scale), the privacy parameters, ``feature_bound`` c_x (every record's ||x||),
    ``label_bound`` c_y (|y|), ``fit_intercept``."""

    statistic = "linreg"

    alpha: float = Param(1.0, Interval(0, math.inf, "left"),
                         "ridge penalty on the record-sum scale (default {default})").field()
    epsilon: float = EPSILON.field()
    delta: float = DELTA.field()
    gamma: float = GAMMA.field()
    feature_bound: float = Param(1.0, POSITIVE, "c_x: every record's ||x|| (default {default})").field()
    label_bound: float = Param(1.0, POSITIVE, "c_y: every record's |y| (default {default})").field()
    fit_intercept: bool = Param(True, Boolean(), option="").field()


@dataclasses.dataclass(frozen=True)
class LinRegJobParams(LinRegParams):
    """A ``sqm linreg --job``'s parameters: the release's, and the label column of the last client's file."""

    label_column: str = Param("label", Text(), "the target column: of the last client's file (--job) or of your "
                              "own table (--data FILE)").field()
