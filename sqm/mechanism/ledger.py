"""The privacy-budget ledger: every release per dataset, composed in RDP across jobs (one SQLite file).

A dataset (named by the job file's dataset id) has a budget (epsilon, delta), set once.  Each release is an
entry: the dataset, the statistic, the time, its events (:mod:`sqm.mechanism.events`, as JSON), its own epsilon at its
delta, the job id and a status.  What a dataset has spent is the RDP composition of ALL its entries' events,
converted at the budget's delta; a release whose composition with them would exceed the budget is refused
(:class:`BudgetExceeded`, naming the dataset, the budget, what is spent and what is left) before it runs.

Crash safety and concurrency: :meth:`Ledger.reserve` checks the budget and inserts the entry in ONE
transaction started with ``BEGIN IMMEDIATE``, so concurrent jobs on one ledger (threads or processes) are
serialized by SQLite and never overspend; the entry is committed (status ``reserved``) before the job sends
anything, so a server killed at any later point never releases without an entry.  The entry becomes
``completed`` when the job ends, or ``failed`` when it raises; every entry counts, whatever its status: a job
that failed (or was killed) after its shares were sent may have released, so the ledger assumes it did.

A failure probability eta (e.g. a batch cap overflowing) is kept per entry and enters delta as
(1 + e^epsilon) sum(eta) (:func:`sqm.mechanism.accounting.delta_with_failure`): the RDP conversion uses
delta_B - (1 + e^epsilon_B) sum(eta).

Default file: ``ledger.sqlite`` in the sqm data folder, following scikit-learn's ``get_data_home`` convention:
the folder named by the environment variable ``SQM_DATA``, else ``~/sqm_data`` (created on first use).

Usage (the server, before any share is sent)::

    from sqm.mechanism.ledger import BudgetExceeded, Ledger

    ledger = Ledger(path)                       # None: the default file
    ledger.set_budget("adult-2024", 4.0, 1e-5)  # once; a different budget later needs replace=True
    with ledger.reserve("adult-2024", report.events, statistic="pca", job_id=job_id) as entry:
        result = run_the_job()                  # raises BudgetExceeded above if over budget
    # entry["status"] is now "completed" ("failed", still counted, if run_the_job raised)

``ledger.check(dataset, events)`` is the same test without recording; ``sqm budget show DATASET`` prints it.
Each client keeps its own ledger in job mode (:class:`sqm.framework.ledger_guard.LedgerGuard`): the same events, charged to
the data owner's own budget for its records.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone

from dp_accounting import dp_event

from sqm.runtime.errors import UsageError

from . import events as ev
from .report import NEIGHBOURING
from .validation import check_param

SCHEMA = """
CREATE TABLE IF NOT EXISTS budgets (
    dataset TEXT PRIMARY KEY,
    epsilon REAL NOT NULL CHECK (epsilon > 0),
    delta REAL NOT NULL CHECK (delta > 0 AND delta < 1),
    set_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS releases (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL,
    statistic TEXT NOT NULL,
    time TEXT NOT NULL,
    events TEXT NOT NULL,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    eta REAL NOT NULL DEFAULT 0,
    job_id TEXT,
    status TEXT NOT NULL CHECK (status IN ('reserved', 'completed', 'failed')),
    finished TEXT,
    unit TEXT NOT NULL DEFAULT 'zero-out'
);
CREATE INDEX IF NOT EXISTS releases_dataset ON releases (dataset);
"""


def data_home(path: str | None = None) -> str:
    """The sqm data folder: ``path``, else $SQM_DATA, else ~/sqm_data (scikit-learn's ``get_data_home``
    convention); created if missing."""
    folder = os.path.expanduser(path or os.environ.get("SQM_DATA") or os.path.join("~", "sqm_data"))
    os.makedirs(folder, exist_ok=True)
    return folder


def default_path() -> str:
    return os.path.join(data_home(), "ledger.sqlite")


class BudgetError(UsageError):
    """The ledger refuses a release (no budget, or over budget)."""


class NoBudget(BudgetError):
    pass


class BudgetExceeded(BudgetError):
    """The release would exceed the dataset's budget; ``dataset``, ``budget``, ``spent`` (epsilon at the
    budget's delta), ``left`` (budget epsilon - spent), ``after`` (epsilon with this release)."""

    def __init__(self, dataset, budget, spent, left, after, n_releases):
        self.dataset, self.budget, self.spent, self.left, self.after = dataset, budget, spent, left, after
        super().__init__(
            f"dataset {dataset!r} is over its privacy budget: budget epsilon {budget.epsilon:g} at delta "
            f"{budget.delta:g}; spent epsilon {spent:.4g} over {n_releases} release(s); left {left:.4g}; "
            f"this release would bring it to {after:.4g}")


@dataclass(frozen=True)
class Budget:
    epsilon: float
    delta: float


@dataclass(frozen=True)
class Status:
    """A dataset's account: ``spent`` epsilon at the budget's delta, ``left`` = budget epsilon - spent (both
    with the release being checked, if any: ``after``)."""

    dataset: str
    budget: Budget
    spent: float
    left: float
    n_releases: int


def spent_epsilon(events, budget: Budget, eta: float = 0.0) -> float:
    """Epsilon of ``events`` composed in RDP, converted at the budget's delta less (1 + e^epsilon_B) ``eta``
    (so that with the failure probabilities the whole is within the budget's delta); inf if eta uses it up."""
    events = list(events)
    if not events:
        return 0.0
    conv_delta = budget.delta - (1.0 + math.exp(budget.epsilon)) * float(eta)
    return ev.compose(events, conv_delta) if conv_delta > 0 else math.inf


class Reservation(dict):
    """A ledger entry as a dict (id, dataset, statistic, time, epsilon, delta, eta, job_id, status, spent,
    left, ledger); a context manager that marks it completed, or failed if the block raises."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        (self.fail if exc_type is not None else self.complete)()
        return False

    def complete(self):
        Ledger(self["ledger"])._finish(self["id"], "completed")
        self["status"] = "completed"

    def fail(self):
        Ledger(self["ledger"])._finish(self["id"], "failed")
        self["status"] = "failed"

    def __reduce__(self):  # pickles (and travels) as a plain dict
        return dict, (dict(self),)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _check_dataset(dataset):
    if not (isinstance(dataset, str) and 0 < len(dataset) <= 200 and dataset.isprintable()):
        raise UsageError(f"a dataset id must be 1-200 printable characters, got {dataset!r}")


def _as_events(events) -> list:
    if isinstance(events, dp_event.DpEvent):
        events = [events]
    events = list(events)
    if not events or not all(isinstance(e, dp_event.DpEvent) for e in events):
        raise UsageError(f"a release must name its DpEvents (sqm.mechanism.events; NoOpDpEvent for none), got {events!r}")
    return events


def _contains_pbm(event) -> bool:
    if isinstance(event, ev.PBMDpEvent):
        return True
    inner = [getattr(event, "event", None)] + list(getattr(event, "events", None) or [])
    return any(e is not None and _contains_pbm(e) for e in inner)


def release_unit(events, unit: str | None = None) -> str:
    """The neighbouring relation a release's events are in: ``unit`` checked against them (PBM events are
    feature-level, "embedding"; every other event here is record-level, "zero-out"), or inferred when None."""
    pbm = any(_contains_pbm(e) for e in events)
    inferred = "embedding" if pbm else "zero-out"
    if unit is None:
        return inferred
    if unit not in NEIGHBOURING or unit == "none":
        raise UsageError(f"a ledger unit must be one of {sorted(set(NEIGHBOURING) - {'none'})}, got {unit!r}")
    if pbm and unit != "embedding":
        raise UsageError(f"PBM events are feature-level (unit 'embedding'), not {unit!r}")
    return unit


class Ledger:
    """The ledger in the SQLite file ``path`` (None: :func:`default_path`).  Holds only the path: each call
    opens its own connection, so a Ledger is picklable and usable from any thread or process."""

    def __init__(self, path: str | None = None, timeout: float = 60.0):
        self.path = os.path.expanduser(path) if path is not None else default_path()
        self.timeout = float(timeout)
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        if not os.path.exists(self.path):  # owner-only from the start (SQLite gives its journal the same mode)
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600))
        with self._connect() as con:
            con.executescript(SCHEMA)
            cols = {r["name"] for r in con.execute("PRAGMA table_info(releases)")}
            if "unit" not in cols:  # a ledger written before units: every entry was record-level (zero-out)
                con.execute("ALTER TABLE releases ADD COLUMN unit TEXT NOT NULL DEFAULT 'zero-out'")

    @contextlib.contextmanager
    def _connect(self):
        """A connection in autocommit mode (transactions are explicit), closed on exit."""
        con = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        try:
            con.row_factory = sqlite3.Row
            con.execute("PRAGMA synchronous = FULL")
            yield con
        finally:
            con.close()

    # ----- budgets -------------------------------------------------------------------------------
    def set_budget(self, dataset: str, epsilon: float, delta: float, replace: bool = False) -> Budget:
        """Set the dataset's budget, once: setting the same again is a no-op; a different one is refused
        unless ``replace=True``."""
        _check_dataset(dataset)
        check_param("epsilon", epsilon, "a budget epsilon")
        check_param("delta", delta, "a budget delta")
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            old = self._budget(con, dataset)
            if old is not None and (old.epsilon, old.delta) != (float(epsilon), float(delta)) and not replace:
                con.execute("ROLLBACK")
                raise BudgetError(f"dataset {dataset!r} already has the budget epsilon {old.epsilon:g}, delta "
                                  f"{old.delta:g}; changing it to epsilon {epsilon:g}, delta {delta:g} needs "
                                  f"replace=True (sqm budget set --replace)")
            con.execute("INSERT OR REPLACE INTO budgets VALUES (?, ?, ?, ?)",
                        (dataset, float(epsilon), float(delta), _now()))
            con.execute("COMMIT")
        return Budget(float(epsilon), float(delta))

    @staticmethod
    def _budget(con, dataset) -> Budget | None:
        row = con.execute("SELECT epsilon, delta FROM budgets WHERE dataset = ?", (dataset,)).fetchone()
        return None if row is None else Budget(row["epsilon"], row["delta"])

    def budget(self, dataset: str) -> Budget | None:
        with self._connect() as con:
            return self._budget(con, dataset)

    def datasets(self) -> list[str]:
        """Every dataset with a budget or a release, sorted."""
        with self._connect() as con:
            rows = con.execute("SELECT dataset FROM budgets UNION SELECT dataset FROM releases").fetchall()
        return sorted(r[0] for r in rows)

    def releases(self, dataset: str) -> list[dict]:
        """The dataset's entries in order, each a dict with its events parsed (``events``)."""
        with self._connect() as con:
            rows = con.execute("SELECT * FROM releases WHERE dataset = ? ORDER BY id", (dataset,)).fetchall()
        out = []
        for r in rows:
            d = dict(r)
            d["events"] = ev.events_from_json(json.loads(d["events"]))
            out.append(d)
        return out

    # ----- accounting ----------------------------------------------------------------------------
    def _status(self, con, dataset, new_events=(), new_eta=0.0) -> Status:
        budget = self._budget(con, dataset)
        if budget is None:
            raise NoBudget(f"dataset {dataset!r} has no privacy budget in the ledger {self.path}: set one first "
                           f"(sqm budget set {dataset} --budget EPS,DELTA, or a job's --budget)")
        rows = con.execute("SELECT events, eta FROM releases WHERE dataset = ?", (dataset,)).fetchall()
        # one unit per dataset (reserve refuses another), so every entry composes with every other
        events = [e for r in rows for e in ev.events_from_json(json.loads(r["events"]))] + list(new_events)
        eta = sum(r["eta"] for r in rows) + float(new_eta)
        spent = spent_epsilon(events, budget, eta)
        return Status(dataset, budget, spent, budget.epsilon - spent, len(rows))

    def status(self, dataset: str) -> Status:
        """What the dataset has spent and has left (NoBudget if it has no budget)."""
        with self._connect() as con:
            return self._status(con, dataset)

    def check(self, dataset: str, new_events, eta: float = 0.0) -> Status:
        """The dataset's account with ``new_events`` added, without recording; BudgetExceeded if over."""
        _check_dataset(dataset)
        with self._connect() as con:
            return self._check(con, dataset, _as_events(new_events), eta)

    def _check(self, con, dataset, new_events, eta) -> Status:
        before = self._status(con, dataset)
        after = self._status(con, dataset, new_events, eta)
        if not after.spent <= before.budget.epsilon:
            raise BudgetExceeded(dataset, before.budget, before.spent, before.left, after.spent,
                                 before.n_releases)
        return after

    def reserve(self, dataset: str, events, statistic: str = "", job_id: str | None = None, *,
                delta: float | None = None, eta: float = 0.0, unit: str | None = None) -> Reservation:
        """Check the budget and record the release in one transaction (BEGIN IMMEDIATE: concurrent jobs are
        serialized), committed before this returns; BudgetExceeded (nothing recorded) if it would exceed.
        ``delta``: the release's own delta, for its stand-alone epsilon (default: the budget's); ``eta``: its
        failure probability.  ``unit``: the neighbouring relation of the events (:data:`sqm.mechanism.report.NEIGHBOURING`;
        None: "embedding" for PBM events, else "zero-out", the record-level relation): a dataset's entries are all
        in one unit, since a feature-level epsilon (PBM-VFL's, for embeddings taken as given) and a record-level
        one do not compose into any guarantee; another unit is refused (ValueError, nothing recorded).
        Returns the entry (status 'reserved'); use it as a context manager, or call ``complete()`` / ``fail()``."""
        _check_dataset(dataset)
        events = _as_events(events)
        unit = release_unit(events, unit)
        if not (0 <= eta <= 1):
            raise UsageError(f"the failure probability eta must lie in [0, 1], got {eta!r}")
        text = json.dumps(ev.events_to_json(events), allow_nan=False)
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                other = con.execute("SELECT DISTINCT unit FROM releases WHERE dataset = ? AND unit != ?",
                                    (dataset, unit)).fetchall()
                if other:
                    raise UsageError(f"dataset {dataset!r} holds {other[0]['unit']} entries in the ledger {self.path}: "
                                     f"a {unit} release does not compose with them (different units); charge it to "
                                     f"a dataset id of its own")
                after = self._check(con, dataset, events, eta)
            except BaseException:
                con.execute("ROLLBACK")
                raise
            own_delta = float(delta) if delta is not None else after.budget.delta
            own_eps = ev.compose(events, own_delta)
            row = dict(dataset=dataset, statistic=str(statistic), time=_now(), epsilon=own_eps, delta=own_delta,
                       eta=float(eta), job_id=None if job_id is None else str(job_id), status="reserved", unit=unit)
            cur = con.execute("INSERT INTO releases (dataset, statistic, time, events, epsilon, delta, eta, job_id, "
                              "status, unit) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                              (dataset, row["statistic"], row["time"], text, own_eps, own_delta, row["eta"],
                               row["job_id"], "reserved", unit))
            con.execute("COMMIT")
        return Reservation(id=cur.lastrowid, **row, spent=after.spent, left=after.left, ledger=self.path)

    def record(self, dataset: str, events, statistic: str = "", job_id: str | None = None, *,
               delta: float | None = None, eta: float = 0.0, unit: str | None = None) -> Reservation:
        """:meth:`reserve` and mark completed at once (a release already made, e.g. in process)."""
        entry = self.reserve(dataset, events, statistic, job_id, delta=delta, eta=eta, unit=unit)
        entry.complete()
        return entry

    def _finish(self, entry_id: int, status: str) -> None:
        with self._connect() as con:
            con.execute("UPDATE releases SET status = ?, finished = ? WHERE id = ?", (status, _now(), entry_id))
