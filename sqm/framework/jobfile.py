"""Real multi-party jobs from a job file: each party process reads only its own CSV file.

A job file (JSON) lists the parties in index order; party 0 is the server (no data)::

    {"job_id": "3fa2...(32 hex digits)", "name": "census-2024", "dataset": "census", "id_column": "id",
     "parties": [{"address": "10.0.0.1:11365"},
                 {"address": "10.0.0.2:11365", "file": "bank.csv",
                  "bounds": {"age": [0, 120], "income": [0, 500000]}},
                 {"address": "10.0.0.3:11365", "file": "insurer.csv"}]}

A party file is a table (CSV with a header, or Parquet: :mod:`sqm.framework.tables`): the id column plus that party's
feature columns (numbers), its records in any order (each client sorts its rows itself, step 4).  A client's
optional ``bounds`` are PUBLIC ranges of its columns: it clamps each declared column to its range and scales
it so that rows inside the ranges fit the row norm bound (:func:`scale_to_bounds`; undeclared columns are
left as they are; ``sqm pca --propose-bounds FILE`` proposes ranges from a party's own data, which are not
private and must be reviewed).  ``norm_share`` (every client or none, adding up to at most 1): a client's
public share s_j of the squared row norm bound, its sub-rows bounded by c sqrt(s_j) (default: its share of
the columns).  File
paths in a job file are relative to the job file and must stay inside its folder (absolute paths, ``..``
and symlinks leading out are refused, naming the party); an operator may point its own party at a file
anywhere with ``--data-file PATH`` on its own command line.  On each host, ``sqm pca --job job.json
--index I`` starts party I (``--index`` omitted: all parties on this machine, over the addresses in the
file).  A job needs at least two clients (one client would mean threshold t = 0: the server's share would
be that client's data).

``task`` (optional): ``{"statistic": "pca", "components": 5, "epsilon": 1, ...}``, the job itself: the statistic
(the command that runs it) and its parameters (:func:`sqm.cli.job_cli.apply_task_block`: a command of another statistic is refused,
and options on a command line may only repeat the file's values).

``job_id`` (32 hex digits, random, fresh for every job: :func:`write_job` draws one) binds every party to this
job: the parties compare it, the addresses and the task before anything else, and refuse a party of another
job naming it.  Running one party (``--index``) needs it.  ``name`` is the job's name in the parties' TLS
certificates (``python -m sqm.runtime.certs --job NAME``; default: the name in each party's own certificate).
``dataset`` names the data the release is charged to in the server's privacy-budget ledger (default: the
job's ``name``; see :class:`LedgerGuard`); every party agrees on it with the task.  TLS
is on whenever an address is not loopback (each party's ``--ssl-dir``); plain TCP between hosts needs the
operator's ``--insecure-plaintext``.

Seeds never leave a party: no seed is part of the public parameters or of any message.  ``--seed`` is
refused in job mode unless ``--insecure-reproducible`` is given (:func:`seed_policy`); then each party
derives its own seed from the seed on its own command line (``sqm.mechanism.rng.spawn_seeds``, entry I for party I).

What a party does (:class:`JobParty`, run inside ``python -m sqm.runtime.party``):

1. all parties check that they run the same task with the same public parameters;
2. each client loads ONLY its own file (the program it is given names no other party's file) and checks
   it: the file exists, has records and feature columns, numbers only, nothing missing, no infinity, no
   missing and no repeated ids (compared in their canonical form, :func:`sqm.framework.tables.canonical_id`:
   ``007`` and ``7`` are one id), and the columns its ``bounds`` declare; it puts its rows in
   :func:`canonical_order` of their ids (one total order, computed from its own ids alone);
3. the clients tell everyone their column and record counts and column names (the public schema of a valid
   file) or a short category of their problem (never a cell value, an id, a header or a path: the full
   detail is printed at that party only); on any problem every party refuses, naming the client, before
   any share is sent;
4. the clients align their records by private set intersection (:mod:`sqm.framework.alignment`, protocol
   :mod:`sqm.runtime.psi`): no id leaves its owner except blinded under a key the receiver does not hold; each
   client keeps the records every client holds, in canonical order, and the job's record count is the
   intersection size (refused below ``min_intersection``, default 100: job file ``"min_intersection"``,
   or ``--min-intersection``); a client with declared ``bounds`` scales them;
5. the server charges the release (the task's ``release(meta)`` events) to the job file's dataset in its
   privacy-budget ledger (:class:`LedgerGuard`): over budget, the job is refused before any share is sent;
6. the task (e.g. :class:`sqm.methods.pca.PCAJobTask`, through :func:`sqm.mechanism.release.sqm_round`) plans the public
   release from the counts and runs it: each client clips its own rows to its bound, counts the clipped rows
   (reported to that party only, with a WARNING above 1% of its rows (:func:`clip_warning`): the count is
   data-dependent and is not released to the server), and its input carries the digest of its records'
   order from the alignment, which the clients compare among themselves again before any share is sent.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import logging
import os
from dataclasses import dataclass

import numpy as np

from sqm.framework.alignment import DEFAULT_MIN_INTERSECTION, align_records, check_min_intersection
from sqm.framework.extras import require
from sqm.framework.jobtask import JobTask  # noqa: F401 (re-exported: the task contract)
from sqm.framework.tables import MAX_ABS_VALUE, PartyFileError, PartyTable, id_order_key, read_table  # noqa: F401 (re-exported)
from sqm.mechanism.vertical import party_norm_bounds
from sqm.runtime.certs import check_job_name
from sqm.runtime.errors import UsageError
from sqm.runtime.launch import (
    Launch,
    MPCError,
    new_job_id,
    party_command,
    party_env,
    party_name,
    require_two_clients,
    run_parties,
)
from sqm.runtime.party import InputRefused, PartyProgram, ProtocolError, public_digest
from sqm.runtime.protocol import party_label
from sqm.runtime.party import messages as wire

log = logging.getLogger(__name__)


# ----- job files --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartySpec:
    address: str
    file: str | None = None  # None for the server
    name: str = ""
    bounds: tuple = ()  # ((column, lo, hi), ...): public ranges declared for this client's columns
    norm_share: float | None = None  # public: this client's share of c^2 (its sub-rows' bound c sqrt(share))


@dataclass(frozen=True)
class JobSpec:
    parties: tuple[PartySpec, ...]
    id_column: str = "id"
    path: str | None = None  # the job file it came from
    job_id: str | None = None  # 32 hex digits, fresh per job (required to run one party on its own)
    name: str | None = None  # the job's name in the parties' certificates
    dataset: str | None = None  # the dataset id the server's privacy-budget ledger charges (default: name)
    drop_columns: tuple[str, ...] = ()  # columns of the party files this job leaves out (--drop-columns)
    min_intersection: int = DEFAULT_MIN_INTERSECTION  # fewest records in common a job runs on (--min-intersection)
    task: dict | None = None  # the job file's "task" block: {"statistic": "pca", its parameters...} (None: none)

    @property
    def dataset_id(self) -> str | None:
        """The dataset this job's release is charged to in the ledger: ``dataset``, else the job's ``name``."""
        return self.dataset or self.name

    @property
    def n_clients(self) -> int:
        return len(self.parties) - 1

    @property
    def norm_shares(self) -> tuple[float, ...] | None:
        """The clients' declared shares of the squared row norm bound (None: none declared)."""
        shares = tuple(p.norm_share for p in self.parties[1:])
        return None if shares[0] is None else shares

    @property
    def bounds(self) -> tuple:
        """Each client's declared column ranges (``()`` where it declares none): public, in the job file."""
        return tuple(p.bounds for p in self.parties[1:])

    @property
    def addresses(self) -> list[str]:
        return [p.address for p in self.parties]

    def with_file(self, index: int, path) -> "JobSpec":
        """This job with client ``index``'s file replaced by ``path`` (its operator's own ``--data-file``:
        any path on that party's machine, absolute or relative to the working folder)."""
        if index is None or not 1 <= index <= self.n_clients:
            raise UsageError(f"--data-file replaces one client's file: give --index 1..{self.n_clients} "
                             f"(the server, party 0, holds no data)")
        parties = list(self.parties)
        parties[index] = dataclasses.replace(parties[index], file=os.path.abspath(str(path)))
        return dataclasses.replace(self, parties=tuple(parties))


def _check_address(a, i) -> str:
    if not isinstance(a, str) or a.count(":") != 1:
        raise UsageError(f"job file: party {i} needs an address 'host:port', got {a!r}")
    host, port = a.split(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"job file: party {i} has an invalid address {a!r} (need host:port, port 1..65535)")
    return a


def _confined(f: str, base: str, i: int, path) -> str:
    """Client ``i``'s file ``f`` from the job file, as a path inside the job file's folder ``base``.

    Absolute paths and paths that lead out of the folder (``..``, or a symlink resolving elsewhere) are
    refused: a job file written by someone else must not make a party read (and report on) an arbitrary
    file of its machine.  Nothing is opened here."""
    hint = (f"party files in a job file must lie in the job file's folder {base}; the operator of client "
            f"{i} may give any path for its own file on its own command line (--data-file PATH with --index {i})")
    if os.path.isabs(f):
        raise UsageError(f"job file {path}: client {i}'s file is an absolute path, refused: {hint}")
    full = os.path.join(base, f)
    real_base = os.path.realpath(base)
    real = os.path.realpath(full)
    if os.path.commonpath([real, real_base]) != real_base:
        raise UsageError(f"job file {path}: client {i}'s file {f!r} resolves outside the job file's folder, "
                         f"refused: {hint}")
    return full


def load_job(path) -> JobSpec:
    """Read and check a job file (JSON, format in the module docstring)."""
    path = str(path)
    if not os.path.isfile(path):
        raise UsageError(f"job file {path} does not exist")
    try:
        with open(path) as f:
            raw = json.load(f)
    except json.JSONDecodeError as e:
        raise UsageError(f"job file {path} is not valid JSON: {e}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("parties"), list):
        raise UsageError(f"job file {path} needs a 'parties' list (party 0 the server, then the clients)")
    entries = raw["parties"]
    require_two_clients(max(0, len(entries) - 1), f"job file {path}: ")
    base = os.path.dirname(os.path.abspath(path))
    parties = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise UsageError(f"job file {path}: party {i} must be an object with 'address' (and 'file')")
        addr = _check_address(e.get("address"), i)
        f = e.get("file")
        if i == 0 and f is not None:
            raise UsageError(f"job file {path}: party 0 is the server and holds no data; remove its 'file'")
        if i > 0:
            if not isinstance(f, str) or not f:
                raise UsageError(f"job file {path}: client {i} needs a 'file' (its CSV)")
            f = _confined(f, base, i, path)
        if i == 0 and (e.get("bounds") is not None or e.get("norm_share") is not None):
            raise UsageError(f"job file {path}: party 0 is the server and holds no data; remove its 'bounds' "
                             f"and 'norm_share'")
        share = e.get("norm_share")
        if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float))
                                  or not 0 < share <= 1):
            raise UsageError(f"job file {path}: client {i}'s 'norm_share' must be a number in (0, 1], got {share!r}")
        parties.append(PartySpec(addr, f, str(e.get("name") or ("server" if i == 0 else f"client{i}")),
                                 check_bounds(e.get("bounds"), f"job file {path}: client {i}'s"),
                                 None if share is None else float(share)))
    shares = [p.norm_share for p in parties[1:]]
    if any(v is not None for v in shares) and (None in shares or sum(shares) > 1 + 1e-9):
        raise UsageError(f"job file {path}: 'norm_share' must be given for every client or none, and the shares "
                         f"must add up to at most 1 (whole rows then satisfy ||x|| <= c); got {shares}")
    addrs = [p.address for p in parties]
    if len(set(addrs)) != len(addrs):
        raise UsageError(f"job file {path}: duplicate party addresses {addrs}")
    id_column = raw.get("id_column", "id")
    if not isinstance(id_column, str) or not id_column:
        raise UsageError(f"job file {path}: 'id_column' must be a column name")
    from sqm.runtime.session import check_job_id

    job_id, name, dataset = raw.get("job_id"), raw.get("name"), raw.get("dataset")
    try:
        if job_id is not None:
            check_job_id(job_id)
        if name is not None:
            check_job_name(name)
        if dataset is not None:
            check_dataset_id(dataset)
    except ValueError as e:
        raise UsageError(f"job file {path}: {e}") from None
    min_common = raw.get("min_intersection", DEFAULT_MIN_INTERSECTION)
    check_min_intersection(min_common, f"job file {path}: 'min_intersection'")
    task = raw.get("task")
    if task is not None and not (isinstance(task, dict) and isinstance(task.get("statistic"), str)
                                 and all(isinstance(k, str) for k in task)):
        raise UsageError(f"job file {path}: 'task' must be an object naming its \"statistic\" (e.g. \"pca\") and "
                         f"its parameters, e.g. {{\"statistic\": \"pca\", \"components\": 5, \"epsilon\": 1}}")
    return JobSpec(tuple(parties), id_column, path, job_id, name, dataset, min_intersection=min_common, task=task)


def check_bounds(raw, who: str = "") -> tuple:
    """A client's declared public column ranges, ``{"column": [lo, hi], ...}``, as ((column, lo, hi), ...)."""
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not raw:
        raise UsageError(f"{who} 'bounds' must map column names to public ranges [lo, hi], e.g. "
                         f"{{\"age\": [0, 120]}}")
    out = []
    for col, r in raw.items():
        ok = isinstance(r, (list, tuple)) and len(r) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) for v in r)
        if not ok or not r[0] < r[1]:
            raise UsageError(f"{who} bound of column {col!r} must be a range [lo, hi] of finite numbers with "
                             f"lo < hi, got {r!r}")
        out.append((str(col), float(r[0]), float(r[1])))
    return tuple(out)


def declared_scales(task: JobTask, meta: "JobMeta", bounds, pid: int) -> dict[str, float]:
    """Client ``pid``'s declared columns -> the factor :func:`scale_to_bounds` multiplies each by: the column's
    bound over ``max(|lo|, |hi|)``, a column's bound being its share of the task's row norm bound,
    c_j / sqrt(its columns) (c_j: :func:`sqm.mechanism.vertical.party_norm_bounds`, over the columns the task's
    ``feature_counts(meta)`` counts), or what the task's ``declared_bound`` says (a regression label).  Public:
    the client and the server compute the same factors from the job file and the public counts."""
    if not bounds:
        return {}
    if task.clamp_only:
        return {col: 1.0 for col, _, _ in bounds}
    counts = task.feature_counts(meta)
    c_j = party_norm_bounds(task.row_norm_bound, counts, task.party_bounds)[pid - 1]
    col_bound = float(c_j) / np.sqrt(counts[pid - 1])
    return {col: float(task.declared_bound(col, col_bound)) / max(abs(lo), abs(hi)) for col, lo, hi in bounds}


def scale_to_bounds(block: np.ndarray, columns, bounds, factors: dict[str, float]) -> tuple[np.ndarray, int]:
    """A client's block with each declared column clamped to its public range [lo, hi] and multiplied by its
    factor (:func:`declared_scales`; zero stays zero: a range [-a, a] maps to [-b, b], [0, a] to [0, b]);
    undeclared columns are left as they are.  Returns it and how many values lay outside their ranges."""
    out = np.array(block, dtype=np.float64)
    at = {c: j for j, c in enumerate(columns)}
    outside = 0
    for col, lo, hi in bounds:
        j = at[col]
        outside += int(np.count_nonzero((out[:, j] < lo) | (out[:, j] > hi)))
        out[:, j] = np.clip(out[:, j], lo, hi) * factors[col]
    return out, outside


def check_dataset_id(dataset) -> str:
    """A job file's ``dataset``: 1-200 printable characters naming the data the ledger charges."""
    if not isinstance(dataset, str) or not 0 < len(dataset) <= 200 or not dataset.isprintable():
        raise UsageError(f"'dataset' must be a name of 1-200 printable characters, got {dataset!r}")
    return dataset


def write_job(path, addresses, files, id_column: str = "id", job_id: str | None = None,
              name: str | None = None, dataset: str | None = None, bounds=None, norm_shares=None,
              min_intersection: int | None = None, task: dict | None = None) -> str:
    """Write a job file: ``addresses[0]`` the server's, then one address and one file per client; a fresh
    random ``job_id`` unless given, the job's ``name`` (as in its certificates) and the ``dataset`` id (the
    ledger's) if given; ``bounds``: per client, None or its public column ranges ``{column: [lo, hi]}``;
    ``norm_shares``: each client's public share of c^2 (None: c_j = c sqrt(its columns / all columns));
    ``min_intersection``: the fewest records in common the job runs on (None: the default, not written);
    ``task``: the job's task block, ``{"statistic": "pca", its parameters...}`` (:func:`sqm.cli.job_cli.apply_task_block`)."""
    if len(addresses) != len(files) + 1:
        raise UsageError(f"need one address per party: {len(addresses)} addresses for 1 server + "
                         f"{len(files)} clients")
    base = os.path.dirname(os.path.abspath(path))
    parties = [{"address": addresses[0]}]
    for j, (a, f) in enumerate(zip(addresses[1:], files), start=1):
        rel = os.path.relpath(os.path.abspath(f), base)
        if rel == os.pardir or rel.startswith(os.pardir + os.sep):
            raise UsageError(f"client {j}'s file {f} lies outside the job file's folder {base}: load_job "
                             f"would refuse it (put it there, or have its operator pass --data-file)")
        parties.append({"address": a, "file": rel})
        if bounds is not None and bounds[j - 1] is not None:
            check_bounds(bounds[j - 1], f"client {j}'s")
            parties[-1]["bounds"] = {c: [float(lo), float(hi)] for c, (lo, hi) in bounds[j - 1].items()}
        if norm_shares is not None:
            parties[-1]["norm_share"] = float(norm_shares[j - 1])
    from sqm.runtime.session import check_job_id

    head = {"job_id": check_job_id(job_id) if job_id is not None else new_job_id()}
    if name is not None:
        head["name"] = check_job_name(name)
    if dataset is not None:
        head["dataset"] = check_dataset_id(dataset)
    if min_intersection is not None:
        head["min_intersection"] = check_min_intersection(min_intersection, "min_intersection")
    if task is not None:
        if not isinstance(task, dict) or not isinstance(task.get("statistic"), str):
            raise UsageError(f"a task block names its statistic, e.g. {{\"statistic\": \"pca\", ...}}, got {task!r}")
        head["task"] = dict(task)
    with open(path, "w") as fh:
        json.dump({**head, "id_column": id_column, "parties": parties}, fh, indent=2)
    return str(path)


def write_party_csvs(X, directory, n_parties: int | None = None, col_counts=None, ids=None,
                     id_column: str = "id", addresses=None, prefix: str = "party",
                     job_name: str = "job.json", dataset: str | None = None, bounds=None,
                     norm_shares=None, fmt: str = "csv", row_group_rows: int = 1 << 14,
                     min_intersection: int | None = None, task: dict | None = None) -> str:
    """Split ``X``'s columns among parties, write ``{prefix}{j}.csv`` (id + columns) and a job file.

    ``fmt="parquet"`` writes ``{prefix}{j}.parquet`` instead (pyarrow; integer ids when ``ids`` are integers,
    float64 columns, row groups of ``row_group_rows`` records, so a reader in batches holds one group at a
    time).
    ``col_counts`` gives each party's column count (default: ``n_parties`` near-equal blocks, as
    :meth:`sqm.mechanism.vertical.VerticalData.split`).  ``ids`` default to 0..m-1.  ``addresses`` default to
    loopback ports chosen free now; ``dataset``, ``bounds``, ``norm_shares``: see :func:`write_job`.  Floats
    are written with 17 significant digits (exact round trip).
    Returns the job file's path.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise UsageError(f"data must be 2-D, got shape {X.shape}")
    if col_counts is None:
        if n_parties is None or not 1 <= n_parties <= X.shape[1]:
            raise UsageError(f"cannot split {X.shape[1]} columns among {n_parties} parties")
        col_counts = [b.shape[1] for b in np.array_split(X, n_parties, axis=1)]
    col_counts = [int(c) for c in col_counts]
    if sum(col_counts) != X.shape[1] or min(col_counts) < 1:
        raise UsageError(f"column counts {col_counts} do not split {X.shape[1]} columns")
    ids = list(range(X.shape[0])) if ids is None else list(ids)
    if len(ids) != X.shape[0]:
        raise UsageError(f"{len(ids)} ids for {X.shape[0]} records")
    if fmt not in ("csv", "parquet"):
        raise UsageError(f"fmt must be 'csv' or 'parquet', got {fmt!r}")
    os.makedirs(directory, exist_ok=True)
    files, start = [], 0
    for j, k in enumerate(col_counts, start=1):
        if fmt == "parquet":
            files.append(_write_parquet(os.path.join(directory, f"{prefix}{j}.parquet"), ids, id_column,
                                        [f"x{start + t}" for t in range(k)], X[:, start:start + k], row_group_rows))
            start += k
            continue
        f = os.path.join(directory, f"{prefix}{j}.csv")
        with open(f, "w", newline="") as fh:
            csv.writer(fh).writerow([id_column] + [f"x{start + t}" for t in range(k)])
            fh.write("".join(f"{i}," + ",".join(map(repr, row)) + "\r\n"  # floats' repr: exact round trip
                             for i, row in zip(ids, X[:, start:start + k].tolist())))
        files.append(f)
        start += k
    if addresses is None:
        from sqm.runtime.launch import free_ports

        addresses = [f"127.0.0.1:{p}" for p in free_ports(len(col_counts) + 1)]
    return write_job(os.path.join(directory, job_name), addresses, files, id_column, dataset=dataset,
                     bounds=bounds, norm_shares=norm_shares, min_intersection=min_intersection, task=task)


def _write_parquet(path: str, ids, id_column: str, names, block: np.ndarray, row_group_rows: int) -> str:
    require("parquet", "writing Parquet party files")
    import pyarrow as pa
    import pyarrow.parquet as pq

    is_int = all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in ids)
    cols = {id_column: pa.array(np.asarray(ids, dtype=np.int64) if is_int else [str(i) for i in ids])}
    cols.update({n: pa.array(np.ascontiguousarray(block[:, t])) for t, n in enumerate(names)})
    pq.write_table(pa.table(cols), path, row_group_size=int(row_group_rows))
    return path


# ----- one party's file -------------------------------------------------------------------------------------


def read_party_csv(path, id_column: str = "id") -> PartyTable:
    """Load and check one party's table (CSV or Parquet: :func:`sqm.framework.tables.read_table`).  Errors
    (:class:`PartyFileError`) name the file, row and column; their ``public`` part, for peers, names neither
    file, column nor value."""
    return read_table(path, id_column)


# ----- the party program --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobMeta:
    """Public facts every party learns before the task runs: the clients' column counts and the record count (the
    size of the record alignment's intersection: the records the job runs on)."""

    col_counts: tuple[int, ...]
    n_records: int

    @property
    def n_parties(self) -> int:
        return len(self.col_counts)


ALIGNMENT_NOTE = ("records: the {m} records all {k} clients hold (private set intersection of their ids); the "
                  "intersection size is released exactly, like n; adding or removing one person at one "
                  "organisation changes the intersection by at most one record, so the per-record sensitivity holds")


def refused(reason: str) -> Exception:
    """The exception a task raises to refuse its job before any share is sent (every party exits "refused",
    naming ``reason``, which reaches every peer: no data in it)."""
    return ProtocolError(f"refused before any share was sent: {reason}")


INSECURE_WARNING = ("WARNING: --insecure-reproducible: every party's randomness (Skellam noise, rounding, "
                    "shares' keys) is derived from --seed {seed}; whoever knows the seed can regenerate every "
                    "party's noise and remove it, so the result is NOT differentially private against them. "
                    "For reproducible experiments only (JSON: \"secure_mode\": false).")


def seed_policy(seed, insecure_reproducible: bool = False, warn: bool = True) -> bool:
    """``secure_mode`` of a job-mode run (``sqm pca --job``, ``sqm logreg --job``): True without a seed.

    A seed in job mode is refused (ValueError naming ``--insecure-reproducible``) unless the user opts in;
    with the opt-in a WARNING line goes to stderr (``warn``) and the run is recorded as ``secure_mode``
    false.  The seed itself is never sent: each party derives its own seed from the one on its own command
    line (``sqm.mechanism.rng.spawn_seeds(seed, M)[index]``)."""
    if seed is None:
        return True
    if not insecure_reproducible:
        raise UsageError(f"--seed {seed} is refused in job mode: whoever knows a seed can regenerate every "
                         f"party's noise, so the server could remove it.  Leave --seed out (each party draws "
                         f"its own randomness from OS entropy), or pass --insecure-reproducible for a "
                         f"reproducible experiment whose result is not private against anyone knowing the seed")
    if warn:
        log.warning(INSECURE_WARNING.format(seed=seed))
    return False


class JobParty(PartyProgram):
    """Party ``index`` of a job-file job; holds only its own file path (None at the server).  ``dataset``: the
    job file's dataset id (public, agreed); ``ledger``: this party's :class:`LedgerGuard` (the server's, or a
    client's own ledger of its records' releases; None: none)."""

    def __init__(self, index: int, file: str | None, id_column: str, task: JobTask, dataset: str | None = None,
                 ledger: "LedgerGuard | None" = None, bounds: tuple = (), drop_columns: tuple = (),
                 min_intersection: int = DEFAULT_MIN_INTERSECTION):
        self.index, self.file, self.id_column, self.task = index, file, id_column, task
        self.dataset, self.ledger, self.bounds = dataset, ledger, tuple(bounds)
        self.drop_columns = tuple(drop_columns)
        self.min_intersection = int(min_intersection)

    @property
    def own_bounds(self) -> tuple:
        """This client's declared column ranges (the job file's, public; ``()``: none, or the server)."""
        return self.bounds[self.index - 1] if self.index > 0 and self.bounds else ()

    def public(self):
        extra = [self.bounds] if any(self.bounds) else []  # every client's declared ranges, agreed by all
        extra += [("drop", self.drop_columns)] if self.drop_columns else []  # the columns left out, agreed
        return ["sqm-jobfile", self.id_column, self.dataset, self.task.public(), ("min_intersection",
                                                                                 self.min_intersection), *extra]

    async def _budget_verdict(self, ctx, meta: "JobMeta") -> None:
        """Every party whose operator keeps a privacy-budget ledger checks this job against it (nothing recorded
        yet); one exchange tells every party each verdict, so that a party over its own budget refuses the job
        before ANY party sends a share, and no other party's ledger is charged for a job that never ran.  The
        verdicts are public ("" or e.g. "the job would exceed its own privacy budget for dataset 'X'"): a
        refusing party's spent and left figures stay with its own operator."""
        mine = None if self.ledger is None else self.ledger.refusal(self.dataset, self.task, meta,
                                                                     client=not ctx.is_server)
        if mine is not None:  # tell every party why, then refuse without waiting for anyone
            await ctx.send_recv({q: mine[1] for q in range(ctx.M)}, [], None, "budget verdict")
            raise ProtocolError(f"{party_label(ctx.pid)} refused before any share was sent: {mine[0]}",
                                public=f"refused before any share was sent: {mine[1]}")
        got = await ctx.send_recv({q: "" for q in range(ctx.M)}, range(ctx.M),
                                  wire.value(str, "a budget verdict", lambda v: len(v) <= 500), "budget verdict")
        bad = [(q, v) for q, v in enumerate(got) if v and q != ctx.pid]
        if bad:
            raise ProtocolError(f"refused before any share was sent: {party_label(bad[0][0])} refused: {bad[0][1]}")

    def _scaled(self, table: PartyTable, meta: "JobMeta", pid: int) -> tuple[PartyTable, int]:
        """This client's table scaled to its declared ranges (:func:`declared_scales`), so a row inside the
        declared ranges is never clipped."""
        factors = declared_scales(self.task, meta, self.own_bounds, pid)
        if hasattr(table, "with_transform"):  # read chunk by chunk: each chunk is scaled as it is read
            return table.with_transform(lambda b: scale_to_bounds(b, table.columns, self.own_bounds, factors)), None
        block, outside = scale_to_bounds(table.block, table.columns, self.own_bounds, factors)
        return dataclasses.replace(table, block=block), outside

    def describe(self) -> str:
        """The task and a digest of its public parameters (no file, no seed): compared before anything else."""
        return (f"job file task {type(self.task).__name__} (id column {self.id_column!r}, public parameters "
                f"{public_digest(self.public())[:16]})")

    async def run(self, ctx):
        if ctx.pid != self.index:
            raise ProtocolError(f"party started as index {ctx.pid} but its program is for party {self.index}")
        await ctx.agree(tuple(self.public()), "task")
        table, mine = None, None
        if not ctx.is_server:
            table, mine = load_own_file(self.file, self.id_column, ctx.pid, self.own_bounds, self.drop_columns,
                                        stream=bool(self.task.streams))
        out = {p: mine for p in range(ctx.M)} if not ctx.is_server else {}
        if mine is not None and "error" in mine:  # its own file: tell everyone why and refuse at once (BAD_DATA)
            await ctx.send_recv(out, [], None, "client schemas")
            raise InputRefused(f"{mine['error']} (refused before any share was sent)", "see the detail above")
        got = await ctx.send_recv(out, ctx.clients, wire.value(dict, "the client's schema or its refusal", _schema_ok),
                                  "client schemas")
        errors = [f"client {j} refused: {g['error']}" for j, g in zip(ctx.clients, got) if "error" in g]
        if errors:  # only the clients' short categories: this message also goes to every peer
            raise refused("; ".join(errors))
        dropped = {c for g in got for c in g.get("dropped", ())}
        unknown = [c for c in self.drop_columns if c not in dropped]
        if unknown:  # a typo is an error, never silently ignored (column names are the public schema)
            raise refused(f"no client's file has the column(s) {unknown} named by --drop-columns")
        columns = [c for g in got for c in g["names"]]  # public schema: every client's column names, in order
        sizes = {j: int(g["rows"]) for j, g in zip(ctx.clients, got)}
        table, n_common = await align_records(ctx, table, sizes, self.min_intersection, self.task.seed)
        meta = JobMeta(tuple(int(g["cols"]) for g in got), n_common)
        outside = None
        if table is not None and self.own_bounds:  # scaled to the job file's public ranges
            table, outside = self._scaled(table, meta, ctx.pid)
        charged = self.task.charges
        if charged:
            await self._budget_verdict(ctx, meta)  # every party's own ledger agrees, or nobody sends a share
        entry = None
        if self.ledger is not None and charged:  # charged before any share: refused if over budget
            entry = self.ledger.reserve(self.dataset, self.task, meta, client=not ctx.is_server)
        try:
            result = await self.task.run(ctx, table, meta)
        except BaseException:
            if entry is not None:
                entry.fail()  # still counted: shares may have been sent
            raise
        rep = result.get("report")  # the release's report says what n is and that it is public
        if rep is not None:
            old = rep.get("notes") if isinstance(rep, dict) else rep.notes
            notes = "; ".join(x for x in (old, ALIGNMENT_NOTE.format(m=n_common, k=len(sizes))) if x)
            result["report"] = ({**rep, "notes": notes} if isinstance(rep, dict)
                                else dataclasses.replace(rep, notes=notes))
        result.setdefault("col_counts", list(meta.col_counts))
        result.setdefault("n_records", meta.n_records)
        result.setdefault("alignment", {"records": {str(j): v for j, v in sizes.items()}, "intersection": n_common})
        if entry is not None:
            entry.complete()
            result.setdefault("ledger", {k: entry[k] for k in ("id", "dataset", "statistic", "epsilon", "delta",
                                                               "status", "spent", "left", "ledger")})
        if table is not None:
            result.setdefault("file", table.file)
            if outside is None and getattr(table, "transform", None) is not None:
                outside = table.transformed_count  # counted while the task read the chunks
            if outside is not None:
                result.setdefault("outside_declared_range", outside)  # this client's own count
        else:
            result.setdefault("columns", columns)
            # public: what each released column was multiplied by (1 where no range is declared), so that a
            # released model can be given in the units of the owners' raw columns
            scales = {c: 1.0 for c in columns}
            for j, b in enumerate(self.bounds, 1):
                scales.update(declared_scales(self.task, meta, b, j))
            result.setdefault("column_scales", scales)
        return result


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


def canonical_order(ids) -> list[int]:
    """The row order every client computes alone from its own canonical ids
    (:func:`sqm.framework.tables.id_order_key`: integers by value, then text ids by text), one total order whatever
    else a client holds, so the records two clients have in common come in the same order at both; nothing
    is sent."""
    return sorted(range(len(ids)), key=lambda r: id_order_key(ids[r]))


def load_own_file(file, id_column: str, pid: int, bounds: tuple = (), drop_columns: tuple = (),
                  stream: bool = False) -> tuple[PartyTable | None, dict]:
    """A client's table, its rows in :func:`canonical_order` of their ids, and the schema message it sends
    every party: ``{"cols", "rows", "names"}`` (its column names: the public schema of a valid file; with
    ``drop_columns`` also ``"dropped"``: those of them it held and left out), or ``{"error": short category}``
    naming no path, header or value (the full detail is printed here only).  ``bounds``: its declared column
    ranges; a declared column missing from the file is refused.  ``stream``: a file already in canonical
    order is checked in one pass and read again chunk by chunk when used
    (:class:`sqm.framework.table_stream.StreamedTable`: bounded memory); any other file is read whole, as without."""
    dropped: list[str] = []
    try:
        table = None
        if stream:
            from sqm.framework.table_stream import scan_table

            table = scan_table(file, id_column)
            if table is not None:
                log.info(f"client {pid}: party file {file}: {table.n_rows:,} records checked; read in chunks")
        if table is None:
            table = read_party_csv(file, id_column)
            table = table.reordered(canonical_order(table.ids))
        if drop_columns:
            dropped = [c for c in table.columns if c in drop_columns]
            keep = [j for j, c in enumerate(table.columns) if c not in drop_columns]
            if not keep:
                raise PartyFileError(f"party file {file}: --drop-columns leaves none of its columns {table.columns}",
                                     "--drop-columns leaves none of its columns")
            table = table.select(keep)
        absent = [c for c, _, _ in bounds if c not in table.columns]
        if absent:
            raise PartyFileError(f"party file {file} lacks the column(s) {absent} whose ranges the job file "
                                 f"declares (\"bounds\"); its columns are {table.columns}",
                                 "its file lacks columns whose ranges the job file declares")
    except PartyFileError as e:
        log.error(f"client {pid}: {e}")
        return None, {"error": e.public}
    except OSError as e:
        log.error(f"client {pid}: party file {file} could not be read: {e}")
        return None, {"error": "its party file could not be read"}
    schema = {"cols": table.n_cols, "rows": table.n_rows, "names": list(table.columns)}
    return table, ({**schema, "dropped": dropped} if drop_columns else schema)


def _schema_ok(g) -> bool:
    """A client's schema message: {"cols": int >= 1, "rows": int >= 1, "names": cols short strings} or
    {"error": short text}."""
    if set(g) == {"error"}:
        return isinstance(g["error"], str) and len(g["error"]) < 2000
    dropped = g.get("dropped", [])
    return (set(g) - {"dropped"} == {"cols", "rows", "names"}
            and isinstance(dropped, list) and all(isinstance(n, str) and len(n) <= 1000 for n in dropped)
            and all(type(g[k]) is int and g[k] >= 1 for k in ("cols", "rows"))
            and isinstance(g["names"], list) and len(g["names"]) == g["cols"]
            and all(isinstance(n, str) and len(n) <= 1000 for n in g["names"]))


def party_program(spec: JobSpec, index: int, task: JobTask, ledger: "LedgerGuard | None" = None) -> JobParty:
    """Party ``index``'s program: its own file only (a party never learns where others keep their data), and
    its own ledger guard (``ledger``: the server's, or a client's own), which needs the job file's dataset."""
    if not 0 <= index < len(spec.parties):
        raise UsageError(f"party index {index} out of range: the job file lists {len(spec.parties)} parties "
                         f"(0 = server, 1..{spec.n_clients} clients)")
    if ledger is not None and spec.dataset_id is None:
        raise UsageError(f"job file {spec.path or '(unnamed)'} names no dataset: the ledger charges each release "
                         f"to the job file's \"dataset\" (or its \"name\"); add one")
    if ledger is not None:
        ledger = dataclasses.replace(ledger, job_id=spec.job_id)
    if any(spec.bounds) and not task.takes_bounds:
        raise UsageError(f"job file {spec.path or '(unnamed)'} declares column ranges (\"bounds\"), which "
                         f"{type(task).__name__} does not use: remove them")
    declared = {c for b in spec.bounds for c, _, _ in b}
    if declared & set(spec.drop_columns):
        raise UsageError(f"job file {spec.path or '(unnamed)'} declares ranges for column(s) "
                         f"{sorted(declared & set(spec.drop_columns))} that --drop-columns leaves out: keep one")
    if any(spec.bounds):
        task.check_bounds(spec.bounds)  # e.g. a label column may not be scaled
    if spec.norm_shares is not None:
        if not task.takes_bounds:
            raise UsageError(f"job file {spec.path or '(unnamed)'} declares norm shares (\"norm_share\"), which "
                             f"{type(task).__name__} does not use: remove them")
        task = task.with_party_bounds([task.row_norm_bound * float(np.sqrt(s)) for s in spec.norm_shares])
    return JobParty(index, spec.parties[index].file, spec.id_column, task, spec.dataset_id, ledger, spec.bounds,
                    spec.drop_columns, spec.min_intersection)


def job_programs(spec: JobSpec, task: JobTask, ledger: "LedgerGuard | None" = None) -> list[JobParty]:
    """Every party's program of a job started on this machine (the server's with ``ledger``)."""
    return [party_program(spec, i, task, ledger if i == 0 else None) for i in range(len(spec.parties))]


def simulate(spec: JobSpec, task: JobTask, timeout: float = 3600.0, ledger: "LedgerGuard | None" = None,
             **_transport) -> list[dict]:
    """SIMULATION: every party's program of the job (the same :func:`party_program` objects) run in this one
    process by :func:`sqm.runtime.inprocess.run_in_process`; each client still reads only its own file.  Transport
    options (TLS, connect and idle timeouts) have no meaning here and are ignored."""
    from sqm.runtime.inprocess import run_in_process

    programs = job_programs(spec, task, ledger)
    return run_in_process(programs, timeout=timeout, min_clients=2, job_id=spec.job_id, job_name=spec.name)


def _progress_args(progress_timeout: float | None) -> list[str]:
    return [] if progress_timeout is None else ["--progress-timeout", f"{progress_timeout:g}"]


def run_local(spec: JobSpec, task: JobTask, timeout: float = 3600.0, connect_timeout: float = 60.0,
              ssl_dir: str | None = None, idle_timeout: float | None = None,
              insecure_plaintext: bool = False, ledger: "LedgerGuard | None" = None,
              progress_timeout: float | None = None) -> list[dict]:
    """Start every party of the job on this machine (one process each, at the job file's addresses).

    Returns each party's result record (``result``, ``bytes_sent``, ``seconds``...), server first.  A party's
    failure raises :class:`sqm.runtime.launch.MPCError` naming it.  The launcher reads no party file; it only
    checks, for a clear error before starting anyone, that each client's file exists.  The job's id is the
    job file's (a fresh one if it has none: every party is started here).
    """
    for j, p in enumerate(spec.parties[1:], start=1):
        if not os.path.isfile(p.file):
            raise UsageError(f"client {j}'s party file {p.file} does not exist: put its CSV there or fix the "
                             f"path in {spec.path or 'the job file'}")
    programs = job_programs(spec, task, ledger)
    live = {} if idle_timeout is None else {"idle_timeout": idle_timeout}
    return run_parties(programs, timeout=timeout, connect_timeout=connect_timeout, addresses=spec.addresses,
                       ssl_dir=ssl_dir, min_clients=2, job_id=spec.job_id, job_name=spec.name,
                       insecure_plaintext=insecure_plaintext, extra_args=_progress_args(progress_timeout), **live)


def run_job(spec: JobSpec, task: JobTask, index: int | None = None, timeout: float = 3600.0,
            ssl_dir: str | None = None, data_file: str | None = None, connect_timeout: float = 60.0,
            insecure_plaintext: bool = False, idle_timeout: float | None = None, backend: str = "mpyc",
            ledger: str | None = None, budget=None, progress_timeout: float | None = None,
            client_ledger: bool = False) -> list[dict | None]:
    """Every party on this machine (``index`` None), or only party ``index`` (its record; None elsewhere).

    ``data_file``: client ``index``'s own file, any path on this machine (its operator's ``--data-file``),
    replacing the job file's entry for that party only.  ``connect_timeout``: seconds for every party to
    connect; ``insecure_plaintext``: the operator's opt-in to plain TCP between hosts.  ``backend``: 'mpyc'
    (party processes) or 'plain' (every party in this process: :func:`simulate`).  ``ledger`` (path) and
    ``budget`` ((epsilon, delta)): the privacy-budget ledger (:class:`LedgerGuard`) of the server, or, with
    ``index`` a client's, that client's own; ``client_ledger``: a client started alone (``index`` > 0) keeps
    its ledger in the default file when no ``ledger`` path is given (the command's default; ``--no-ledger``
    turns it off)."""
    if data_file is not None:
        if index is None:
            raise UsageError("--data-file replaces one client's file: give that client's --index too")
        spec = spec.with_file(index, data_file)
    own = client_ledger and index is not None and index > 0
    guard = LedgerGuard(ledger, budget) if ledger is not None or budget is not None or own else None
    if backend == "plain":
        if index is not None:
            raise UsageError("--backend plain runs every party of the job in this process: leave out --index")
        return simulate(spec, task, timeout=timeout, ledger=guard)
    if backend != "mpyc":
        raise UsageError(f"unknown backend {backend!r}; choose 'mpyc' (party processes) or 'plain' (simulation)")
    if index is None:
        return run_local(spec, task, timeout=timeout, ssl_dir=ssl_dir, connect_timeout=connect_timeout,
                         insecure_plaintext=insecure_plaintext, idle_timeout=idle_timeout, ledger=guard,
                         progress_timeout=progress_timeout)
    recs: list[dict | None] = [None] * len(spec.parties)
    recs[index] = run_one(spec, index, task, timeout=timeout, ssl_dir=ssl_dir, connect_timeout=connect_timeout,
                          insecure_plaintext=insecure_plaintext, idle_timeout=idle_timeout, ledger=guard,
                          progress_timeout=progress_timeout)
    return recs


def run_one(spec: JobSpec, index: int, task: JobTask, timeout: float = 3600.0,
            connect_timeout: float = 60.0, ssl_dir: str | None = None, idle_timeout: float | None = None,
            insecure_plaintext: bool = False, ledger: "LedgerGuard | None" = None,
            progress_timeout: float | None = None) -> dict:
    """Run party ``index`` only, in a child ``python -m sqm.runtime.party`` process (other hosts run the others).

    Its messages go to this terminal; returns its result record.  Raises MPCError if it fails.
    ``ssl_dir``: this party's keys from ``python -m sqm.runtime.certs`` (mutually authenticated TLS, over loopback too;
    without it the party looks in ./.config, and plain TCP needs ``insecure_plaintext``).
    The child and its private folder (program, result) go away with this wrapper however it ends: Ctrl-C,
    SIGTERM or SIGKILL (:class:`sqm.runtime.launch.Launch`).
    """
    if spec.job_id is None:
        raise UsageError(f"job file {spec.path or '(unnamed)'} has no 'job_id': every party of a job needs the same "
                         f"fresh id, so that a party of another job is refused.  Add one to the job file "
                         f"(\"job_id\": 32 hex digits from python -c 'import secrets; print(secrets.token_hex(16))') "
                         f"and give every party the same file")
    prog = party_program(spec, index, task, ledger)
    with Launch("sqm-party-") as job:
        pf, rf = job.write("program", prog), job.path("result")
        cmd = party_command(pf, index, ",".join(spec.addresses), rf, timeout, connect_timeout, ssl_dir,
                            spec.job_id, spec.name, insecure_plaintext)
        live = ([] if idle_timeout is None else ["--idle-timeout", f"{idle_timeout:g}"]) + \
            _progress_args(progress_timeout)
        code = job.start(cmd + live, party_env()).wait()
        if code != 0 or not os.path.exists(rf):
            raise MPCError(f"{party_name(index)} exited {code}; no result released (see its message above)",
                           codes={index: code})
        return job.load(rf)


CLIP_WARN_FRACTION = 0.01  # a client that clipped more than this fraction of its rows is warned


def clip_warning(index: int, counts: dict) -> str | None:
    """The WARNING for client ``index`` whose own counts (``clipped``, ``rows``) show more than
    :data:`CLIP_WARN_FRACTION` of its rows clipped, else None.  The count is data-dependent and not
    differentially private, so it stays with that client: only its own operator's output and JSON hold it
    (the server never receives it)."""
    clipped, rows = counts.get("clipped"), counts.get("rows")
    if not isinstance(clipped, int) or not isinstance(rows, int) or rows < 1 or clipped <= CLIP_WARN_FRACTION * rows:
        return None
    return (f"WARNING: client {index} clipped {clipped} of its {rows} rows ({100 * clipped / rows:.1f}%) to its "
            f"share of the row norm bound: the release is biased.  Declare public per-column ranges (\"bounds\": "
            f"{{\"column\": [lo, hi]}}) for this client in the job file so that it scales its columns (sqm pca "
            f"--propose-bounds FILE proposes some from its own data, for review), or raise the ranges")
