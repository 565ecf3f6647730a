"""A job's privacy-budget check (:class:`LedgerGuard`): every party that keeps a ledger (the server's operator;
each client, a data owner, by default) checks the job's release against its own ledger and records it before
any share is sent (:mod:`sqm.mechanism.ledger`).
"""
from __future__ import annotations

from dataclasses import dataclass

from sqm.framework.jobtask import JobTask
from sqm.framework.party import JobMeta, refused


@dataclass(frozen=True)
class LedgerGuard:
    """The server's privacy-budget check of a job (in the server's program only; picklable).

    ``path``: the SQLite ledger (:class:`sqm.mechanism.ledger.Ledger`; None: its default file in the sqm data folder);
    ``budget``: (epsilon, delta) to set as the dataset's total, once (a different one for a dataset that has
    one is refused); ``job_id``: recorded with the entry.  :meth:`reserve` runs at the server once the clients'
    counts are known and before any share is sent: it composes the release's events (the task's
    ``release(meta)``) with the dataset's entries and records the new entry in one transaction, or refuses
    the job naming what is left (every party then exits "refused").  The entry is in the ledger before the
    result exists, so a server killed afterwards never releases without one; it is marked completed when the
    server's part ends, failed (and still counted) if it raises.  A client keeps its own ledger the
    same way (``sqm <command> --job J --index I``: on by default): it charges the release's events against the
    server (``task.release(meta)``: the record-level guarantee its records have against the party that learns
    the result) to its own dataset, and refuses a job over its own budget before any share is sent."""

    path: str | None = None
    budget: tuple[float, float] | None = None
    job_id: str | None = None

    def _ledger(self, dataset: str):
        from sqm.mechanism.ledger import Ledger

        ledger = Ledger(self.path)
        if self.budget is not None:
            ledger.set_budget(dataset, *self.budget)
        return ledger

    def refusal(self, dataset: str, task: JobTask, meta: JobMeta, client: bool = False) -> tuple[str, str] | None:
        """None if this job's release fits the dataset's budget (nothing recorded), else (the reason for this
        party's own operator, with the figures; the public reason, without them)."""
        from sqm.mechanism.ledger import BudgetError, BudgetExceeded, NoBudget

        report = task.release(meta)
        try:
            self._ledger(dataset).check(dataset, report.events, float(getattr(report, "eta", 0.0)))
        except NoBudget as e:
            return (f"{e}" + ("; or --no-ledger to keep none" if client else ""),
                    f"its own privacy-budget ledger holds no budget for dataset {dataset!r}")
        except BudgetExceeded as e:
            return str(e), f"the job would exceed its own privacy budget for dataset {dataset!r}"
        except BudgetError as e:
            return str(e), f"its own privacy-budget ledger refuses the job for dataset {dataset!r}"
        return None

    def reserve(self, dataset: str, task: JobTask, meta: JobMeta, client: bool = False):
        """The :class:`sqm.mechanism.ledger.Reservation` of this job's release: its events against the server,
        charged by the server, or by a client to its own records' dataset (``client``); ProtocolError (refused)
        if the dataset has no budget or the release would exceed it."""
        from sqm.mechanism.ledger import BudgetError

        report = task.release(meta)
        name = str(task.public()[0])
        statistic = f"{name} (this client's records, released to the server)" if client else name
        try:
            return self._ledger(dataset).reserve(dataset, report.events, statistic=statistic, job_id=self.job_id,
                                                 delta=report.delta, eta=float(getattr(report, "eta", 0.0)))
        except BudgetError as e:
            raise refused(str(e)) from None
