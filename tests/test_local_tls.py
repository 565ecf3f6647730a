"""Authenticated local jobs (issue 25): a launcher makes TLS keys for each job in its private folder, so another
local user who reads a party's command line (job id, addresses) and starts its own "server" with the same
arguments cannot join: its connections fail the handshake and are dropped, and the job completes with the real
parties' result (real processes over loopback)."""
from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np

from sqm.mpc.net.launch import party_env, run_parties
from sqm.mpc.protocols.context import EvaluateJob
from sqm.mpc.protocols.secure_sum import SumClient, sum_job


def test_a_local_impostor_with_the_command_line_cannot_join(tmp_path):
    job = sum_job([SumClient(np.array([j, 2 * j])) for j in (1, 2)], 2, 1000)
    pub = job.public()
    programs = [EvaluateJob(pub)] + [EvaluateJob(pub, c) for c in job.clients]
    own = tmp_path / "impostor.program"  # the impostor's own program: it cannot read the launcher's folder
    own.write_bytes(pickle.dumps(EvaluateJob(pub)))
    impostors = []

    def start_impostor(procs):
        with open(f"/proc/{procs[0].pid}/cmdline", "rb") as f:  # what any local user can read
            argv = [a.decode() for a in f.read().split(b"\0") if a]
        i = argv.index("--program")
        argv[i + 1] = str(own)
        argv[argv.index("--result") + 1] = str(tmp_path / "impostor.result")
        if "--ssl" in argv:  # it has no keys: the launcher's are in its private folder
            k = argv.index("--ssl-dir")
            del argv[k:k + 2]
            argv.remove("--ssl")
        argv[argv.index("--connect-timeout") + 1] = "5"
        impostors.append(subprocess.Popen([sys.executable] + argv[1:], env=party_env(3),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))

    try:
        records = run_parties(programs, timeout=60, connect_timeout=30, on_start=start_impostor)
    finally:
        for p in impostors:
            p.kill()
            p.wait()
    assert records[0]["result"] is not None  # the real server got the release
    assert not (tmp_path / "impostor.result").exists()
