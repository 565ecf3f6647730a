"""A job's privacy-budget check (:class:`LedgerGuard`): every party that keeps a ledger (the server's operator;
each client, a data owner, by default) checks the job's release against its own ledger and records it before
any share is sent (:mod:`sqm.mechanism.ledger`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a light module: sqm --help reads DEFAULT_MAX_ALIGNMENTS from it
    from sqm.framework.jobtask import JobTask
    from sqm.framework.party import JobMeta

DEFAULT_MAX_ALIGNMENTS = 20  # record alignments per dataset a client allows by default (--max-alignments)


@dataclass(frozen=True)
class LedgerGuard:
    """One party's privacy-budget ledger in a job (picklable; in that party's own program only).

    ``path``: the SQLite ledger (:class:`sqm.mechanism.ledger.Ledger`; None: its default file in the sqm data
    folder); ``budget``: (epsilon, delta) to set as the dataset's total, once (a different one for a dataset
    that has one is refused); ``job_id``: recorded with the entries.  ``dataset``: the dataset this party's
    operator names (``--ledger-dataset``).  ``client``: a data owner's own ledger.

    At a client the dataset charged is the owner's, never the job file's: :meth:`opened` binds its file's
    content digest to ``dataset`` (None: the name the digest is bound to, else ``sha256:`` and 16 hex digits of
    it; :meth:`sqm.mechanism.ledger.Ledger.bind`), and :meth:`count_alignment` records the job's record alignment,
    refused at ``max_alignments`` (None: no cap).  At the server the dataset is ``dataset``, else the job
    file's (``"dataset"``, else its ``"name"``).

    :meth:`refusal` and :meth:`reserve` run once the counts are known and before any share is sent: the release's
    events (the task's ``release(meta)``: the record-level guarantee against the server, the party that learns
    the result) composed with the dataset's entries, recorded in one transaction, or the job refused naming
    what is left (every party then exits "refused").  A client's entry is refundable: if the job ends before the
    client sent its shares of any output (:meth:`sqm.mpc.net.transport.PartyTransport.output_shares_next`) it becomes
    ``refunded``, which does not count; otherwise (and always at the server) a failed job stays counted."""

    path: str | None = None
    budget: tuple[float, float] | None = None
    job_id: str | None = None
    dataset: str | None = None
    max_alignments: int | None = DEFAULT_MAX_ALIGNMENTS
    client: bool = False
    account: str | None = None  # the dataset charged, once known (opened() at a client; the server's at start)

    def _ledger(self, dataset: str | None = None):
        from sqm.mechanism.ledger import Ledger

        ledger = Ledger(self.path)
        if self.budget is not None and dataset is not None:
            ledger.set_budget(dataset, *self.budget)
        return ledger

    def opened(self, file) -> LedgerGuard:
        """This client's guard with its dataset resolved: its file's digest (streamed SHA-256; a database
        query's: :meth:`sqm.framework.sql_tables.SqlSource.digest`) bound to the owner's name
        (:class:`sqm.mechanism.ledger.BindingError` if it is bound to another)."""
        from sqm.mechanism.ledger import file_digest
        from sqm.framework.sql_tables import SqlSource

        # a database query has no bytes of its own: its database and statement stand for them
        digest = file.digest() if isinstance(file, SqlSource) else file_digest(file)
        name = self._ledger().bind(self.dataset, digest)
        return dataclasses.replace(self, account=name)

    def count_alignment(self) -> int:
        """Record this job's record alignment of the dataset (AlignmentCapReached at the owner's cap)."""
        return self._ledger().count_alignment(self.account, self.max_alignments, self.job_id)

    def alignments(self) -> int:
        return self._ledger().alignments(self.account)

    def refusal(self, task: JobTask, meta: JobMeta) -> tuple[str, str] | None:
        """None if this job's release fits the dataset's budget (nothing recorded), else (the reason for this
        party's own operator, with the figures; the public reason, without them: a client's names no dataset, the
        server's names its own)."""
        from sqm.mechanism.ledger import BudgetError, NoBudget

        report = task.release(meta)
        named = "" if self.client else f" for dataset {self.account!r}"  # the server's: the job file's, public
        try:
            self._ledger(self.account).check(self.account, report.events, float(getattr(report, "eta", 0.0)))
        except NoBudget as e:
            return f"{e}" + ("; or --no-ledger to keep none" if self.client else ""), e.public + named
        except BudgetError as e:
            return str(e), e.public + named
        return None

    def reserve(self, task: JobTask, meta: JobMeta):
        """The :class:`sqm.mechanism.ledger.Reservation` of this job's release: its events against the server,
        charged by the server, or by a client to its own records' dataset (refundable); ProtocolError (refused)
        if the dataset has no budget or the release would exceed it."""
        from sqm.mpc.net.abort import refused
        from sqm.mechanism.ledger import BudgetError

        report = task.release(meta)
        name = str(task.public()[0])
        statistic = f"{name} (this client's records, released to the server)" if self.client else name
        try:
            return self._ledger(self.account).reserve(self.account, report.events, statistic=statistic,
                                                      job_id=self.job_id, delta=report.delta,
                                                      eta=float(getattr(report, "eta", 0.0)), refundable=self.client)
        except BudgetError as e:
            raise refused(str(e)) from None

    # ----- released models (a scoring job's check) ----------------------------------------------------
    def released_model(self, digest: str) -> dict | None:
        """The completed entry of this ledger that released the model ``digest`` (any of its datasets), or None."""
        return self._ledger().released_model(digest)

    def record_scoring(self, digest: str, requester: int) -> None:
        """Record that this client's file (its dataset) was scored with model ``digest`` for ``requester``."""
        self._ledger().record_scoring(self.account, digest, requester, self.job_id)

    def scored_models(self, requester: int) -> list[str]:
        """The numbers (JSON) of the models this client's file was scored with before for ``requester``."""
        return self._ledger().scored_models(self.account, requester)
