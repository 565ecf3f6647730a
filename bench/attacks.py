"""Trust attacks (issue 43): what a hostile peer tries against the surfaces built for deployment, replayed through
real party processes; cases of ``python -m bench faults`` (``--cases jobfile-engine,...``).

Each case returns the record the fault bench prints: what was observed and the criteria, each checked on its
own, ``passed`` when every one holds.  The cases:

- ``jobfile-engine``: the coordinator's job file points client 1's shard engine (``"engine"``) at a scheduler the
  attacker runs (a TCP listener here); every party is started alone (``sqm pca --job J --index I``, its own
  ``--data-file``).  Passes when every party refuses before connecting, naming the field, the attacker's listener
  receives no connection, and nothing is released.
- ``score-solve`` / ``score-identity`` (attack 3): scores that would give client 1's columns to the requester, and a
  crafted identity model: refused by the clients before any share, no score released.
- ``psi-label-server`` (attack 2): a server whose label table holds the whole id space keeps everything it receives
  and every key it blinds with, and tries to link any value of a client's list to anything else: it links none.
- ``hiding-rerun`` (attack 6): with membership hidden, a client reruns the alignment with one member swapped for an
  id nobody holds: its two views agree in every count and structure.
- ``ledger-names`` / ``ledger-drain`` (attack 4): job files naming other datasets over the same records, and a
  server killed right after every reservation: the owner's one account is charged once, and reservations of jobs
  that released nothing are refunded.
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

from sqm.framework.jobtask import JobTask
from sqm.mpc.net.party import PartyProgram



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


def _parties(job: str, extras: dict, work: str, timeout: float, command: str = "pca") -> dict:
    """Every party of ``job`` started alone (``sqm COMMAND --job J --index I``): {index: (exit, seconds, output)}."""
    procs, t0 = {}, time.monotonic()
    for i, extra in extras.items():
        procs[i] = subprocess.Popen([sys.executable, "-m", "sqm", command, "--job", job, "--index", str(i),
                                     "--timeout", f"{timeout:g}", "--connect-timeout", "20", *extra],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)
    out = {}
    for i, p in procs.items():
        text, _ = p.communicate(timeout=timeout + 60)
        out[i] = (p.returncode, round(time.monotonic() - t0, 2), text)
    return out


def _one_by_one(local: str, name: str, **changes) -> tuple[str, dict]:
    """The shared form of local job file ``local`` (``name`` beside it; a fresh job id and ports; ``changes`` to its
    head, e.g. a dataset) and each party's own ``--data-file`` option."""
    import secrets

    from sqm.framework.spec import load_job, write_shared_job
    from sqm.mpc.net.launch import free_ports

    spec = load_job(local)
    out = write_shared_job(local, os.path.join(os.path.dirname(local), name))
    with open(out) as fh:
        raw = json.load(fh)
    raw.update(job_id=secrets.token_hex(16), **changes)
    for party, port in zip(raw["parties"], free_ports(len(raw["parties"])), strict=False):
        party["address"] = f"127.0.0.1:{port}"
    with open(out, "w") as fh:
        json.dump(raw, fh)
    return out, {i: ([] if p.file is None else ["--data-file", p.file]) for i, p in enumerate(spec.parties)}


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _last_line(text: str) -> str:
    """A party's last message: its last unindented line with the indented lines after it (a message whose first
    line was broken to stay short continues on an indented line), joined by spaces."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip() and "chunk" not in ln]
    start = max([i for i, ln in enumerate(lines) if not ln.startswith(" ")] or [0])
    return " ".join(ln.strip() for ln in lines[start:])[:600]


def jobfile_engine(seed: int = 0) -> dict:
    import numpy as np

    from sqm.framework.spec import load_job, write_party_csvs, write_shared_job
    from sqm.mpc.net.certs import make_certificates

    work = tempfile.mkdtemp(prefix="sqm-attack-engine-")
    srv, got, stop = _listener()
    try:
        X = np.random.default_rng(seed).normal(size=(80, 4)) * 0.2
        while True:  # party ports drawn at random: redraw until no party's 2 default worker ports is another's
            local = write_party_csvs(X, os.path.join(work, "job"), 2, min_intersection=1,
                                     task={"statistic": "pca", "components": 1, "epsilon": 1})
            spec = load_job(local)
            ports = [int(p.address.rsplit(":", 1)[1]) for p in spec.parties]
            if not {q + k for q in ports for k in (1, 2)} & set(ports):
                break
        shared = write_shared_job(local, os.path.join(work, "job", "shared.json"))
        with open(shared) as fh:
            raw = json.load(fh)
        for p in raw["parties"]:
            p["workers"] = 2
        raw["parties"][1]["engine"] = f"tcp://127.0.0.1:{srv.getsockname()[1]}"
        with open(shared, "w") as fh:
            json.dump(raw, fh)
        keys = os.path.join(work, "keys")
        make_certificates(keys, 3, days=1)
        extras = {i: ["--ssl-dir", keys] + ([] if p.file is None else ["--data-file", p.file, "--no-ledger"])
                  for i, p in enumerate(spec.parties)}
        extras = {i: e + ["--json", os.path.join(work, f"out{i}.json")] for i, e in extras.items()}
        out = _parties(shared, extras, work, 60)
        time.sleep(0.3)
        per_party = [{"party": i, "exit": c, "seconds": s, "message": _last_line(t),
                      "released": os.path.exists(os.path.join(work, f"out{i}.json"))}
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


def ledger_names(seed: int = 0) -> dict:
    """Attack 4a: two job files naming datasets 'bank-1' and 'bank-2' over the same records, each spending epsilon 1
    against client 1's budget of 1.2.  Passes when the second job is refused by client 1 before any share (nothing
    released) and its ledger holds one release, under its own account (its file's digest)."""
    import numpy as np

    from sqm.framework.spec import write_party_csvs
    from sqm.mechanism.ledger import Ledger

    work = tempfile.mkdtemp(prefix="sqm-attack-ledger-")
    try:
        X = np.random.default_rng(seed).normal(size=(60, 5)) * 0.2
        local = write_party_csvs(X, os.path.join(work, "job"), col_counts=[2, 3], min_intersection=1,
                                 task={"statistic": "pca", "components": 1, "epsilon": 1, "gamma": 1024})
        ledger = os.path.join(work, "owner1.sqlite")
        runs = []
        for name in ("bank-1", "bank-2"):
            job, files = _one_by_one(local, f"{name}.json", dataset=name)
            extras = {0: ["--json", os.path.join(work, f"{name}.json.out")],
                      1: files[1] + ["--ledger", ledger, "--budget", "1.2,1e-5"], 2: files[2] + ["--no-ledger"]}
            runs.append(_parties(job, {i: ["--insecure-plaintext"] + e for i, e in extras.items()}, work, 60))
        led = Ledger(ledger)
        entries = {d: [e["status"] for e in led.releases(d)] for d in led.datasets()}
        second = runs[1]
        crit = {"first_job_ran": all(c == 0 for c, _, _ in runs[0].values()),
                "second_job_refused_by_client_1": all(c != 0 for c, _, _ in second.values())
                and "client 1 refused before any share was sent" in second[1][2],
                "nothing_released_by_the_second": not os.path.exists(os.path.join(work, "bank-2.json.out")),
                "one_release_charged": sum(len(v) for v in entries.values()) == 1
                and not led.releases("bank-1") and not led.releases("bank-2")}
        return {"what": "job files naming 'bank-1', 'bank-2' over the same records, against client 1's budget 1.2",
                "per_party": [{"party": i, "exit": c, "message": _last_line(t)} for i, (c, _, t) in second.items()],
                "ledger": entries, "criteria": crit, "passed": all(crit.values())}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ledger_drain(seed: int = 0, rounds: int = 3) -> dict:
    """Attack 4b: the server is killed right after the clients reserved their budgets (held before its first
    input-shares exchange), ``rounds`` times.  Passes when every client's reservations are refunded (nothing was
    sent from which an output could be opened), its spent epsilon stays 0 and the alignments are counted."""
    import pickle
    import secrets
    import signal

    import numpy as np

    from bench.probe import Probe
    from sqm.framework.ledger_guard import LedgerGuard
    from sqm.framework.party import party_program
    from sqm.framework.spec import load_job, write_party_csvs
    from sqm.mechanism.ledger import Ledger
    from sqm.apps.pca.job import PCAJobTask
    from sqm.mpc.net.launch import free_ports, party_command, party_env

    work = tempfile.mkdtemp(prefix="sqm-attack-drain-")
    procs: dict = {}
    try:
        X = np.random.default_rng(seed).normal(size=(60, 5)) * 0.2
        guards = {i: LedgerGuard(os.path.join(work, f"c{i}.sqlite"), (1.0, 1e-5)) for i in (1, 2)}
        codes = []
        for r in range(rounds):
            spec = load_job(write_party_csvs(X, os.path.join(work, f"job{r}"), col_counts=[2, 3], min_intersection=1,
                                             addresses=[f"127.0.0.1:{p}" for p in free_ports(3)]))
            task = PCAJobTask(n_components=1, epsilon=1.0, gamma=1024.0)
            go, job_id, procs = os.path.join(work, f"go{r}"), secrets.token_hex(16), {}
            for i in range(3):
                pf = os.path.join(work, f"r{r}party{i}.program")
                with open(pf, "wb") as f:
                    pickle.dump(Probe(party_program(spec, i, task, guards.get(i)), os.path.join(work, f"r{r}m{i}"),
                                      "input shares", go), f)
                cmd = party_command(pf, i, ",".join(spec.addresses), os.path.join(work, f"r{r}res{i}"), 60, 30,
                                    job_id=job_id, insecure_plaintext=True)
                procs[i] = subprocess.Popen(cmd, env=party_env(local_parties=3, blas_threads=1),
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 120
            mark = os.path.join(work, f"r{r}m0")
            while not (os.path.exists(mark) and "HOLD input shares" in _read(mark)):
                if time.monotonic() > deadline or procs[0].poll() is not None:
                    break
                time.sleep(0.02)
            os.kill(procs[0].pid, signal.SIGKILL)  # the server, right after every client reserved
            with open(go, "w"):
                pass
            codes.append({i: p.wait(90) for i, p in procs.items()})
        status, spent, aligned = {}, {}, {}
        for c, g in guards.items():
            led = Ledger(g.path)
            status[c] = [e["status"] for d in led.datasets() for e in led.releases(d)]
            spent[c] = sum(led.status(d).spent for d in led.datasets() if led.budget(d) is not None)
            aligned[c] = sum(led.alignments(d) for d in led.datasets())
        crit = {"every_job_aborted": all(c != 0 for run in codes for c in run.values()),
                "every_reservation_refunded": all(v == ["refunded"] * rounds for v in status.values()),
                "nothing_spent": all(v == 0 for v in spent.values()),
                "alignments_counted": all(v == rounds for v in aligned.values())}
        return {"what": f"the server killed right after the clients reserved epsilon 1 of their budget 1, {rounds} "
                        f"times", "ledgers": status, "spent": spent, "alignments": aligned, "criteria": crit,
                "passed": all(crit.values())}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


def _scoring_setup(work: str, seed: int) -> tuple:
    """A released 6-component PCA over 2 clients x 3 columns (each client's ledger records its model) and a job
    of 200 new records to score: (model file, new local job file, {client: its ledger options}, new records)."""
    import numpy as np

    from sqm.framework.spec import write_party_csvs

    rng = np.random.default_rng(seed + 11)
    train = write_party_csvs(rng.normal(size=(300, 6)) * 0.3, os.path.join(work, "train"), col_counts=[3, 3],
                             min_intersection=1, task={"statistic": "pca", "components": 6, "epsilon": 2})
    own = {j: ["--ledger", os.path.join(work, f"owner{j}.sqlite")] for j in (1, 2)}
    model = os.path.join(work, "pca.json")
    job, files = _one_by_one(train, "shared.json")
    extras = {0: ["--json", model], **{j: files[j] + own[j] + ["--budget", "10,1e-5"] for j in (1, 2)}}
    out = _parties(job, {i: ["--insecure-plaintext"] + e for i, e in extras.items()}, work, 120)
    if any(c != 0 for c, _, _ in out.values()):
        raise RuntimeError(f"the training job failed: {[_last_line(t) for _, _, t in out.values()]}")
    X = rng.normal(size=(200, 6))
    new = write_party_csvs(X, os.path.join(work, "new"), col_counts=[3, 3], min_intersection=1)
    return model, new, own, X


def _score(work: str, new: str, model: str, own: dict, name: str) -> tuple[dict, str]:
    job, files = _one_by_one(new, name)
    scores = os.path.join(work, f"{name}.scores.csv")
    extras = {0: ["--model", model], 1: files[1] + own[1], 2: files[2] + own[2] + ["--scores", scores]}
    return _parties(job, {i: ["--insecure-plaintext"] + e for i, e in extras.items()}, work, 120, "score"), scores


def score_solve(seed: int = 0) -> dict:
    """Attack 3a: scoring new records with an honest 6-component PCA over 2 clients x 3 columns for client 2, which
    would subtract its own partial scores and solve for client 1's raw block.  Passes when client 1 refuses before
    any share, naming the columns the scores would determine, and no score is released."""
    work = tempfile.mkdtemp(prefix="sqm-attack-score-")
    try:
        model, new, own, _ = _scoring_setup(work, seed)
        out, scores = _score(work, new, model, own, "solve.json")
        crit = {"every_party_refused": all(c != 0 for c, _, _ in out.values()),
                "client_1_names_its_columns": "determine its column(s) ['x0', 'x1', 'x2']" in out[1][2],
                "no_score_released": not os.path.exists(scores)}
        return {"what": "client 2 would solve client 1's raw columns from a 6-component projection's scores",
                "per_party": [{"party": i, "exit": c, "message": _last_line(t)} for i, (c, _, t) in out.items()],
                "criteria": crit, "passed": all(crit.values())}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def score_identity(seed: int = 0) -> dict:
    """Attack 3b: the server scores with a crafted identity "model" (every column its own output).  Passes when
    both clients refuse it before any share (not a release they recorded) and no score is released."""
    work = tempfile.mkdtemp(prefix="sqm-attack-identity-")
    try:
        _, new, own, _ = _scoring_setup(work, seed)
        crafted = os.path.join(work, "identity.json")
        with open(crafted, "w") as f:
            json.dump({"command": "pca", "released": {"components": [
                {f"x{c}": float(c == k) for c in range(6)} for k in range(6)]}}, f)
        out, scores = _score(work, new, crafted, own, "identity.json")
        # each client checks the model on receipt; one may hear the other's refusal first, so every party must
        # name a client's refusal of an unrecorded model, and at least one client its own ledger's verdict
        crit = {"every_party_refused": all(c != 0 for c, _, _ in out.values()),
                "clients_name_an_unrecorded_model": all("is not a release it recorded" in out[i][2]
                                                        or "is not a completed release in its ledger" in out[i][2]
                                                        for i in (0, 1, 2))
                and any("is not a completed release in its ledger" in out[j][2] for j in (1, 2)),
                "no_score_released": not os.path.exists(scores)}
        return {"what": "the server scores with a crafted identity model",
                "per_party": [{"party": i, "exit": c, "message": _last_line(t)} for i, (c, _, t) in out.items()],
                "criteria": crit, "passed": all(crit.values())}
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ----- attacks 2 and 6: what a curious party computes from everything it receives in the record alignment ---------


class AlignWithLabels(JobTask):
    """BENCH ONLY: a job that aligns the records, the server holding a label table, and releases nothing."""

    server_table = True

    def public(self):
        return ("align-only",)

    async def run(self, ctx, table, meta):
        return {}

    def release(self, meta):
        return None


class Curious(PartyProgram):
    """BENCH ONLY, a party program wrapper (picklable): runs ``inner`` and writes, to ``path``, every message this
    party receives (step, sender, payload, through its context's ``send_recv``) and every key it blinds with in the
    PSI (``sqm.mpc.protocols.psi.blind``): all that a party that follows the protocol and keeps everything holds."""

    def __init__(self, inner, path: str):
        self.inner, self.path = inner, path

    def __getattr__(self, name):  # the wrapped program's public attributes (describe, public...)
        if name in ("inner", "path"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def run(self, ctx):
        from sqm.mpc.protocols import psi
        from sqm.mpc.net import wire

        log, keys = [], []
        real_send_recv, real_blind = ctx.send_recv, psi.blind

        async def send_recv(outgoing, senders, expect, step="message"):
            got = await real_send_recv(outgoing, senders, expect, step)
            senders = list(senders)
            for peer, g in zip(senders, got if len(senders) == len(got) else [got] * len(senders), strict=False):
                log.append([step, int(peer), g])
            return got

        def blind(key, points):
            keys.append(bytes(key))
            return real_blind(key, points)

        ctx.send_recv, psi.blind = send_recv, blind
        try:
            return await self.inner.run(ctx)
        finally:
            psi.blind = real_blind
            with open(self.path, "wb") as f:
                f.write(wire.encode({"log": log, "keys": sorted(set(keys))}))


def _write_sets(folder: str, sets, cols: int = 2, seed: int = 0) -> list[str]:
    """Client j's file: its ids ``sets[j - 1]``, ``cols`` columns of generated values each, rows shuffled."""
    import csv

    import numpy as np

    os.makedirs(folder, exist_ok=True)
    rng, files = np.random.default_rng(seed), []
    for j, ids in enumerate(sets, start=1):
        path = os.path.join(folder, f"party{j}.csv")
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["id"] + [f"c{j}_{t}" for t in range(cols)])
            for i in rng.permutation(ids):
                w.writerow([int(i)] + [f"{v:.6f}" for v in rng.normal(size=cols) * 0.1])
        files.append(path)
    return files


def _points(tree) -> list[bytes]:
    """Every 32-byte value (a blinded id) in a received payload."""
    import numpy as np

    if isinstance(tree, np.ndarray):
        return [r.tobytes() for r in tree.reshape(-1, 32)] if tree.dtype == np.uint8 and tree.size % 32 == 0 else []
    if isinstance(tree, list):
        return [x for t in tree for x in _points(t)]
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _points(v)]
    return []


def frame_shape(tree):
    """A received frame's structure: its kinds, dtypes and shapes, never its values."""
    import numpy as np

    if isinstance(tree, np.ndarray):
        return ("array", str(tree.dtype), tree.shape)
    if isinstance(tree, list):
        return ("list", tuple(frame_shape(t) for t in tree))
    if isinstance(tree, dict):
        return ("dict", tuple((k, frame_shape(v)) for k, v in sorted(tree.items())))
    return (type(tree).__name__,)


def frame_scalars(tree) -> list:
    """Every value of a received frame that is not an array (ints, strings: counts, digests, verdicts), in order."""
    import numpy as np

    if isinstance(tree, np.ndarray):
        return []
    if isinstance(tree, list):
        return [x for t in tree for x in frame_scalars(t)]
    if isinstance(tree, dict):
        return [x for k in sorted(tree) for x in [k] + frame_scalars(tree[k])]
    return [tree]


def psi_label_server(seed: int = 0) -> dict:
    """Attack 2: in a job whose server holds a label table, the table holds every id of the id space (1,000; each of
    3 clients holds 340 of them, 180 or more at every client).  The server follows the protocol and keeps every value it
    receives and every key it blinds with; then, as the attacker of the issue did, it blinds each value of the
    clients' lists with every product of its own keys and looks for it among everything else it received.  Passes
    when it links no value of any client's list (so it names no client's id beyond what its own result says: which
    of its ids are in the intersection of all) and its result is that intersection."""
    import csv
    import itertools
    import secrets

    import numpy as np

    from sqm.framework.party import job_programs
    from sqm.framework.spec import load_job, write_job
    from sqm.mpc.net import wire
    from sqm.mpc.net.launch import free_ports, run_parties
    from sqm.mpc.protocols import psi
    from sqm.mpc.protocols.psi import blind

    work = tempfile.mkdtemp(prefix="sqm-attack-labels-")
    try:
        rng = np.random.default_rng(seed)
        space = list(range(1000, 2000))
        common = [int(i) for i in rng.choice(space, 180, replace=False)]
        rest = [i for i in space if i not in set(common)]
        sets = [sorted(common + [int(i) for i in rng.choice(rest, 160, replace=False)]) for _ in range(3)]
        files = _write_sets(os.path.join(work, "job"), sets, seed=seed)
        labels = os.path.join(work, "job", "labels.csv")
        with open(labels, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "label"])
            w.writerows([i, i % 2] for i in reversed(space))
        spec = load_job(write_job(os.path.join(work, "job", "job.json"), [f"127.0.0.1:{p}" for p in free_ports(4)],
                                  files, min_intersection=1, server_file=labels, job_id=secrets.token_hex(16)))
        path = os.path.join(work, "server.view")
        progs = job_programs(spec, AlignWithLabels())
        progs[0] = Curious(progs[0], path)
        recs = run_parties(progs, timeout=120, addresses=spec.addresses, min_clients=2, job_id=spec.job_id)
        with open(path, "rb") as fh:
            view = wire.decode(fh.read())
        lists = (psi.RING_STEP, psi.DIRECT_STEP)  # stage 1's steps
        received = [v for step, _, g in view["log"] if step in lists for v in _points(g)]
        stage1 = set(received)
        others = {v for step, _, g in view["log"] if step not in lists for v in _points(g)}
        keys = view["keys"]
        values = np.frombuffer(b"".join(sorted(stage1)), np.uint8).reshape(-1, 32)
        linked = set()
        for n in range(1, len(keys) + 1):
            for combo in itertools.combinations(keys, n):
                v = values
                for k in combo:
                    v = blind(k, v)
                linked |= {a.tobytes() for a, b in zip(values, v, strict=False) if b.tobytes() in others or
                           (b.tobytes() in stage1 and b.tobytes() != a.tobytes())}
        result = recs[0]["result"]
        crit = {"the_clients_lists_received": len(received) == sum(map(len, sets)),
                "no_client_value_linked": not linked,
                "its_result_is_the_intersection": result.get("n_records") == len(set.intersection(*map(set, sets)))}
        return {"what": "a server whose label table holds the whole id space tries to name each client's ids",
                "received_values": len(stage1) + len(others), "keys": len(keys), "linked": len(linked),
                "criteria": crit, "passed": all(crit.values())}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def hiding_rerun(seed: int = 0) -> dict:
    """Attack 6: with membership hidden, client 1 runs the alignment twice, the second time with one of its records
    (a member) swapped for an id nobody else holds, and compares what it received.  Passes when its two views have
    the same structure and the same values wherever they are not shares (counts, sizes, verdicts, positions' count),
    and the same result, while the server's own count of members differs (100, then 99)."""
    import secrets

    from sqm.framework.party import job_programs
    from sqm.framework.spec import load_job, write_job
    from sqm.apps.pca import PCAJobTask
    from sqm.mpc.net import wire
    from sqm.mpc.net.launch import free_ports, run_parties
    from sqm.mpc.protocols import psi

    work = tempfile.mkdtemp(prefix="sqm-attack-rerun-")
    try:
        mine = list(range(1000, 1200))
        common = mine[:100]
        base = [mine, sorted(common + list(range(5000, 5050))), sorted(common + list(range(6000, 6050)))]
        swapped = [sorted(mine[1:] + [6400]), base[1], base[2]]
        views, results, server = [], [], []
        for k, sets in enumerate((base, swapped)):
            folder = os.path.join(work, str(k))
            files = _write_sets(folder, sets, seed=seed)
            spec = load_job(write_job(os.path.join(folder, "job.json"), [f"127.0.0.1:{p}" for p in free_ports(4)],
                                      files, min_intersection=50, hide_membership=True, job_id=secrets.token_hex(16)))
            path = os.path.join(folder, "client1.view")
            progs = job_programs(spec, PCAJobTask(n_components=1, epsilon=1.0, gamma=1024.0))
            progs[1] = Curious(progs[1], path)
            recs = run_parties(progs, timeout=180, addresses=spec.addresses, min_clients=2, job_id=spec.job_id)
            with open(path, "rb") as fh:
                log = wire.decode(fh.read())["log"]
            # the clients' fresh random contributions to their shared key, and its digest, differ from run to run,
            # whatever the sets: their shape is compared, not their value
            views.append([(step, peer, frame_shape(g), frame_scalars(g) if step not in psi.KEY_STEPS else [])
                          for step, peer, g in log])
            res = recs[1]["result"]
            results.append({k2: res[k2] for k2 in ("alignment", "col_counts") if k2 in res}
                           | {"has_n": "n_records" in res})
            server.append(recs[0]["result"]["alignment"].get("intersection"))
        crit = {"same_frames_and_counts": views[0] == views[1], "same_result": results[0] == results[1],
                "no_member_count_at_the_client": not results[0]["has_n"],
                "the_server_counts_100_then_99": server == [100, 99]}
        return {"what": ("a client reruns the hidden-membership alignment with one member swapped for an id"
                         " nobody holds"),
                "frames": len(views[0]), "client_result": results[0], "server_members": server, "criteria": crit,
                "passed": all(crit.values())}
    finally:
        shutil.rmtree(work, ignore_errors=True)


ATTACKS = {
    "jobfile-engine": ("the job file points client 1's shard engine at the attacker's scheduler", jobfile_engine),
    "score-solve": ("the requester would solve another client's columns from the scores", score_solve),
    "score-identity": ("a crafted identity model is used for scoring", score_identity),
    "ledger-names": ("job files name other datasets over the same records", ledger_names),
    "ledger-drain": ("the server dies right after each reservation, again and again", ledger_drain),
    "psi-label-server": ("a server holding the whole id space tries to name each client's ids", psi_label_server),
    "hiding-rerun": ("a client reruns a hidden alignment with one member swapped", hiding_rerun),
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
