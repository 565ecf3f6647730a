"""The SQM linear-regression task of job files (:mod:`sqm.framework.spec`), :class:`LinRegJobTask`: what a party process
of a ``sqm linreg --job`` imports (with the estimator it holds), apart from the command in :mod:`.cli`."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from sqm.framework.jobtask import JobTask, check_label_header, switches_of
from sqm.apps.linreg.params import MAX_LABEL_CLIPPED, LinRegJobParams
from sqm.apps.linreg.statistic import guarded_solve, joint_matrix
from sqm.errors import UsageError
from sqm.mechanism.params import Range, public_range
from sqm.mpc.net.party import InputRefused, ProtocolError

if TYPE_CHECKING:
    from sqm.apps.linreg.estimator import SQMLinearRegression


class LinRegJobTask(JobTask):
    """The SQM linear-regression task for :mod:`sqm.framework.spec`: the last client's CSV holds the label column
    ``label_column`` besides its features, whose public range ``label_range`` the task declares (required: the
    label party clamps the label to it and scales it into the label bound, and refuses the release when more than
    ``max_label_clipped`` of its rows lie outside it); every party plans the same release from the clients' column
    and record counts and runs :func:`sqm.mechanism.release.sqm_round`; the server solves.  Seeds as in
    :class:`sqm.apps.pca.PCAJobTask` (never sent; a seeded job equals ``SQMLinearRegression(seed=...).fit``)."""

    hides_membership = True  # "hide_membership": the joint Gram over the union, members only (sqm.framework.alignment)

    def __init__(self, estimator: SQMLinearRegression, label_column: str = "label",
                 insecure_reproducible: bool = False, label_range=None,
                 max_label_clipped: float = MAX_LABEL_CLIPPED):
        from sqm.framework.party import seed_policy

        self.secure_mode = seed_policy(estimator.seed, insecure_reproducible, warn=False)
        self.est, self.label_column, self.seed = estimator, label_column, estimator.seed
        self.label_range = label_range if label_range not in Range() else public_range(label_range)
        self.max_label_clipped = max_label_clipped
        # bad parameters (the label column's and range's too) and a missing label range refused here, before any
        # party starts
        self.params.require_label_range()
        self.est.mechanism([1, 2])

    @property
    def row_norm_bound(self) -> float:
        """The features' row norm bound: a client's declared column ranges scale into it (:mod:`sqm.framework.spec`)."""
        return float(self.est.feature_bound)

    def feature_counts(self, meta) -> list[int]:
        """Each client's feature columns (the label party's label column excluded), as the release's column
        groups (:func:`sqm.apps.linreg.statistic.joint_bounds`)."""
        counts = list(meta.col_counts)
        counts[-1] -= 1
        if counts[-1] < 1:
            raise ProtocolError(f"client {len(counts)} (the label party) needs feature columns besides the label; "
                                f"refused")
        return counts

    def declared_bound(self, column: str, col_bound: float) -> float:
        """A declared range of the label column scales it into the label bound; a feature's into its share."""
        return float(self.est.label_bound) if column == self.label_column else col_bound

    def check_bounds(self, bounds) -> None:
        """The label's range is the task's (``label_range``), declared once: a client's ``bounds`` naming the label
        column too is refused."""
        for j, b in enumerate(bounds, start=1):
            if any(col == self.label_column for col, _, _ in b):
                raise UsageError(f"client {j} declares a range (\"bounds\") for the label column "
                                 f"'{self.label_column}': the label's range is declared once, in the task "
                                 f"(\"label_range\": [lo, hi] in the job file's task block, or --label-range LO HI); "
                                 f"remove it from \"bounds\"")

    def declared_ranges(self, n_clients: int) -> dict[int, tuple]:
        """The label's declared range, a column range of the label party (the last client): it clamps its label to
        it and scales it into the label bound (:meth:`declared_bound`), as a range in ``bounds`` would."""
        lo, hi = self.params.require_label_range()
        return {n_clients: ((self.label_column, lo, hi),)}

    def preflight(self, headers: dict[int, list[str]], n_clients: int) -> None:
        """The label party's (the last client's) file must hold the label column and a feature besides it."""
        check_label_header(headers, n_clients, self.label_column)

    def check_table(self, table, pid: int, n_clients: int) -> tuple[str, str] | None:
        """The label party refuses, before anything derived from its records is sent, a label outside the declared
        range on more than ``max_label_clipped`` of its rows: (the detail for its operator, the public reason)."""
        if pid != n_clients or self.label_column not in table.columns:
            return None
        lo, hi = self.params.require_label_range()
        y = np.asarray(table.block, dtype=np.float64)[:, list(table.columns).index(self.label_column)]
        outside = int(np.count_nonzero((y < lo) | (y > hi)))
        share = outside / max(1, y.size)
        if share <= float(self.max_label_clipped):
            return None
        public = (f"its label lies outside the declared label_range [{lo:g}, {hi:g}] on more than "
                  f"max_label_clipped {float(self.max_label_clipped):g} of its rows (it would be clamped)")
        detail = (f"its label '{self.label_column}' lies outside the declared label_range [{lo:g}, {hi:g}] on "
                  f"{outside:,} of its {y.size:,} rows ({100 * share:.1f}%, above max_label_clipped "
                  f"{float(self.max_label_clipped):g}; observed range [{y.min():g}, {y.max():g}]): widen "
                  f"\"label_range\" in the task block, or raise \"max_label_clipped\"")
        return detail, public

    def with_party_bounds(self, party_bounds):
        raise UsageError("sqm linreg --job takes no norm shares (\"norm_share\"): its clients share the feature "
                         "bound by their column counts; remove them")

    @property
    def params(self) -> LinRegJobParams:
        """The job's declared parameters: the estimator's release and the label column."""
        return LinRegJobParams(**self.est.params().as_dict(), label_column=self.label_column,
                               label_range=self.label_range, max_label_clipped=self.max_label_clipped)

    def public(self):
        return self.params.public()

    def switches(self) -> dict[str, object]:
        return switches_of(self.params.as_dict(), self.secure_mode)

    def _plan(self, meta):
        counts = list(meta.col_counts)
        counts[-1] += int(bool(self.est.fit_intercept))  # the label party adds the constant column
        mech = self.est.mechanism(counts)
        return (counts, mech, *mech.round_plan(counts, meta.n_records, align_ids=True))

    def release(self, meta):
        """The privacy report (events) of the job's one SQM release, from the public counts only."""
        return self._plan(meta)[3]

    releases_model = True  # the weights by raw column and the intercept (sqm linreg --job --json)

    def released_model(self, result: dict) -> dict:
        """The ridge model the server's result gives, as ``sqm linreg --job --json`` writes it: each feature's
        weight on its raw column and the intercept, in the label's raw units (declared ranges' scaling undone)."""
        from sqm.framework.released_models import linear_model
        from sqm.framework.units import feature_columns, raw_linear_model

        counts = result["col_counts"]
        cols = feature_columns(result.get("columns") or [], counts, len(counts) - 1, self.label_column)
        coef = np.asarray(result["coef"]).ravel()
        cols = cols if len(cols) == len(coef) else [f"x{j}" for j in range(len(coef))]
        scales = result.get("column_scales") or {}
        raw, intercept = raw_linear_model(coef, cols, scales, result["intercept"],
                                          float(scales.get(self.label_column, 1.0)))
        return linear_model("linear", raw, intercept)

    async def run(self, ctx, table, meta) -> dict:
        from sqm.mechanism.release import sqm_round
        from sqm.mechanism.rng import make_rng, spawn_seeds

        counts, mech, plan, report = self._plan(meta)
        block = None if table is None else table.block
        if table is not None and ctx.pid == meta.n_parties:  # the label party: [features, 1, y]
            if self.label_column not in table.columns:
                raise InputRefused(f"its file has no label column '{self.label_column}'", table.file)
            k = list(table.columns).index(self.label_column)
            block = joint_matrix(np.delete(table.block, k, axis=1), table.block[:, k], bool(self.est.fit_intercept))
        rng = make_rng(spawn_seeds(self.seed, meta.n_parties + 1)[ctx.pid])
        out = await sqm_round(ctx, mech.polynomial, block, plan, rng,
                              ids_digest=None if table is None else table.ids_digest)
        if not ctx.is_server:
            return {"clipped": out.clipped, "rows": table.n_rows, "cols": table.n_cols}
        assert out.estimate is not None  # the server's part of a release: the estimate
        gram = out.estimate.reshape(sum(counts), sum(counts))
        # post-processing of the release (no privacy cost): the penalty from public quantities, the solve, the
        # shrinkage toward the released mean and the released model's training R^2 with its interval
        alpha = None if self.est.alpha is None else float(self.est.alpha)
        fit = guarded_solve(gram, alpha, math.sqrt(2 * report.mu) / out.scale, bool(self.est.fit_intercept),
                            n_records=meta.n_records)
        quality = ("alpha", "shrinkage", "r2_released", "r2_std", "r2_lower", "r2_upper", "mean_returned")
        return {"coef": fit["coef"], "intercept": fit["intercept"], **{k: fit[k] for k in quality},
                "report": report.as_dict(), "raw": out.raw}
