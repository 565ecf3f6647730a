"""BGW cost against gamma: secure covariance through the mpyc backend, MPyC's stock path and plaintext numpy.

    sqm bench bgw-cost --rows 20000 --cols 60 --parties 2 --json bgw.json --plot bgw.png

``--parties`` counts the clients; the job runs 1 + parties MPyC processes (the server is party 0).

``--compare-rng`` (benchmark only) runs every gamma twice in the same command: with the default
cryptographic generator (AES-128-CTR keyed from OS entropy, for the Shamir coefficients and the clients'
rounding and noise) and with numpy's PCG64 in its place (the statistical generator used before; insecure),
and times drawing rows x cols uniform field elements and rounding coins with each generator.
"""
from __future__ import annotations

import argparse
import dataclasses
import resource
import time

import numpy as np
from tqdm import tqdm

from bench.common import finish

from mpc.backend import FixedClient, Job
from mpc.launch import run_parties
from mpc.mpyc_backend import MPyCBackend
from mpc.program import SumProgram
from mpc.randomness import secure_generator
from mpc.stock import StockGram
from sqm.quantize import stochastic_round
from sqm.mechanism import SQM
from sqm.polynomial import covariance
from sqm.vertical import VerticalData


def make_data(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    X = np.random.default_rng(seed).normal(size=(rows, cols))
    return X / np.linalg.norm(X, axis=1).max()


def stock_comparison(X: np.ndarray, parties: int, gamma: float) -> dict:
    """X^T X of the same quantized blocks (no noise) by MPyC's stock np_matmul and by our fast path.

    Both run as real MPyC party processes, end to end (process start included), in this run.
    """
    data = VerticalData.split(X, parties)
    blocks = [stochastic_round(b, gamma, seed=j) for j, b in enumerate(data.blocks)]
    bits = int(2 * np.ceil(np.log2(gamma + 1)) + np.ceil(np.log2(X.shape[0] + 1)) + 4)
    programs = [StockGram(None, data.col_counts, X.shape[0], bits)]
    programs += [StockGram(b.astype(object), data.col_counts, X.shape[0], bits) for b in blocks]
    t0 = time.perf_counter()
    res = run_parties(programs)
    stock_s = time.perf_counter() - t0
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
                stock_identical=bool((G_stock == exact).all()),
                fast_identical=bool((fast.values == exact).all()))


class PCG64Backend(MPyCBackend):
    """BENCHMARK ONLY: the mpyc backend with numpy's PCG64 (a statistical generator, insecure) in place of
    AES-CTR for every party's Shamir coefficients and every client's rounding and noise draws."""

    def __init__(self):
        super().__init__(insecure_share_rng="pcg64")

    def run(self, job: Job):
        clients = [dataclasses.replace(c, insecure_pcg64=True) for c in job.clients]
        return super().run(dataclasses.replace(job, clients=clients))


def rng_microbench(n: int, p: int, repeat: int = 3) -> dict:
    """Seconds (best of ``repeat``) to draw ``n`` uniform elements of [0, p) (Shamir coefficients) and ``n``
    uniform floats (rounding coins) with AES-128-CTR and with PCG64."""
    out = dict(elements=int(n), field_prime_bits=int(p).bit_length())
    for name, rng in (("aes_ctr", secure_generator()), ("pcg64", np.random.default_rng())):
        for what, draw in (("field_elements", lambda: rng.integers(0, p, size=n, dtype=np.int64)),
                           ("uniform_floats", lambda: rng.random(n))):
            best = float("inf")
            for _ in range(repeat):
                t0 = time.perf_counter()
                draw()
                best = min(best, time.perf_counter() - t0)
            out[f"{name}_{what}_seconds"] = best
    for what in ("field_elements", "uniform_floats"):
        out[f"{what}_ratio"] = out[f"aes_ctr_{what}_seconds"] / out[f"pcg64_{what}_seconds"]
    return out


def run(rows=20000, cols=60, parties=2, gammas=None, epsilon=1.0, delta=1e-5, stock_rows=None,
        stock_cols=None, seed=0, progress=True, compare_rng=False, repeat=1) -> dict:
    gammas = gammas or [2.0 ** k for k in range(6, 17)]
    X = make_data(rows, cols, seed)
    data = VerticalData.split(X, parties)
    t0 = time.perf_counter()
    exact = X.T @ X
    plain_s = time.perf_counter() - t0
    out_rows = []

    def secure_cov(gamma, backend):
        """(result, relative error, CPU seconds of all party processes: user + system, reaped children)."""
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        res = SQM(covariance(cols), gamma, epsilon=epsilon, delta=delta, backend=backend, seed=seed).run(data)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        est = res.estimate.reshape(cols, cols)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        return res, float(np.linalg.norm(est - exact) / np.linalg.norm(exact)), cpu

    if int(repeat) != repeat or repeat < 1:
        raise ValueError(f"repeat must be an integer >= 1, got {repeat!r}")
    names = ["aes_ctr", "pcg64"] if compare_rng else ["aes_ctr"]
    for k, gamma in enumerate(tqdm(gammas, desc="bgw-cost", disable=not progress)):
        runs = {name: [] for name in names}
        for r in range(int(repeat)):  # interleaved, alternating which generator goes first
            for name in names if (k + r) % 2 == 0 else names[::-1]:
                runs[name].append(secure_cov(gamma, "mpyc" if name == "aes_ctr" else PCG64Backend()))
        best = {name: min(got, key=lambda g: g[0].seconds) for name, got in runs.items()}
        res, rel, cpu = best["aes_ctr"]
        row = dict(gamma=gamma, field_bits=res.field_bits, bytes_per_party=[int(b) for b in res.bytes_sent],
                   seconds=res.seconds, rel_error=rel, max_rss_bytes=[int(b) for b in res.max_rss_bytes],
                   rng="aes_ctr", party_cpu_seconds=min(g[2] for g in runs["aes_ctr"]))
        if repeat > 1:
            row["all_seconds"] = [g[0].seconds for g in runs["aes_ctr"]]
        if compare_rng:
            pres, prel, _ = best["pcg64"]
            pcpu = min(g[2] for g in runs["pcg64"])
            row.update(pcg64_seconds=pres.seconds, pcg64_rel_error=prel, rng_time_ratio=res.seconds / pres.seconds,
                       pcg64_party_cpu_seconds=pcpu, rng_cpu_ratio=row["party_cpu_seconds"] / pcpu)
            if repeat > 1:
                row["pcg64_all_seconds"] = [g[0].seconds for g in runs["pcg64"]]
        out_rows.append(row)
    report = dict(shape=[rows, cols], parties=parties + 1, clients=parties, plaintext_seconds=plain_s,
                  rows=out_rows, rng="aes_ctr (AES-128-CTR keyed from OS entropy)", repeat=int(repeat))
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
              f"MPyC stock np_matmul {rep['stock_seconds']:.2f} s, fast path {rep['fast_seconds_at_stock_shape']:.2f} s, "
              f"speed-up {rep['speedup']:.1f}x (target >= 50x); inside the protocol (process start excluded, "
              f"slowest party): stock {rep['stock_protocol_seconds']:.2f} s, fast {rep['fast_protocol_seconds']:.3f} s, "
              f"speed-up {rep['protocol_speedup']:.0f}x; both equal the exact integers: "
              f"{rep['stock_identical'] and rep['fast_identical']}")


def plot(rep: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = [r["gamma"] for r in rep["rows"]]
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    ax[0].semilogx(g, [r["seconds"] for r in rep["rows"]], "o-", base=2)
    ax[0].axhline(rep["plaintext_seconds"], ls="--", c="gray", label="plaintext numpy")
    ax[0].set(xlabel="gamma", ylabel="seconds", title="wall time"); ax[0].legend()
    ax[1].semilogx(g, [max(r["bytes_per_party"]) / 2 ** 20 for r in rep["rows"]], "o-", base=2)
    ax[1].set(xlabel="gamma", ylabel="MiB", title="bytes sent (max party)")
    ax[2].loglog(g, [r["rel_error"] for r in rep["rows"]], "o-", base=2)
    ax[2].set(xlabel="gamma", ylabel="relative Frobenius error", title="error at epsilon=1")
    fig.tight_layout(); fig.savefig(path, dpi=120)



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
    ap.add_argument("--json", help="write the figures to this JSON file")
    ap.add_argument("--plot", help="write a PNG plot to this file")


def cli(args) -> int:
    gammas = [float(g) for g in args.gammas.split(",") if g.strip()]
    rep = run(args.rows, args.cols, args.parties, gammas, args.epsilon, args.delta,
              args.stock_rows or None, args.stock_cols, compare_rng=args.compare_rng,
              repeat=args.repeat)
    return finish(rep, args, print_table, plot)
