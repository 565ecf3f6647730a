"""The SQM-PCA task of job files (:mod:`sqm.framework.spec`): each party runs SQM's per-party step on its own file.

A party process imports this module and :mod:`sqm.apps.pca.utility` only (no scikit-learn).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from sqm.framework.party import seed_policy
from sqm.mpc.net.abort import refused
from sqm.mpc.protocols.api import PartyAPI
from sqm.framework.jobtask import DeclaredTask
from sqm.mechanism.release import sqm_round
from sqm.mechanism.rng import make_rng, spawn_seeds
from sqm.apps.pca.params import PCAParams
from sqm.apps.pca.utility import check_components, components_from_covariance, covariance_release

if TYPE_CHECKING:
    from sqm.framework.party import JobMeta
    from sqm.mechanism.release import SQM, SQMPlan
    from sqm.mechanism.report import PrivacyReport


class PCAJobTask(DeclaredTask):
    """The SQM-PCA task for :mod:`sqm.framework.spec`: every party plans the same public release from the clients'
    column and record counts (:meth:`sqm.mechanism.release.SQM.round_plan`) and runs its part of it with
    :func:`sqm.mechanism.release.sqm_round`, SQM's one per-party step: each client clips, quantizes and noises its own
    file's columns, with the digest of its records' order from the alignment (:mod:`sqm.framework.alignment`), which the
    clients compare again before any share; the server receives the
    noisy X^T X and computes the components.

    With ``seed=None`` (the default, ``secure_mode``) each party draws its own randomness from OS entropy.
    A ``seed`` needs ``insecure_reproducible=True`` (see :func:`sqm.framework.party.seed_policy`): it is never sent
    nor part of :meth:`public`; party i takes entry i of ``spawn_seeds(seed, M)`` from its own copy, so a
    run whose parties were all given the same seed equals ``SQMPCA(..., seed=seed).fit`` on the same
    columns bit for bit (tests), and anyone who knows that seed can regenerate every party's noise.
    """

    streams = True  # party files sorted by id are read chunk by chunk (sqm.framework.party.load_own_file)
    hides_membership = True  # "hide_membership": the covariance over the union, members only (sqm.framework.alignment)

    def __init__(self, *args, seed=None, insecure_reproducible: bool = False, steps_path: str | None = None,
                 params: PCAParams | None = None, **values):
        """``params`` (a :class:`PCAParams`), or its fields as arguments (``PCAJobTask(2, epsilon=1.0)``);
        ``seed`` this party's own (never public); ``steps_path``: party i reports its progress to PATH.i
        (:attr:`sqm.framework.jobtask.JobTask.steps_path`; not public)."""
        self.secure_mode = seed_policy(seed, insecure_reproducible, warn=False)
        self.params = params if params is not None else PCAParams(*args, **values)
        # this party's own seed from its own command line (None: OS entropy); never sent
        self.seed, self.steps_path = seed, steps_path
        self.mechanism(1)  # check the parameters now, before any party starts
        self._plans: dict[JobMeta, tuple[int, SQM, SQMPlan, PrivacyReport]] = {}

    def mechanism(self, n_cols: int):
        p = self.params
        if p.row_norm_check:  # no client needs a share of c: declared norm shares are not used
            p = dataclasses.replace(p, party_bounds=None)
        return covariance_release(n_cols, **p.mechanism_kwargs(), seed=self.seed)

    def with_party_bounds(self, party_bounds) -> PCAJobTask:
        task = super().with_party_bounds(party_bounds)
        task._plans = {}  # plans of the bounds it had
        return task

    def __getstate__(self):
        return {**self.__dict__, "_plans": {}}  # a party plans from its own copy

    def preflight(self, headers: dict[int, list[str]], n_clients: int) -> None:
        """More components than the clients' columns: refused from their headers, when every client's is known."""
        if len(headers) == n_clients:
            check_components(self.params.n_components, sum(len(c) for c in headers.values()))

    def public(self):
        return self.params.public()

    def _plan(self, meta):
        """(k, the SQM mechanism, its public plan, its privacy report) for the clients' counts; refused (before
        any share is sent) if k does not fit the columns."""
        if meta not in self._plans:
            d = int(sum(meta.col_counts))
            try:
                k = check_components(self.params.n_components, d)
            except ValueError as err:
                raise refused(str(err)) from None
            mech = self.mechanism(d)
            self._plans[meta] = (k, mech, *mech.round_plan(meta.col_counts, meta.n_records, align_ids=True))
        return self._plans[meta]

    def release(self, meta):
        """The privacy report (events) of this job's one SQM release, from the public counts only."""
        return self._plan(meta)[3]

    releases_model = True  # the projection on the components (sqm pca --job --json)

    def released_model(self, result: dict) -> dict:
        """The projection the server's result gives, as ``sqm pca --job --json`` writes it: per component, a
        weight per raw column (``projection_raw`` where declared ranges scaled the columns, else the components)."""
        from sqm.framework.released_models import projection_model
        from sqm.framework.units import is_scaled, raw_projection

        V = np.asarray(result["components"])
        cols = result.get("columns") or [f"x{j}" for j in range(V.shape[1])]
        scales = result.get("column_scales") or {}
        if is_scaled(scales):
            return projection_model(raw_projection(V, cols, scales))
        return projection_model([{c: float(v) for c, v in zip(cols, row, strict=False)} for row in V])

    async def run(self, ctx: PartyAPI, table, meta) -> dict:
        k, mech, plan, report = self._plan(meta)
        my_seed = spawn_seeds(self.seed, meta.n_parties + 1)[ctx.pid]  # this party's own entry, as SQM.run
        rows = None if table is None else (table if hasattr(table, "chunks") else table.block)
        # the evaluation's chunks are this party's progress (its transport's, sqm.framework.progress.follow_steps)
        out = await sqm_round(ctx, mech.polynomial, rows, plan, make_rng(my_seed),
                              None if table is None else table.ids_digest)
        if not ctx.is_server:
            assert out.clipped is not None  # a client's part of a release: its clip count
            return {"clipped": int(out.clipped), "rows": table.n_rows, "cols": table.n_cols}
        assert out.estimate is not None  # the server's part: the estimate
        _, ev, V = components_from_covariance(out.estimate, int(sum(meta.col_counts)), k, meta.records_released)
        return {"components": np.ascontiguousarray(V.T), "explained_variance": ev, "report": report.as_dict(),
                "raw": out.raw}
