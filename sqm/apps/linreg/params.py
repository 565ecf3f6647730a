"""SQM ridge regression's parameters, declared once (:mod:`sqm.mechanism.params`): the estimator's defaults and
checks come from :class:`LinRegParams`; the job task's public parameters, the job file's task block and
``sqm linreg``'s options from :class:`LinRegJobParams` (the same, and the label's column).  Standard library
only (``sqm --help`` and a party process import it)."""
from __future__ import annotations

import dataclasses
import math

from sqm.errors import UsageError
from sqm.mechanism.params import (DELTA, EPSILON, GAMMA, VERIFY_INPUTS, Boolean, Interval, Param, Params, Range, Text,
                                  public_range)

POSITIVE = Interval(0, math.inf, "neither", says="be > 0")


@dataclasses.dataclass(frozen=True)
class LinRegParams(Params):
    """One SQM release of the joint Gram [X 1 y]^T [X 1 y] and the server's ridge solve: ``alpha`` (the ridge
    penalty, on the record-sum scale; None: :func:`sqm.apps.linreg.statistic.noise_penalty`, from public
    quantities only), the privacy parameters, ``feature_bound`` c_x (every record's ||x||),
    ``label_bound`` c_y (|y|), ``fit_intercept``, ``verify_inputs`` (every client proves its values and row norms
    within these bounds and its noise drawn as committed: :class:`sqm.mechanism.release.SQM`'s)."""

    statistic = "linreg"

    alpha: float | None = Param(None, Interval(0, math.inf, "left"),
                                "ridge penalty on the record-sum scale, on top of the solve's floor of the "
                                "released X^T X's eigenvalues at the noise's spectral norm (default: from public "
                                "quantities only; see the linear-regression how-to)",
                                optional=True).field()
    epsilon: float = EPSILON.field()
    delta: float = DELTA.field()
    gamma: float = GAMMA.field()
    feature_bound: float = Param(1.0, POSITIVE, "c_x: every record's ||x|| (default {default})").field()
    label_bound: float = Param(1.0, POSITIVE, "c_y: every record's |y| (default {default})").field()
    fit_intercept: bool = Param(True, Boolean(), option="").field()
    verify_inputs: bool = VERIFY_INPUTS.field()


# The largest share of the label party's rows whose label may lie outside the declared label range (and be
# clamped to it) before the label party refuses the release.  1%: the share above which every client is warned
# that clipping biases its release (sqm.framework.party.CLIP_WARN_FRACTION); a regression fitted on a target
# clamped on more rows than that is fitted to another target, so such a range is a mistake to fix, not a release
# to make.  A range left out of a job is refused outright.
MAX_LABEL_CLIPPED = 0.01

LABEL_RANGE_HELP = ("with --job: the label's public range LO HI (job file: \"label_range\": [lo, hi] in the task "
                    "block), declared once: the label party clamps its label to it and scales it into --label-bound; "
                    "required with --job")


@dataclasses.dataclass(frozen=True)
class LinRegJobParams(LinRegParams):
    """A ``sqm linreg --job``'s parameters: the release's, the label column of the last client's file, the label's
    public range (required in a job: :meth:`require_label_range`) and the largest share of rows whose label may
    lie outside it."""

    label_column: str = Param("label", Text(), "the target column: of the last client's file (--job) or of your "
                              "own table (--data FILE)").field()
    label_range: tuple | None = Param(None, Range(), LABEL_RANGE_HELP, optional=True,
                                      public="tagged").field()
    max_label_clipped: float = Param(MAX_LABEL_CLIPPED, Interval(0, 1, "both"),
                                     "with --job: the label party refuses the release, before sending anything, when "
                                     "more than this share of its rows has a label outside --label-range "
                                     "(default {default})", metavar="SHARE", public="tagged").field()

    def require_label_range(self) -> tuple[float, float]:
        """The declared label range, or a UsageError saying how to declare it (a job without one would clip
        every label beyond --label-bound and still release)."""
        if self.label_range is None:
            raise UsageError(f"a linreg job needs its label's public range, declared once: \"label_range\": [lo, hi] "
                             f"in the task block, or --label-range LO HI (labels beyond --label-bound "
                             f"{self.label_bound:g} would be clipped)")
        return public_range(self.label_range)
