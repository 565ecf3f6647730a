"""Record alignment (ECDH PSI, :mod:`sqm.mpc.protocols.psi`) through real party processes: time, bytes and memory per id.

    python -m bench psi --ids 10000,100000,1000000 --clients 2,3 --json psi.json --plot psi.png
    python -m bench psi --ids 100000 --clients 3 --server-table --json psi-labels.json
    python -m bench psi --ids 200000 --clients 2 --workers 2

Each (ids, clients) cell is one job through real MPyC party processes on loopback whose task does nothing:
every client reads its own Parquet party file (ids sorted, one feature column: read in batches), the parties
exchange the schema, and the clients align their records by PSI (:mod:`sqm.framework.alignment`): hashing onto the
curve, n blindings of every id around the ring (every value received checked on the curve, every list checked for
repeated values), the verdict exchange, the server's comparison, the answers, the clients' order check.  Each
client holds ``ids`` records, ``--overlap`` of them (default 0.7) in every client's set.

``--server-table``: the server holds a table of its own too (a PBM-VFL job's labels), of every id any client
holds (the whole id space of the job), and joins the PSI as a holder (:mod:`sqm.mpc.protocols.psi`, "The server's own
set": stage 2 sends its list and the clients' common values around the ring once more).

``--workers W``: each cell runs twice, one after the other: with one process per party, then with W workers per
party (the job file's ``"workers"``: each party's hashing, blinding and checks on W local processes of its own,
:mod:`sqm.mpc.protocols.psi_pool`); both report their CPU seconds (every party process and its pool, from this
process's children's usage) beside the end-to-end time.

Reported per cell: end-to-end seconds (processes started to results), ids per second per core (all
clients' ids over the end-to-end time and the machine's cores: the clients run in parallel), bytes sent per
id (all parties' bytes over all clients' ids), each party's peak resident memory and its growth per id
between the smallest and largest id counts, and the share of the PSI in a party's time.  Target (issue 23):
10^6 ids per client, 3 clients, under 120 s end to end on a 2-core machine.

``--keys``: the job file's ``alignment_keys`` (default ``threshold``: with up to 3 clients, threshold t = 1, each
client blinds its own list once under the clients' shared key; ``all``: every list under every client's key).

The floor: the scalar multiplications per id of every client (:func:`multiplications_per_id`: 1 under the shared
key, n under every client's), each at the CPU cost one multiplication has in the same run (:func:`x25519_us`, by the
backend the PSI uses), spread over the machine's cores.
:data:`PUBLISHED` holds peers' published figures (their sources named), for the docs' side-by-side table.
"""  # noqa: E501 (the first line is ``python -m bench --help``'s one-line summary of this benchmark)
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from sqm.framework.jobtask import JobTask

from bench.common import children_cpu, finish

TARGET_S = 120.0
TARGET_IDS, TARGET_CLIENTS = 1_000_000, 3
def x25519_us(points: int = 20000) -> float:
    """CPU microseconds of one X25519 multiplication by the backend the PSI uses here
    (:func:`sqm.mpc.protocols.x25519.scalarmult`), measured now on ``points`` random points of the curve: the
    floor's unit, taken in the same run as the figures it bounds."""
    import secrets
    import time

    from sqm.mpc.protocols import psi, x25519

    pts = psi.hash_ids([str(i) for i in range(points)])
    key = secrets.token_bytes(32)
    x25519.scalarmult(key, pts[:64])  # the first use: the backend loads and checks itself
    t0 = time.process_time()
    x25519.scalarmult(key, pts)
    return (time.process_time() - t0) / points * 1e6

# Peers' published PSI figures, 2 parties, 10^7 ids each (the documents state the hardware; none ran here).
# ids/s per core: both parties' ids over the time and both parties' cores.
_SF = "SecretFlow PSI v2 benchmark (secretflow/psi docs/user_guide/psi_v2_benchmark.md), 8 cores per party, LAN"
PUBLISHED = [
    {"system": "SecretFlow ECDH-PSI-2PC, Curve25519", "source": _SF, "ids_per_party": 10 ** 7, "seconds": 114,
     "cores": 16},
    {"system": "SecretFlow ECDH-PSI-2PC, FourQ", "source": _SF, "ids_per_party": 10 ** 7, "seconds": 66,
     "cores": 16},
    {"system": "SecretFlow RR22_FAST_PSI_2PC (OT/VOLE-based)", "source": _SF, "ids_per_party": 10 ** 7,
     "seconds": 19, "cores": 16},
    {"system": "FATE 2.0 PSI component (standalone engine)",
     "source": "FATE doc/2.0/fate/performance/performance_multi_engines.md, 16 cores per host, 1 Gb LAN",
     "ids_per_party": 10 ** 7, "seconds": 430, "cores": 32},
]
for _p in PUBLISHED:
    _p["ids_per_s_per_core"] = 2 * _p["ids_per_party"] / _p["seconds"] / _p["cores"]


class AlignOnly(JobTask):
    """A job task (:class:`sqm.framework.jobtask.JobTask`) that computes nothing: the job is its record alignment."""

    streams = True  # a file sorted by id is read in batches (as a PCA job reads it): the ids are never held whole

    def public(self):
        return ("bench-psi",)

    async def run(self, ctx, table, meta) -> dict:
        return {"records": meta.n_records}

    def release(self, meta):  # pragma: no cover - no ledger in this benchmark
        raise NotImplementedError


class AlignWithLabels(AlignOnly):
    """:class:`AlignOnly` whose server holds a table of its own (``--server-table``)."""

    server_table = True


def write_parties(directory: str, ids: int, clients: int, overlap: float, seed: int = 0,
                  server_table: bool = False, keys: str = "threshold", workers: int | None = None) -> str:
    """Parquet party files (an int64 'id' column, sorted, and one float column) of ``ids`` records each, of
    which ``round(overlap * ids)`` are in every client's file and the rest in that client's file only; ids
    are distinct random 12-digit numbers.  ``server_table``: the server's own file (CSV: 'id', 'label') holds
    every id any client holds.  ``keys``: the job file's ``alignment_keys``.  ``workers``: every party's workers
    (their addresses drawn free).  Returns the job file's path."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sqm.framework.spec import write_job
    from sqm.mpc.net.launch import free_ports

    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    common = int(round(overlap * ids))
    pool = np.unique(rng.integers(10 ** 11, 10 ** 12, size=int(1.1 * (common + clients * (ids - common))) + 100))
    pool = rng.permutation(pool)
    shared, at = pool[:common], common
    files = []
    for j in range(1, clients + 1):
        own = np.sort(np.concatenate([shared, pool[at:at + ids - common]]))
        at += ids - common
        path = os.path.join(directory, f"party{j}.parquet")
        pq.write_table(pa.table({"id": pa.array(own.astype(np.int64)),
                                 "x": pa.array(rng.normal(size=own.size))}), path, row_group_size=1 << 16)
        files.append(path)
    ports = free_ports((clients + 1) * (1 + (workers or 0)))
    addresses = [f"127.0.0.1:{p}" for p in ports[:clients + 1]]
    shards = None if workers is None else [[f"127.0.0.1:{p}" for p in ports[clients + 1 + i * workers:][:workers]]
                                           for i in range(clients + 1)]
    job = write_job(os.path.join(directory, "job.json"), addresses, files, min_intersection=1, workers=workers,
                    worker_addresses=shards, alignment_keys=None if keys == "threshold" else keys)
    if server_table:  # the server's labels, every id of the job's id space
        import json

        every = np.sort(pool[:at])
        with open(os.path.join(directory, "labels.csv"), "w") as f:
            f.write("id,label\n" + "".join(f"{int(i)},{int(i) % 2}\n" for i in every))
        with open(job) as f:
            raw = json.load(f)
        raw["parties"][0]["file"] = "labels.csv"
        with open(job, "w") as f:
            json.dump(raw, f)
    return job


def run_one(job_file: str, timeout: float = 3600.0, server_table: bool = False):
    records, seconds, _ = run_measured(job_file, timeout, server_table)
    return records, seconds


def run_measured(job_file: str, timeout: float = 3600.0, server_table: bool = False):
    """(records, end-to-end seconds, CPU seconds of every process the job started: parties and their pools)."""
    from sqm.framework.spec import load_job
    from sqm.framework.runners import run_job

    t0, c0 = time.perf_counter(), children_cpu()
    records = run_job(load_job(job_file), AlignWithLabels() if server_table else AlignOnly(), backend="mpyc",
                      timeout=timeout)
    return records, time.perf_counter() - t0, children_cpu() - c0


def multiplications_per_id(clients: int, keys: str = "threshold") -> int:
    """Scalar multiplications per id of every client's list: one under the clients' shared key (``keys``
    "threshold" where the runtime's threshold is t = 1: up to 3 clients), else one by every client."""
    return 1 if keys == "threshold" and clients // 2 <= 1 else clients


def run(ids_list, clients_list, overlap: float = 0.7, workdir: str | None = None, progress: bool = True,
        server_table: bool = False, keys: str = "threshold", workers: int | None = None) -> dict:
    from tqdm import tqdm

    from sqm.mpc.protocols import x25519

    cores = os.cpu_count() or 1
    unit = x25519_us()  # the floor's unit, measured in this run
    base = workdir or tempfile.mkdtemp(prefix="sqm-bench-psi-")
    rows = []
    try:
        cells = [(c, n, w) for c in clients_list for n in ids_list for w in ([None] if workers is None
                                                                              else [None, workers])]
        for clients, ids, w in tqdm(cells, desc="psi", disable=not progress):
            folder = os.path.join(base, f"{clients}x{ids}" + (f"w{w}" if w else ""))
            job = write_parties(folder, ids, clients, overlap, server_table=server_table, keys=keys,
                                workers=w)
            records, seconds, cpu = run_measured(job, server_table=server_table)
            total_ids = ids * clients
            res = records[0]["result"]
            sent = [int(r.get("bytes_sent", 0)) for r in records]
            rows.append(dict(
                clients=clients, ids=ids, workers=w or 1, cpu_seconds=cpu,
                intersection=int(res["alignment"]["intersection"]),
                server_ids=res["alignment"]["records"].get("0"),
                expected_intersection=int(round(overlap * ids)), seconds=seconds,
                ids_per_s_per_core=total_ids / seconds / cores, bytes_sent=sent,
                bytes_per_id=sum(sent) / total_ids, party_seconds=[float(r["seconds"]) for r in records],
                max_rss_bytes=[int(r["max_rss_bytes"]) for r in records],
                floor_seconds=multiplications_per_id(clients, keys) * total_ids * unit * 1e-6 / cores))
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    return summarize(dict(cores=cores, overlap=overlap, x25519_us=unit, rows=rows, published=PUBLISHED,
                          server_table=server_table, keys=keys, load_average=list(os.getloadavg()),
                          x25519_backend=x25519.backend()))


def summarize(rep: dict) -> dict:
    rep["correct"] = all(r["intersection"] == r["expected_intersection"] for r in rep["rows"])
    rows = [r for r in rep["rows"] if r.get("workers", 1) == 1]  # the growth and the target: one process per party
    growth = {}
    for c in sorted({r["clients"] for r in rows}):
        mine = sorted((r for r in rows if r["clients"] == c), key=lambda r: r["ids"])
        if len(mine) >= 2 and mine[-1]["ids"] > mine[0]["ids"]:
            d = mine[-1]["ids"] - mine[0]["ids"]
            growth[str(c)] = [(b - a) / d
                              for a, b in zip(mine[0]["max_rss_bytes"], mine[-1]["max_rss_bytes"], strict=False)]
    rep["rss_bytes_per_id"] = growth  # per party: peak memory growth per id of each client's set
    target = [r for r in rows if r["ids"] == TARGET_IDS and r["clients"] == TARGET_CLIENTS]
    rep["target_met"] = (target[0]["seconds"] < TARGET_S) if target else None
    return rep


def print_table(rep: dict) -> None:
    print(f"record alignment (ECDH PSI over X25519) through real party processes, {rep['cores']} cores, "
          f"{rep['overlap']:.0%} of each set in the intersection"
          + ("; the server holds a label table of every id" if rep.get("server_table") else "")
          + (f"; X25519 through {rep['x25519_backend']}" if rep.get("x25519_backend") else "")
          + f"; floor: {rep['x25519_us']:.1f} us of CPU per multiplication, measured in this run")
    print(f"{'clients':>7} {'ids/client':>11} {'workers':>7} {'common':>9} {'end to end s':>13} {'CPU s':>7} "
          f"{'floor s':>8} {'ids/s/core':>11} {'bytes/id':>9} {'peak RSS MiB (server, clients)':>32}")
    for r in rep["rows"]:
        rss = " ".join(f"{b / 2 ** 20:5.0f}" for b in r["max_rss_bytes"])
        cpu = f"{r['cpu_seconds']:>7.1f}" if "cpu_seconds" in r else f"{'':>7}"
        print(f"{r['clients']:>7} {r['ids']:>11,} {r.get('workers', 1):>7} {r['intersection']:>9,} "
              f"{r['seconds']:>13.2f} {cpu} {r['floor_seconds']:>8.1f} {r['ids_per_s_per_core']:>11,.0f} "
              f"{r['bytes_per_id']:>9.1f} {rss:>32}")
    for c, g in rep["rss_bytes_per_id"].items():
        print(f"{c} clients: peak memory growth per id of a client's set (server, clients): "
              + ", ".join(f"{x:.0f} B" for x in g))
    print(f"intersections as built: {'correct' if rep['correct'] else 'WRONG'}")
    if rep["target_met"] is not None:
        print(f"{TARGET_IDS:,} ids per client, {TARGET_CLIENTS} clients, under {TARGET_S:.0f} s: "
              f"{'met' if rep['target_met'] else 'NOT met'}")
    print("published (other hardware, 2 parties):")
    for p in rep["published"]:
        print(f"  {p['system']}: {p['ids_per_party']:,} ids per party in {p['seconds']} s on {p['cores']} cores: "
              f"{p['ids_per_s_per_core']:,.0f} ids/s per core ({p['source']})")


def plot(rep: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    for c in sorted({r["clients"] for r in rep["rows"]}):
        mine = [r for r in rep["rows"] if r["clients"] == c]
        ax[0].loglog([r["ids"] for r in mine], [r["seconds"] for r in mine], "o-", label=f"{c} clients")
        ax[0].loglog([r["ids"] for r in mine], [r["floor_seconds"] for r in mine], ":", c="gray")
        ax[1].semilogx([r["ids"] for r in mine], [max(r["max_rss_bytes"]) / 2 ** 20 for r in mine], "o-",
                       label=f"{c} clients")
    ax[0].axhline(TARGET_S, ls="--", c="gray")
    ax[0].set(xlabel="ids per client", ylabel="seconds", title="end to end (dotted: X25519 floor)")
    ax[1].set(xlabel="ids per client", ylabel="MiB", title="largest peak resident memory of a party")
    ax[0].legend()
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--ids", default="10000,100000,1000000",
                    help="comma list of ids per client (default 10^4, 10^5, 10^6)")
    ap.add_argument("--clients", default="2,3", help="comma list of client counts (default 2,3)")
    ap.add_argument("--overlap", type=float, default=0.7,
                    help="fraction of each client's ids held by every client (default 0.7)")
    ap.add_argument("--server-table", action="store_true",
                    help="the server holds a label table of its own (as in a PBM-VFL job), of every id any client "
                         "holds, and joins the PSI as a holder")
    ap.add_argument("--keys", choices=("threshold", "all"), default="threshold",
                    help="the job file's alignment_keys: threshold (the default: with up to 3 clients one key the "
                         "clients share, one multiplication per id) or all (every list under every client's key)")
    ap.add_argument("--hide-membership", action="store_true",
                    help="compare a whole PCA (or --task logreg) job revealing membership with one hiding it "
                         "(bench/psi_hidden.py), for intersections of --fractions of the union, with the last "
                         "--clients count")
    ap.add_argument("--union", type=int, default=20000, help="with --hide-membership: ids in the union (default 20000)")
    ap.add_argument("--fractions", default="0.1,0.5,0.9",
                    help="with --hide-membership: the intersection's share of the union (default 0.1,0.5,0.9)")
    ap.add_argument("--cols", type=int, default=12, help="with --hide-membership: feature columns in all (default 12)")
    ap.add_argument("--repeat", type=int, default=1, help="with --hide-membership: runs of each mode (default 1)")
    ap.add_argument("--task", choices=("pca", "logreg"), default="pca",
                    help="with --hide-membership: the job, PCA or SQM-LR with the sgd solver (default pca)")
    ap.add_argument("--q", type=float, default=0.01,
                    help="with --task logreg: the sampling rate of the intersection's records (default 0.01)")
    ap.add_argument("--epochs", type=int, default=2, help="with --task logreg: epochs (default 2)")
    ap.add_argument("--workers", type=int, default=None,
                    help="also run each cell with this many workers per party (2 or more: the PSI's hashing, "
                         "blinding and checks on each party's own local processes), after the run without")
    ap.add_argument("--workdir", help="folder for the party files (default: a temporary folder, removed)")
    ap.add_argument("--json", help="write the figures to this JSON file")
    ap.add_argument("--plot", help="write a PNG plot to this file")
    from bench import psi_peer

    psi_peer.add_peer_arguments(ap)  # --peer: SecretFlow's PSI beside ours (bench/psi_peer.py)


def cli(args) -> int:
    if args.peer:
        from bench import psi_peer

        return psi_peer.peer_cli(args, write_parties, run_one)
    if args.hide_membership:
        from bench import psi_hidden

        clients = [int(x) for x in args.clients.split(",") if x.strip()]
        fractions = [float(x) for x in args.fractions.split(",") if x.strip()]
        if not clients or not all(0 < f <= 1 for f in fractions) or args.union < 2:
            from sqm.errors import UsageError

            raise UsageError("--hide-membership takes --fractions in (0, 1] and --union >= 2")
        rep = psi_hidden.run(fractions, args.union, clients[-1], args.cols, repeat=args.repeat, workdir=args.workdir,
                             progress=not getattr(args, "quiet", 0), task=args.task, q=args.q, epochs=args.epochs)
        return finish(rep, args, psi_hidden.print_table, None)
    ids = [int(float(x)) for x in args.ids.split(",") if x.strip()]
    clients = [int(x) for x in args.clients.split(",") if x.strip()]
    if not 0 < args.overlap <= 1:
        raise ValueError(f"--overlap must be in (0, 1], got {args.overlap}")
    if args.workers is not None and args.workers < 2:
        raise ValueError(f"--workers must be 2 or more, got {args.workers}")
    rep = run(ids, clients, args.overlap, args.workdir, progress=not getattr(args, "quiet", 0),
              server_table=args.server_table, keys=args.keys, workers=args.workers)
    return finish(rep, args, print_table, plot)
