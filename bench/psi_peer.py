"""Peer for ``python -m bench psi --peer``: SecretFlow's PSI protocols (libpsi, from the ``spu`` wheel) beside ours.

    python -m bench psi --peer --ids 10000,100000 --clients 2,3 --spu-python ~/spu-venv/bin/python --json p.json

What is compared.  For every (ids, clients) cell the same id sets are built once (:func:`bench.psi.write_parties`:
``ids`` distinct 12-digit ids per client, ``--overlap`` of them in every client's set) and read by both sides:
ours from the job's Parquet party files, SecretFlow from a CSV copy of each client's ids (one ``id`` column).

- **ours**: the record alignment of a job that computes nothing (:func:`bench.psi.run_one`): a server and one
  process per client over loopback TLS, ECDH over X25519, the server comparing; twice, with the job file's
  ``alignment_keys`` at its default (``ours``: with up to 3 clients each client blinds its own list once under the
  clients' shared key) and ``"all"`` (``ours-all``: every list around the ring under every client's key);
- **SecretFlow** (``spu.psi.psi_execute``, libpsi's "PSI v2" entry point): one process per client of the
  interpreter ``--spu-python``, linked by brpc over loopback (no TLS), each reading its CSV and writing its share
  of the intersection (aligned: SecretFlow's default), the result broadcast to every party.  Two-party protocols
  (:data:`TWO_PARTY`: ECDH over Curve25519, RR22, KKRT) run in the 2-client cells, multi-party ones
  (:data:`MULTI_PARTY`: ECDH_NPC, KKRT_NPC) in cells of 3 or more clients; the others are not run there.

The sides run interleaved in the same minutes (ours, then each SecretFlow protocol, ``--repeat`` rounds per
cell).  Per run: end to end seconds (the first process started -> every process exited), CPU seconds of every
process the run started (user + system of the reaped children, plus this launcher's own, which is what ours
spends coordinating), the 1-minute load average before it, the intersection's size (checked equal to the one
built into the sets, which ours must find too), and for ours the bytes every party sent per id of every client.
SecretFlow's nodes also report the seconds inside ``psi_execute`` (after linking) and their own peak memory.

SecretFlow is an optional peer, never a requirement (see :mod:`bench.peers` for its virtual environment: ``spu``
pins numpy<2 and jax<=0.4.34).  Without it the benchmark prints "SecretFlow absent: ..." and runs ours alone
(exit 0).  The SecretFlow processes run this file as ``python -m bench.psi_peer --spu-psi-node CONFIG`` from the
checkout: this module imports only the standard library at its top (and ``spu`` only inside
:func:`spu_psi_node`).
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from bench.common import finish
from bench.peers import INSTALL_NOTE, ROOT, _free_ports, spu_link, spu_probe, stop_run

OURS = "ours"
OURS_ALL = "ours-all"  # ours with "alignment_keys": "all" (every list under every client's key)
TWO_PARTY = ("ECDH", "RR22", "KKRT")  # libpsi's 2PC protocols (PsiProtocol.PROTOCOL_<name>)
MULTI_PARTY = ("ECDH_NPC", "KKRT_NPC")  # its n-party ones
PROTOCOLS = TWO_PARTY + MULTI_PARTY
CURVE = "CURVE_25519"  # ECDH protocols' curve: the same group as ours (X25519)


def applies(protocol: str, clients: int) -> bool:
    """Whether SecretFlow's ``protocol`` runs on ``clients`` parties (2PC ones on exactly 2, NPC ones on >= 3)."""
    return clients == 2 if protocol in TWO_PARTY else clients >= 3


# ------------------------------------------------------------------------------------------ the SecretFlow node
def spu_psi_node(config_path: str) -> int:
    """One SecretFlow PSI party (runs in the ``spu`` interpreter as ``python -m bench.psi_peer --spu-psi-node
    CONFIG``): link to the others, run ``psi_execute`` on its CSV, write its record (timeline, intersection,
    CPU seconds, peak memory)."""
    tl = {"started": time.time()}
    import spu
    import spu.psi as psi

    with open(config_path) as f:
        cfg = json.load(f)
    rank = int(cfg["rank"])
    tl["ready"] = time.time()
    lctx = spu_link(cfg, rank, "party")
    tl["connected"] = time.time()

    proto = psi.PsiProtocolConfig()
    proto.protocol = getattr(psi.PsiProtocol, "PROTOCOL_" + cfg["protocol"])
    proto.receiver_rank = 0
    proto.broadcast_result = True
    if cfg["protocol"].startswith("ECDH"):
        ecdh = psi.EcdhParams()
        ecdh.curve = getattr(psi.EllipticCurveType, CURVE)
        proto.ecdh_params = ecdh
    inp = psi.InputParams()
    inp.type = psi.SourceType.SOURCE_TYPE_FILE_CSV
    inp.path = cfg["input"]
    inp.selected_keys = ["id"]
    inp.keys_unique = True
    out = psi.OutputParams()
    out.type = psi.SourceType.SOURCE_TYPE_FILE_CSV
    out.path = cfg["output"]
    conf = psi.PsiExecuteConfig()
    conf.protocol_conf = proto
    conf.input_params = inp
    conf.output_params = out
    report = psi.psi_execute(conf, lctx)
    tl["done"] = time.time()
    lctx.stop_link()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    rec = dict(rank=rank, timeline=tl, intersection=int(report.intersection_count),
               original=int(report.original_count), max_rss_bytes=ru.ru_maxrss * 1024,
               cpu_seconds=ru.ru_utime + ru.ru_stime, spu_version=spu.__version__)
    with open(cfg["record"], "w") as f:
        json.dump(rec, f)
    return 0


# -------------------------------------------------------------------------------------------- the launcher side
def write_csvs(job_file: str) -> list[str]:
    """A CSV copy (one ``id`` column) of every client's Parquet party file of the job ``job_file``."""
    import pyarrow.parquet as pq

    folder = os.path.dirname(job_file)
    paths = []
    j = 1
    while os.path.exists(os.path.join(folder, f"party{j}.parquet")):
        ids = pq.read_table(os.path.join(folder, f"party{j}.parquet"), columns=["id"]).column("id").to_pylist()
        path = os.path.join(folder, f"party{j}.csv")
        with open(path, "w") as f:
            f.write("id\n" + "".join(f"{i}\n" for i in ids))
        paths.append(path)
        j += 1
    return paths


def spu_psi_run(python: str, csvs: list[str], protocol: str, timeout: float = 1800.0) -> dict:
    """SecretFlow's ``protocol`` on the ``csvs`` (one process of ``python`` each): end-to-end seconds and each
    party's record."""
    tmp = tempfile.mkdtemp(prefix="sqm-psi-peer-")
    procs, logs = [], []
    try:
        n = len(csvs)
        ports, job = _free_ports(n), f"psi-peer-{os.getpid()}-{time.time_ns()}"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
        cfgs = []
        for rank, csv in enumerate(csvs):
            cfg = dict(rank=rank, ports=ports, job=job, protocol=protocol, timeout=timeout, input=csv,
                       output=os.path.join(tmp, f"out{rank}.csv"), record=os.path.join(tmp, f"record{rank}.json"))
            path = os.path.join(tmp, f"party{rank}.json")
            with open(path, "w") as f:
                json.dump(cfg, f)
            cfgs.append((path, cfg))
        t0 = time.perf_counter()
        for rank, (path, _cfg) in enumerate(cfgs):
            logs.append(open(os.path.join(tmp, f"party{rank}.log"), "w+"))  # noqa: SIM115 (closed below)
            procs.append(subprocess.Popen([python, "-m", "bench.psi_peer", "--spu-psi-node", path], cwd=ROOT,
                                          env=env, stdout=logs[-1], stderr=subprocess.STDOUT))
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs):
            for rank, p in enumerate(procs):
                if p.returncode not in (None, 0):
                    logs[rank].seek(0)
                    tail = "\n".join(logs[rank].read().splitlines()[-15:])
                    raise RuntimeError(f"SecretFlow {protocol} party {rank} exited with {p.returncode}:\n{tail}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"SecretFlow {protocol} parties still running after {timeout:.0f} s")
            time.sleep(0.01)
        seconds = time.perf_counter() - t0
        records = []
        for rank, (p, (_, cfg)) in enumerate(zip(procs, cfgs, strict=True)):
            if p.returncode != 0:
                logs[rank].seek(0)
                tail = "\n".join(logs[rank].read().splitlines()[-15:])
                raise RuntimeError(f"SecretFlow {protocol} party {rank} exited with {p.returncode}:\n{tail}")
            with open(str(cfg["record"])) as f:
                records.append(json.load(f))
        return dict(seconds=seconds, records=records)
    finally:
        stop_run(procs, logs, tmp)


def _measured(fn):
    """``fn()``'s result with the wall seconds, CPU seconds (children reaped meanwhile + this process) and the
    1-minute load average before it."""
    load = os.getloadavg()[0]
    c0, s0 = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    got = fn()
    wall = time.perf_counter() - t0
    c1, s1 = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    children = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
    launcher = (s1.ru_utime - s0.ru_utime) + (s1.ru_stime - s0.ru_stime)
    return got, dict(wall_seconds=wall, cpu_seconds=children + launcher, children_cpu_seconds=children,
                     launcher_cpu_seconds=launcher, load_1min=load)


def _ours(run_one, job: str, ids: int, clients: int) -> dict:
    (records, _), m = _measured(lambda: run_one(job))
    sent = [int(r.get("bytes_sent", 0)) for r in records]
    return dict(m, intersection=int(records[0]["result"]["alignment"]["intersection"]), processes=len(records),
                bytes_sent=sent, bytes_per_id=sum(sent) / (ids * clients),
                party_seconds=[float(r["seconds"]) for r in records],
                max_rss_bytes=[int(r["max_rss_bytes"]) for r in records])


def _secretflow(python: str, csvs: list[str], protocol: str, timeout: float) -> dict:
    got, m = _measured(lambda: spu_psi_run(python, csvs, protocol, timeout))
    recs = got["records"]
    counts = sorted({r["intersection"] for r in recs})
    return dict(m, intersection=counts[0] if len(counts) == 1 else None, party_intersections=[r["intersection"]
                                                                                                for r in recs],
                processes=len(recs), bytes_sent=None, bytes_per_id=None,
                protocol_seconds=max(r["timeline"]["done"] - r["timeline"]["connected"] for r in recs),
                party_cpu_seconds=[float(r["cpu_seconds"]) for r in recs],
                max_rss_bytes=[int(r["max_rss_bytes"]) for r in recs])


def run(ids_list, clients_list, write_parties, run_one, overlap: float = 0.7, protocols=PROTOCOLS, repeat: int = 1,
        spu_python: str | None = None, workdir: str | None = None, timeout: float = 1800.0,
        progress: bool = True) -> dict:
    """Interleaved runs (ours, then each SecretFlow protocol that applies, ``repeat`` rounds) of every cell; ours
    alone, with ``secretflow`` null and a ``note``, when no interpreter imports ``spu``.  ``write_parties`` and
    ``run_one``: :func:`bench.psi.write_parties` and :func:`bench.psi.run_one`, passed in by that module (this one
    does not import it: it is imported by it)."""
    if int(repeat) != repeat or repeat < 1:
        raise ValueError(f"--repeat must be an integer >= 1, got {repeat!r}")
    python, version = spu_probe(spu_python)
    note = None if python is not None else f"SecretFlow absent: {version}; {INSTALL_NOTE}"
    if note and progress:
        print(note, file=sys.stderr)
    base = workdir or tempfile.mkdtemp(prefix="sqm-bench-psi-peer-")
    runs = []
    try:
        for clients in clients_list:
            for ids in ids_list:
                folder = os.path.join(base, f"{clients}x{ids}")
                job = write_parties(folder, ids, clients, overlap)
                every = _all_keys_copy(job)
                csvs = write_csvs(job) if python else []
                sides = [OURS, OURS_ALL] + ([p for p in protocols if applies(p, clients)] if python else [])
                for r in range(int(repeat)):
                    for side in sides:
                        if progress:
                            print(f"psi peer: {clients} clients x {ids:,} ids, {side}, round {r + 1}",
                                  file=sys.stderr)
                        got = (_ours(run_one, job if side == OURS else every, ids, clients)
                               if side in (OURS, OURS_ALL)
                               else _secretflow(python, csvs, side, timeout))  # type: ignore[arg-type]
                        got.update(side=side, clients=clients, ids=ids, repeat=r,
                                   expected_intersection=int(round(overlap * ids)))
                        got["correct"] = got["intersection"] == got["expected_intersection"]
                        runs.append(got)
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    return summarize(dict(overlap=overlap, repeat=int(repeat), protocols=list(protocols), cores=os.cpu_count(),
                          spu_python=python, secretflow=version if python else None, note=note, curve=CURVE,
                          runs=runs, load_average=list(os.getloadavg())))


def _all_keys_copy(job: str) -> str:
    """The job file ``job`` with ``"alignment_keys": "all"``, beside it (the same party files)."""
    import json

    with open(job) as f:
        raw = json.load(f)
    path = os.path.join(os.path.dirname(job), "job-all-keys.json")
    with open(path, "w") as f:
        json.dump({**raw, "alignment_keys": "all"}, f)
    return path


def summarize(rep: dict) -> dict:
    """The table's rows (one per cell and side: its fastest run, its least CPU, every run's wall seconds) and
    whether every intersection equals the one built into the sets (and so ours)."""
    rows = []
    keys = []
    for r in rep["runs"]:
        k = (r["clients"], r["ids"], r["side"])
        if k not in keys:
            keys.append(k)
    for k in keys:
        mine = [r for r in rep["runs"] if (r["clients"], r["ids"], r["side"]) == k]
        best = min(mine, key=lambda r: r["wall_seconds"])
        rows.append(dict(clients=k[0], ids=k[1], side=k[2], processes=best["processes"],
                         wall_seconds=best["wall_seconds"], cpu_seconds=best["cpu_seconds"],
                         min_cpu_seconds=min(r["cpu_seconds"] for r in mine),
                         cpu_us_per_id=1e6 * min(r["cpu_seconds"] for r in mine) / (k[0] * k[1]),
                         intersection=best["intersection"], correct=all(r["correct"] for r in mine),
                         bytes_per_id=best["bytes_per_id"], all_wall_seconds=[r["wall_seconds"] for r in mine],
                         load_1min=[r["load_1min"] for r in mine]))
    rep["rows"] = rows
    rep["correct"] = all(r["correct"] for r in rows)
    return rep


def _label(side: str) -> str:
    return {OURS: "ours (ECDH X25519, threshold keys)", OURS_ALL: "ours (ECDH X25519, every client's key)"}.get(
        side, f"SecretFlow {side}")


def print_table(rep: dict) -> None:
    from sqm.cli.tables import render_table

    if rep.get("note"):
        print(rep["note"])
    print(f"record alignment beside SecretFlow's PSI (libpsi psi_execute, {rep['secretflow'] or 'absent'}), the same "
          f"id sets, {rep['overlap']:.0%} of each in every set, {rep['cores']} cores; ours: server + one process "
          "per client over loopback TLS; SecretFlow: one process per client, brpc over loopback")
    rows = [dict(cell=f"{r['clients']} x {r['ids']:,}", side=_label(r["side"]), procs=r["processes"],
                 wall=r["wall_seconds"], cpu=r["min_cpu_seconds"], us=r["cpu_us_per_id"],
                 common=r["intersection"], ok="yes" if r["correct"] else "NO",
                 bpi="-" if r["bytes_per_id"] is None else f"{r['bytes_per_id']:.1f}",
                 load=", ".join(f"{x:.2f}" for x in r["load_1min"]),
                 runs=", ".join(f"{s:.2f}" for s in r["all_wall_seconds"]))
            for r in rep["rows"]]
    print(render_table(rows, [("cell", "clients x ids"), ("side", "side"), ("procs", "processes"),
                              ("wall", "wall s", ".2f"), ("cpu", "CPU s (all)", ".2f"), ("us", "CPU us/id", ".1f"),
                              ("common", "intersection"), ("ok", "correct"), ("bpi", "bytes/id"),
                              ("load", "load 1 min"), ("runs", "every run wall s")]))
    print(f"best wall of {rep['repeat']} interleaved round(s) per side; CPU: least over the rounds, every process "
          "the run started plus the launcher; CPU us/id over every client's ids; bytes/id: ours, every party's "
          "bytes sent over every client's ids")
    print(f"intersections equal to the sets' built-in one: {'yes' if rep['correct'] else 'NO'}")


def add_peer_arguments(ap) -> None:
    """``python -m bench psi``'s options for the peer comparison (the id sets come from --ids, --clients,
    --overlap; the rounds from --repeat)."""
    ap.add_argument("--peer", action="store_true",
                    help="run SecretFlow's PSI protocols (the spu wheel's libpsi) beside ours on the same id sets, "
                         "interleaved, --repeat rounds: 2PC ones on 2 clients, NPC ones on 3 or more; ours alone "
                         "with a note when spu is absent")
    ap.add_argument("--spu-python", default=None,
                    help="with --peer: a Python interpreter that can import spu (default $SQM_SPU_PYTHON, else this "
                         "one if it can)")
    ap.add_argument("--peer-protocols", default=",".join(PROTOCOLS),
                    help=f"with --peer: SecretFlow's protocols (default {','.join(PROTOCOLS)})")
    ap.add_argument("--peer-timeout", type=float, default=1800.0,
                    help="with --peer: seconds per SecretFlow run (default 1800)")


def peer_cli(args, write_parties, run_one) -> int:
    """``python -m bench psi --peer``: :func:`run` with the psi benchmark's id-set options and its ``write_parties``
    and ``run_one``."""
    from sqm.errors import UsageError

    protocols = [p.strip().upper() for p in args.peer_protocols.split(",") if p.strip()]
    unknown = [p for p in protocols if p not in PROTOCOLS]
    if unknown:
        raise UsageError(f"--peer-protocols: unknown {', '.join(unknown)}; choose from {', '.join(PROTOCOLS)}")
    ids = [int(float(x)) for x in args.ids.split(",") if x.strip()]
    clients = [int(x) for x in args.clients.split(",") if x.strip()]
    if not ids or not clients or min(clients) < 2 or not 0 < args.overlap <= 1:
        raise UsageError("--peer takes --ids, --clients of at least 2 and --overlap in (0, 1]")
    rep = run(ids, clients, write_parties, run_one, args.overlap, protocols, args.repeat, args.spu_python,
              args.workdir, args.peer_timeout, progress=not getattr(args, "quiet", 0))
    return finish(rep, args, print_table)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--spu-psi-node":
        sys.exit(spu_psi_node(sys.argv[2]))
    sys.exit("usage: python -m bench.psi_peer --spu-psi-node CONFIG (a SecretFlow party of "
             "python -m bench psi --peer)")
