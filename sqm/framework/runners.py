"""Running a job-file job: every party in this process (:func:`simulate`), every party as a process on this
machine (:func:`run_local`), one party (:func:`run_one`), or any of them from a command's options
(:func:`run_job`).  The two that start party processes first run :func:`preflight`, the checks that need only
the clients' column names, before any process starts (the simulation leaves them to the parties, which make
them all again on their data).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from sqm.framework.alignment import DEFAULT_MAX_SET_RATIO
from sqm.framework.jobtask import JobTask
from sqm.framework.ledger_guard import DEFAULT_MAX_ALIGNMENTS, LedgerGuard
from sqm.framework.party import job_programs, party_program, task_bounds
from sqm.framework.spec import JobSpec, refuse_private_fields
from sqm.framework.sql_tables import SqlSource
from sqm.framework.tables import read_header
from sqm.errors import UsageError
from sqm.mpc.net.launch import (
    Launch,
    MPCError,
    party_command,
    party_env,
    party_name,
    run_parties,
)


def preflight(spec: JobSpec, task: JobTask, indices=None) -> None:
    """The checks that need no data, before any party starts (a refusal then costs no connection, alignment or
    wait): each client's column names among ``indices`` (None: every client, the launcher of a local job; a party
    started alone checks its own) read from its file's header alone (:func:`sqm.framework.tables.read_header`;
    the id column and ``--drop-columns`` left out), the columns whose ranges the job declares present, then the
    task's own checks (:meth:`JobTask.preflight`: more components than columns, a label column missing...).
    A UsageError names the job file, the client and the cause."""
    where = f"job file {spec.path or '(unnamed)'}"
    bounds = task_bounds(spec, task)
    headers: dict[int, list[str]] = {}
    for j in range(1, spec.n_clients + 1) if indices is None else [i for i in indices if i > 0]:
        f = spec.parties[j].file
        cols = None if not isinstance(f, str) or not os.path.isfile(f) else read_header(f, spec.id_column)
        if cols is None:  # no file here, or not readable cheaply: its party refuses it with the detail
            continue
        headers[j] = [c for c in cols if c not in spec.drop_columns]
    try:
        task.preflight(headers, spec.n_clients)
    except UsageError as e:
        raise UsageError(f"{where}: {e} (refused before any party started)") from None
    for j, cols in headers.items():
        absent = [c for c, _, _ in bounds[j - 1] if c not in cols]
        if absent:
            raise UsageError(f"{where}: client {j}'s file {spec.parties[j].file} lacks the column(s) {absent} whose "
                             f"ranges the job declares; its columns are {cols[:20]} (refused before any party "
                             f"started)")


def simulate(spec: JobSpec, task: JobTask, timeout: float = 3600.0, ledger: LedgerGuard | None = None,
             max_set_ratio: float = DEFAULT_MAX_SET_RATIO, **_transport) -> list[dict]:
    """SIMULATION: every party's program of the job (the same :func:`party_program` objects) run in this one
    process by :func:`sqm.mpc.protocols.inprocess.run_in_process`; each client still reads only its own file.  Transport
    options (TLS, connect and idle timeouts) have no meaning here and are ignored."""
    from sqm.mpc.protocols.inprocess import run_in_process

    programs = job_programs(spec, task, ledger, max_set_ratio)
    return run_in_process(programs, timeout=timeout, min_clients=2, job_id=spec.job_id, job_name=spec.name)


def _progress_args(progress_timeout: float | None) -> list[str]:
    return [] if progress_timeout is None else ["--progress-timeout", f"{progress_timeout:g}"]


def run_local(spec: JobSpec, task: JobTask, timeout: float = 3600.0, connect_timeout: float = 60.0,
              ssl_dir: str | None = None, idle_timeout: float | None = None,
              insecure_plaintext: bool = False, ledger: LedgerGuard | None = None,
              progress_timeout: float | None = None, max_set_ratio: float = DEFAULT_MAX_SET_RATIO) -> list[dict]:
    """Start every party of the job on this machine (one process each, at the job file's addresses).

    Returns each party's result record (``result``, ``bytes_sent``, ``seconds``...), server first.  A party's
    failure raises :class:`sqm.mpc.net.launch.MPCError` naming it.  The launcher reads no party file; it only
    checks, for a clear error before starting anyone, that each client's file exists.  The job's id is the
    job file's (a fresh one if it has none: every party is started here).
    """
    for j, p in enumerate(spec.parties[1:], start=1):
        if p.file is None:
            raise UsageError(f"{spec.path or 'the job file'} names no file for client {j}: to run every party on this "
                             f"machine, give each client a \"file\"; a job file without them is for parties started "
                             f"one by one (--index I --data-file PATH on each host)")
        if isinstance(p.file, str) and not os.path.isfile(p.file):
            raise UsageError(f"client {j}'s party file {p.file} does not exist: put its CSV there or fix the "
                             f"path in {spec.path or 'the job file'}")
    if spec.pins and ssl_dir is None:
        raise UsageError(f"job file {spec.path or '(unnamed)'} pins parties' keys (\"fingerprint\"): the local "
                         f"launcher's fresh per-job keys cannot match them; give --ssl-dir with the pinned keys, or "
                         f"run each party with --index")
    preflight(spec, task)
    programs = job_programs(spec, task, ledger, max_set_ratio)
    live: dict[str, Any] = {} if idle_timeout is None else {"idle_timeout": idle_timeout}
    return run_parties(programs, timeout=timeout, connect_timeout=connect_timeout, addresses=spec.addresses,
                       ssl_dir=ssl_dir, min_clients=2, job_id=spec.job_id, job_name=spec.name,
                       insecure_plaintext=insecure_plaintext, extra_args=_progress_args(progress_timeout),
                       pins=spec.pins, **live)


def run_job(spec: JobSpec, task: JobTask, index: int | None = None, timeout: float = 3600.0,
            ssl_dir: str | None = None, data_file: str | None = None, connect_timeout: float = 60.0,
            insecure_plaintext: bool = False, idle_timeout: float | None = None, backend: str = "mpyc",
            ledger: str | None = None, budget=None, progress_timeout: float | None = None,
            client_ledger: bool = False, ledger_dataset: str | None = None,
            max_alignments: int | None = DEFAULT_MAX_ALIGNMENTS, engine: str | None = None,
            worker_addresses=None, max_set_ratio: float = DEFAULT_MAX_SET_RATIO,
            data_sql: SqlSource | None = None) -> Sequence[dict | None]:
    """Every party on this machine (``index`` None), or only party ``index`` (its record; None elsewhere).

    ``data_file``: client ``index``'s own file, any path on this machine (its operator's ``--data-file``),
    replacing the job file's entry for that party only.  ``connect_timeout``: seconds for every party to
    connect; ``insecure_plaintext``: the operator's opt-in to plain TCP between hosts.  ``backend``: 'mpyc'
    (party processes) or 'plain' (every party in this process: :func:`simulate`).  ``ledger`` (path) and
    ``budget`` ((epsilon, delta)): the privacy-budget ledger (:class:`LedgerGuard`) of the server, or, with
    ``index`` a client's, that client's own; ``client_ledger``: a client started alone (``index`` > 0) keeps
    its ledger in the default file when no ``ledger`` path is given (the command's default; ``--no-ledger``
    turns it off).  ``ledger_dataset``: the dataset that ledger charges (its operator's ``--ledger-dataset``; a
    client's file is bound to it by digest, :class:`LedgerGuard`); ``max_alignments``: a client's cap on its
    dataset's record alignments (None: none).  ``engine`` and ``worker_addresses``: party ``index``'s own shard
    engine and workers' addresses (its operator's ``--engine``, ``--worker-addresses``).  ``max_set_ratio``: the
    size policy of this machine's parties for the record alignment
    (:func:`sqm.framework.alignment.check_set_sizes`).  ``data_sql``: party ``index``'s table from a database
    instead of a file (its operator's ``--data-sql`` options, :class:`sqm.framework.sql_tables.SqlSource`).

    A party started alone (``index``) refuses a job file that names any party's own settings (data file, model
    code, shard engine, worker addresses: :func:`sqm.framework.spec.refuse_private_fields`): those come from its
    operator only."""
    if index is not None:
        refuse_private_fields(spec)
    if data_file is not None:
        if index is None:
            raise UsageError("--data-file gives one party's own file: give that party's --index too")
        spec = spec.with_file(index, data_file)
    if data_sql is not None:
        if index is None or data_file is not None:
            raise UsageError("--data-sql gives one party's own table instead of a file: give that party's --index, "
                             "and no --data-file")
        spec = spec.with_sql(index, data_sql)
    if engine is not None or worker_addresses is not None:
        if index is None:
            raise UsageError("--engine and --worker-addresses set one party's own shard workers: give its --index "
                             "too (without --index, the job file's entries serve every party on this machine)")
        spec = spec.with_workers(index, engine, worker_addresses)
    own = client_ledger and index is not None and index > 0
    keeps = ledger is not None or budget is not None or ledger_dataset is not None or own
    guard = LedgerGuard(ledger, budget, dataset=ledger_dataset, max_alignments=max_alignments) if keeps else None
    if backend == "plain":
        if index is not None:
            raise UsageError("--backend plain runs every party of the job in this process: leave out --index")
        return simulate(spec, task, timeout=timeout, ledger=guard, max_set_ratio=max_set_ratio)
    if backend != "mpyc":
        raise UsageError(f"unknown backend {backend!r}; choose 'mpyc' (party processes) or 'plain' (simulation)")
    if index is None:
        return run_local(spec, task, timeout=timeout, ssl_dir=ssl_dir, connect_timeout=connect_timeout,
                         insecure_plaintext=insecure_plaintext, idle_timeout=idle_timeout, ledger=guard,
                         progress_timeout=progress_timeout, max_set_ratio=max_set_ratio)
    recs: list[dict | None] = [None] * len(spec.parties)
    recs[index] = run_one(spec, index, task, timeout=timeout, ssl_dir=ssl_dir, connect_timeout=connect_timeout,
                          insecure_plaintext=insecure_plaintext, idle_timeout=idle_timeout, ledger=guard,
                          progress_timeout=progress_timeout, max_set_ratio=max_set_ratio)
    return recs


def run_one(spec: JobSpec, index: int, task: JobTask, timeout: float = 3600.0,
            connect_timeout: float = 60.0, ssl_dir: str | None = None, idle_timeout: float | None = None,
            insecure_plaintext: bool = False, ledger: LedgerGuard | None = None,
            progress_timeout: float | None = None, max_set_ratio: float = DEFAULT_MAX_SET_RATIO) -> dict:
    """Run party ``index`` only, in a child ``python -m sqm.mpc.net.party`` process (other hosts run the others).

    Its messages go to this terminal; returns its result record.  Raises MPCError if it fails.
    ``ssl_dir``: this party's keys (``sqm keys``; mutually authenticated TLS, over loopback too; without it the
    party looks in ./.config, and plain TCP needs ``insecure_plaintext``).  The job file's pinned fingerprints go
    to the party (``--pins``).
    The child and its private folder (program, result) go away with this wrapper however it ends: Ctrl-C,
    SIGTERM or SIGKILL (:class:`sqm.mpc.net.launch.Launch`).
    """
    if spec.job_id is None:
        raise UsageError(f"job file {spec.path or '(unnamed)'} has no 'job_id': every party of a job needs the same "
                         f"fresh id, so that a party of another job is refused.  Add one to the job file "
                         f"(\"job_id\": 32 hex digits from python -c 'import secrets; print(secrets.token_hex(16))') "
                         f"and give every party the same file")
    preflight(spec, task, [index])
    prog = party_program(spec, index, task, ledger, max_set_ratio)
    with Launch("sqm-party-") as job:
        pf, rf = job.write("program", prog), job.path("result")
        cmd = party_command(pf, index, ",".join(spec.addresses), rf, timeout, connect_timeout, ssl_dir,
                            spec.job_id, spec.name, insecure_plaintext, spec.pins)
        live = ([] if idle_timeout is None else ["--idle-timeout", f"{idle_timeout:g}"]) + \
            _progress_args(progress_timeout)
        code = job.start(cmd + live, party_env()).wait()
        if code != 0 or not os.path.exists(rf):
            raise MPCError(f"{party_name(index)} exited {code}; no result released (see its message above)",
                           codes={index: code})
        return job.load(rf)
