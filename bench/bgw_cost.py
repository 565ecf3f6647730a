"""BGW cost against gamma: secure covariance through the mpyc backend, MPyC's stock path and plaintext numpy.

    python -m bench bgw-cost --rows 20000 --cols 60 --parties 2 --json bgw.json --plot bgw.png

``--parties`` counts the clients; the job runs 1 + parties MPyC processes (the server is party 0).

``--compare-rng`` (benchmark only) runs every gamma twice in the same command: with the default
cryptographic generator (AES-128-CTR keyed from OS entropy, for the Shamir coefficients and the clients'
rounding and noise) and with numpy's PCG64 in its place (the statistical generator used before; insecure),
and times drawing rows x cols uniform field elements and rounding coins with each generator.

Every secure run is broken down per party (:func:`party_phases`, from the wall-clock timeline each party
process records, :func:`sqm.mpc.net.party.main`, and the launcher's, :func:`sqm.mpc.net.launch.run_parties`):
process start (spawned -> ready to connect: interpreter, imports, the program file), connect, the protocol's phases
(``ctx.phases``: agree, client checks, share inputs, exchange input shares, local moments, degree reduction,
open result), the program's time outside them, and output (result written, process exited, result collected).

``--floors`` adds each phase's ratio to its physical floor on this machine, measured in the same run: the local
products ("moments") against the plaintext float64 Gram ``X.T @ X`` of the same shape (numpy's BLAS, with the
BLAS threads each party gets: this machine's cores / parties, best of 3), and each party's exchange against its
bytes sent (the server: the largest client's, which it waits for) over the loopback bandwidth (one TCP connection
on 127.0.0.1 pushing ``--floor-mib`` MiB between two threads, best of 3; the same over TLS 1.3 with the parties'
kind of keys is reported beside it).

numpy, the runtime and the mechanism are imported inside the functions that run the benchmark: ``python -m bench
--help`` imports this module to register ``python -m bench bgw-cost`` (:mod:`bench.command`).
"""
from __future__ import annotations

import argparse
import dataclasses
import resource
import time

from bench.common import finish

# The per-party phases, in order: the party's start, its connection, the protocol's phases as
# sqm.mpc.protocols.evaluation.Evaluation names them (any other phase a party reports is added after them), the
# program's time outside those phases and the output.
START, CONNECT, OTHER, OUTPUT, TOTAL = "process start", "connect", "program (outside phases)", "output", "total"
PROTOCOL_PHASES = ("agree", "client checks", "share inputs (local)", "exchange input shares", "local moments",
                   "degree reduction", "open result")
PHASE_HEADERS = {START: "start", CONNECT: "connect", "agree": "agree", "client checks": "checks",
                 "share inputs (local)": "share", "exchange input shares": "exchange", "local moments": "moments",
                 "degree reduction": "reduce", "open result": "open", OTHER: "other", OUTPUT: "output",
                 TOTAL: "total"}


def party_phases(record: dict) -> dict:
    """Seconds of each phase of one party's run, from its record (:func:`sqm.mpc.net.launch.run_parties`):

    - ``process start``: spawned by the launcher -> ready to connect (interpreter start-up, imports, the program
      file unpickled and its modules imported, MPyC imported);
    - ``connect``: ready -> every peer connected (includes waiting for the slowest peer to start);
    - the protocol's phases (``record["phases"]``; its clock starts when the party's context is made, right after
      connecting, so the first phase includes the job agreement), then ``program (outside phases)``: the rest of
      connected -> program finished;
    - ``output``: program finished -> result collected (closing barrier, result pickled and written, process
      exit, the launcher reading it back);
    - ``total``: spawned -> collected.

    The timeline's stamps are ``time.time()`` of one machine's processes; a record without one (an in-process
    run) gives the protocol's phases alone."""
    tl, phases = record.get("timeline") or {}, dict(record.get("phases") or {})
    out = {}
    if {"spawned", "ready", "connected"} <= set(tl):
        out[START] = tl["ready"] - tl["spawned"]
        out[CONNECT] = tl["connected"] - tl["ready"]
    for name in PROTOCOL_PHASES + tuple(k for k in phases if k not in PROTOCOL_PHASES):
        if name in phases:
            out[name] = float(phases[name])
    if {"connected", "finished"} <= set(tl):
        out[OTHER] = tl["finished"] - tl["connected"] - sum(float(v) for v in phases.values())
    if {"finished", "collected", "spawned"} <= set(tl):
        out[OUTPUT] = tl["collected"] - tl["finished"]
        out[TOTAL] = tl["collected"] - tl["spawned"]
    return out


def party_timeline(record: dict) -> dict:
    """A party's timeline (:func:`sqm.mpc.net.party.main`) as seconds since the launcher spawned it."""
    tl = record.get("timeline") or {}
    t0 = tl.get("spawned")
    return {} if t0 is None else {k: v - t0 for k, v in sorted(tl.items(), key=lambda kv: kv[1] or 0.0) if v}


def phase_report(records: list[dict], t0: float, t1: float) -> dict:
    """A run's per-party breakdown (:func:`party_phases`, :func:`party_timeline`), the launcher's time before the
    first process was spawned (planning: calibration, the programs written) and after the last result was
    collected, and the heavy packages each party imported (``heavy_modules``,
    :data:`sqm.mpc.net.party.HEAVY_MODULES`)."""
    spawned = [r["timeline"]["spawned"] for r in records if r.get("timeline", {}).get("spawned")]
    collected = [r["timeline"]["collected"] for r in records if r.get("timeline", {}).get("collected")]
    return dict(party_phases=[party_phases(r) for r in records], party_timelines=[party_timeline(r) for r in records],
                launcher_before_spawn_seconds=(min(spawned) - t0) if spawned else None,
                launcher_after_collect_seconds=(t1 - max(collected)) if collected else None,
                heavy_modules=[list(r.get("heavy_modules", [])) for r in records])


def make_data(rows: int, cols: int, seed: int = 0):
    import numpy as np

    X = np.random.default_rng(seed).normal(size=(rows, cols))
    return X / np.linalg.norm(X, axis=1).max()


def stock_comparison(X, parties: int, gamma: float) -> dict:
    """X^T X of the same quantized blocks (no noise) by MPyC's stock np_matmul and by our fast path.

    Both run as real MPyC party processes, end to end (process start included), in this run.
    """
    import numpy as np

    from sqm.mpc.protocols.backend import FixedClient, Job
    from sqm.mpc.net.launch import run_parties
    from sqm.mpc.protocols.mpyc_backend import MPyCBackend
    from sqm.mpc.protocols.program import SumProgram
    from bench.stock import StockGram
    from sqm.mechanism.quantize import stochastic_round
    from sqm.mechanism.vertical import VerticalData

    data = VerticalData.split(X, parties)
    blocks = [stochastic_round(b, gamma, seed=j) for j, b in enumerate(data.blocks)]
    bits = int(2 * np.ceil(np.log2(gamma + 1)) + np.ceil(np.log2(X.shape[0] + 1)) + 4)
    programs = [StockGram(None, data.col_counts, X.shape[0], bits)]
    programs += [StockGram(b.astype(object), data.col_counts, X.shape[0], bits) for b in blocks]
    t0, w0 = time.perf_counter(), time.time()
    # MPyC's stock np_matmul computes locally in one go, blocking the party's event loop for tens of seconds at
    # 20,000 rows, which the liveness check would take for a silent peer: it is off for the stock run only
    res = run_parties(programs, idle_timeout=0)
    stock_s = time.perf_counter() - t0
    stock_phases = phase_report(res, w0, time.time())
    G_stock = np.array([[int(v) for v in row] for row in res[0]["result"]], dtype=object).reshape(-1)
    n = X.shape[1]
    job = Job(program=SumProgram.gram_program(n), clients=[FixedClient(b, n * n) for b in blocks],
              col_bounds=[int(np.max(np.abs(np.hstack(blocks))))] * n, n_records=X.shape[0],
              var_owner=list(data.owner()))
    t0 = time.perf_counter()
    fast = MPyCBackend().run(job)
    fast_s = time.perf_counter() - t0
    ref = np.hstack(blocks).astype(object)
    exact = ref.T.dot(ref).reshape(-1)
    stock_proto = max(float(r["seconds"]) for r in res)
    fast_proto = max(fast.party_seconds)
    return dict(stock_seconds=stock_s, stock_shape=list(X.shape), fast_seconds_at_stock_shape=fast_s,
                speedup=stock_s / fast_s, stock_protocol_seconds=stock_proto, fast_protocol_seconds=fast_proto,
                protocol_speedup=stock_proto / fast_proto, fast_phases=fast.phases,
                stock_party_phases=stock_phases["party_phases"],
                stock_identical=bool((G_stock == exact).all()),
                fast_identical=bool((fast.values == exact).all()))


def _pcg64_backend():
    """The class :data:`PCG64Backend`, defined on first use: it derives from the runtime's mpyc backend, which
    this module does not import until a benchmark runs."""
    from sqm.mpc.protocols.mpyc_backend import MPyCBackend

    class PCG64Backend(MPyCBackend):
        """BENCHMARK ONLY: the mpyc backend with numpy's PCG64 (a statistical generator, insecure) in place of
        AES-CTR for every party's Shamir coefficients and every client's rounding and noise draws."""

        def __init__(self):
            super().__init__(insecure_share_rng="pcg64")

        def run(self, job):
            clients = [dataclasses.replace(c, insecure_pcg64=True) for c in job.clients]
            return super().run(dataclasses.replace(job, clients=clients))

    PCG64Backend.__module__ = __name__
    globals()["PCG64Backend"] = PCG64Backend
    return PCG64Backend


def __getattr__(name: str):  # PEP 562: ``from bench.bgw_cost import PCG64Backend``
    if name == "PCG64Backend":
        return _pcg64_backend()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def rng_microbench(n: int, p: int, repeat: int = 3) -> dict:
    """Seconds (best of ``repeat``) to draw ``n`` uniform elements of [0, p) (Shamir coefficients) and ``n``
    uniform floats (rounding coins) with AES-128-CTR and with PCG64."""
    import numpy as np

    from sqm.mpc.shares.randomness import secure_generator

    out = dict(elements=int(n), field_prime_bits=int(p).bit_length())
    for name, rng in (("aes_ctr", secure_generator()), ("pcg64", np.random.default_rng())):
        for what, draw in (("field_elements", lambda rng=rng: rng.integers(0, p, size=n, dtype=np.int64)),
                           ("uniform_floats", lambda rng=rng: rng.random(n))):
            best = float("inf")
            for _ in range(repeat):
                t0 = time.perf_counter()
                draw()
                best = min(best, time.perf_counter() - t0)
            out[f"{name}_{what}_seconds"] = best
    for what in ("field_elements", "uniform_floats"):
        out[f"{what}_ratio"] = out[f"aes_ctr_{what}_seconds"] / out[f"pcg64_{what}_seconds"]
    return out


def rounding_microbench(blocks, gamma: float, repeat: int = 3) -> dict:
    """Seconds (best of ``repeat``, summed over the clients' blocks) to round every block at ``gamma`` by the
    clients' dependent rounding (one group per block, as a client with one bound) and by independent stochastic
    rounding (the paper's Algorithm 2), with the same coins (AES-CTR, seeded)."""
    from sqm.mechanism.quantize import dependent_round, stochastic_round

    out = dict(gamma=float(gamma), values=int(sum(b.size for b in blocks)))
    for name, fn in (("dependent", lambda b, s: dependent_round(b, gamma, None, s)),
                     ("independent", lambda b, s: stochastic_round(b, gamma, s))):
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            for j, b in enumerate(blocks):
                fn(b, j)
            best = min(best, time.perf_counter() - t0)
        out[f"{name}_seconds"] = best
    out["ratio"] = out["dependent_seconds"] / out["independent_seconds"]
    return out


def modmul_microbench(p: int, size: int = 2_000_000, repeat: int = 3) -> dict:
    """Seconds (best of ``repeat``) of ``size`` elementwise products mod p (the job's field) by
    :func:`sqm.mpc.shares.modarith.mul_mod` (float64 quotients) and with an 80-bit long double quotient (what it
    used before: :func:`sqm.mpc.shares.modarith.quotient_mul_mod`), with equal results checked."""
    import numpy as np

    from sqm.mpc.shares import modarith

    rng = np.random.default_rng(0)
    a, b = rng.integers(0, p, size=(2, size), dtype=np.int64)
    out = dict(field_bits=int(p).bit_length(), values=int(size))
    results = []
    for name, fn in (("long_double", lambda: modarith.quotient_mul_mod(a, b, p, np.longdouble)),
                     ("mul_mod", lambda: modarith.mul_mod(a, b, p))):
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            r = fn()
            best = min(best, time.perf_counter() - t0)
        out[f"{name}_seconds"] = best
        results.append(r)
    if not np.array_equal(results[0], results[1]):
        raise AssertionError("mul_mod and the long double products differ")
    out["ratio"] = out["long_double_seconds"] / out["mul_mod_seconds"]
    return out


def gram_floor(X, threads: int | None = None, repeat: int = 3) -> dict:
    """Seconds (best of ``repeat``) of the plaintext float64 Gram ``X.T @ X`` with ``threads`` BLAS threads (None:
    as this process has them), the floor of the parties' local products."""
    import numpy as np

    X = np.ascontiguousarray(X, dtype=np.float64)

    def best():
        out = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            X.T @ X
            out = min(out, time.perf_counter() - t0)
        return out

    if threads is None:
        return dict(seconds=best(), threads=None)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # no way to limit BLAS here: as the process has it
        return dict(seconds=best(), threads=None)
    with threadpool_limits(limits=int(threads), user_api="blas"):
        return dict(seconds=best(), threads=int(threads))


def loopback_bandwidth(nbytes: int = 200 << 20, repeat: int = 3, tls: bool = False, chunk: int = 1 << 20) -> float:
    """Bytes per second (best of ``repeat``) of one TCP connection on 127.0.0.1 carrying ``nbytes`` from one thread
    to another (``tls``: over TLS 1.3 with a fresh authority and party keys made as the launcher makes them), the
    floor of a party's exchange."""
    import socket
    import tempfile
    import threading

    ctx_s = ctx_c = None
    if tls:
        from sqm.mpc.net.certs import TLSIdentity, make_certificates

        keys = tempfile.mkdtemp(prefix="sqm-bench-keys-")
        make_certificates(keys, 2, days=1, job="sqm-bench")
        ctx_s, ctx_c = TLSIdentity(keys, 0).server_context(), TLSIdentity(keys, 1).client_context()
    payload = memoryview(bytes(chunk))
    best = float("inf")
    for _ in range(repeat):
        lsock = socket.create_server(("127.0.0.1", 0))
        port = lsock.getsockname()[1]
        got = [0]

        def receive(lsock=lsock, got=got):
            conn, _ = lsock.accept()
            if ctx_s is not None:
                conn = ctx_s.wrap_socket(conn, server_side=True)
            buf = bytearray(chunk)
            while got[0] < nbytes:
                n = conn.recv_into(buf)
                if not n:
                    break
                got[0] += n
            conn.close()

        th = threading.Thread(target=receive)
        th.start()
        c = socket.create_connection(("127.0.0.1", port))
        if ctx_c is not None:
            c = ctx_c.wrap_socket(c)
            c.do_handshake()
        t0 = time.perf_counter()
        sent = 0
        while sent < nbytes:
            c.sendall(payload[:min(chunk, nbytes - sent)])
            sent += min(chunk, nbytes - sent)
        th.join()
        best = min(best, time.perf_counter() - t0)
        c.close()
        lsock.close()
    if tls:
        import shutil

        shutil.rmtree(keys, ignore_errors=True)
    return nbytes / best


def measure_floors(X, parties: int, mib: int = 200) -> dict:
    """The physical floors of this machine for :func:`add_floor_ratios` (see the module's docstring)."""
    import os

    from sqm.mpc.net.launch import party_env

    threads = int(party_env(local_parties=parties + 1)["OPENBLAS_NUM_THREADS"])
    g = gram_floor(X, threads)
    return dict(gram_seconds=g["seconds"], gram_blas_threads=g["threads"],
                gram_all_threads_seconds=gram_floor(X)["seconds"],
                loopback_mib=int(mib), loopback_bytes_per_s=loopback_bandwidth(int(mib) << 20),
                loopback_tls_bytes_per_s=loopback_bandwidth(int(mib) << 20, tls=True),
                load_average=list(os.getloadavg()), cpus=os.cpu_count())


def add_floor_ratios(row: dict, floors: dict) -> None:
    """Each party's moments / the Gram floor and exchange / (its bytes sent / loopback bandwidth; the server, which
    sends no input shares, waits for the largest client's bytes), into ``row`` (``floor_ratios``: one dict per
    party; ``None`` where the party has no such phase)."""
    out = []
    sent_by = row["bytes_per_party"]
    for i, ph in enumerate(row.get("party_phases") or []):
        # a client's exchange pushes its own bytes; the server (no input) waits for the largest client's
        sent = sent_by[i] if i > 0 else max(sent_by[1:], default=0)
        ex_floor = sent / floors["loopback_bytes_per_s"]
        mom, ex = ph.get("local moments"), ph.get("exchange input shares")
        out.append({"moments_seconds": mom, "moments_floor_seconds": floors["gram_seconds"],
                    "moments_ratio": None if mom is None else mom / floors["gram_seconds"],
                    "exchange_seconds": ex, "exchange_floor_seconds": ex_floor,
                    "exchange_tls_floor_seconds": sent / floors["loopback_tls_bytes_per_s"],
                    "exchange_ratio": None if ex is None else ex / ex_floor})
    row["floor_ratios"] = out


def run(rows=20000, cols=60, parties=2, gammas=None, epsilon=1.0, delta=1e-5, stock_rows=None,
        stock_cols=None, seed=0, progress=True, compare_rng=False, repeat=1, floors=False, floor_mib=200,
        row_check=False) -> dict:
    import numpy as np
    from tqdm import tqdm

    from sqm.mpc.shares.field import prime_below
    from sqm.mpc.net.launch import record_jobs
    from sqm.mechanism.release import SQM
    from sqm.mechanism.polynomial import covariance
    from sqm.mechanism.vertical import VerticalData

    gammas = gammas or [2.0 ** k for k in range(6, 17)]
    X = make_data(rows, cols, seed)
    data = VerticalData.split(X, parties)
    t0 = time.perf_counter()
    exact = X.T @ X
    plain_s = time.perf_counter() - t0
    out_rows = []

    def secure_cov(gamma, backend, row_norm_check=False):
        """(result, relative error, CPU seconds of all party processes: user + system, reaped children, the
        per-party phases: :func:`phase_report` of the parties' records)."""
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        w0 = time.time()
        with record_jobs() as jobs:
            res = SQM(covariance(cols), gamma, epsilon=epsilon, delta=delta, backend=backend, seed=seed,
                      row_norm_check=row_norm_check).run(data)
        phases = phase_report(jobs[-1], w0, time.time())
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        est = res.estimate.reshape(cols, cols)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        return res, float(np.linalg.norm(est - exact) / np.linalg.norm(exact)), cpu, phases

    if int(repeat) != repeat or repeat < 1:
        raise ValueError(f"repeat must be an integer >= 1, got {repeat!r}")
    names = ["aes_ctr", "pcg64"] if compare_rng else ["aes_ctr"]
    for k, gamma in enumerate(tqdm(gammas, desc="bgw-cost", disable=not progress)):
        runs = {name: [] for name in names}
        for r in range(int(repeat)):  # interleaved, alternating which generator goes first
            for name in names if (k + r) % 2 == 0 else names[::-1]:
                runs[name].append(secure_cov(gamma, "mpyc" if name == "aes_ctr" else _pcg64_backend()()))
        best = {name: min(got, key=lambda g: g[0].seconds) for name, got in runs.items()}
        res, rel, cpu, phases = best["aes_ctr"]
        row = dict(gamma=gamma, field_bits=res.field_bits, bytes_per_party=[int(b) for b in res.bytes_sent],
                   seconds=res.seconds, rel_error=rel, max_rss_bytes=[int(b) for b in res.max_rss_bytes],
                   rng="aes_ctr", party_cpu_seconds=min(g[2] for g in runs["aes_ctr"]), **phases)
        if repeat > 1:
            row["all_seconds"] = [g[0].seconds for g in runs["aes_ctr"]]
        if compare_rng:
            pres, prel, _, _ = best["pcg64"]
            pcpu = min(g[2] for g in runs["pcg64"])
            row.update(pcg64_seconds=pres.seconds, pcg64_rel_error=prel, rng_time_ratio=res.seconds / pres.seconds,
                       pcg64_party_cpu_seconds=pcpu, rng_cpu_ratio=row["party_cpu_seconds"] / pcpu)
            if repeat > 1:
                row["pcg64_all_seconds"] = [g[0].seconds for g in runs["pcg64"]]
        if row_check:  # the same release with the secure row norm check, right after it
            rres, rrel, rcpu, rph = secure_cov(gamma, "mpyc", row_norm_check=True)
            rb = [int(b) for b in rres.bytes_sent]
            row.update(row_check_seconds=rres.seconds, row_check_bytes_per_party=rb, row_check_rel_error=rrel,
                       row_check_party_cpu_seconds=rcpu, row_check_time_ratio=rres.seconds / res.seconds,
                       row_check_bytes_ratio=max(rb) / max(row["bytes_per_party"]),
                       row_check_comparison_seconds=max(p.get("row limit (secure comparison)", 0.0)
                                                        for p in rph.get("party_phases") or [{}]))
        out_rows.append(row)
    report = dict(shape=[rows, cols], parties=parties + 1, clients=parties, plaintext_seconds=plain_s,
                  rows=out_rows, rng="aes_ctr (AES-128-CTR keyed from OS entropy)", repeat=int(repeat),
                  rounding=rounding_microbench(data.blocks, gammas[-1]), row_check=bool(row_check),
                  modmul=modmul_microbench(prime_below(out_rows[-1]["field_bits"])))
    if floors:  # measured after the secure runs, in the same command
        report["floors"] = measure_floors(X, parties, floor_mib)
        for row in out_rows:
            add_floor_ratios(row, report["floors"])
    if compare_rng:
        ratios = [r["rng_time_ratio"] for r in out_rows]
        report.update(compare_rng=True, rng_time_ratio_max=max(ratios), rng_ratio_target=1.25,
                      rng_meets_target=max(ratios) <= 1.25,
                      rng_microbench=rng_microbench(rows * cols, (1 << 61) - 1))
    if stock_rows:
        sX = X[:stock_rows, :stock_cols or cols]
        report.update(stock_comparison(sX, parties, gammas[0]))
    else:
        report.update(stock_seconds=None, stock_shape=None)
    return report


def print_table(rep: dict) -> None:
    print(f"secure covariance {rep['shape'][0]} x {rep['shape'][1]}, {rep['parties']} MPyC parties "
          f"({rep['clients']} clients); plaintext numpy X^T X: {rep['plaintext_seconds'] * 1e3:.1f} ms")
    print(f"{'gamma':>8} {'field bits':>10} {'bytes/party (max)':>18} {'seconds':>8} {'rel error':>10} "
          f"{'peak RSS/party (max)':>21}")
    for r in rep["rows"]:
        print(f"{r['gamma']:>8.0f} {r['field_bits']:>10} {max(r['bytes_per_party']):>18,} "
              f"{r['seconds']:>8.2f} {r['rel_error']:>10.3e} {max(r['max_rss_bytes']) / 2 ** 30:>17.2f} GiB")
    print_phases(rep)
    if rep.get("row_check"):
        print("with the secure row norm check (SQM's row_norm_check: a secure comparison per record), same seeds, "
              "right after each run above:")
        print(f"{'gamma':>8} {'seconds':>8} {'x time':>7} {'bytes/party (max)':>18} {'x bytes':>8} {'rel error':>10}")
        for r in rep["rows"]:
            print(f"{r['gamma']:>8.0f} {r['row_check_seconds']:>8.2f} {r['row_check_time_ratio']:>7.2f} "
                  f"{max(r['row_check_bytes_per_party']):>18,} {r['row_check_bytes_ratio']:>8.2f} "
                  f"{r['row_check_rel_error']:>10.3e}")
    rd = rep.get("rounding")
    if rd:
        print(f"the clients' rounding of {rd['values']:,} values at gamma {rd['gamma']:.0f} (best of 3, outside the "
              f"protocol): dependent {rd['dependent_seconds']:.3f} s, independent {rd['independent_seconds']:.3f} s "
              f"(x{rd['ratio']:.1f})")
    mm = rep.get("modmul")
    if mm:
        print(f"{mm['values']:,} products mod the {mm['field_bits']}-bit field (best of 3, outside the protocol): "
              f"long double quotient {mm['long_double_seconds']:.3f} s, mul_mod (float64 quotients) "
              f"{mm['mul_mod_seconds']:.3f} s (x{mm['ratio']:.1f})")
    if rep.get("compare_rng"):
        print("WARNING: the PCG64 column is a benchmark of the old statistical generator (insecure), never a mode "
              "to run jobs in")
        best = f"best of {rep['repeat']}, " if rep.get("repeat", 1) > 1 else ""
        print(f"{'gamma':>8} {'AES-CTR s':>10} {'PCG64 s':>10} {'ratio':>7} {'AES-CTR cpu':>12} {'PCG64 cpu':>10} "
              f"{'ratio':>7}   (wall: end to end, {best}same command, target ratio <= {rep['rng_ratio_target']}; "
              f"cpu: user + system seconds of all party processes)")
        for r in rep["rows"]:
            print(f"{r['gamma']:>8.0f} {r['seconds']:>10.2f} {r['pcg64_seconds']:>10.2f} {r['rng_time_ratio']:>7.3f} "
                  f"{r['party_cpu_seconds']:>12.2f} {r['pcg64_party_cpu_seconds']:>10.2f} {r['rng_cpu_ratio']:>7.3f}")
        mb = rep["rng_microbench"]
        print(f"drawing {mb['elements']:,} values: uniform mod a {mb['field_prime_bits']}-bit prime AES-CTR "
              f"{mb['aes_ctr_field_elements_seconds']:.3f} s, PCG64 {mb['pcg64_field_elements_seconds']:.3f} s "
              f"(x{mb['field_elements_ratio']:.2f}); uniform floats AES-CTR "
              f"{mb['aes_ctr_uniform_floats_seconds']:.3f} s, PCG64 {mb['pcg64_uniform_floats_seconds']:.3f} s "
              f"(x{mb['uniform_floats_ratio']:.2f})")
    if rep.get("stock_seconds"):
        print(f"same quantized {rep['stock_shape'][0]} x {rep['stock_shape'][1]} X^T X, no noise, end to end: "
              f"MPyC stock np_matmul {rep['stock_seconds']:.2f} s, "
              f"fast path {rep['fast_seconds_at_stock_shape']:.2f} s, "
              f"speed-up {rep['speedup']:.1f}x (target >= 50x); inside the protocol (process start excluded, "
              f"slowest party): stock {rep['stock_protocol_seconds']:.2f} s, "
              f"fast {rep['fast_protocol_seconds']:.3f} s, "
              f"speed-up {rep['protocol_speedup']:.0f}x; both equal the exact integers: "
              f"{rep['stock_identical'] and rep['fast_identical']}")


def phase_rows(rep: dict) -> list[dict]:
    """One row per (gamma, party) of the report: the party's seconds per phase (:func:`party_phases`)."""
    rows = []
    for r in rep["rows"]:
        for i, ph in enumerate(r.get("party_phases") or []):
            rows.append({"gamma": f"{r['gamma']:g}", "party": "server" if i == 0 else f"client {i}", **ph})
    return rows


def print_phases(rep: dict) -> None:
    """The per-party phase table: seconds per phase of each party (AES-CTR runs), then the launcher's own."""
    from sqm.cli.tables import render_table

    rows = phase_rows(rep)
    if not rows:
        return
    names = list(dict.fromkeys(k for r in rows for k in r if k not in ("gamma", "party")))
    order = [START, CONNECT, *PROTOCOL_PHASES, *(n for n in names if n not in PHASE_HEADERS), OTHER, OUTPUT, TOTAL]
    cols = ["gamma", "party"] + [(n, PHASE_HEADERS.get(n, n), ".3f") for n in order if n in names]
    print("seconds per phase and party (start: spawned -> ready to connect; connect: -> all peers connected; "
          "protocol phases; other: the program outside them; output: -> result collected by the launcher)")
    print(render_table(rows, cols))
    before = [r.get("launcher_before_spawn_seconds") for r in rep["rows"]]
    if all(b is not None for b in before):
        print("launcher before the first spawn (plan, calibration, programs written): "
              + ", ".join(f"{b:.3f} s" for b in before) + "; after the last result: "
              + ", ".join(f"{r['launcher_after_collect_seconds']:.3f} s" for r in rep["rows"]))
    heavy = sorted({m for r in rep["rows"] for h in r.get("heavy_modules", []) for m in h})
    print(f"heavy packages imported by a party: {', '.join(heavy) if heavy else 'none'}")
    if rep.get("floors"):
        print_floors(rep)


def print_floors(rep: dict) -> None:
    """The floors' table: each party's moments and exchange against their physical floors (``--floors``)."""
    from sqm.cli.tables import render_table

    f = rep["floors"]
    mb = 1e6
    print(f"floors (same run): plaintext float64 X.T @ X {rep['shape'][0]} x {rep['shape'][1]} "
          f"{f['gram_seconds']:.3f} s with {f['gram_blas_threads'] or 'default'} BLAS thread(s) per party "
          f"({f['gram_all_threads_seconds']:.3f} s with this process's); loopback TCP "
          f"{f['loopback_bytes_per_s'] / mb:,.0f} MB/s, TLS 1.3 {f['loopback_tls_bytes_per_s'] / mb:,.0f} MB/s "
          f"({f['loopback_mib']} MiB, one connection); load average "
          + ", ".join(f"{v:.2f}" for v in f["load_average"]) + f" on {f['cpus']} cores")
    rows = []
    for r in rep["rows"]:
        for i, fr in enumerate(r.get("floor_ratios") or []):
            rows.append({"gamma": f"{r['gamma']:g}", "party": "server" if i == 0 else f"client {i}",
                         "MB sent": r["bytes_per_party"][i] / mb, **fr})
    print(render_table(rows, ["gamma", "party", ("MB sent", "MB sent", ".1f"),
                              ("moments_seconds", "moments s", ".3f"), ("moments_floor_seconds", "Gram s", ".3f"),
                              ("moments_ratio", "x floor", ".1f"), ("exchange_seconds", "exchange s", ".3f"),
                              ("exchange_floor_seconds", "bytes/bw s", ".3f"),
                              ("exchange_tls_floor_seconds", "TLS s", ".3f"), ("exchange_ratio", "x floor", ".1f")]))


def plot(rep: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = [r["gamma"] for r in rep["rows"]]
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    ax[0].semilogx(g, [r["seconds"] for r in rep["rows"]], "o-", base=2)
    ax[0].axhline(rep["plaintext_seconds"], ls="--", c="gray", label="plaintext numpy")
    ax[0].set(xlabel="gamma", ylabel="seconds", title="wall time")
    ax[0].legend()
    ax[1].semilogx(g, [max(r["bytes_per_party"]) / 2 ** 20 for r in rep["rows"]], "o-", base=2)
    ax[1].set(xlabel="gamma", ylabel="MiB", title="bytes sent (max party)")
    ax[2].loglog(g, [r["rel_error"] for r in rep["rows"]], "o-", base=2)
    ax[2].set(xlabel="gamma", ylabel="relative Frobenius error", title="error at epsilon=1")
    fig.tight_layout()
    fig.savefig(path, dpi=120)



def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--rows", type=int, default=20000, help="records (default 20000)")
    ap.add_argument("--cols", type=int, default=60, help="columns (default 60)")
    ap.add_argument("--parties", type=int, default=2, help="clients; MPyC parties = clients + 1 (default 2)")
    ap.add_argument("--gammas", default=",".join(str(2 ** k) for k in range(6, 17)),
                    help="comma list of gamma values (default 2^6..2^16)")
    ap.add_argument("--epsilon", type=float, default=1.0, help="server-observed epsilon (default 1)")
    ap.add_argument("--delta", type=float, default=1e-5, help="delta (default 1e-5)")
    ap.add_argument("--stock-rows", type=int, default=2000,
                    help="rows for MPyC's stock np_matmul comparison (0 to skip; default 2000)")
    ap.add_argument("--stock-cols", type=int, default=None, help="columns for the stock comparison (default --cols)")
    ap.add_argument("--compare-rng", action="store_true",
                    help="BENCHMARK ONLY: also run each gamma with numpy's PCG64 (insecure statistical generator) "
                         "in place of AES-CTR for share coefficients and client draws; both timings side by side")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each gamma (and generator) this many times, interleaved, and report the fastest "
                         "(default 1)")
    ap.add_argument("--floors", action="store_true",
                    help="also measure this machine's physical floors in the same run (plaintext float64 X.T @ X of "
                         "the same shape; loopback TCP and TLS bandwidth) and report each party's moments and "
                         "exchange as multiples of them")
    ap.add_argument("--floor-mib", type=int, default=200,
                    help="MiB pushed through loopback to measure its bandwidth (with --floors; default 200)")
    ap.add_argument("--row-norm-check", action="store_true",
                    help="also run each release with the secure row norm check and report its time and bytes "
                         "against the run without it")
    ap.add_argument("--json", help="write the figures to this JSON file")
    ap.add_argument("--plot", help="write a PNG plot to this file")


def cli(args) -> int:
    gammas = [float(g) for g in args.gammas.split(",") if g.strip()]
    rep = run(args.rows, args.cols, args.parties, gammas, args.epsilon, args.delta,
              args.stock_rows or None, args.stock_cols, compare_rng=args.compare_rng,
              repeat=args.repeat, floors=args.floors, floor_mib=args.floor_mib, row_check=args.row_norm_check)
    return finish(rep, args, print_table, plot)
