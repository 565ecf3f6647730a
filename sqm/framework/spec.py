"""Real multi-party jobs from a job file: each party process reads only its own CSV file.

A job file (JSON) lists the parties in index order; party 0 is the server (no data)::

    {"job_id": "3fa2...(32 hex digits)", "name": "census-2024", "dataset": "census", "id_column": "id",
     "parties": [{"address": "10.0.0.1:11365"},
                 {"address": "10.0.0.2:11365", "bounds": {"age": [0, 120], "income": [0, 500000]}},
                 {"address": "10.0.0.3:11365"}]}

The job file is written by whoever coordinates the job and is the same at every party: it holds public
parameters only.  A party's own settings (:data:`PRIVATE_FIELDS`: its data file, model code, shard engine and
workers' addresses) come from its own operator's command line (``--data-file``, ``--model``, ``--engine``,
``--worker-addresses``); a party started alone (``--index``) refuses a job file naming any of them
(:func:`refuse_private_fields`).  A local job file, whose parties all run on one machine under one operator, may
name them: ``"file"``, ``"model"``, ``"engine"``, ``"worker_addresses"`` in a party's entry
(:func:`write_shared_job` writes its shared form).

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

The server holds no data, except for a task that says it holds a table of its own (``server_table``: a PBM-VFL
job's labels, ``{"address": ..., "file": "labels.csv"}``, keyed by the same ids); it then takes part in the
record alignment like a client.  ``"model": "file.py:factory"`` (a PBM-VFL job): the party's own model code,
loaded at that party only and never sent (its operator may name any file with ``--model FILE:FACTORY``).

``"workers": W`` (every party the same W, or none): each party runs its share of the secure evaluation on W shard
workers, one MPC session per shard (:mod:`sqm.mpc.protocols.shards`; a PCA job only), listening at the addresses its
operator gives (``--worker-addresses``; default: its port + 1 ... + W), which it announces to the other parties,
and run by its own Dask cluster (``--engine tcp://host:8786``) or as local processes.

``task`` (optional): ``{"statistic": "pca", "components": 5, "epsilon": 1, ...}``, the job itself: the statistic
(the command that runs it) and its parameters (:func:`sqm.cli.job_cli.apply_task_block`: a command of another statistic
is refused, and options on a command line may only repeat the file's values).

``job_id`` (32 hex digits, random, fresh for every job: :func:`write_job` draws one) binds every party to this
job: the parties compare it, the addresses and the task before anything else, and refuse a party of another
job naming it.  Running one party (``--index``) needs it.  ``name`` is the job's name in the parties' TLS
certificates (``sqm keys request --job NAME``; default: the name in each party's own certificate).  A party's
``"fingerprint": "sha256:<64 hex>"`` (``sqm keys fingerprint party_i.crt``) pins its public key: every other party
refuses, on every connection, a certificate for that party holding another key (even one the job's authority
signed), and the party refuses to start with a certificate that does not match it; every party agrees on the
pins before anything else.
``dataset`` names the data the release is charged to in the server's privacy-budget ledger (default: the
job's ``name``; see :class:`LedgerGuard`); every party agrees on it with the task.  TLS
is on whenever an address is not loopback (each party's ``--ssl-dir``); plain TCP between hosts needs the
operator's ``--insecure-plaintext``.

Every key of the file and of a party's entry is declared once, with its JSON type, default and meaning, in
:mod:`sqm.framework.job_schema`: a key not declared there (a misspelling) or a value of another type is refused,
naming the party and the closest valid key, before anything else is read.

Seeds never leave a party: no seed is part of the public parameters or of any message.  ``--seed`` is
refused in job mode unless ``--insecure-reproducible`` is given (:func:`seed_policy`); then each party
derives its own seed from the seed on its own command line (``sqm.mechanism.rng.spawn_seeds``, entry I for party I).
"""
from __future__ import annotations

import csv
import dataclasses
import json
import os
from dataclasses import dataclass

import numpy as np

from sqm.framework.alignment import DEFAULT_MIN_INTERSECTION, check_min_intersection
from sqm.framework.alignment_policy import ALIGNMENT_KEYS, DEFAULT_ALIGNMENT_KEYS
from sqm.framework.extras import require
from sqm.framework.job_schema import check_job_keys
from sqm.framework.sql_tables import SqlSource, refuse_in_job_file
from sqm.framework.tables import PartyTable, read_table
from sqm.framework.user_code import split_spec
from sqm.mpc.net.certs import check_fingerprint, check_job_name
from sqm.errors import UsageError
from sqm.mpc.net.launch import (
    new_job_id,
    require_two_clients,
)


@dataclass(frozen=True)
class PartySpec:
    address: str
    file: str | SqlSource | None = None  # None for the server; a database query: its operator's --data-sql
    name: str = ""
    bounds: tuple = ()  # ((column, lo, hi), ...): public ranges declared for this client's columns
    norm_share: float | None = None  # public: this client's share of c^2 (its sub-rows' bound c sqrt(share))
    model: str | None = None  # "path.py:factory": this party's own model code (a PBM-VFL job), loaded there only
    workers: int | None = None  # shard workers of this party (every party the same count: the job's shards)
    worker_addresses: tuple[str, ...] | None = None  # where they listen (None: the ports after its address)
    engine: str | None = None  # its own Dask cluster's scheduler ("tcp://host:8786"); None: local processes
    fingerprint: str | None = None  # "sha256:<hex>": its pinned public key (sqm keys fingerprint); None: not pinned


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
    hide_membership: bool = False  # align over the union; membership of the intersection stays secret
    alignment_keys: str = DEFAULT_ALIGNMENT_KEYS  # the PSI's keys: the runtime's threshold's, or "all" clients'
    private: tuple[tuple[int, str], ...] = ()  # (party, key) of each party's own setting the job file named

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
        shares = [p.norm_share for p in self.parties[1:]]
        return None if None in shares else tuple(float(s) for s in shares if s is not None)

    @property
    def bounds(self) -> tuple:
        """Each client's declared column ranges (``()`` where it declares none): public, in the job file."""
        return tuple(p.bounds for p in self.parties[1:])

    @property
    def addresses(self) -> list[str]:
        return [p.address for p in self.parties]

    @property
    def pins(self) -> dict[int, str]:
        """The pinned key fingerprints, by party index (parties without a pin left out)."""
        return {i: p.fingerprint for i, p in enumerate(self.parties) if p.fingerprint is not None}

    @property
    def shards(self) -> int | None:
        """The job's shard count (every party runs one worker per shard: :mod:`sqm.mpc.protocols.shards`), or None."""
        return self.parties[0].workers

    def shard_addresses(self) -> list[list[str]] | None:
        """Per party, its workers' addresses, shard by shard (public: every party holds the same table)."""
        if self.shards is None:
            return None
        from sqm.mpc.protocols.shards import worker_addresses

        return [list(p.worker_addresses) if p.worker_addresses else worker_addresses(p.address, self.shards)
                for p in self.parties]

    def with_model(self, index: int, model: str) -> JobSpec:
        """This job with party ``index``'s model code replaced by ``model`` ("FILE:FACTORY", its operator's own
        ``--model``: any file on that party's machine)."""
        if index is None or not 0 <= index <= self.n_clients:
            raise UsageError(f"--model names one party's own model code: give its --index 0..{self.n_clients} too")
        file, name = split_spec(model, "--model")
        parties = list(self.parties)
        parties[index] = dataclasses.replace(parties[index], model=f"{os.path.abspath(file)}:{name}")
        return dataclasses.replace(self, parties=tuple(parties))

    def with_file(self, index: int, path) -> JobSpec:
        """This job with client ``index``'s file replaced by ``path`` (its operator's own ``--data-file``:
        any path on that party's machine, absolute or relative to the working folder)."""
        if index is None or not 0 <= index <= self.n_clients:
            raise UsageError(f"--data-file replaces one party's file: give --index 0..{self.n_clients} (0: the "
                             f"server's own table, for a task where it holds one, e.g. PBM-VFL's labels)")
        parties = list(self.parties)
        parties[index] = dataclasses.replace(parties[index], file=os.path.abspath(str(path)))
        return dataclasses.replace(self, parties=tuple(parties))

    def with_sql(self, index: int, source: SqlSource) -> JobSpec:
        """This job with party ``index``'s table read from a database (its operator's ``--data-sql`` options:
        :class:`sqm.framework.sql_tables.SqlSource`) instead of a file."""
        if index is None or not 0 <= index <= self.n_clients:
            raise UsageError(f"--data-sql gives one party's own table: give --index 0..{self.n_clients} too")
        parties = list(self.parties)
        parties[index] = dataclasses.replace(parties[index], file=source)
        return dataclasses.replace(self, parties=tuple(parties))

    def with_workers(self, index: int, engine: str | None = None, addresses=None) -> JobSpec:
        """This job with party ``index``'s shard engine (its own Dask scheduler) and its workers' addresses set by
        its operator (``--engine``, ``--worker-addresses``); the job's shard count is the job file's."""
        if engine is None and addresses is None:
            return self
        if index is None or not 0 <= index <= self.n_clients:
            raise UsageError(f"--engine and --worker-addresses set one party's own shard workers: give its "
                             f"--index 0..{self.n_clients} too")
        if self.shards is None:
            raise UsageError(f"job file {self.path or '(unnamed)'} runs no shard workers (no \"workers\"): "
                             f"--engine and --worker-addresses have nothing to set")
        if engine is not None:
            _check_engine(engine, f"party {index}'s --engine")
        if addresses is not None:
            addresses = [a.strip() for a in addresses]
            if len(addresses) != self.shards:
                raise UsageError(f"--worker-addresses lists {len(addresses)} addresses; the job runs "
                                 f"{self.shards} shards, one worker each")
            addresses = tuple(_check_address(a, index) for a in addresses)
        parties = list(self.parties)
        parties[index] = dataclasses.replace(parties[index], engine=engine or parties[index].engine,
                                             worker_addresses=addresses or parties[index].worker_addresses)
        return dataclasses.replace(self, parties=tuple(parties))


# A party's own settings: from its own operator only (its command line), never from a job file that another
# organisation may have written; the option that gives each
PRIVATE_FIELDS = {"file": "--data-file PATH", "model": "--model FILE:FACTORY", "engine": "--engine ADDRESS",
                  "worker_addresses": "--worker-addresses HOST:PORT,..."}


def refuse_private_fields(spec: JobSpec) -> None:
    """Refuse a job file that names any party's own settings (:data:`PRIVATE_FIELDS`: data file, model code, shard
    engine, worker addresses) for a party started alone (``--index``): its author is whoever coordinates the job,
    and what a party reads, runs or hands its records to is its own operator's choice alone."""
    if not spec.private:
        return
    by_party: dict[int, list[str]] = {}
    for i, k in spec.private:
        by_party.setdefault(i, []).append(f'"{k}"')
    named = "; ".join(f"{'the server' if i == 0 else f'client {i}'}'s {', '.join(ks)}" for i, ks in by_party.items())
    flags = ", ".join(PRIVATE_FIELDS[k].split()[0] for k in PRIVATE_FIELDS if any(k == f for _, f in spec.private))
    raise UsageError(f"job file {spec.path or '(unnamed)'} names {named}: refused.  A party started alone (--index) "
                     f"takes these from its own operator ({flags}), never from the shared job file")


def write_shared_job(path, out) -> str:
    """Write job file ``path`` as the parties started one by one get it: the same job (its id, addresses, task and
    public parameters) without any party's own settings (:data:`PRIVATE_FIELDS`), which each party's operator
    then gives on its own command line.  Returns ``out``."""
    with open(path) as f:
        raw = json.load(f)
    raw["parties"] = [{k: v for k, v in e.items() if k not in PRIVATE_FIELDS} for e in raw.get("parties", [])]
    with open(out, "w") as f:
        json.dump(raw, f, indent=2)
    return str(out)


def _check_engine(engine, who: str) -> str:
    if not isinstance(engine, str) or "://" not in engine or not engine.isprintable():
        raise UsageError(f"{who} must be a Dask scheduler's address, e.g. \"tcp://10.0.0.5:8786\", got {engine!r}")
    return engine


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
    who = "the server" if i == 0 else f"client {i}"
    hint = (f"party files in a job file must lie in the job file's folder {base}; the operator of {who} may give "
            f"any path for its own file on its own command line (--data-file PATH, or --model FILE:FACTORY, with "
            f"--index {i})")
    if os.path.isabs(f):
        raise UsageError(f"job file {path}: {who}'s file is an absolute path, refused: {hint}")
    full = os.path.join(base, f)
    real_base = os.path.realpath(base)
    real = os.path.realpath(full)
    if os.path.commonpath([real, real_base]) != real_base:
        raise UsageError(f"job file {path}: {who}'s file {f!r} resolves outside the job file's folder, "
                         f"refused: {hint}")
    return full


def _confined_code(model, base: str, i: int, path) -> str:
    """Party ``i``'s ``"model": "file.py:factory"`` from the job file: the file confined to the job file's folder
    like a party file (its operator may name any file of its own with ``--model FILE:FACTORY`` instead)."""
    file, name = split_spec(model, f"job file {path}: party {i}'s 'model'")
    return f"{_confined(file, base, i, path)}:{name}"


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
    if not isinstance(raw, dict):
        raise UsageError(f"job file {path} must be an object with a 'parties' list (party 0 the server, then the "
                         f"clients)")
    refuse_in_job_file(raw, f"job file {path}")  # a database and its credentials: the party's operator's only
    check_job_keys(raw, f"job file {path}")  # unknown keys and values of another JSON type: refused
    entries = raw["parties"]
    require_two_clients(max(0, len(entries) - 1), f"job file {path}: ")
    base = os.path.dirname(os.path.abspath(path))
    parties, private = [], []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise UsageError(f"job file {path}: party {i} must be an object with 'address' (and 'file')")
        private += [(i, k) for k in PRIVATE_FIELDS if entry.get(k) is not None]
        addr = _check_address(entry.get("address"), i)
        file = entry.get("file")
        if i > 0 and file is not None and (not isinstance(file, str) or not file):
            raise UsageError(f"job file {path}: client {i}'s 'file' must be a path (its CSV), got {file!r}")
        if i == 0 and file is not None and (not isinstance(file, str) or not file):
            raise UsageError(f"job file {path}: the server's 'file' (its own table, e.g. a PBM-VFL job's labels) "
                             f"must be a path, got {file!r}")
        if file is not None:  # the server's is its own table (labels), for a task that takes one (party_program)
            file = _confined(file, base, i, path)
        model = entry.get("model")
        if model is not None:
            model = _confined_code(model, base, i, path)
        if i == 0 and (entry.get("bounds") is not None or entry.get("norm_share") is not None):
            raise UsageError(f"job file {path}: party 0 is the server and holds no data; remove its 'bounds' "
                             f"and 'norm_share'")
        share = entry.get("norm_share")
        if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float))
                                  or not 0 < share <= 1):
            raise UsageError(f"job file {path}: client {i}'s 'norm_share' must be a number in (0, 1], got {share!r}")
        workers, waddrs, engine = _workers_entry(entry, i, path)
        parties.append(PartySpec(addr, file, str(entry.get("name") or ("server" if i == 0 else f"client{i}")),
                                 check_bounds(entry.get("bounds"), f"job file {path}: client {i}'s"),
                                 None if share is None else float(share), model, workers, waddrs, engine,
                                 fingerprint=_fingerprint_entry(entry, i, path)))
    shares = [p.norm_share for p in parties[1:]]
    if any(v is not None for v in shares) and (None in shares or sum(v for v in shares if v is not None) > 1 + 1e-9):
        raise UsageError(f"job file {path}: 'norm_share' must be given for every client or none, and the shares "
                         f"must add up to at most 1 (whole rows then satisfy ||x|| <= c); got {shares}")
    counts = [p.workers for p in parties]
    if len(set(counts)) > 1:
        raise UsageError(f"job file {path}: every party runs one worker per shard, so 'workers' must be the same "
                         f"number for every party (or given for none); got {counts}")
    addrs = [p.address for p in parties]
    if len(set(addrs)) != len(addrs):
        raise UsageError(f"job file {path}: duplicate party addresses {addrs}")
    shards = counts[0]  # every party's count (checked equal above)
    if shards is not None:  # every listening address of the job, workers' included, differs
        from sqm.mpc.protocols.shards import worker_addresses

        every = addrs + [a for p in parties for a in (p.worker_addresses or worker_addresses(p.address, shards))]
        if len(set(every)) != len(every):
            raise UsageError(f"job file {path}: the parties' and workers' addresses overlap (a worker listens at "
                             f"its party's port + 1 + its shard unless 'worker_addresses' are given): "
                             f"{sorted({a for a in every if every.count(a) > 1})}")
    id_column = raw.get("id_column", "id")
    if not isinstance(id_column, str) or not id_column:
        raise UsageError(f"job file {path}: 'id_column' must be a column name")
    from sqm.mpc.net.session import check_job_id

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
    hide = raw.get("hide_membership", False)  # a boolean (checked with every key's type above)
    keys = raw.get("alignment_keys", DEFAULT_ALIGNMENT_KEYS)
    if keys not in ALIGNMENT_KEYS:
        raise UsageError(f"job file {path}: 'alignment_keys' must be one of {', '.join(map(repr, ALIGNMENT_KEYS))}, "
                         f"got {keys!r}")
    return JobSpec(tuple(parties), id_column, path, job_id, name, dataset, min_intersection=min_common, task=task,
                   hide_membership=hide, alignment_keys=keys, private=tuple(private))


def _fingerprint_entry(e: dict, i: int, path) -> str | None:
    """Party ``i``'s pinned key, ``"fingerprint": "sha256:<64 hex>"`` (None: not pinned)."""
    pin = e.get("fingerprint")
    if pin is None:
        return None
    who = "the server" if i == 0 else f"client {i}"
    try:
        return check_fingerprint(pin, f"{who}'s 'fingerprint'")
    except ValueError as err:
        raise UsageError(f"job file {path}: {err}") from None


def _workers_entry(e: dict, i: int, path) -> tuple:
    """(workers, worker_addresses, engine) of party ``i``'s entry: ``"workers": 2`` (its shard workers; every
    party the same count), optionally ``"worker_addresses": ["host:port", ...]`` (one per worker; default: the
    ports after the party's) and ``"engine": "tcp://host:8786"`` (its own Dask cluster; default: local
    processes)."""
    who = "the server" if i == 0 else f"client {i}"
    n = e.get("workers")
    if n is None:
        if e.get("worker_addresses") is not None or e.get("engine") is not None:
            raise UsageError(f"job file {path}: {who} gives 'worker_addresses' or 'engine' without 'workers'")
        return None, None, None
    if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n <= 1024:
        raise UsageError(f"job file {path}: {who}'s 'workers' must be an integer from 2 to 1024 (the job's shards; "
                         f"leave it out for one process per party), got {n!r}")
    addrs = e.get("worker_addresses")
    if addrs is not None:
        if not isinstance(addrs, list) or len(addrs) != n:
            raise UsageError(f"job file {path}: {who}'s 'worker_addresses' must list {n} addresses 'host:port', "
                             f"one per worker")
        addrs = tuple(_check_address(a, i) for a in addrs)
    engine = e.get("engine")
    if engine is not None:
        _check_engine(engine, f"job file {path}: {who}'s 'engine'")
    return n, addrs, engine


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


def check_dataset_id(dataset) -> str:
    """A job file's ``dataset``: 1-200 printable characters naming the data the ledger charges."""
    if not isinstance(dataset, str) or not 0 < len(dataset) <= 200 or not dataset.isprintable():
        raise UsageError(f"'dataset' must be a name of 1-200 printable characters, got {dataset!r}")
    return dataset


def write_job(path, addresses, files, id_column: str = "id", job_id: str | None = None,
              name: str | None = None, dataset: str | None = None, bounds=None, norm_shares=None,
              min_intersection: int | None = None, task: dict | None = None, server_file=None,
              models=None, workers: int | None = None, worker_addresses=None, engines=None,
              hide_membership: bool = False, fingerprints=None, alignment_keys: str | None = None) -> str:
    """Write a job file: ``addresses[0]`` the server's, then one address and one file per client (None: no file,
    as in a job file for parties started one by one, whose operators each give their own); a fresh
    random ``job_id`` unless given, the job's ``name`` (as in its certificates) and the ``dataset`` id (the
    ledger's) if given; ``bounds``: per client, None or its public column ranges ``{column: [lo, hi]}``;
    ``norm_shares``: each client's public share of c^2 (None: c_j = c sqrt(its columns / all columns));
    ``min_intersection``: the fewest records in common the job runs on (None: the default, not written);
    ``task``: the job's task block, ``{"statistic": "pca", its parameters...}``
    (:func:`sqm.cli.job_cli.apply_task_block`); ``server_file``: the server's own table (a PBM-VFL job's labels);
    ``models``: per party (server first), None or its own model code "FILE:FACTORY" (files inside the job file's folder,
    as the data files); ``workers``: every party's shard workers (None: one process per party), ``worker_addresses`` per
    party (None: the ports after its address), ``engines`` per party (None or its own Dask scheduler's address);
    ``fingerprints``: per party (server first), None or its pinned key ``"sha256:<hex>"``; ``alignment_keys``: the
    PSI's keys, ``"threshold"`` or ``"all"`` (None: the default, not written)."""
    if len(addresses) != len(files) + 1:
        raise UsageError(f"need one address per party: {len(addresses)} addresses for 1 server + "
                         f"{len(files)} clients")
    base = os.path.dirname(os.path.abspath(path))

    def inside(f, j: int) -> str:
        rel = os.path.relpath(os.path.abspath(f), base)
        if rel == os.pardir or rel.startswith(os.pardir + os.sep):
            raise UsageError(f"{'the server' if j == 0 else f'client {j}'}'s file {f} lies outside the job file's "
                             f"folder {base}: load_job would refuse it (put it there, or have its operator pass "
                             f"--data-file or --model)")
        return rel

    parties = [{"address": addresses[0]}]
    if server_file is not None:
        parties[0]["file"] = inside(server_file, 0)
    for j, (a, f) in enumerate(zip(addresses[1:], files, strict=False), start=1):
        parties.append({"address": a} if f is None else {"address": a, "file": inside(f, j)})
        if bounds is not None and bounds[j - 1] is not None:
            check_bounds(bounds[j - 1], f"client {j}'s")
            parties[-1]["bounds"] = {c: [float(lo), float(hi)] for c, (lo, hi) in bounds[j - 1].items()}
        if norm_shares is not None:
            parties[-1]["norm_share"] = float(norm_shares[j - 1])
    if workers is not None:
        for j, entry in enumerate(parties):
            entry["workers"] = int(workers)
            if worker_addresses is not None and worker_addresses[j] is not None:
                entry["worker_addresses"] = list(worker_addresses[j])
            if engines is not None and engines[j] is not None:
                entry["engine"] = str(engines[j])
    for j, pin in enumerate(fingerprints or []):
        if pin is not None:
            parties[j]["fingerprint"] = check_fingerprint(pin, f"party {j}'s fingerprint")
    for j, code in enumerate(models or []):
        if code is not None:
            file, name = split_spec(code)
            parties[j]["model"] = f"{inside(file, j)}:{name}"
    from sqm.mpc.net.session import check_job_id

    head: dict[str, object] = {"job_id": check_job_id(job_id) if job_id is not None else new_job_id()}
    if name is not None:
        head["name"] = check_job_name(name)
    if dataset is not None:
        head["dataset"] = check_dataset_id(dataset)
    if min_intersection is not None:
        head["min_intersection"] = check_min_intersection(min_intersection, "min_intersection")
    if hide_membership:
        head["hide_membership"] = True
    if alignment_keys is not None:
        if alignment_keys not in ALIGNMENT_KEYS:
            raise UsageError(f"alignment_keys must be one of {', '.join(map(repr, ALIGNMENT_KEYS))}, got "
                             f"{alignment_keys!r}")
        head["alignment_keys"] = alignment_keys
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
                             for i, row in zip(ids, X[:, start:start + k].tolist(), strict=False)))
        files.append(f)
        start += k
    if addresses is None:
        from sqm.mpc.net.launch import free_ports

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


def read_party_csv(path, id_column: str = "id") -> PartyTable:
    """Load and check one party's table (CSV or Parquet: :func:`sqm.framework.tables.read_table`).  Errors
    (:class:`PartyFileError`) name the file, row and column; their ``public`` part, for peers, names neither
    file, column nor value."""
    return read_table(path, id_column)
