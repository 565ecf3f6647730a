"""SQM-LR as a job-file task (:mod:`sqm.framework.spec`): a real multi-party run in which each party reads only its own
CSV, the label party's holding the label column."""
from __future__ import annotations

import dataclasses

import numpy as np

from sqm.framework.party import seed_policy
from sqm.framework.jobtask import JobTask, check_label_header, switches_of
from sqm.mechanism.release import sqm_round
from sqm.mechanism.report import PrivacyReport
from sqm.mechanism.rng import make_rng, spawn_seeds
from sqm.apps.logreg.estimator import SQMLogisticRegression, split_label, split_weights
from sqm.apps.logreg.moments import fit_release
from sqm.apps.logreg.params import LogRegJobParams
from sqm.apps.logreg.party import LRPlan, train_party
from sqm.errors import UsageError
from sqm.mpc.net.party import InputRefused, ProtocolError


class LRJobTask(JobTask):
    """The SQM-LR task for :mod:`sqm.framework.spec`: the label party's CSV holds the label column
    ``label_column`` (any two values: the smaller is 0, the larger 1, and the label party says so in its own
    output; anything else is refused before any share) besides its features; every party builds the same
    public plan from the clients' column and record counts (the schedule left None from the record count:
    :func:`sqm.apps.logreg.estimator.default_schedule`, as in local mode; the record count is the record
    alignment's intersection size), the clients compare the digests of their records' order among themselves,
    and the run is :func:`sqm.apps.logreg.party.train_party`.  The server's result is the weights
    (in the clients' column order, the label excluded; the intercept separate) and the privacy report; each
    client's clip count stays with that client.  ``progress_path``: a file on the server's machine where its
    program appends its running figure (the noisy gradient's norm, :class:`sqm.apps.logreg.party._Eval`) for the
    command's progress bar (the server's own display, not a public parameter).

    Randomness: without ``seed`` (secure mode, the default) every party draws its own from OS entropy.  A
    ``seed`` makes every party derive its seed from it, so anyone holding it (the server's operator too) can
    regenerate every client's noise: it is refused unless ``insecure_reproducible=True``, and the report then
    records ``secure_mode: False``.  The seed is never part of the public parameters the parties agree on."""

    def __init__(self, *args, seed=None, insecure_reproducible: bool = False, progress_path: str | None = None,
                 params: LogRegJobParams | None = None, **values):
        """``params`` (a :class:`LogRegJobParams`), or its fields as arguments, in its order or by name (the
        sampling rate by its task-block key ``q`` too): ``LRJobTask(1.0, 1e-5, 8192.0, label_column="y")``;
        ``seed`` this party's own (never public)."""
        seed_policy(seed, insecure_reproducible, warn=False)  # a seed without the opt-in: refused
        if "q" in values:
            values["sampling_rate"] = values.pop("q")
        self.params = params if params is not None else LogRegJobParams(*args, **values)
        self.seed, self.progress_path = seed, progress_path
        self.estimator = self._estimator(self.params)
        self.estimator.check_params()  # bad parameters refused here, before any party starts
        self._moment_plans: dict = {}

    def _estimator(self, params: LogRegJobParams) -> SQMLogisticRegression:
        return SQMLogisticRegression(**params.release().as_dict(), backend="mpyc", seed=self.seed)

    def __getattr__(self, name: str):
        """The parameters read as the task's own attributes (``task.label_column``)."""
        if name in LogRegJobParams.names():
            return getattr(self.params, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getstate__(self):
        return {**self.__dict__, "_moment_plans": {}}  # a party plans from its own copy

    row_norm_bound = 1.0  # a record's feature row, before the intercept's constant: ||x||_2 <= 1
    # "hide_membership": the moments solver's Gram over the union, members only (sqm.framework.alignment), as a PCA
    # job's; the sgd solver samples its batches over the union and multiplies each batch row by its membership
    # inside the secure gradient (sqm.apps.logreg.party, "Membership hidden")
    hides_membership = True

    @property
    def secure_mode(self) -> bool:
        return self.seed is None

    def switches(self) -> dict[str, object]:
        return switches_of(self.params.as_dict(), self.secure_mode)

    @property
    def party_bounds(self):
        """The clients' feature sub-row bounds c_j (None: c_j = sqrt(its feature columns / all))."""
        return self.params.party_bounds

    def with_party_bounds(self, party_bounds) -> LRJobTask:
        """This task with the clients' sub-row bounds c_j (from the job file's declared norm shares)."""
        import copy

        task = copy.copy(self)
        task.params = dataclasses.replace(self.params, party_bounds=tuple(float(b) for b in party_bounds))
        task.estimator = task._estimator(task.params)
        task._moment_plans = {}
        return task

    def feature_counts(self, meta) -> list[int]:
        """Each client's feature column count (the label party's label column excluded): the counts the row
        norm bound is shared over, in the plan and in :meth:`sqm.framework.party.JobParty._scaled` alike."""
        label = self.label_index(meta)
        counts = list(meta.col_counts)
        counts[label] -= 1
        if counts[label] < 1:
            raise ProtocolError(f"client {label + 1} (the label party) needs feature columns besides the label; "
                                f"refused")
        return counts

    def label_index(self, meta) -> int:
        """The label party's 0-based client index (refused alike by every party when it does not exist)."""
        n = meta.n_parties
        label = n - 1 if self.label_party is None else int(self.label_party)
        if not 0 <= label < n:  # every party sees the same public counts: all refuse alike
            raise ProtocolError(f"label party {label} is missing: the job has clients 0..{n - 1}; refused")
        return label

    def preflight(self, headers: dict[int, list[str]], n_clients: int) -> None:
        """The label party's file must hold the label column and a feature besides it (labels need no range:
        they are mapped to 0/1, which the release bounds exactly)."""
        label = n_clients if self.label_party is None else int(self.label_party) + 1
        check_label_header(headers, label, self.label_column)

    def check_bounds(self, bounds) -> None:
        """The job file's declared ranges (per client) may not scale the label column."""
        for j, b in enumerate(bounds, 1):
            if any(col == self.label_column for col, _, _ in b):
                raise UsageError(f"client {j} declares a range (\"bounds\") for the label column "
                                 f"'{self.label_column}': only feature columns are scaled; remove it")

    def public(self):
        return self.params.public()

    def solver_of(self, meta) -> tuple[str, str]:
        """(the solver this job runs, why): the one given, or ``solver="auto"``'s choice from the public record
        count (the intersection's size; with membership hidden the S positions the union is placed over, which
        every party knows, not the intersection, which only the server does), the clients' feature column counts
        and epsilon (:func:`sqm.apps.logreg.estimator.auto_solver`), every party alike."""
        return self.estimator.resolve_solver(meta.n_records, sum(self.feature_counts(meta)))

    def _runner(self, meta) -> SQMLogisticRegression:
        """The estimator whose plan this job runs (its solver resolved, :meth:`solver_of`)."""
        return self.estimator.for_solver(self.solver_of(meta)[0])

    def _moments(self, meta):
        """(the SQM release, its layout, its report) of the moments solver, from the public counts."""
        if meta not in self._moment_plans:
            label, counts = self.label_index(meta), self.feature_counts(meta)
            self._moment_plans[meta] = self._runner(meta).moments_plan(meta.n_records, counts, label)
        return self._moment_plans[meta]

    def _plan(self, meta) -> tuple[LRPlan, PrivacyReport, int]:
        """The public plan, privacy report and label party from the clients' public counts (every party alike)."""
        label, counts = self.label_index(meta), self.feature_counts(meta)
        return (*self._runner(meta).plan(meta.n_records, counts, label, union=meta.union), label)

    def release(self, meta) -> PrivacyReport:
        """What the job releases (for the server's privacy-budget ledger), from the public counts."""
        return self._moments(meta)[2] if self.solver_of(meta)[0] == "moments" else self._plan(meta)[1]

    async def _run_moments(self, ctx, table, meta) -> dict:
        """The moments solver's one release (:func:`sqm.mechanism.release.sqm_round` of the Gram of [features, c,
        kappa y, beta (1/2 - y)], as a PCA job's) and, at the server, the model fitted from it
        (:mod:`sqm.apps.logreg.moments`)."""
        mech, layout, report = self._moments(meta)
        label = layout.label_party
        plan = mech._release_plan(report, layout.block_counts, meta.n_records, align_ids=True)
        rows, labels = None, None
        if table is not None:
            if ctx.pid - 1 == label:
                block, labels = self.label_block(table)
                rows = layout.block(block[:, :-1], block[:, -1])
            else:
                rows = table.block
        my_seed = spawn_seeds(self.seed, meta.n_parties + 1)[ctx.pid]
        out = await sqm_round(ctx, mech.polynomial, rows, plan, make_rng(my_seed),
                              None if table is None else table.ids_digest)
        if not ctx.is_server:
            assert out.clipped is not None  # a client's part of a release: its clip count
            res = {"clipped": int(out.clipped), "rows": table.n_rows}
            if labels is not None:
                res["labels"] = labels
            return res
        _, w, b = fit_release(out.estimate, layout, max(1, meta.records_released), report.mu, mech.gamma,
                              bool(self.estimator.fit_intercept))
        return {"weights": np.r_[w, b], "coef": w, "intercept": float(b), "report": report,
                "secure_mode": self.secure_mode, "fit_intercept": bool(self.estimator.fit_intercept),
                "solver": "moments", "solver_reason": self.solver_of(meta)[1], "schedule": None, "b_max": None}

    async def run(self, ctx, table, meta) -> dict:
        if self.solver_of(meta)[0] == "moments":
            return await self._run_moments(ctx, table, meta)
        plan, report, label = self._plan(meta)
        block, labels = None, None
        if table is not None:
            if ctx.pid - 1 == label:  # the label party's own input: the others learn only the reason, never a value
                block, labels = self.label_block(table)
            else:
                block = table.block
        seeds = spawn_seeds(self.seed, meta.n_parties + 1)
        res = await train_party(ctx, plan, seeds[ctx.pid], block, check_ids=not meta.union,
                                members=meta.members if ctx.is_server else None,
                                ids_digest=None if table is None else table.ids_digest,
                                progress_path=self.progress_path if ctx.is_server else None,
                                every=max(1, plan.rounds // 200))
        if ctx.is_server:
            coef, intercept = split_weights(res["weights"], plan)
            res.update(report=report, secure_mode=self.secure_mode, b_max=plan.b_max, coef=coef[0],
                       intercept=float(intercept[0]), fit_intercept=plan.has_intercept, solver="sgd",
                       solver_reason=self.solver_of(meta)[1],
                       schedule={**dataclasses.asdict(self._runner(meta).schedule(meta.n_records)),
                                 "rounds": plan.rounds})
        else:
            res["rows"] = table.n_rows  # this client's own clip count over its rows (sqm.framework.party.clip_warning)
            if labels is not None:
                res["labels"] = labels
        return res

    releases_model = True  # the weights by raw column and the intercept (sqm logreg --job --json)

    def released_model(self, result: dict) -> dict:
        """The logistic-regression model the server's result gives, as ``sqm logreg --job --json`` writes it:
        each feature's weight on its raw column (declared ranges' scaling undone) and the intercept."""
        from sqm.framework.released_models import linear_model
        from sqm.framework.units import feature_columns, raw_linear_model

        counts = result["col_counts"]
        label = len(counts) - 1 if self.label_party is None else int(self.label_party)
        cols = feature_columns(result.get("columns") or [], counts, label, self.label_column)
        coef = np.asarray(result["coef"]).ravel()
        cols = cols if len(cols) == len(coef) else [f"x{j}" for j in range(len(coef))]
        raw, _ = raw_linear_model(coef, cols, result.get("column_scales") or {})
        return linear_model("logistic", raw, float(result["intercept"]))

    def label_block(self, table) -> tuple[np.ndarray, str]:
        """The label party's block [features, label as 0/1] and what the mapping was, or InputRefused (its
        reason, sent to every peer, names no value; the detail with the fix stays at this party).  With membership
        hidden the labels are read from the party's own records only (``table.held``); the rows of the union it
        does not hold stay zeros (the label 0 there multiplies nothing: such a row is no member)."""
        held = getattr(table, "held", None)
        try:
            X, y, _, note = split_label(table.block if held is None else table.block[held], table.columns,
                                        self.label_column, table.file)
        except ValueError as err:
            public = (f"its file has no label column '{self.label_column}' (--label-column)"
                      if self.label_column not in table.columns else
                      "its label column does not hold exactly two classes (recode it to two values, e.g. 0/1)")
            raise InputRefused(public, str(err)) from None
        block = np.hstack([X, y[:, None]])
        if held is not None:
            placed = np.zeros((table.n_rows, block.shape[1]))
            placed[held] = block
            block = placed
        return block, note
