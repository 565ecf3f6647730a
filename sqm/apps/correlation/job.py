"""The private correlation matrix as a job-file task (:mod:`sqm.framework.spec`): each client reads only its own
file, the last one adding the constant column; the server receives the noisy Gram of [X 1] and computes the
correlations."""
from __future__ import annotations


from sqm.framework.jobtask import DeclaredTask
from sqm.framework.party import seed_policy
from sqm.mechanism.release import sqm_round
from sqm.mechanism.rng import make_rng, spawn_seeds
from sqm.apps.correlation.params import CorrelationParams
from sqm.apps.correlation.statistic import correlation_from_gram, correlation_release, with_constant


class CorrelationJobTask(DeclaredTask):
    """The correlation task: every party plans the same release from the clients' column and record counts and
    runs :func:`sqm.mechanism.release.sqm_round`.  Seeds as in :class:`sqm.apps.pca.job.PCAJobTask` (never
    sent; a seeded job needs ``insecure_reproducible``)."""

    def __init__(self, params: CorrelationParams | None = None, seed=None, insecure_reproducible: bool = False,
                 **values):
        self.secure_mode = seed_policy(seed, insecure_reproducible, warn=False)
        self.params = params if params is not None else CorrelationParams(**values)
        self.seed = seed
        correlation_release([1, 1], self.params)  # bad parameters refused here, before any party starts

    def public(self):
        return self.params.public()

    def _plan(self, meta):
        mech = correlation_release(meta.col_counts, self.params, seed=self.seed)
        counts = list(meta.col_counts)
        counts[-1] += 1  # the constant column, at the last client
        return (mech, *mech.round_plan(counts, meta.n_records, align_ids=True))

    def release(self, meta):
        """The privacy report (events) of the job's one SQM release, from the public counts only."""
        return self._plan(meta)[2]

    async def run(self, ctx, table, meta) -> dict:
        mech, plan, report = self._plan(meta)
        block = None if table is None else table.block
        if table is not None and ctx.pid == meta.n_parties:
            block = with_constant(block)
        rng = make_rng(spawn_seeds(self.seed, meta.n_parties + 1)[ctx.pid])
        out = await sqm_round(ctx, mech.polynomial, block, plan, rng,
                              ids_digest=None if table is None else table.ids_digest)
        if not ctx.is_server:
            return {"clipped": out.clipped, "rows": table.n_rows, "cols": table.n_cols}
        corr, mean, n = correlation_from_gram(out.estimate, sum(meta.col_counts))
        return {"correlation": corr, "mean": mean, "n_estimate": n, "report": report.as_dict(), "raw": out.raw}
