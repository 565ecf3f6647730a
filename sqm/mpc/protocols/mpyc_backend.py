"""The ``mpyc`` backend: every party a real MPyC process, shares over TCP (loopback here, any hosts in production)."""
from __future__ import annotations

import time

from sqm.mpc.protocols.backend import Backend, Job, JobResult
from sqm.mpc.shares.field import prime_for_bound
from sqm.mpc.net.launch import require_two_clients, run_parties
from sqm.mpc.protocols.context import EvaluateJob
from sqm.errors import UsageError


class MPyCBackend(Backend):
    """Secure evaluation by BGW over Shamir shares among 1 server + n clients, each its own process."""

    name = "mpyc"

    def __init__(self, timeout: float = 3600.0, outputs_to_clients: bool = False, ssl_dir: str | None = None,
                 insecure_share_rng: str | None = None):
        self.timeout = timeout
        self.outputs_to_clients = outputs_to_clients
        self.ssl_dir = ssl_dir  # a folder with every party's keys: TLS between all parties
        # BENCHMARK ONLY: "pcg64" makes every party draw its Shamir coefficients from numpy's PCG64 (a
        # statistical generator) to measure what the default AES-CTR stream costs; never in a real job
        if insecure_share_rng not in (None, "pcg64"):
            raise UsageError(f"insecure_share_rng must be None or 'pcg64' (benchmark only), "
                             f"got {insecure_share_rng!r}")
        self.insecure_share_rng = insecure_share_rng

    def run(self, job: Job) -> JobResult:
        t0 = time.perf_counter()
        require_two_clients(len(job.clients))  # t = 0 with one client: refused before any process starts
        M = len(job.clients) + 1
        p = prime_for_bound(job.result_bound(), M)  # refuse an overflowing job before starting anyone
        pub = job.public()
        programs = [EvaluateJob(pub, None, self.outputs_to_clients)]
        programs += [EvaluateJob(pub, c, self.outputs_to_clients) for c in job.clients]
        extra = ["--insecure-pcg64-shares"] if self.insecure_share_rng == "pcg64" else None
        res = run_parties(programs, timeout=self.timeout, ssl_dir=self.ssl_dir, extra_args=extra)
        return JobResult(values=res[0]["result"], backend=self.name, seconds=time.perf_counter() - t0,
                         bytes_sent=[int(r.get("bytes_sent", 0)) for r in res], field_bits=p.bit_length(),
                         max_rss_bytes=[int(r.get("max_rss_bytes", 0)) for r in res],
                         party_seconds=[float(r.get("seconds", 0.0)) for r in res],
                         phases=[dict(r.get("phases", {})) for r in res])
