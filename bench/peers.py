"""Peers: the same exact integer Gram X^T X through SecretFlow SPU (ABY3, SEMI2K) and through this project's runtime.

    python -m bench peers --spu-python /path/to/spu-venv/bin/python --json peers.json

What is compared.  A matrix X (rows x cols, rows of norm <= 1, :func:`bench.bgw_cost.make_data`) is split by
columns among ``--parties`` data holders (2 or 3) and each holder's block is stochastically rounded at ``--gamma``
to integers, as an SQM client does (no noise on either side: the benchmark is the secure Gram, not the
mechanism).  Both sides compute the exact integer X^T X of those same integer blocks and open it to one party;
both results are checked against numpy's exact X^T X (max abs error, expected 0).

- **ours**: the secure X^T X of :mod:`sqm.mpc` (BGW/Shamir over MPyC, real party processes over loopback TLS:
  a server and one process per data holder), run exactly as ``python -m bench bgw-cost``'s stock comparison runs
  its fast path (a :class:`sqm.mpc.protocols.backend.Job` of fixed client blocks through :class:`MPyCBackend`), the
  per-party breakdown by :func:`bench.bgw_cost.phase_report`;
- **SPU ABY3** and **SPU SEMI2K** (SecretFlow's SPU, the ``spu`` package, 3 nodes, ring ``--field``, FM64 by
  default: the Gram's entries need 2 log2(gamma) + log2(rows) + 1 bits): three real processes of the interpreter
  ``--spu-python`` linked by SPU's brpc link over loopback (no TLS).  Each data holder is an SPU node (node 0 is
  the one that receives the result, like our server, when there are 2 holders; with 3, nodes 0, 1, 2 hold the
  blocks) that secret-shares its own block with ``spu.Io.make_shares`` and sends the other nodes their shares;
  the nodes then run one SPU executable, compiled by each node from ``jnp.concatenate(blocks, 1).T @ ...``
  (int64, ``jax_enable_x64``), and nodes 1 and 2 send their output shares to node 0, which reconstructs
  X^T X.  SEMI2K uses SPU's default Beaver source (``TrustedFirstParty``: node 0 deals the triples).

Measured per run: end to end (the first process started -> the result back in this process, process start-up
included on both sides), the time inside the protocol (slowest party; ours: the protocol's phases, from the
connected parties' first message to the result opened; SPU: input sharing + the executable + opening the
result, after linking and compiling), per-process peak resident memory (``VmHWM``, sampled by :class:`PeakRSS`
every 20 ms on both sides: a process's own ``ru_maxrss`` would include this launcher's memory), the CPU seconds
of all the run's processes (user + system, reaped children), bytes
sent per process (ours: the runtime's counters; SPU: the link's own count during the executable, from
SPU's profile log, plus the input and output shares each node sent) and the max abs error.  Each SPU process's
phases (start: spawned -> spu, jax and numpy imported; connect: brpc link made; compile; share; gram; open;
output: -> collected) are kept in the JSON, as are ours (:func:`bench.bgw_cost.party_phases`).

The sides run interleaved, in the same minutes (ours, SPU ABY3, SPU SEMI2K, ours, ...), ``--repeat`` times
per shape; the table quotes each side's fastest run and the JSON keeps every run with the 1-minute load average
before it.  Default shapes: the KDDCUP shape 195,666 x 117 and 20,000 x 60 (``--rows``/``--cols``: comma lists,
paired).

SPU is an optional peer, never a requirement.  ``spu`` 0.9.5 pins ``numpy<2`` and ``jax<=0.4.34``, which this
project's environment does not share, so it lives in its own virtual environment::

    python3 -m venv ~/spu-venv && ~/spu-venv/bin/pip install spu
    python -m bench peers --spu-python ~/spu-venv/bin/python

(``--spu-python`` defaults to ``$SQM_SPU_PYTHON``, else this interpreter when it can import ``spu``.)  Without
it the benchmark prints a note saying so, writes ``{"skipped": true, ...}`` with ``--json`` and exits 0.  The
SPU processes run this file as ``python -m bench.peers --spu-node CONFIG`` from the checkout: this module imports
nothing but the standard library at its top (and numpy, jax and spu only inside :func:`spu_node`).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from bench.common import finish

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPU_NODES = 3  # ABY3 is a 3-party protocol; SEMI2K runs on the same 3 nodes
PROTOCOLS = ("ABY3", "SEMI2K")
OURS = "ours"
INSTALL_NOTE = ("install it in a separate virtual environment (spu 0.9.5 pins numpy<2 and jax<=0.4.34): "
                "python3 -m venv ~/spu-venv && ~/spu-venv/bin/pip install spu; then pass "
                "--spu-python ~/spu-venv/bin/python (or set SQM_SPU_PYTHON)")
# The SPU processes' phases (their timeline stamps, in order) and the table's names for them.
SPU_STAMPS = ("spawned", "ready", "connected", "compiled", "shared", "computed", "opened", "collected")
SPU_PHASES = ("start", "connect", "compile", "share", "gram", "open", "output")


# --------------------------------------------------------------------------------------------- the SPU node
def spu_link(cfg: dict, rank: int, name: str):
    """SecretFlow's brpc link of party ``rank`` over loopback to every port of ``cfg["ports"]`` (parties named
    ``name0``, ``name1``...), job ``cfg["job"]``, ``cfg["timeout"]`` seconds per receive; returned once every party
    has joined (runs in the ``spu`` interpreter)."""
    from spu import libspu

    desc = libspu.link.Desc()
    desc.id = cfg["job"]
    for r, port in enumerate(cfg["ports"]):
        desc.add_party(f"{name}{r}", f"127.0.0.1:{port}")
    desc.connect_retry_times = 600
    desc.connect_retry_interval_ms = 100
    desc.recv_timeout_ms = int(cfg["timeout"] * 1000)
    desc.http_timeout_ms = int(cfg["timeout"] * 1000)
    lctx = libspu.link.create_brpc(desc, rank)
    lctx.barrier()
    return lctx


def spu_node(config_path: str) -> int:
    """One SPU node (runs in the ``spu`` interpreter as ``python -m bench.peers --spu-node CONFIG``): link to the
    other two, compile the Gram, share its own block (if it holds one) and receive the others' shares, run,
    open the result to node 0, write its record (timeline stamps, peak RSS, bytes it sent from Python)."""
    import resource

    import numpy as np
    import jax

    jax.config.update("jax_enable_x64", True)  # int64 blocks stay int64 (the Gram is exact integers)
    import jax.numpy as jnp
    import spu
    import spu.utils.frontend as fe
    from spu import libspu

    with open(config_path) as f:
        cfg = json.load(f)
    rank, owners, shapes = int(cfg["rank"]), list(cfg["owners"]), [tuple(s) for s in cfg["shapes"]]
    tl = {"ready": time.time()}
    sent = 0

    lctx = spu_link(cfg, rank, "node")
    tl["connected"] = time.time()

    names = [f"block{i}" for i in range(len(shapes))]

    def gram(*blocks):
        x = jnp.concatenate(blocks, axis=1)
        return jnp.matmul(x.T, x)

    args = [jax.ShapeDtypeStruct(s, jnp.int64) for s in shapes]
    executable, _ = fe.compile(fe.Kind.JAX, gram, args, {}, names, [libspu.Visibility.VIS_SECRET] * len(names),
                               lambda out: ["gram"])
    config = libspu.RuntimeConfig(protocol=getattr(libspu.ProtocolKind, cfg["protocol"]),
                                  field=getattr(libspu.FieldType, cfg["field"]))
    config.enable_pphlo_profile = True  # logs the link's bytes during the run ("Link details: total send bytes")
    rt = spu.Runtime(lctx, config)
    io = spu.Io(SPU_NODES, config)
    tl["compiled"] = time.time()

    def send_share(dst, share):
        nonlocal sent
        parts = [share.meta, str(len(share.share_chunks)).encode()] + list(share.share_chunks)
        for p in parts:
            lctx.send_async(dst, p)
            sent += len(p)

    def recv_share(src):
        share = libspu.Share()
        share.meta = lctx.recv(src)
        n = int(lctx.recv(src))
        share.share_chunks = [lctx.recv(src) for _ in range(n)]
        return share

    own = {}
    for i, owner in enumerate(owners):  # every holder shares its block at once, then each node takes its shares
        if owner == rank:
            shares = io.make_shares(np.ascontiguousarray(np.load(cfg["blocks"][str(i)]), dtype=np.int64),
                                    libspu.Visibility.VIS_SECRET)
            for dst in range(SPU_NODES):
                if dst != rank:
                    send_share(dst, shares[dst])
            own[i] = shares[rank]
            del shares
    for i, owner in enumerate(owners):
        rt.set_var(names[i], own.pop(i) if owner == rank else recv_share(owner))
    tl["shared"] = time.time()

    rt.run(executable)
    tl["computed"] = time.time()

    out = rt.get_var("gram")
    if rank == 0:
        G = io.reconstruct([out] + [recv_share(src) for src in range(1, SPU_NODES)])
        np.save(cfg["result"], np.asarray(G))
    else:
        send_share(0, out)
    tl["opened"] = time.time()
    lctx.barrier()  # every share delivered before any node leaves
    lctx.stop_link()
    tl["finished"] = time.time()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    rec = dict(rank=rank, timeline=tl, python_bytes_sent=sent, pid=os.getpid(), max_rss_bytes=ru.ru_maxrss * 1024,
               cpu_seconds=ru.ru_utime + ru.ru_stime, spu_version=spu.__version__)
    with open(cfg["record"], "w") as f:
        json.dump(rec, f)
    sys.stdout.flush()
    return 0


# ------------------------------------------------------------------------------------------- the launcher side
def spu_probe(python: str | None) -> tuple[str | None, str]:
    """(the interpreter to run SPU nodes with, ``spu``'s version) or (None, why not)."""
    import importlib.util

    if python is None:
        python = os.environ.get("SQM_SPU_PYTHON") or None
    if python is None:
        if importlib.util.find_spec("spu") is None:
            return None, f"the spu package is not importable by this interpreter ({sys.executable})"
        python = sys.executable
    if shutil.which(python) is None and not os.access(python, os.X_OK):
        return None, f"--spu-python {python}: no such executable"
    try:
        p = subprocess.run([python, "-c", "import spu; print(spu.__version__)"], capture_output=True, text=True,
                           timeout=120)
    except OSError as e:
        return None, f"--spu-python {python}: {e}"
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["(no message)"])[-1]
        return None, f"the spu package is not importable by {python} ({last})"
    return python, p.stdout.strip()


def _free_ports(n: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _link_bytes(log: str) -> int | None:
    """The link's bytes sent during the executable, from SPU's profile log (None if it has no such line)."""
    got = re.findall(r"Link details: total send bytes (\d+)", log)
    return int(got[-1]) if got else None


def stop_run(procs, logs, tmp: str) -> None:
    """The end of a peer run, whatever happened: its own processes still running (only on failure are any left)
    killed and reaped, its log files closed, its folder removed."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    for f in logs:
        f.close()
    shutil.rmtree(tmp, ignore_errors=True)


def spu_run(python: str, blocks: list, owners: list[int], protocol: str, field: str, timeout: float = 1800.0) -> dict:
    """The Gram of ``blocks`` (int64, block i held by SPU node ``owners[i]``) through 3 SPU processes of
    ``python``: the result (node 0's reconstruction), end-to-end seconds and each node's figures."""
    import numpy as np

    tmp = tempfile.mkdtemp(prefix="sqm-peers-")
    procs, logs = [], []
    try:
        paths = {}
        for i, b in enumerate(blocks):
            paths[i] = os.path.join(tmp, f"block{i}.npy")
            np.save(paths[i], np.ascontiguousarray(b, dtype=np.int64))
        ports, job = _free_ports(SPU_NODES), f"peers-{os.getpid()}-{time.time_ns()}"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
        cfgs = []
        for rank in range(SPU_NODES):
            cfg = dict(rank=rank, ports=ports, job=job, protocol=protocol, field=field, owners=owners,
                       shapes=[list(b.shape) for b in blocks], timeout=timeout,
                       blocks={str(i): paths[i] for i, o in enumerate(owners) if o == rank},
                       result=os.path.join(tmp, "result.npy"), record=os.path.join(tmp, f"record{rank}.json"))
            path = os.path.join(tmp, f"node{rank}.json")
            with open(path, "w") as f:
                json.dump(cfg, f)
            cfgs.append((path, cfg))
        spawned, exited = [], [None] * SPU_NODES
        t0 = time.perf_counter()
        for rank, (path, _cfg) in enumerate(cfgs):
            # open until the node exits (its stdout and stderr); closed with the other logs below
            logs.append(open(os.path.join(tmp, f"node{rank}.log"), "w+"))  # noqa: SIM115
            spawned.append(time.time())
            procs.append(subprocess.Popen([python, "-m", "bench.peers", "--spu-node", path], cwd=ROOT, env=env,
                                          stdout=logs[-1], stderr=subprocess.STDOUT))
        deadline = time.monotonic() + timeout
        while any(e is None for e in exited):
            for rank, p in enumerate(procs):
                if exited[rank] is None and p.poll() is not None:
                    exited[rank] = time.time()
                    if p.returncode != 0:
                        logs[rank].seek(0)
                        tail = "\n".join(logs[rank].read().splitlines()[-15:])
                        raise RuntimeError(f"SPU {protocol} node {rank} exited with {p.returncode}:\n{tail}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"SPU {protocol} nodes still running after {timeout:.0f} s")
            time.sleep(0.02)
        records = []
        for rank, (_, cfg) in enumerate(cfgs):
            with open(cfg["record"]) as f:
                rec = json.load(f)
            rec["timeline"].update(spawned=spawned[rank], exited=exited[rank])
            records.append(rec)
        G = np.load(os.path.join(tmp, "result.npy"))
        collected = time.time()
        seconds = time.perf_counter() - t0
        nodes = []
        for rank, rec in enumerate(records):
            tl = dict(rec["timeline"], collected=collected)
            logs[rank].seek(0)
            link = _link_bytes(logs[rank].read())
            ph = {name: tl[b] - tl[a] for name, a, b in zip(SPU_PHASES, SPU_STAMPS, SPU_STAMPS[1:], strict=False)}
            ph["total"] = tl["collected"] - tl["spawned"]
            nodes.append(dict(phases=ph, protocol_seconds=tl["opened"] - tl["compiled"],
                              max_rss_bytes=int(rec["max_rss_bytes"]), cpu_seconds=float(rec["cpu_seconds"]),
                              link_bytes_sent=link,
                              python_bytes_sent=int(rec["python_bytes_sent"]),
                              bytes_sent=None if link is None else link + int(rec["python_bytes_sent"])))
        return dict(result=G, seconds=seconds, nodes=nodes, spu_version=records[0].get("spu_version"))
    finally:
        stop_run(procs, logs, tmp)


class PeakRSS:
    """Peak resident memory of this process's descendants: each one's ``VmHWM`` (``/proc/PID/status``), sampled
    every ``interval`` seconds in a thread, keyed by ``label(cmdline)`` (None: not counted).

    Not ``ru_maxrss``: Linux keeps a process's maximum RSS across ``exec``, so a party's own ``ru_maxrss`` includes
    the launcher's resident memory when it was forked (this benchmark's launcher holds the data and the exact
    Gram: hundreds of MiB at the KDDCUP shape); ``VmHWM`` belongs to the new program alone.  The last sample
    before a process exits may miss growth in its final ``interval``.  Linux only (empty elsewhere)."""

    def __init__(self, label, interval: float = 0.02):
        import threading

        self.label, self.interval, self.peak = label, interval, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        if os.path.isdir("/proc/self"):
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self):
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self):
        children = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
                except (OSError, IndexError, ValueError):
                    pass
        todo, mine = [os.getpid()], []
        while todo:
            kids = children.get(todo.pop(), [])
            mine += kids
            todo += kids
        for pid in mine:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    key = self.label(f.read().replace(b"\0", b" ").decode(errors="replace"))
                if key is None:
                    continue
                with open(f"/proc/{pid}/status") as f:
                    hwm = next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:")), None)
            except (OSError, ValueError):
                continue
            if hwm is not None:
                self.peak[key] = max(self.peak.get(key, 0), hwm)


def _ours_label(cmdline: str):
    m = re.search(r"sqm\.runtime\.party .*party(\d+)\.program", cmdline)
    return int(m.group(1)) if m else None


def _spu_label(cmdline: str):
    m = re.search(r"bench\.peers --spu-node .*node(\d+)\.json", cmdline)
    return int(m.group(1)) if m else None


def quantized_blocks(rows: int, cols: int, parties: int, gamma: float, seed: int = 0):
    """The data holders' integer blocks: :func:`bench.bgw_cost.make_data` split by columns and stochastically
    rounded at ``gamma`` (:func:`sqm.mechanism.quantize.stochastic_round`), as bgw-cost's stock comparison does."""
    import numpy as np

    from bench.bgw_cost import make_data
    from sqm.mechanism.quantize import stochastic_round
    from sqm.mechanism.vertical import VerticalData

    data = VerticalData.split(make_data(rows, cols, seed), parties)
    blocks = [np.asarray(stochastic_round(b, gamma, seed=j), dtype=np.int64) for j, b in enumerate(data.blocks)]
    return blocks, data


def exact_gram(blocks):
    """numpy's exact X^T X of the integer blocks (int64; float64 BLAS is exact while every sum < 2^53)."""
    import numpy as np

    X = np.hstack(blocks)
    bound = int(np.abs(X).max(initial=0)) ** 2 * X.shape[0]
    if bound < 2 ** 53:
        Xf = X.astype(np.float64)
        return np.rint(Xf.T @ Xf).astype(np.int64)
    Xo = X.astype(object)
    return Xo.T.dot(Xo)


def ours_run(blocks, data) -> dict:
    """The same Gram through this project's runtime, as ``python -m bench bgw-cost``'s stock comparison runs its fast
    path: a :class:`~sqm.mpc.protocols.backend.Job` of the fixed blocks (no noise) through :class:`MPyCBackend` (real
    MPyC party processes: a server + one per data holder), the per-party phases by
    :func:`bench.bgw_cost.phase_report`."""
    import numpy as np

    from bench.bgw_cost import phase_report
    from sqm.mpc.protocols.backend import FixedClient, Job
    from sqm.mpc.net.launch import record_jobs
    from sqm.mpc.protocols.mpyc_backend import MPyCBackend
    from sqm.mpc.protocols.program import SumProgram

    n = sum(b.shape[1] for b in blocks)
    job = Job(program=SumProgram.gram_program(n), clients=[FixedClient(b, n * n) for b in blocks],
              col_bounds=[int(np.max(np.abs(np.hstack(blocks))))] * n, n_records=blocks[0].shape[0],
              var_owner=list(data.owner()))
    w0, t0 = time.time(), time.perf_counter()
    with record_jobs() as jobs:
        res = MPyCBackend().run(job)
    seconds = time.perf_counter() - t0
    ph = phase_report(jobs[-1], w0, time.time())
    nodes = [dict(phases=p, protocol_seconds=float(s), max_rss_bytes=int(m), bytes_sent=int(b))
             for p, s, m, b in zip(ph["party_phases"], res.party_seconds, res.max_rss_bytes, res.bytes_sent,
                                   strict=False)]
    return dict(result=np.asarray(res.values, dtype=object).reshape(n, n), seconds=seconds, nodes=nodes,
                field_bits=res.field_bits)


def _max_abs_error(G, exact) -> int:
    import numpy as np

    diff = np.asarray(G, dtype=object).reshape(exact.shape) - np.asarray(exact, dtype=object)
    return int(max((abs(int(v)) for v in diff.reshape(-1)), default=0))


def _summary(side: str, runs: list[dict]) -> dict:
    """The side's row of the table: its fastest run's figures, every run's end-to-end seconds."""
    best = min(runs, key=lambda r: r["seconds"])
    nodes = best["nodes"]
    sent = [n.get("bytes_sent") for n in nodes]
    return dict(side=side, rows=best["rows"], cols=best["cols"], processes=len(nodes),
                seconds=best["seconds"], protocol_seconds=max(n["protocol_seconds"] for n in nodes),
                max_rss_bytes=[n["max_rss_bytes"] for n in nodes],
                bytes_sent=None if any(s is None for s in sent) else sent,
                cpu_seconds=best["cpu_seconds"], min_cpu_seconds=min(r["cpu_seconds"] for r in runs),
                max_abs_error=max(r["max_abs_error"] for r in runs), exact=all(r["max_abs_error"] == 0 for r in runs),
                all_seconds=[r["seconds"] for r in runs], load_1min=[r["load_1min"] for r in runs])


def run(shapes=((195666, 117), (20000, 60)), parties=2, gamma=4096.0, protocols=PROTOCOLS, field="FM64",
        repeat=3, seed=0, spu_python=None, timeout=1800.0) -> dict:
    """Interleaved runs (ours, then each SPU protocol, ``repeat`` times) of every shape; or a skipped report
    (``skipped``, ``reason``) when no interpreter can import ``spu``."""
    python, version = spu_probe(spu_python)
    if python is None:
        return dict(skipped=True, reason=f"{version}; {INSTALL_NOTE}", spu_python=spu_python,
                    load_1min=os.getloadavg()[0])
    if parties not in (2, 3):
        raise ValueError(f"--parties must be 2 or 3 (SPU runs 3 nodes), got {parties}")
    if int(repeat) != repeat or repeat < 1:
        raise ValueError(f"repeat must be an integer >= 1, got {repeat!r}")
    owners = [1, 2] if parties == 2 else [0, 1, 2]
    sides = [OURS] + [p.upper() for p in protocols]
    out_rows, runs_all = [], []
    load_before = os.getloadavg()[0]
    for rows, cols in shapes:
        blocks, data = quantized_blocks(rows, cols, parties, gamma, seed)
        exact = exact_gram(blocks)
        bits = max(abs(int(v)) for v in exact.reshape(-1)).bit_length() + 1  # signed
        if bits > 64:
            raise ValueError(f"the Gram of {rows} x {cols} at gamma {gamma:g} needs {bits} bits: more than SPU's int64 "
                             "values hold; lower --gamma")
        runs = {s: [] for s in sides}
        for r in range(int(repeat)):
            for side in sides:
                load, r0 = os.getloadavg()[0], resource.getrusage(resource.RUSAGE_CHILDREN)
                with PeakRSS(_ours_label if side == OURS else _spu_label) as rss:
                    got = (ours_run(blocks, data) if side == OURS
                           else spu_run(python, blocks, owners, side, field, timeout))
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                for i, node in enumerate(got["nodes"]):  # VmHWM where sampled, else the process's own ru_maxrss
                    node["self_reported_max_rss_bytes"] = node["max_rss_bytes"]
                    node["max_rss_bytes"] = rss.peak.get(i, node["max_rss_bytes"])
                    node["rss_sampled"] = i in rss.peak
                cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
                got.update(side=side, rows=rows, cols=cols, repeat=r, load_1min=load, cpu_seconds=cpu,
                           max_abs_error=_max_abs_error(got.pop("result"), exact))
                runs[side].append(got)
                runs_all.append(got)
        for side in sides:
            row = _summary(side, runs[side])
            row.update(gram_bits=bits, field=("BGW prime field" if side == OURS else field))
            out_rows.append(row)
    return dict(shape=[list(s) for s in shapes], parties=parties, gamma=gamma, repeat=int(repeat), field=field,
                spu_python=python, spu_version=version, rows=out_rows, runs=runs_all, cores=os.cpu_count(),
                load_1min_before=load_before, load_1min_after=os.getloadavg()[0],
                load_1min_range=[min(r["load_1min"] for r in runs_all), max(r["load_1min"] for r in runs_all)])


def _label(side: str) -> str:
    return "ours (BGW, MPyC)" if side == OURS else f"SPU {side}"


def print_table(rep: dict) -> None:
    if rep.get("skipped"):
        print(f"python -m bench peers: skipped, SecretFlow SPU is not available: {rep['reason']}")
        return
    from sqm.cli.tables import render_table

    print(f"exact integer Gram X^T X of {rep['parties']} data holders' column blocks (gamma {rep['gamma']:g}, no "
          f"noise), opened to one party; ours: BGW over MPyC, {rep['parties'] + 1} processes, loopback TLS; "
          f"SPU {rep['spu_version']} ({rep['spu_python']}): 3 nodes, brpc over loopback, {rep['field']}")
    mib = 2 ** 20
    rows = [dict(shape=f"{r['rows']:,} x {r['cols']}", method=_label(r["side"]), seconds=r["seconds"],
                 protocol=r["protocol_seconds"], cpu=r["cpu_seconds"],
                 rss=", ".join(f"{b / mib:.0f}" for b in r["max_rss_bytes"]),
                 sent="-" if r["bytes_sent"] is None else ", ".join(f"{b / mib:.1f}" for b in r["bytes_sent"]),
                 err=r["max_abs_error"], runs=", ".join(f"{s:.2f}" for s in r["all_seconds"]))
            for r in rep["rows"]]
    print(render_table(rows, [("shape", "shape"), ("method", "side"), ("seconds", "end to end s", ".2f"),
                              ("protocol", "protocol s", ".2f"), ("cpu", "CPU s (all)", ".1f"),
                              ("rss", "peak RSS/process MiB"),
                              ("sent", "MiB sent/process"), ("err", "max abs error"), ("runs", "every run s")]))
    lo, hi = rep["load_1min_range"]
    print(f"best of {rep['repeat']} interleaved runs per side (ours, then SPU, in turn); 1-minute load average "
          f"before the runs {lo:.2f}-{hi:.2f} on {rep['cores']} cores; max abs error against numpy's exact X^T X")
    phases = []
    for r in rep["runs"]:
        if r["side"] == OURS or r["repeat"] != 0:
            continue
        for i, n in enumerate(r["nodes"]):
            phases.append(dict(shape=f"{r['rows']:,} x {r['cols']}", method=_label(r["side"]), node=i, **n["phases"]))
    if phases:
        print("SPU seconds per phase and node, first run (start: spawned -> imports done; connect: link; compile; "
              "share: inputs shared and received; gram: the executable; open: result to node 0; output: -> "
              "collected)")
        print(render_table(phases, [("shape", "shape"), ("method", "side"), "node"]
                           + [(p, p, ".3f") for p in SPU_PHASES + ("total",)]))


def _pairs(rows: str, cols: str) -> list[tuple[int, int]]:
    r = [int(x) for x in rows.split(",") if x.strip()]
    c = [int(x) for x in cols.split(",") if x.strip()]
    if len(r) != len(c):
        raise SystemExit(f"python -m bench peers: --rows and --cols need as many values ({len(r)} against {len(c)})")
    return list(zip(r, c, strict=False))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--rows", default="195666,20000", help="records, a comma list paired with --cols "
                                                           "(default 195666,20000: the KDDCUP shape and a small one)")
    ap.add_argument("--cols", default="117,60", help="columns, a comma list paired with --rows (default 117,60)")
    ap.add_argument("--parties", type=int, default=2, choices=(2, 3),
                    help="data holders (column blocks); ours runs a server + one process each, SPU 3 nodes "
                         "(default 2)")
    ap.add_argument("--gamma", type=float, default=4096.0, help="the blocks' rounding scale (default 4096)")
    ap.add_argument("--protocols", default=",".join(PROTOCOLS), help="SPU protocols (default ABY3,SEMI2K)")
    ap.add_argument("--field", default="FM64", choices=("FM64", "FM128"), help="SPU's ring (default FM64)")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved runs per side and shape; the table quotes "
                                                          "the fastest, the JSON keeps all (default 3)")
    ap.add_argument("--spu-python", default=None,
                    help="a Python interpreter that can import spu (default $SQM_SPU_PYTHON, else this one if "
                         "it can): spu pins numpy<2, so it usually lives in its own virtual environment")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per SPU run (default 1800)")
    ap.add_argument("--seed", type=int, default=0, help="the data's seed (default 0)")
    ap.add_argument("--json", help="write the figures to this JSON file")


def cli(args) -> int:
    protocols = [p.strip().upper() for p in args.protocols.split(",") if p.strip()]
    unknown = [p for p in protocols if p not in PROTOCOLS]
    if unknown:
        raise SystemExit(f"python -m bench peers: unknown SPU protocol(s) {unknown}; choose from {list(PROTOCOLS)}")
    rep = run(_pairs(args.rows, args.cols), args.parties, args.gamma, protocols, args.field, args.repeat,
              args.seed, args.spu_python, args.timeout)
    return finish(rep, args, print_table)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--spu-node":
        sys.exit(spu_node(sys.argv[2]))
    sys.exit("usage: python -m bench.peers --spu-node CONFIG (an SPU node of python -m bench peers)")
