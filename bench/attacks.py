"""Trust attacks (issue 43): what a hostile peer tries against the surfaces built for deployment, replayed through
real party processes; cases of ``sqm bench faults`` (``--cases jobfile-engine,...``).

Each case returns the record the fault bench prints: what was observed and the criteria, each checked on its
own, ``passed`` when every one holds.  The cases:

- ``jobfile-engine``: the coordinator's job file points client 1's shard engine (``"engine"``) at a scheduler the
  attacker runs (a TCP listener here); every party is started alone (``sqm pca --job J --index I``, its own
  ``--data-file``).  Passes when every party refuses before connecting, naming the field, the attacker's listener
  receives no connection, and nothing is released.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time



def _listener() -> tuple[socket.socket, list, threading.Event]:
    """An attacker's listener on loopback: counts the connections it accepts until stopped."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.1)
    got: list = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            got.append(conn.recv(1 << 16))
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    return srv, got, stop


def _parties(job: str, extras: dict, work: str, timeout: float) -> dict:
    """Every party of ``job`` started alone (``sqm pca --job J --index I``): {index: (exit, seconds, output)}."""
    procs, t0 = {}, time.monotonic()
    for i, extra in extras.items():
        procs[i] = subprocess.Popen([sys.executable, "-m", "sqm", "pca", "--job", job, "--index", str(i),
                                     "--json", os.path.join(work, f"out{i}.json"), "--timeout", f"{timeout:g}",
                                     "--connect-timeout", "20", *extra], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, cwd=work)
    out = {}
    for i, p in procs.items():
        text, _ = p.communicate(timeout=timeout + 60)
        out[i] = (p.returncode, round(time.monotonic() - t0, 2), text)
    return out


def jobfile_engine(seed: int = 0) -> dict:
    import numpy as np

    from sqm.framework.spec import load_job, write_party_csvs, write_shared_job
    from sqm.runtime.certs import make_certificates

    work = tempfile.mkdtemp(prefix="sqm-attack-engine-")
    srv, got, stop = _listener()
    try:
        X = np.random.default_rng(seed).normal(size=(80, 4)) * 0.2
        local = write_party_csvs(X, os.path.join(work, "job"), 2, min_intersection=1,
                                 task={"statistic": "pca", "components": 1, "epsilon": 1})
        spec = load_job(local)
        shared = write_shared_job(local, os.path.join(work, "job", "shared.json"))
        raw = json.load(open(shared))
        for p in raw["parties"]:
            p["workers"] = 2
        raw["parties"][1]["engine"] = f"tcp://127.0.0.1:{srv.getsockname()[1]}"
        json.dump(raw, open(shared, "w"))
        keys = os.path.join(work, "keys")
        make_certificates(keys, 3, days=1)
        extras = {i: ["--ssl-dir", keys] + ([] if p.file is None else ["--data-file", p.file, "--no-ledger"])
                  for i, p in enumerate(spec.parties)}
        out = _parties(shared, extras, work, 60)
        time.sleep(0.3)
        per_party = [{"party": i, "exit": c, "seconds": s, "message": t.strip().splitlines()[-1][:300] if t.strip()
                      else "", "released": os.path.exists(os.path.join(work, f"out{i}.json"))}
                     for i, (c, s, t) in sorted(out.items())]
        crit = {"every_party_refused": all(p["exit"] not in (None, 0) for p in per_party),
                "names_the_field": all('"engine"' in p["message"] for p in per_party),
                "attacker_received_nothing": not got,
                "nothing_released": not any(p["released"] for p in per_party)}
        return {"what": "the job file names client 1's shard engine: a scheduler the attacker runs",
                "per_party": per_party, "attacker_connections": len(got), "criteria": crit,
                "passed": all(crit.values())}
    finally:
        stop.set()
        srv.close()
        shutil.rmtree(work, ignore_errors=True)


ATTACKS = {
    "jobfile-engine": ("the job file points client 1's shard engine at the attacker's scheduler", jobfile_engine),
}


def run_attack(name: str, seed: int = 0) -> dict:
    what, fn = ATTACKS[name]
    t0 = time.monotonic()
    rec = fn(seed)
    rec.update(case=name, what=rec.get("what", what), seconds=round(time.monotonic() - t0, 2),
               load_before=round(os.getloadavg()[0], 2))
    return rec


def print_attacks(recs: list[dict]) -> None:
    if not recs:
        return
    print("Trust attacks (issue 43): real party processes; pass = every criterion holds")
    head = f"{'case':24s} {'time s':>7s}  result"
    print(head)
    print("-" * 60)
    for r in recs:
        failed = [k for k, v in r["criteria"].items() if not v]
        print(f"{r['case']:24s} {r['seconds']:7.2f}  {'PASS' if r['passed'] else 'FAIL: ' + ', '.join(failed)}")
        print(f"  {r['what']}; " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in r["criteria"].items()))
