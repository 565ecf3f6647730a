"""SQM-LR as a job-file task (:mod:`apps.jobfile`): a real multi-party run in which each party reads only its own
CSV, the label party's holding the label column."""
from __future__ import annotations

import numpy as np

from sqm.report import PrivacyReport
from sqm.rng import spawn_seeds

from .estimator import SQMLogisticRegression, check_labels
from .party import LRPlan, train_party


class LRJobTask:
    """The SQM-LR task for :mod:`apps.jobfile`: the label party's CSV holds the label column
    ``label_column`` (0/1) besides its features; every party builds the same public plan from the clients'
    column and record counts, the clients compare record-id digests among themselves, and the run is
    :func:`apps.logreg.party.train_party`.  The server's result is the weights (in the clients' column order,
    the label excluded) and the privacy report; each client's clip count stays with that client.

    Randomness: without ``seed`` (secure mode, the default) every party draws its own from OS entropy.  A
    ``seed`` makes every party derive its seed from it, so anyone holding it (the server's operator too) can
    regenerate every client's noise: it is refused unless ``insecure_reproducible=True``, and the report then
    records ``secure_mode: False``.  The seed is never part of the public parameters the parties agree on."""

    def __init__(self, epsilon: float, delta: float = 1e-5, gamma: float = 8192.0, q: float = 0.001,
                 epochs: int | None = None, learning_rate: float = 1.0, weight_bound: float = 1.0,
                 label_column: str = "label", label_party: int | None = None, seed=None,
                 insecure_reproducible: bool = False):
        from ..jobfile import seed_policy

        seed_policy(seed, insecure_reproducible, warn=False)  # a seed without the opt-in: refused
        self.estimator = SQMLogisticRegression(epsilon, delta, gamma, q, epochs, learning_rate, "mpyc",
                                               weight_bound=weight_bound, label_party=label_party, seed=seed)
        self.epochs = self.estimator._epochs()  # bad parameters refused here, before any party starts
        self.label_column, self.label_party, self.seed = label_column, label_party, seed

    @property
    def secure_mode(self) -> bool:
        return self.seed is None

    def public(self):
        e = self.estimator
        return ("sqm-logreg", float(e.epsilon), float(e.delta), float(e.gamma), float(e.sampling_rate), self.epochs,
                float(e.learning_rate), float(e.weight_bound), self.label_column, self.label_party)

    def _plan(self, meta) -> tuple[LRPlan, PrivacyReport, int]:
        """The public plan, privacy report and label party from the clients' public counts (every party alike)."""
        from mpc.party import ProtocolError

        n = meta.n_parties
        label = n - 1 if self.label_party is None else int(self.label_party)
        if not 0 <= label < n:  # every party sees the same public counts: all refuse alike
            raise ProtocolError(f"label party {label} is missing: the job has clients 0..{n - 1}; refused")
        counts = list(meta.col_counts)
        counts[label] -= 1
        if counts[label] < 1:
            raise ProtocolError(f"client {label + 1} (the label party) needs feature columns besides the label; "
                                f"refused")
        return (*self.estimator.plan(meta.n_records, counts, label), label)

    def release(self, meta) -> PrivacyReport:
        """What the job releases (for the server's privacy-budget ledger), from the public counts."""
        return self._plan(meta)[1]

    async def run(self, ctx, table, meta) -> dict:
        from mpc.party import InputRefused

        plan, report, label = self._plan(meta)
        block = None
        if table is not None:
            j = ctx.pid - 1
            cols = list(table.columns)
            if j == label:  # the label party's own input: the others learn only the reason, never a value
                if self.label_column not in cols:
                    raise InputRefused(f"its file has no label column '{self.label_column}'", table.file)
                k = cols.index(self.label_column)
                try:
                    y = check_labels(table.block[:, k])
                except ValueError as err:
                    raise InputRefused("its label column holds values other than 0 and 1",
                                       f"{table.file}: {err}") from None
                block = np.hstack([np.delete(table.block, k, axis=1), y[:, None]])
            else:
                block = table.block
        seeds = spawn_seeds(self.seed, meta.n_parties + 1)
        res = await train_party(ctx, plan, seeds[ctx.pid], block, check_ids=True,
                                         ids_digest=None if table is None else table.ids_digest)
        if ctx.is_server:
            res.update(report=report, secure_mode=self.secure_mode, b_max=plan.b_max)
        return res
