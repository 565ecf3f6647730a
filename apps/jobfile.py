"""Real multi-party jobs from a job file: each party process reads only its own CSV file.

A job file (JSON) lists the parties in index order; party 0 is the server (no data)::

    {"id_column": "id",
     "parties": [{"address": "10.0.0.1:11365"},
                 {"address": "10.0.0.2:11365", "file": "bank.csv"},
                 {"address": "10.0.0.3:11365", "file": "insurer.csv"}]}

A party file is a CSV with a header: the id column plus that party's feature columns (numbers).  Relative
file paths are taken relative to the job file.  On each host, ``sqm pca --job job.json --index I`` starts
party I (``--index`` omitted: all parties on this machine, over the addresses in the file).

What a party does (:class:`JobParty`, run inside ``python -m mpc.party``):

1. all parties check that they run the same task with the same public parameters;
2. each client loads ONLY its own file (the program it is given names no other party's file) and checks
   it: the file exists, has records and feature columns, numbers only, no NaN or infinity, no repeated ids;
3. the clients tell everyone their column and record counts (public schema) or their problem; on any
   problem every party refuses, naming the client, before any share is sent;
4. the task (e.g. :class:`apps.pca.PCAJobTask`) builds the public :class:`mpc.backend.Job` from the counts
   and evaluates it; the client's input comes from :class:`CSVClient`, which clips the party's sub-rows to
   its bound, counts the clipped rows (reported to that party only: the count is data-dependent and is
   not released to the server), and returns ``(block, addend, sha256 of the id column)``, so that with
   ``Job.align_ids`` the clients compare id digests among themselves (ids are never sent) and refuse
   misaligned records before any share is sent.
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import pickle
import subprocess
import tempfile
from dataclasses import dataclass, field

import numpy as np

from mpc.party import PartyProgram


# ----- job files --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartySpec:
    address: str
    file: str | None = None  # None for the server
    name: str = ""


@dataclass(frozen=True)
class JobSpec:
    parties: tuple[PartySpec, ...]
    id_column: str = "id"
    path: str | None = None  # the job file it came from

    @property
    def n_clients(self) -> int:
        return len(self.parties) - 1

    @property
    def addresses(self) -> list[str]:
        return [p.address for p in self.parties]


def _check_address(a, i) -> str:
    if not isinstance(a, str) or a.count(":") != 1:
        raise ValueError(f"job file: party {i} needs an address 'host:port', got {a!r}")
    host, port = a.split(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"job file: party {i} has an invalid address {a!r} (need host:port, port 1..65535)")
    return a


def load_job(path) -> JobSpec:
    """Read and check a job file (JSON, format in the module docstring)."""
    path = str(path)
    if not os.path.isfile(path):
        raise ValueError(f"job file {path} does not exist")
    try:
        with open(path) as f:
            raw = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"job file {path} is not valid JSON: {e}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("parties"), list):
        raise ValueError(f"job file {path} needs a 'parties' list (party 0 the server, then the clients)")
    entries = raw["parties"]
    if len(entries) < 2:
        raise ValueError(f"job file {path}: need a server and at least one client, got {len(entries)} parties")
    base = os.path.dirname(os.path.abspath(path))
    parties = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise ValueError(f"job file {path}: party {i} must be an object with 'address' (and 'file')")
        addr = _check_address(e.get("address"), i)
        f = e.get("file")
        if i == 0 and f is not None:
            raise ValueError(f"job file {path}: party 0 is the server and holds no data; remove its 'file'")
        if i > 0:
            if not isinstance(f, str) or not f:
                raise ValueError(f"job file {path}: client {i} needs a 'file' (its CSV)")
            f = f if os.path.isabs(f) else os.path.join(base, f)
        parties.append(PartySpec(addr, f, str(e.get("name") or ("server" if i == 0 else f"client{i}"))))
    addrs = [p.address for p in parties]
    if len(set(addrs)) != len(addrs):
        raise ValueError(f"job file {path}: duplicate party addresses {addrs}")
    id_column = raw.get("id_column", "id")
    if not isinstance(id_column, str) or not id_column:
        raise ValueError(f"job file {path}: 'id_column' must be a column name")
    return JobSpec(tuple(parties), id_column, path)


def write_job(path, addresses, files, id_column: str = "id") -> str:
    """Write a job file: ``addresses[0]`` the server's, then one address and one file per client."""
    if len(addresses) != len(files) + 1:
        raise ValueError(f"need one address per party: {len(addresses)} addresses for 1 server + "
                         f"{len(files)} clients")
    base = os.path.dirname(os.path.abspath(path))
    parties = [{"address": addresses[0]}]
    for a, f in zip(addresses[1:], files):
        rel = os.path.relpath(os.path.abspath(f), base)
        parties.append({"address": a, "file": rel})
    with open(path, "w") as fh:
        json.dump({"id_column": id_column, "parties": parties}, fh, indent=2)
    return str(path)


def write_party_csvs(X, directory, n_parties: int | None = None, col_counts=None, ids=None,
                     id_column: str = "id", addresses=None, prefix: str = "party",
                     job_name: str = "job.json") -> str:
    """Split ``X``'s columns among parties, write ``{prefix}{j}.csv`` (id + columns) and a job file.

    ``col_counts`` gives each party's column count (default: ``n_parties`` near-equal blocks, as
    :meth:`sqm.vertical.VerticalData.split`).  ``ids`` default to 0..m-1.  ``addresses`` default to
    loopback ports chosen free now.  Floats are written with 17 significant digits (exact round trip).
    Returns the job file's path.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"data must be 2-D, got shape {X.shape}")
    if col_counts is None:
        if n_parties is None or not 1 <= n_parties <= X.shape[1]:
            raise ValueError(f"cannot split {X.shape[1]} columns among {n_parties} parties")
        col_counts = [b.shape[1] for b in np.array_split(X, n_parties, axis=1)]
    col_counts = [int(c) for c in col_counts]
    if sum(col_counts) != X.shape[1] or min(col_counts) < 1:
        raise ValueError(f"column counts {col_counts} do not split {X.shape[1]} columns")
    ids = list(range(X.shape[0])) if ids is None else list(ids)
    if len(ids) != X.shape[0]:
        raise ValueError(f"{len(ids)} ids for {X.shape[0]} records")
    os.makedirs(directory, exist_ok=True)
    files, start = [], 0
    for j, k in enumerate(col_counts, start=1):
        f = os.path.join(directory, f"{prefix}{j}.csv")
        with open(f, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow([id_column] + [f"x{start + t}" for t in range(k)])
            for i, row in zip(ids, X[:, start:start + k]):
                w.writerow([i] + [repr(float(v)) for v in row])
        files.append(f)
        start += k
    if addresses is None:
        from mpc.launch import free_ports

        addresses = [f"127.0.0.1:{p}" for p in free_ports(len(col_counts) + 1)]
    return write_job(os.path.join(directory, job_name), addresses, files, id_column)


# ----- one party's file -------------------------------------------------------------------------------------


@dataclass
class PartyTable:
    file: str
    columns: list[str]
    block: np.ndarray  # records x columns, float64
    ids_digest: bytes = field(repr=False)

    @property
    def n_rows(self) -> int:
        return self.block.shape[0]

    @property
    def n_cols(self) -> int:
        return self.block.shape[1]


def ids_digest(ids) -> bytes:
    """sha256 over the ids in order (length-prefixed UTF-8), so equal digests mean equal, equally ordered ids."""
    h = hashlib.sha256()
    for i in ids:
        b = str(i).strip().encode()
        h.update(len(b).to_bytes(8, "big"))
        h.update(b)
    return h.digest()


def read_party_csv(path, id_column: str = "id") -> PartyTable:
    """Load and check one party's CSV.  Errors name the file and column but never a record's values."""
    path = str(path)
    if not os.path.exists(path):
        raise ValueError(f"party file {path} does not exist: put this party's CSV (an '{id_column}' column "
                         f"plus its feature columns) there, or fix the path in the job file")
    if not os.path.isfile(path):
        raise ValueError(f"party file {path} is not a file")
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    rows = [r for r in rows if r and any(c.strip() for c in r)]
    if not rows:
        raise ValueError(f"party file {path} is empty (no header, no records)")
    header = [h.strip() for h in rows[0]]
    if id_column not in header:
        raise ValueError(f"party file {path} has no id column '{id_column}' (header: {header[:8]})")
    if len(set(header)) != len(header):
        raise ValueError(f"party file {path} repeats a column name in its header")
    id_at = header.index(id_column)
    feat_at = [j for j in range(len(header)) if j != id_at]
    columns = [header[j] for j in feat_at]
    if not columns:
        raise ValueError(f"party file {path} holds no feature columns (only '{id_column}'): an empty party")
    body = rows[1:]
    if not body:
        raise ValueError(f"party file {path} holds no records: an empty party")
    block = np.empty((len(body), len(columns)), dtype=np.float64)
    ids = []
    for r, row in enumerate(body):
        if len(row) != len(header):
            raise ValueError(f"party file {path}, line {r + 2}: {len(row)} fields, the header has {len(header)}")
        ids.append(row[id_at].strip())
        for t, j in enumerate(feat_at):
            try:
                block[r, t] = float(row[j])
            except ValueError:
                raise ValueError(f"party file {path}, line {r + 2}: column '{columns[t]}' is not a number") from None
    bad = ~np.isfinite(block)
    if bad.any():
        cols = [columns[t] for t in np.flatnonzero(bad.any(axis=0))]
        raise ValueError(f"party file {path} contains {int(bad.sum())} NaN or infinite value(s) "
                         f"(columns {cols[:5]}{' ...' if len(cols) > 5 else ''}): clean or impute them first")
    if any(not i for i in ids):
        raise ValueError(f"party file {path} has an empty '{id_column}' value")
    if len(set(ids)) != len(ids):
        raise ValueError(f"party file {path} repeats ids in column '{id_column}'")
    return PartyTable(path, columns, block, ids_digest(ids))


# ----- a client's input, computed in its own process --------------------------------------------------------


@dataclass
class CSVClient:
    """A picklable client program for :class:`mpc.backend.Job` with ``align_ids=True``.

    Loads its own CSV (unless ``table`` is given), clips its sub-rows to ``clip_bound`` (the count is kept in
    ``self.clipped``), quantizes at scale gamma, draws its Skellam share Sk(``noise_mu``) of ``n_out``
    outputs with its own ``seed`` (exactly as :class:`sqm.client.QuantizingClient`, so a seeded job equals
    the plain simulation bit for bit) and returns ``(x_hat, noise, ids_digest)``.
    """

    file: str | None
    gamma: float
    clip_bound: float
    noise_mu: float
    n_out: int
    seed: object = None
    id_column: str = "id"
    table: PartyTable | None = None
    clipped: int | None = None

    def load(self) -> PartyTable:
        if self.table is None:
            self.table = read_party_csv(self.file, self.id_column)
        return self.table

    def __call__(self):
        from sqm.client import QuantizingClient
        from sqm.vertical import clip_rows

        t = self.load()
        _, self.clipped = clip_rows(t.block, self.clip_bound)
        x_hat, z = QuantizingClient(t.block, self.gamma, self.clip_bound, self.noise_mu, self.n_out, self.seed)()
        return x_hat, z, t.ids_digest


# ----- the party program --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobMeta:
    """Public facts every party learns before the task runs: the clients' column counts and record count."""

    col_counts: tuple[int, ...]
    n_records: int

    @property
    def n_parties(self) -> int:
        return len(self.col_counts)


class JobTask:
    """What a job computes.  Implementations are picklable and define:

    - ``public()``: the public parameters every party must agree on (compared by hash first);
    - ``async run(ctx, table, meta)``: this party's part (``table`` is its :class:`PartyTable`, None at the
      server), making the same sequence of exchanges at every party; returns this party's result dict.
    """

    def public(self):  # pragma: no cover - interface
        raise NotImplementedError

    async def run(self, ctx, table, meta: JobMeta) -> dict:  # pragma: no cover - interface
        raise NotImplementedError


class JobParty(PartyProgram):
    """Party ``index`` of a job-file job; holds only its own file path (None at the server)."""

    def __init__(self, index: int, file: str | None, id_column: str, task: JobTask):
        self.index, self.file, self.id_column, self.task = index, file, id_column, task

    async def run(self, ctx):
        from mpc import wire
        from mpc.protocol import ProtocolError

        if ctx.pid != self.index:
            raise ProtocolError(f"party started as index {ctx.pid} but its program is for party {self.index}")
        await ctx.agree(("sqm-jobfile", self.id_column, self.task.public()), "task")
        table, mine = None, None
        if not ctx.is_server:
            try:
                table = read_party_csv(self.file, self.id_column)
                mine = {"cols": table.n_cols, "rows": table.n_rows}
            except (ValueError, OSError) as e:
                mine = {"error": str(e)}
        out = {p: mine for p in range(ctx.M)} if not ctx.is_server else {}
        got = await ctx.send_recv(out, ctx.clients, wire.value(dict, "the client's schema or its refusal", _schema_ok),
                                  "client schemas")
        errors = [f"client {j}: {g['error']}" for j, g in zip(ctx.clients, got) if "error" in g]
        if errors:
            raise ProtocolError("refused before any share was sent: " + "; ".join(errors))
        rows = sorted({g["rows"] for g in got})
        if len(rows) > 1:
            counts = {j: g["rows"] for j, g in zip(ctx.clients, got)}
            raise ProtocolError(f"refused before any share was sent: clients hold different record counts {counts}")
        meta = JobMeta(tuple(int(g["cols"]) for g in got), int(rows[0]))
        result = await self.task.run(ctx, table, meta)
        result.setdefault("col_counts", list(meta.col_counts))
        result.setdefault("n_records", meta.n_records)
        if table is not None:
            result.setdefault("file", table.file)
        return result


def _schema_ok(g) -> bool:
    """A client's schema message: {"cols": int >= 1, "rows": int >= 1} or {"error": short text}."""
    if set(g) == {"error"}:
        return isinstance(g["error"], str) and len(g["error"]) < 2000
    return set(g) == {"cols", "rows"} and all(type(g[k]) is int and g[k] >= 1 for k in ("cols", "rows"))


def party_program(spec: JobSpec, index: int, task: JobTask) -> JobParty:
    """Party ``index``'s program: its own file only (a party never learns where others keep their data)."""
    if not 0 <= index < len(spec.parties):
        raise ValueError(f"party index {index} out of range: the job file lists {len(spec.parties)} parties "
                         f"(0 = server, 1..{spec.n_clients} clients)")
    return JobParty(index, spec.parties[index].file, spec.id_column, task)


def run_local(spec: JobSpec, task: JobTask, timeout: float = 3600.0, connect_timeout: float = 30.0,
              ssl_dir: str | None = None) -> list[dict]:
    """Start every party of the job on this machine (one process each, at the job file's addresses).

    Returns each party's result record (``result``, ``bytes_sent``, ``seconds``...), server first.  A party's
    failure raises :class:`mpc.launch.MPCError` naming it.  The launcher reads no party file; it only
    checks, for a clear error before starting anyone, that each client's file exists.
    """
    from mpc.launch import run_parties

    for j, p in enumerate(spec.parties[1:], start=1):
        if not os.path.isfile(p.file):
            raise ValueError(f"client {j}'s party file {p.file} does not exist: put its CSV there or fix the "
                             f"path in {spec.path or 'the job file'}")
    programs = [party_program(spec, i, task) for i in range(len(spec.parties))]
    return run_parties(programs, timeout=timeout, connect_timeout=connect_timeout, addresses=spec.addresses,
                       ssl_dir=ssl_dir)


def run_job(spec: JobSpec, task: JobTask, index: int | None = None, timeout: float = 3600.0,
            ssl_dir: str | None = None) -> list[dict | None]:
    """Every party on this machine (``index`` None), or only party ``index`` (its record; None elsewhere)."""
    if index is None:
        return run_local(spec, task, timeout=timeout, ssl_dir=ssl_dir)
    recs: list[dict | None] = [None] * len(spec.parties)
    recs[index] = run_one(spec, index, task, timeout=timeout, ssl_dir=ssl_dir)
    return recs


def run_one(spec: JobSpec, index: int, task: JobTask, timeout: float = 3600.0,
            connect_timeout: float = 300.0, ssl_dir: str | None = None) -> dict:
    """Run party ``index`` only, in a child ``python -m mpc.party`` process (other hosts run the others).

    Its messages go to this terminal; returns its result record.  Raises MPCError if it fails.
    ``ssl_dir``: this party's keys from ``python -m mpc.certs`` (mutually authenticated TLS between hosts).
    """
    from mpc.launch import MPCError, party_command, party_env, party_name

    prog = party_program(spec, index, task)
    with tempfile.TemporaryDirectory(prefix="sqm-party-") as tmp:
        pf, rf = os.path.join(tmp, "program"), os.path.join(tmp, "result")
        with open(pf, "wb") as f:
            pickle.dump(prog, f, protocol=5)
        cmd = party_command(pf, index, ",".join(spec.addresses), rf, timeout, connect_timeout, ssl_dir)
        code = subprocess.call(cmd, env=party_env())
        if code != 0 or not os.path.exists(rf):
            raise MPCError(f"{party_name(index)} exited {code}; no result released (see its message above)")
        with open(rf, "rb") as f:
            return pickle.load(f)
