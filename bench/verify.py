"""The cost of verifiable inputs: an SQM covariance release with the clients' input proofs beside the one without.

    python -m bench verify --shapes 2000x20,20000x60 --clients 2 --gamma 4096 --json verify.json

Each shape runs one release through real party processes (``backend="mpyc"``), without and with ``verify_inputs``
(:mod:`sqm.mpc.protocols.input_proof`), on the same synthetic data (rows normalised to norm 1, seeded) and seeds.
Reported: which FLP prover ran (the compiled kernel or numpy, :func:`sqm.mpc.protocols.flp.prover_backend`), and per
run: bytes sent (all parties, and the most of one party), exchanges, wall seconds, the parties' CPU
seconds (summed), the proof's own phases and the largest peak memory of one party; the verified run's ratios to the
unverified one; and whether both released the same integers less the clients' noise shares (``less noise``): with
``verify_inputs`` each client's noise share is drawn from a committed key (:mod:`sqm.mpc.protocols.addend_check`),
so the released integers themselves differ between the runs, by the noise alone.  The time is the machine's: say
its load beside the figures.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

from bench.common import finish


def _shape(text: str) -> tuple[int, int]:
    rows, cols = text.lower().split("x")
    return int(rows), int(cols)


def run_one(rows: int, cols: int, clients: int, gamma: float, verify: bool, seed: int,
            chunk_rows: int | None = None) -> dict:
    import numpy as np

    from bench.faults import RecordNoise
    from sqm.mechanism.polynomial import covariance
    from sqm.mechanism.release import SQM
    from sqm.mechanism.vertical import VerticalData
    from sqm.mpc.net.launch import run_parties

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, cols))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    split = np.array_split(np.arange(cols), clients)
    data = VerticalData([X[:, s] for s in split])
    mech = SQM(covariance(cols), gamma, epsilon=1.0, backend="mpyc", seed=seed, verify_inputs=verify,
               chunk_rows=chunk_rows)
    programs, _ = mech.programs(data)
    with tempfile.TemporaryDirectory() as tmp:  # each client's noise share, as it added it
        paths = [os.path.join(tmp, f"noise-{c}.npy") for c in range(1, len(programs))]
        programs[1:] = [RecordNoise(p, path) for p, path in zip(programs[1:], paths, strict=True)]
        t0 = time.perf_counter()
        recs = run_parties(programs, timeout=3600, min_clients=2)
        wall = time.perf_counter() - t0
        noise = sum(np.load(path).astype(object).reshape(-1) for path in paths)
    raw = np.array([int(v) for v in np.asarray(recs[0]["result"].raw).reshape(-1)], dtype=object)
    proof = sum(v for r in recs for k, v in (r.get("phases") or {}).items() if k.startswith("input proof"))
    return {"rows": rows, "cols": cols, "clients": clients, "verify_inputs": verify, "seconds": wall,
            "bytes": int(sum(r.get("bytes_sent", 0) for r in recs)),
            "max_party_bytes": int(max(r.get("bytes_sent", 0) for r in recs)),
            "exchanges": int(recs[0].get("exchanges", 0)),
            "cpu_seconds": float(sum(r.get("cpu_seconds", 0.0) for r in recs)),
            "proof_phase_seconds": float(proof),
            "max_party_rss_bytes": int(max(r.get("max_rss_bytes", 0) for r in recs)),
            "field_bits": recs[0]["result"].field_bits,
            "less_noise": [int(v) for v in raw - noise]}


def _party_malloc() -> None:
    """This process's malloc set as a party's (:data:`sqm.mpc.net.launch.MALLOC_ENV`: arrays come from the heap and
    stay with the process), so that a step timed here pays what it pays in a party, not fresh pages for every array
    (glibc's ``mallopt``; elsewhere nothing changes)."""
    import ctypes
    import ctypes.util

    from sqm.mpc.net.launch import MALLOC_ENV

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.mallopt(-3, int(MALLOC_ENV["MALLOC_MMAP_THRESHOLD_"]))  # M_MMAP_THRESHOLD
        libc.mallopt(-1, int(MALLOC_ENV["MALLOC_TRIM_THRESHOLD_"]))  # M_TRIM_THRESHOLD
    except (OSError, AttributeError, TypeError):
        pass


def steps_one(rows: int, cols: int, clients: int, gamma: float, seed: int, bits: int,
              chunk_rows: int | None = None, repeat: int = 5) -> list[dict]:
    """Each step of the input proof timed alone, in this process (nothing sent), on the first client's first
    chunk: its claim as the release's (the same data, bounds and limits), its block clipped to its group's bound
    and rounded toward zero (within the claim), a field of ``bits`` (the verified run's), malloc set as a party's
    (:func:`_party_malloc`).  Per step: the median of ``repeat`` runs (ms), how many times
    the job runs it (chunks x the parties that do, per client) and that product in seconds: a guide to where the
    verified release's CPU goes, not its total (the exchanges and the Gram are not steps here)."""
    import numpy as np

    from sqm.mechanism.polynomial import covariance
    from sqm.mechanism.release import SQM
    from sqm.mechanism.vertical import VerticalData
    from sqm.mpc.net import wire
    from sqm.mpc.protocols import flp
    from sqm.mpc.protocols import input_proof as ip
    from sqm.mpc.protocols import lookup
    from sqm.mpc.protocols.backend import Job
    from sqm.mpc.protocols.stream import chunk_count
    from sqm.mpc.protocols.stream import chunk_rows as default_rows
    from sqm.mpc.shares.field import from_signed, prime_below

    _party_malloc()
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, cols))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    split = np.array_split(np.arange(cols), clients)
    plan = SQM(covariance(cols), gamma, epsilon=1.0, backend="mpyc", seed=seed, verify_inputs=True,
               chunk_rows=chunk_rows).programs(VerticalData([X[:, s] for s in split]))[0][1].plan
    claim = Job(program=None, clients=[], col_bounds=plan.int_col_bounds(), n_records=rows, var_owner=plan.owner,
                input_limits=plan.input_limits()).claims()[0]
    per_chunk = int(chunk_rows or default_rows(cols))
    n = min(rows, per_chunk)
    (cols0, b), = [(g, b) for g, b in zip(plan.bounds.groups, plan.bounds.bounds, strict=True) if 0 in g]
    sub = X[:n, list(cols0)]
    sub = sub * np.minimum(1.0, b / np.maximum(np.linalg.norm(sub, axis=1, keepdims=True), 1e-300))
    block = np.trunc(sub * gamma).astype(np.int64)  # clipped to the group's bound, rounded toward zero
    p, M, t = prime_below(bits), clients + 1, clients // 2
    chunks = chunk_count(rows, per_chunk)
    out = []

    def step(name: str, fn, parties: int):
        fn()
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            res = fn()
            times.append(time.perf_counter() - t0)
        ms = sorted(times)[repeat // 2] * 1e3
        times_run = chunks * parties * clients  # every client's chunks taken as alike
        out.append({"step": name, "ms": ms, "times": times_run, "job_seconds": ms * times_run / 1e3})
        return res

    W, x = step("witness", lambda: (ip.witness(block, claim), from_signed(block, p)), 1)  # as push makes them
    sh, _ = step("witness sharing", lambda: ip.witness_shares(W, x, claim, 1, M, t, p), 1)
    sent = next(v for v in sh.values() if not isinstance(v, bytes))
    frame = step("pack a share", lambda: wire.pack_bits(sent, p), M - 1 - t)
    step("unpack a share", lambda: wire.packed_bits(sent.shape, p)(frame), M - 1 - t)
    step("expand a seed", lambda: ip.expand(bytes(32), W.shape, p), t)
    Xs = step("values", lambda: ip.values(sent, claim, p), M - 1)
    H = Hs = counts = invs = None
    consts: list[int] = []
    if claim.tables:  # the lookups: multiplicities, the alphas' tables, the inverses and their sharing
        counts = step("multiplicities", lambda: lookup.table_counts(W, claim), 1)
        consts = lookup.alphas(bytes(32), 1, max(claim.tables), p)
        invs = step("tables' inverses", lambda: lookup.table_inverses(consts, claim, p), M)
        H = step("inverses", lambda: lookup.inverse_witness(W, claim, invs), 1)
        hs = step("inverses sharing", lambda: ip._seeded_sharing(H, 1, M, t, p, own=False)[0], 1)
        Hs = next(v for v in hs.values() if not isinstance(v, bytes))
    co = ip.coins(bytes(32), 1, n, claim, p)
    Y, _, beta, _ = step("grid (prover)", lambda: ip.grid(x, W, claim, co, p, H=H), 1)
    Yv, _, _, _ = step("grid (verifier)", lambda: ip.grid(Xs, sent, claim, co, p, H=Hs), M - 1)
    st = ip.statement(n, claim, p)
    a, _ = step("blinds", lambda: ip.blind_shares(1, M, t, Y.shape[1], p), 1)
    for i, (lo, hi, q) in enumerate(zip(st.bounds[:-1], st.bounds[1:], st.polys, strict=True)):
        if isinstance(q, flp.Products):
            step(f"prove part {i + 1} (products, {hi - lo} columns)",
                 lambda lo=lo, hi=hi, q=q: flp.prove_products(Y[:, lo:hi], q, beta[lo:hi], p, a[lo:hi], consts), 1)
        else:
            step(f"prove part {i + 1} (degree {flp.degree(q)}, {hi - lo} columns)",
                 lambda lo=lo, hi=hi, q=q: flp.prove(Y[:, lo:hi], q, beta[lo:hi], p, a[lo:hi]), 1)
    proof = flp.prove_statement(Y, st, beta, p, a, consts)
    r = flp.draw_point(np.random.default_rng(seed), p, ip.BASE)
    step("query", lambda: flp.query_statement(Yv, proof, co["alpha"], r, p, st), M - 1)
    opened = flp.query_statement(Y, proof, co["alpha"], r, p, st)  # what the verifiers open: the values'
    if not step("decide", lambda: flp.decide_statement(opened, st, beta, p, consts), M - 1):
        raise RuntimeError("the honest proof failed its check in the steps' timing")
    step("linear check", lambda: ip.linear_check(sent, claim, co, p), M - 1)
    if claim.tables:
        step("lookup check", lambda: lookup.check(Hs, counts, claim, co, invs, p), M - 1)
    for rec in out:
        rec.update(rows=rows, cols=cols, chunk_rows=n, chunks=chunks)
    return out


def run(shapes, clients: int = 2, gamma: float = 4096.0, seed: int = 0, chunk_rows: int | None = None,
        steps: bool = False) -> dict:
    t0 = time.perf_counter()
    rows, step_rows = [], []
    for r, c in shapes:
        base = run_one(r, c, clients, gamma, False, seed, chunk_rows)
        ver = run_one(r, c, clients, gamma, True, seed, chunk_rows)
        same = base.pop("less_noise") == ver.pop("less_noise")
        for rec in (base, ver):
            rec["same_integers_less_noise"] = same
        for k in ("seconds", "bytes", "max_party_bytes", "exchanges", "cpu_seconds"):
            ver[f"{k}_ratio"] = ver[k] / base[k] if base[k] else None
        rows += [base, ver]
        if steps:
            step_rows += steps_one(r, c, clients, gamma, seed, ver["field_bits"], chunk_rows)
    from sqm.mpc.protocols.flp import prover_backend

    out = {"rows": rows, "gamma": gamma, "seed": seed, "chunk_rows": chunk_rows, "load_average": os.getloadavg()[0],
           "prover": prover_backend(), "seconds": time.perf_counter() - t0}
    if steps:
        out["steps"] = step_rows
    return out


def print_table(rep: dict) -> None:
    print(f"verifiable inputs: gamma {rep['gamma']:g}, load average {rep['load_average']:.1f}, "
          f"{rep.get('prover', 'numpy')} prover, chunks of {rep.get('chunk_rows') or 'default'} records")
    print(f"{'shape':>12} {'proofs':>6} {'MB':>9} {'x':>6} {'exch':>5} {'x':>5} {'wall s':>7} {'x':>5} "
          f"{'cpu s':>7} {'x':>5} {'proof s':>7} {'peak MB':>7} {'bits':>4} {'less noise':>10}")
    for r in rep["rows"]:
        v = r["verify_inputs"]

        def ratio(k, r=r, v=v):
            return f"{r[k + '_ratio']:.2f}" if v else ""
        print(f"{r['rows']:>7}x{r['cols']:<4} {'yes' if v else 'no':>6} {r['bytes'] / 1e6:>9.2f} {ratio('bytes'):>6} "
              f"{r['exchanges']:>5} {ratio('exchanges'):>5} {r['seconds']:>7.2f} {ratio('seconds'):>5} "
              f"{r['cpu_seconds']:>7.2f} {ratio('cpu_seconds'):>5} {r['proof_phase_seconds']:>7.2f} "
              f"{r['max_party_rss_bytes'] / 1e6:>7.0f} {r['field_bits']:>4} "
              f"{'same' if r['same_integers_less_noise'] else 'DIFFER':>10}")
    if rep.get("steps"):
        print("\nthe input proof's steps, each alone on the first client's first chunk (median ms; x: the job's "
              "runs of it, all clients; s: their product)")
        for r in rep["steps"]:
            print(f"{r['rows']:>7}x{r['cols']:<4} {r['step']:<40} {r['ms']:>8.2f} ms x{r['times']:<5} "
                  f"{r['job_seconds']:>6.2f} s")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--shapes", default="2000x20", help="records x columns, comma-separated (default 2000x20)")
    ap.add_argument("--clients", type=int, default=2, help="clients the columns are split among (default 2)")
    ap.add_argument("--gamma", type=float, default=4096.0, help="quantization scale (default 4096)")
    ap.add_argument("--seed", type=int, default=0, help="data and party seed (default 0)")
    ap.add_argument("--chunk-rows", type=int, help="records per input chunk, both runs (default: the evaluation's, "
                    "about 4 MiB of shares per chunk)")
    ap.add_argument("--steps", action="store_true", help="also time each step of the input proof alone, on the "
                    "first client's first chunk (where the verified release's CPU goes)")
    ap.add_argument("--json", help="write the report (JSON) here")


def cli(args) -> int:
    shapes = [_shape(s) for s in args.shapes.split(",") if s]
    return finish(run(shapes, args.clients, args.gamma, args.seed, args.chunk_rows, args.steps), args, print_table)
