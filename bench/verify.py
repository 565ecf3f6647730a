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


def run(shapes, clients: int = 2, gamma: float = 4096.0, seed: int = 0, chunk_rows: int | None = None) -> dict:
    t0 = time.perf_counter()
    rows = []
    for r, c in shapes:
        base = run_one(r, c, clients, gamma, False, seed, chunk_rows)
        ver = run_one(r, c, clients, gamma, True, seed, chunk_rows)
        same = base.pop("less_noise") == ver.pop("less_noise")
        for rec in (base, ver):
            rec["same_integers_less_noise"] = same
        for k in ("seconds", "bytes", "max_party_bytes", "exchanges", "cpu_seconds"):
            ver[f"{k}_ratio"] = ver[k] / base[k] if base[k] else None
        rows += [base, ver]
    from sqm.mpc.protocols.flp import prover_backend

    return {"rows": rows, "gamma": gamma, "seed": seed, "chunk_rows": chunk_rows, "load_average": os.getloadavg()[0],
            "prover": prover_backend(), "seconds": time.perf_counter() - t0}


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


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--shapes", default="2000x20", help="records x columns, comma-separated (default 2000x20)")
    ap.add_argument("--clients", type=int, default=2, help="clients the columns are split among (default 2)")
    ap.add_argument("--gamma", type=float, default=4096.0, help="quantization scale (default 4096)")
    ap.add_argument("--seed", type=int, default=0, help="data and party seed (default 0)")
    ap.add_argument("--chunk-rows", type=int, help="records per input chunk, both runs (default: the evaluation's, "
                    "about 4 MiB of shares per chunk)")
    ap.add_argument("--json", help="write the report (JSON) here")


def cli(args) -> int:
    shapes = [_shape(s) for s in args.shapes.split(",") if s]
    return finish(run(shapes, args.clients, args.gamma, args.seed, args.chunk_rows), args, print_table)
