"""The privacy-budget ledger: every release per dataset, composed in RDP across jobs (one SQLite file).

A dataset (named by the job file's dataset id) has a budget (epsilon, delta), set once.  Each release is an
entry: the dataset, the statistic, the time, its events (:mod:`sqm.mechanism.events`, as JSON), its own epsilon at its
delta, the job id and a status.  What a dataset has spent is the RDP composition of ALL its entries' events,
converted at the budget's delta; a release whose composition with them would exceed the budget is refused
(:class:`BudgetExceeded`, naming the dataset, the budget, what is spent and what is left) before it runs.

Crash safety and concurrency: :meth:`Ledger.reserve` checks the budget and inserts the entry in ONE
transaction started with ``BEGIN IMMEDIATE``, so concurrent jobs on one ledger (threads or processes) are
serialized by SQLite and never overspend; the entry is committed (status ``reserved``) before the job sends
anything, so a party killed at any later point never releases without an entry.  The entry becomes
``completed`` when the job ends, or ``failed`` when it raises; ``failed`` entries count: the job may have
released.  A refundable reservation (``refundable=True``: a data owner's,
:class:`sqm.framework.ledger_guard.LedgerGuard`) becomes ``refunded``, which does not count, when the job ended before
its party sent its shares of any output (:meth:`Reservation.shares_sent`, marked in the ledger just before they are
sent: the point is :meth:`sqm.mpc.net.transport.PartyTransport.output_shares_next`).  Its process holds an exclusive
lock (``flock``) on a file of its own beside the ledger (``<ledger>.locks/``) while the job runs; a reservation
whose process died (the lock is free) is settled the next time the ledger is read: ``refunded`` if its shares
were not marked sent, else ``failed``.

Owner-named datasets: :meth:`Ledger.bind` binds a file's content digest (SHA-256 of its bytes,
:func:`file_digest`) to one dataset name, so that the same file always charges the same account, whatever a
job file says.  A digest has one name; a name another digest is bound to is refused unless its owner binds the
new file to it (``sqm budget bind``); a file without a name given charges ``sha256:<first 16 hex digits>``.
Record alignments are entries too (:meth:`Ledger.count_alignment`: one per private set intersection a job
runs on the dataset's file, refused at the owner's cap), and so are released models (a completed training
entry records its model's digest and numbers: :meth:`Reservation.complete`) and the scorings run with them
(:meth:`Ledger.record_scoring`).

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
Each client keeps its own ledger in job mode (:class:`sqm.framework.ledger_guard.LedgerGuard`): the same events, charged
to the data owner's own budget for its records.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import secrets
import sqlite3
from dataclasses import dataclass
from datetime import datetime, UTC

from dp_accounting import dp_event

from sqm.errors import UsageError

from . import events as ev
from .report import NEIGHBOURING, ZERO_OUT, relation_phrase
from .validation import check_param

RELEASES = """
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
    status TEXT NOT NULL CHECK (status IN ('reserved', 'completed', 'failed', 'refunded')),
    finished TEXT,
    unit TEXT NOT NULL DEFAULT 'zero-out',
    sent INTEGER NOT NULL DEFAULT 1,
    lock TEXT,
    model TEXT,
    model_numbers TEXT
);
CREATE INDEX IF NOT EXISTS releases_dataset ON releases (dataset);
"""
SCHEMA = """
CREATE TABLE IF NOT EXISTS budgets (
    dataset TEXT PRIMARY KEY,
    epsilon REAL NOT NULL CHECK (epsilon > 0),
    delta REAL NOT NULL CHECK (delta > 0 AND delta < 1),
    set_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS files (
    digest TEXT PRIMARY KEY,
    dataset TEXT NOT NULL,
    bound TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS alignments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL,
    job_id TEXT,
    time TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS scorings (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL,
    model TEXT NOT NULL,
    requester INTEGER NOT NULL,
    job_id TEXT,
    time TEXT NOT NULL
);
""" + RELEASES
RELEASE_COLUMNS = ("id", "dataset", "statistic", "time", "events", "epsilon", "delta", "eta", "job_id", "status",
                   "finished", "unit")  # those of every ledger file written before refunds
COUNTED = "status != 'refunded'"  # the entries a dataset's spending composes
DEFAULT_ACCOUNT = "sha256:"  # a file charged without an owner's name: this prefix and 16 hex digits of its digest
DIGEST_CHUNK = 1 << 20


def file_digest(path) -> str:
    """SHA-256 of the file's bytes (hex), read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(DIGEST_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def default_account(digest: str) -> str:
    """The dataset a file charges when its owner names none: ``sha256:`` and its digest's first 16 hex digits."""
    return DEFAULT_ACCOUNT + digest[:16]


def data_home(path: str | None = None) -> str:
    """The sqm data folder: ``path``, else $SQM_DATA, else ~/sqm_data (scikit-learn's ``get_data_home``
    convention); created if missing."""
    folder = os.path.expanduser(path or os.environ.get("SQM_DATA") or os.path.join("~", "sqm_data"))
    os.makedirs(folder, exist_ok=True)
    return folder


def default_path() -> str:
    return os.path.join(data_home(), "ledger.sqlite")


class BudgetError(UsageError):
    """The ledger refuses a release (no budget, or over budget), a binding or an alignment.  ``public``: the
    reason without this owner's names or figures (what a refusing party tells its peers)."""

    public = "its own privacy-budget ledger refuses the job"


class BindingError(BudgetError):
    """A file's digest is bound to another dataset, or the named dataset to another file."""

    public = "its own ledger binds its file to another dataset"


class AlignmentCapReached(BudgetError):
    """The dataset has had as many record alignments as its owner allows."""

    public = "its owner's cap on record alignments of this dataset is reached"


class NoBudget(BudgetError):
    public = "its own privacy-budget ledger holds no budget"


class BudgetExceeded(BudgetError):
    """The release would exceed the dataset's budget; ``dataset``, ``budget``, ``spent`` (epsilon at the
    budget's delta), ``left`` (budget epsilon - spent), ``after`` (epsilon with this release)."""

    def __init__(self, dataset, budget, spent, left, after, n_releases, unit: str = ZERO_OUT):
        self.dataset, self.budget, self.spent, self.left, self.after = dataset, budget, spent, left, after
        self.public = "the job would exceed its own privacy budget"
        super().__init__(
            f"dataset {dataset!r} is over its privacy budget: budget epsilon {budget.epsilon:g} at delta "
            f"{budget.delta:g}; spent epsilon {spent:.4g} over {n_releases} release(s); left {left:.4g}; "
            f"this release would bring it to {after:.4g} (every epsilon here: {relation_phrase(unit)})")


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
    left, ledger, sent, lock); a context manager that marks it completed, or failed if the block raises."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        (self.fail if exc_type is not None else self.complete)()
        return False

    def shares_sent(self) -> None:
        """Record, durably and before they are sent, that this entry's party sends its shares of an output:
        from now on the entry is never refunded."""
        if not self.get("sent"):
            Ledger(self["ledger"])._mark_sent(self["id"])
            self["sent"] = 1

    def complete(self, model: tuple[str, str] | None = None):
        """Mark it completed; ``model``: (digest, numbers as JSON) of the model the release gave, recorded with it."""
        Ledger(self["ledger"])._finish(self["id"], "completed", model)
        self["status"] = "completed"
        if model is not None:
            self["model"] = model[0]
        _release_lock(self)

    def fail(self, refund: bool = False):
        """Mark it failed (counted); ``refund``: the job ended before this party sent its shares of any output
        (a refundable entry whose shares were not marked sent then becomes ``refunded``, which does not count)."""
        led = Ledger(self["ledger"])
        status = "refunded" if refund and self.get("lock") and not led._sent(self["id"]) else "failed"
        led._finish(self["id"], status)
        self["status"] = status
        _release_lock(self)

    def __reduce__(self):  # pickles (and travels) as a plain dict
        return dict, (dict(self),)


_HELD: dict[str, int] = {}  # lock token -> the open file this process holds the lock of its reservation on


def _lock_folder(ledger_path: str) -> str:
    return ledger_path + ".locks"


def _take_lock(ledger_path: str) -> str:
    """A fresh token whose lock file (owner-only, beside the ledger) this process now holds (flock, exclusive):
    the OS releases it when the process dies, however it dies."""
    folder = _lock_folder(ledger_path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    token = secrets.token_hex(16)
    fd = os.open(os.path.join(folder, token), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _HELD[token] = fd
    return token


def _drop_lock(ledger_path: str, token: str | None) -> None:
    if not token:
        return
    fd = _HELD.pop(token, None)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(_lock_folder(ledger_path), token))
    if fd is not None:
        os.close(fd)


def _release_lock(entry: dict) -> None:
    _drop_lock(entry["ledger"], entry.get("lock"))


def _holder_alive(ledger_path: str, token: str) -> bool:
    """Whether a live process holds the lock of the reservation ``token`` (its own or another's)."""
    if token in _HELD:
        return True
    try:
        fd = os.open(os.path.join(_lock_folder(ledger_path), token), os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _check_dataset(dataset):
    if not (isinstance(dataset, str) and 0 < len(dataset) <= 200 and dataset.isprintable()):
        raise UsageError(f"a dataset id must be 1-200 printable characters, got {dataset!r}")


def _as_events(events) -> list:
    if isinstance(events, dp_event.DpEvent):
        events = [events]
    events = list(events)
    if not events or not all(isinstance(e, dp_event.DpEvent) for e in events):
        raise UsageError(f"a release must name its DpEvents (sqm.mechanism.events; NoOpDpEvent for none), "
                         f"got {events!r}")
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
            self._migrate(con)
            con.executescript(SCHEMA)

    @staticmethod
    def _migrate(con) -> None:
        """A ledger file written before refunds: its releases table rebuilt with the new statuses and columns
        (its entries kept, every one counted: ``sent`` 1; one written before units has record-level entries)."""
        row = con.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'releases'").fetchone()
        if row is None or "'refunded'" in row[0]:
            return
        con.execute("BEGIN IMMEDIATE")
        try:
            row = con.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'releases'").fetchone()
            if "'refunded'" not in row[0]:  # another process may have migrated it meanwhile
                cols = {r["name"] for r in con.execute("PRAGMA table_info(releases)")}
                keep = [c for c in RELEASE_COLUMNS if c in cols]
                con.execute("ALTER TABLE releases RENAME TO releases_before_refunds")
                for statement in RELEASES.split(";"):
                    if statement.strip():
                        con.execute(statement)
                con.execute(f"INSERT INTO releases ({', '.join(keep)}) SELECT {', '.join(keep)} "
                            f"FROM releases_before_refunds")
                con.execute("DROP TABLE releases_before_refunds")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

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
        """Every dataset with a budget, a release, a bound file or an alignment, sorted."""
        with self._connect() as con:
            rows = con.execute("SELECT dataset FROM budgets UNION SELECT dataset FROM releases UNION SELECT dataset "
                               "FROM files UNION SELECT dataset FROM alignments").fetchall()
        return sorted(r[0] for r in rows)

    def releases(self, dataset: str) -> list[dict]:
        """The dataset's entries in order (refunded ones included), each a dict with its events parsed
        (``events``); reservations whose process died are settled first (:meth:`settle`)."""
        self.settle()
        with self._connect() as con:
            rows = con.execute("SELECT * FROM releases WHERE dataset = ? ORDER BY id", (dataset,)).fetchall()
        out = []
        for r in rows:
            d = dict(r)
            d["events"] = ev.events_from_json(json.loads(d["events"]))
            out.append(d)
        return out

    # ----- reservations whose process died ------------------------------------------------------------
    def settle(self) -> int:
        """Settle every refundable reservation whose process died (its lock is free, :func:`_holder_alive`):
        ``refunded`` if its party had not marked its shares of an output sent, else ``failed``.  Returns how
        many were settled."""
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                n = self._settle(con)
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
        return n

    def _settle(self, con) -> int:
        rows = con.execute("SELECT id, lock, sent FROM releases "
                           "WHERE status = 'reserved' AND lock IS NOT NULL").fetchall()
        dead = [r for r in rows if not _holder_alive(self.path, r["lock"])]
        for r in dead:
            con.execute("UPDATE releases SET status = ?, finished = ? WHERE id = ?",
                        ("failed" if r["sent"] else "refunded", _now(), r["id"]))
        for r in dead:
            _drop_lock(self.path, r["lock"])
        return len(dead)

    # ----- accounting ----------------------------------------------------------------------------
    def _status(self, con, dataset, new_events=(), new_eta=0.0) -> Status:
        budget = self._budget(con, dataset)
        if budget is None:
            raise NoBudget(f"dataset {dataset!r} has no privacy budget in the ledger {self.path}: set one first "
                           f"(sqm budget set {dataset} --budget EPS,DELTA, or a job's --budget)")
        rows = con.execute(f"SELECT events, eta FROM releases WHERE dataset = ? AND {COUNTED}", (dataset,)).fetchall()
        # one unit per dataset (reserve refuses another), so every entry composes with every other
        events = [e for r in rows for e in ev.events_from_json(json.loads(r["events"]))] + list(new_events)
        eta = sum(r["eta"] for r in rows) + float(new_eta)
        spent = spent_epsilon(events, budget, eta)
        return Status(dataset, budget, spent, budget.epsilon - spent, len(rows))

    def status(self, dataset: str) -> Status:
        """What the dataset has spent and has left (NoBudget if it has no budget)."""
        self.settle()
        with self._connect() as con:
            return self._status(con, dataset)

    def check(self, dataset: str, new_events, eta: float = 0.0) -> Status:
        """The dataset's account with ``new_events`` added, without recording; BudgetExceeded if over."""
        _check_dataset(dataset)
        self.settle()
        with self._connect() as con:
            events = _as_events(new_events)
            return self._check(con, dataset, events, eta, release_unit(events))

    def _check(self, con, dataset, new_events, eta, unit: str) -> Status:
        before = self._status(con, dataset)
        after = self._status(con, dataset, new_events, eta)
        if not after.spent <= before.budget.epsilon:
            raise BudgetExceeded(dataset, before.budget, before.spent, before.left, after.spent,
                                 before.n_releases, unit)
        return after

    def reserve(self, dataset: str, events, statistic: str = "", job_id: str | None = None, *,
                delta: float | None = None, eta: float = 0.0, unit: str | None = None,
                refundable: bool = False) -> Reservation:
        """Check the budget and record the release in one transaction (BEGIN IMMEDIATE: concurrent jobs are
        serialized), committed before this returns; BudgetExceeded (nothing recorded) if it would exceed.
        ``delta``: the release's own delta, for its stand-alone epsilon (default: the budget's); ``eta``: its
        failure probability.  ``unit``: the neighbouring relation of the events
        (:data:`sqm.mechanism.report.NEIGHBOURING`; None: "embedding" for PBM events, else "zero-out", the record-level
        relation): a dataset's entries are all in one unit, since a feature-level epsilon (PBM-VFL's, for embeddings
        taken as given) and a record-level one do not compose into any guarantee; another unit is refused (ValueError,
        nothing recorded).  ``refundable``: the entry may become ``refunded`` (not counted) if its job ends before its
        party sends its shares of an output (:meth:`Reservation.shares_sent`, :meth:`Reservation.fail`); this process
        then holds its lock until it is finished, and if the process dies first the entry is settled by :meth:`settle`.
        Default False: every entry counts, finished or not.
        Returns the entry (status 'reserved'); use it as a context manager, or call ``complete()`` / ``fail()``."""
        _check_dataset(dataset)
        events = _as_events(events)
        unit = release_unit(events, unit)
        if not (0 <= eta <= 1):
            raise UsageError(f"the failure probability eta must lie in [0, 1], got {eta!r}")
        text = json.dumps(ev.events_to_json(events), allow_nan=False)
        token = _take_lock(self.path) if refundable else None  # held before the entry exists
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                self._settle(con)
                other = con.execute("SELECT DISTINCT unit FROM releases WHERE dataset = ? AND unit != ?",
                                    (dataset, unit)).fetchall()
                if other:
                    raise UsageError(f"dataset {dataset!r} holds {other[0]['unit']} entries in the ledger {self.path}: "
                                     f"a {unit} release does not compose with them (different units); charge it to "
                                     f"a dataset id of its own")
                after = self._check(con, dataset, events, eta, unit)
            except BaseException:
                con.execute("ROLLBACK")
                _drop_lock(self.path, token)
                raise
            own_delta = float(delta) if delta is not None else after.budget.delta
            own_eps = ev.compose(events, own_delta)
            row = dict(dataset=dataset, statistic=str(statistic), time=_now(), epsilon=own_eps, delta=own_delta,
                       eta=float(eta), job_id=None if job_id is None else str(job_id), status="reserved", unit=unit)
            cur = con.execute("INSERT INTO releases (dataset, statistic, time, events, epsilon, delta, eta, job_id, "
                              "status, unit, sent, lock) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                              (dataset, row["statistic"], row["time"], text, own_eps, own_delta, row["eta"],
                               row["job_id"], "reserved", unit, 0 if refundable else 1, token))
            con.execute("COMMIT")
        return Reservation(id=cur.lastrowid, **row, spent=after.spent, left=after.left, ledger=self.path,
                           sent=0 if refundable else 1, lock=token)

    def record(self, dataset: str, events, statistic: str = "", job_id: str | None = None, *,
               delta: float | None = None, eta: float = 0.0, unit: str | None = None) -> Reservation:
        """:meth:`reserve` and mark completed at once (a release already made, e.g. in process)."""
        entry = self.reserve(dataset, events, statistic, job_id, delta=delta, eta=eta, unit=unit)
        entry.complete()
        return entry

    def _finish(self, entry_id: int, status: str, model: tuple[str, str] | None = None) -> None:
        with self._connect() as con:
            con.execute("UPDATE releases SET status = ?, finished = ?, model = ?, model_numbers = ? WHERE id = ?",
                        (status, _now(), *(model or (None, None)), entry_id))

    def _mark_sent(self, entry_id: int) -> None:
        with self._connect() as con:
            con.execute("UPDATE releases SET sent = 1 WHERE id = ?", (entry_id,))

    def _sent(self, entry_id: int) -> bool:
        with self._connect() as con:
            row = con.execute("SELECT sent FROM releases WHERE id = ?", (entry_id,)).fetchone()
        return row is None or bool(row["sent"])

    # ----- the owner's names for its files ------------------------------------------------------------
    def bind(self, dataset: str | None, digest: str, add: bool = False) -> str:
        """The dataset the file with content ``digest`` charges, binding it on first use.

        A digest is bound to one dataset: ``dataset`` None (no name given) is the one it is bound to, else
        :func:`default_account`; naming another is refused (:class:`BindingError`).  A dataset that another
        digest is bound to (its file changed, or another file) is refused unless ``add`` (its owner's
        ``sqm budget bind``: the new file charges the same account)."""
        if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            raise UsageError(f"a file digest is 64 lower-case hex digits (SHA-256), got {digest!r}")
        if dataset is not None:
            _check_dataset(dataset)
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                name = self._bind(con, dataset, digest, add)
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
        return name

    def _bind(self, con, dataset, digest, add) -> str:
        row = con.execute("SELECT dataset FROM files WHERE digest = ?", (digest,)).fetchone()
        if row is not None:
            if dataset is not None and dataset != row["dataset"]:
                raise BindingError(f"this file (SHA-256 {digest[:16]}...) is bound to dataset {row['dataset']!r} in "
                                   f"the ledger {self.path}: it charges {row['dataset']!r} whatever a job names; "
                                   f"give --ledger-dataset {row['dataset']} or leave it out")
            return row["dataset"]
        name = default_account(digest) if dataset is None else dataset
        other = con.execute("SELECT digest FROM files WHERE dataset = ? LIMIT 1", (name,)).fetchone()
        if other is not None and not add:
            raise BindingError(f"dataset {name!r} is bound to another file (SHA-256 {other['digest'][:16]}...) in the "
                               f"ledger {self.path}: if this file holds the same records (a new version), bind it "
                               f"to the same account first (sqm budget bind {name} FILE); else name another dataset")
        con.execute("INSERT INTO files VALUES (?, ?, ?)", (digest, name, _now()))
        return name

    def files(self, dataset: str) -> list[dict]:
        """The file digests bound to the dataset (digest, bound), in the order they were bound."""
        with self._connect() as con:
            rows = con.execute("SELECT digest, bound FROM files WHERE dataset = ? ORDER BY rowid",
                               (dataset,)).fetchall()
        return [dict(r) for r in rows]

    # ----- record alignments --------------------------------------------------------------------------
    def count_alignment(self, dataset: str, cap: int | None, job_id: str | None = None) -> int:
        """Record one record alignment of the dataset (a job's private set intersection over its file), or
        refuse it (:class:`AlignmentCapReached`, nothing recorded) when the dataset already has ``cap`` (None:
        no cap).  Returns the dataset's count with this one."""
        _check_dataset(dataset)
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            n = con.execute("SELECT COUNT(*) FROM alignments WHERE dataset = ?", (dataset,)).fetchone()[0]
            if cap is not None and n >= cap:
                con.execute("ROLLBACK")
                raise AlignmentCapReached(f"dataset {dataset!r} has had {n} record alignment(s), its owner's cap "
                                          f"(--max-alignments {cap}); ledger {self.path}")
            con.execute("INSERT INTO alignments (dataset, job_id, time) VALUES (?, ?, ?)",
                        (dataset, None if job_id is None else str(job_id), _now()))
            con.execute("COMMIT")
        return n + 1

    def alignments(self, dataset: str) -> int:
        """How many record alignments the dataset has had."""
        with self._connect() as con:
            return con.execute("SELECT COUNT(*) FROM alignments WHERE dataset = ?", (dataset,)).fetchone()[0]

    # ----- released models and their scorings ---------------------------------------------------------
    def released_model(self, digest: str) -> dict | None:
        """The completed entry that released the model with this digest (dataset, job_id, id, model_numbers), or
        None: no completed release of this ledger gave it."""
        with self._connect() as con:
            row = con.execute("SELECT id, dataset, job_id, model_numbers FROM releases WHERE model = ? AND "
                              "status = 'completed' ORDER BY id LIMIT 1", (digest,)).fetchone()
        return None if row is None else dict(row)

    def record_scoring(self, dataset: str, model: str, requester: int, job_id: str | None = None) -> None:
        """Record that the dataset's file was scored with the model (digest) for party ``requester``."""
        with self._connect() as con:
            con.execute("INSERT INTO scorings (dataset, model, requester, job_id, time) VALUES (?, ?, ?, ?, ?)",
                        (dataset, model, int(requester), None if job_id is None else str(job_id), _now()))

    def scored_models(self, dataset: str, requester: int) -> list[str]:
        """The numbers (JSON) of every model the dataset's file was scored with for party ``requester``."""
        with self._connect() as con:
            rows = con.execute("SELECT DISTINCT r.model_numbers FROM scorings s JOIN releases r ON r.model = s.model "
                               "WHERE s.dataset = ? AND s.requester = ? AND r.model_numbers IS NOT NULL",
                               (dataset, int(requester))).fetchall()
        return [r[0] for r in rows]
