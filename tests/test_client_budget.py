"""Each data owner enforces its own budget (issue 27, part 3; issue 43, part 4): a client started alone
(``--index I > 0``) keeps a privacy-budget ledger by default and charges each release of its records (their events
against the server) to its own dataset, named by its owner and bound to its file's content, never the job file's;
a client over its own budget refuses the job before ANY party sends a share (one verdict exchange), naming itself
to everyone and its figures to its own operator only; nobody's ledger is charged for a job that never ran; a
reservation is refunded exactly when the job ended before that client sent its shares of any output;
``sqm budget show`` on each side lists what was charged."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sqm.framework.ledger_guard import LedgerGuard

from sqm.framework.spec import load_job, write_party_csvs

from sqm.framework.party import party_program
from sqm.mechanism.ledger import Ledger, default_account, file_digest
from sqm.apps.pca.job import PCAJobTask
from sqm.mpc.net.certs import DEFAULT_JOB, make_certificates
from sqm.mpc.protocols.inprocess import run_in_process
from sqm.mpc.net.launch import MPCError

from conftest import one_by_one
from sqm.mpc.net.transport import PartyTransport

TASK = {"statistic": "pca", "components": 1, "epsilon": 1, "gamma": 1024}
DATASET = "customers-2026"
DEBUG: list = []


def _job(tmp_path):
    X = np.random.default_rng(5).normal(size=(60, 5)) * 0.2
    return write_party_csvs(X, str(tmp_path / "job"), col_counts=[2, 3], min_intersection=1, task=TASK,
                            dataset=DATASET)


def _parties(tmp_path, job, extra: dict, env_extra: dict | None = None):
    """Every party of ``job`` started alone (``sqm pca --job J --index I``, as on three hosts), real processes
    over loopback TLS; returns {index: (exit code, stderr + stdout)}."""
    keys = str(tmp_path / "keys")
    make_certificates(keys, 3, days=1, job=load_job(job).name or DEFAULT_JOB)
    env = {**os.environ, **(env_extra or {})}
    shared, own = one_by_one(job)
    procs = {i: subprocess.Popen([sys.executable, "-m", "sqm", "pca", "--job", shared, "--index", str(i),
                                  "--ssl-dir", keys, "--timeout", "120", *own[i], *extra.get(i, []), *DEBUG],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(3)}
    out = {}
    for i, p in procs.items():
        o, e = p.communicate(timeout=300)
        out[i] = (p.returncode, e + o)
    return out


@pytest.mark.slow
def test_a_client_over_its_own_budget_refuses_before_any_share_and_nothing_is_charged(tmp_path):
    job = _job(tmp_path)
    l0, l1, l2 = (str(tmp_path / f"ledger{i}.sqlite") for i in range(3))
    out = _parties(tmp_path, job, {0: ["--ledger", l0, "--budget", "10,1e-5"],
                                   1: ["--ledger", l1, "--budget", "10,1e-5"],
                                   2: ["--ledger", l2, "--budget", "0.5,1e-5"]})  # the job spends epsilon 1
    assert {i: code for i, (code, _) in out.items()} == {0: 3, 1: 3, 2: 3}, out
    own = out[2][1]
    assert "client 2 refused before any share was sent" in own and "over its privacy budget" in own
    assert "budget epsilon 0.5" in own  # its figures, for its own operator
    for i in (0, 1):
        text = out[i][1]
        assert "client 2" in text.lower()  # named to every party, with the public reason only
        assert "the job would exceed its own privacy budget" in text
        assert "budget epsilon 0.5" not in text  # another owner's figures stay with it
    for path in (l0, l1, l2):  # nobody was charged for a job that never ran
        led = Ledger(path)
        assert all(led.releases(d) == [] for d in led.datasets())


@pytest.mark.slow
def test_each_owner_charges_its_records_release_by_default_and_budget_show_lists_it(tmp_path):
    job = _job(tmp_path)
    homes = {i: tmp_path / f"home{i}" for i in (1, 2)}
    first = _parties(tmp_path, job, {}, {"SQM_DATA": str(homes[1])})  # a client's ledger is on by default
    assert {i: code for i, (code, _) in first.items()} == {0: 3, 1: 3, 2: 3}, first
    assert "its own privacy-budget ledger holds no budget" in first[0][1]  # the server is told why
    assert "--budget" in first[1][1] and "--no-ledger" in first[1][1]  # the owner is told what to do

    server_ledger = str(tmp_path / "server.sqlite")
    c2 = str(tmp_path / "owner2.sqlite")
    out = _parties(tmp_path, job, {0: ["--ledger", server_ledger, "--budget", "4,1e-5", "--json",
                                       str(tmp_path / "pca.json")],
                                   1: ["--budget", "4,1e-5"],                  # the default file in its data home
                                   2: ["--ledger", c2, "--budget", "4,1e-5", "--ledger-dataset", "clinic"]},
                   {"SQM_DATA": str(homes[1])})
    assert {i: code for i, (code, _) in out.items()} == {0: 0, 1: 0, 2: 0}, out
    released = json.loads((tmp_path / "pca.json").read_text())["privacy"][0]["epsilon_server"]
    own1 = default_account(file_digest(load_job(job).parties[1].file))  # no name given: the file's digest's
    for path, name, who in ((server_ledger, DATASET, "server"), (str(homes[1] / "ledger.sqlite"), own1, "client"),
                            (c2, "clinic", "client")):
        (entry,) = Ledger(path).releases(name)
        assert entry["status"] == "completed" and entry["epsilon"] == pytest.approx(released, rel=1e-9)
        assert ("this client's records, released to the server" in entry["statistic"]) == (who == "client")
        assert Ledger(path).releases(DATASET if who == "client" else own1) == []  # never the job file's dataset
    assert Ledger(c2).alignments("clinic") == 1
    show = subprocess.run([sys.executable, "-m", "sqm", "budget", "show", "clinic", "--ledger", c2],
                          capture_output=True, text=True, timeout=120)
    assert show.returncode == 0 and "budget epsilon 4" in show.stdout and "released to the server" in show.stdout
    assert "record alignments: 1" in show.stdout


def test_after_a_refusal_no_party_sends_anything(tmp_path, monkeypatch):
    """Every exchange every party makes, recorded (in process, the same party programs): the budget verdict is
    the last; no share of data follows it, from any party."""
    spec = load_job(_job(tmp_path))
    task = PCAJobTask(n_components=1, epsilon=1.0, gamma=1024.0)
    guards = {0: LedgerGuard(str(tmp_path / "s.sqlite"), (10.0, 1e-5)),
              1: LedgerGuard(str(tmp_path / "c1.sqlite"), (10.0, 1e-5)),
              2: LedgerGuard(str(tmp_path / "c2.sqlite"), (0.5, 1e-5))}
    sent = []
    real = PartyTransport.send_recv

    async def spy(self, outgoing, senders, expect, step="message"):
        sent.append((self.pid, step, sorted(outgoing)))
        return await real(self, outgoing, senders, expect, step)

    monkeypatch.setattr(PartyTransport, "send_recv", spy)
    programs = [party_program(spec, i, task, guards[i]) for i in range(3)]
    with pytest.raises(MPCError) as e:
        run_in_process(programs, timeout=60)
    assert "client 2 refused" in str(e.value)
    steps = [s for _, s, _ in sent]
    assert "budget verdict" in steps
    for pid in range(3):
        mine = [s for p, s, _ in sent if p == pid]
        assert mine[-1] == "budget verdict", (pid, mine)  # nothing after it
    assert not any("share" in s or "input" in s for s in steps), steps
    for g in guards.values():
        assert Ledger(g.path).releases(DATASET) == []


def _job_named(job: str, dataset: str) -> str:
    """Another job file over the same party files (the same folder), naming another dataset and a fresh job id."""
    import secrets

    from sqm.mpc.net.launch import free_ports

    doc = json.loads(Path(job).read_text())
    doc.update(dataset=dataset, job_id=secrets.token_hex(16))
    # ports free now, not the last job's
    for party, port in zip(doc["parties"], free_ports(len(doc["parties"])), strict=False):
        party["address"] = f"127.0.0.1:{port}"
    path = os.path.join(os.path.dirname(job), f"{dataset}.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


@pytest.mark.slow
def test_job_files_naming_other_datasets_charge_the_owners_one_account(tmp_path):
    """Issue 43, attack 4a: job files naming 'bank-1', 'bank-2' over the same records.  The client charges its
    own dataset (its file's digest), whatever the job file names: the second job (epsilon 1 each, the client's
    budget 1.2) is refused by that client before any share, and its ledger holds one release."""
    job = _job(tmp_path)
    c1 = str(tmp_path / "owner1.sqlite")
    budgets = {0: [], 1: ["--ledger", c1, "--budget", "1.2,1e-5"], 2: ["--no-ledger"]}
    first = _parties(tmp_path, _job_named(job, "bank-1"), budgets)
    assert {i: code for i, (code, _) in first.items()} == {0: 0, 1: 0, 2: 0}, first
    second = _parties(tmp_path, _job_named(job, "bank-2"), budgets)
    assert {i: code for i, (code, _) in second.items()} == {0: 3, 1: 3, 2: 3}, second
    assert "client 1 refused before any share was sent" in second[1][1] and "over its privacy budget" in second[1][1]
    led = Ledger(c1)
    (account,) = [d for d in led.datasets() if led.releases(d)]
    assert account == default_account(file_digest(load_job(job).parties[1].file))
    assert [e["status"] for e in led.releases(account)] == ["completed"]
    assert led.releases("bank-1") == led.releases("bank-2") == [] and led.alignments(account) == 2


def test_the_alignment_cap_refuses_before_the_psi(tmp_path, monkeypatch):
    """Issue 43, part 4: each job's record alignment is an entry of the client's ledger; at its owner's cap the
    client refuses the next job before the PSI (its schema message is the refusal), naming itself."""
    spec = load_job(_job(tmp_path))
    task = PCAJobTask(n_components=1, epsilon=1.0, gamma=1024.0)
    guards = {1: LedgerGuard(str(tmp_path / "c1.sqlite"), (10.0, 1e-5), max_alignments=1),
              2: LedgerGuard(str(tmp_path / "c2.sqlite"), (10.0, 1e-5))}
    run_in_process([party_program(spec, i, task, guards.get(i)) for i in range(3)], timeout=60)
    sent = []
    real = PartyTransport.send_recv

    async def spy(self, outgoing, senders, expect, step="message"):
        sent.append((self.pid, step))
        return await real(self, outgoing, senders, expect, step)

    monkeypatch.setattr(PartyTransport, "send_recv", spy)
    with pytest.raises(MPCError, match=r"^client 1 refused before any share was sent: dataset .* has had 1 record "
                                      r"alignment\(s\)") as e:
        run_in_process([party_program(spec, i, task, guards.get(i)) for i in range(3)], timeout=60)
    assert e.value.codes == {0: 3, 1: 3, 2: 3}
    assert "client 1 refused: its owner's cap on record alignments of this dataset is reached" in e.value.messages[0]
    assert not any(step.startswith("PSI") for _, step in sent), sent
    for i, n in ((1, 1), (2, 2)):  # client 1's second alignment was refused, not counted
        led = Ledger(guards[i].path)
        (account,) = led.datasets()
        assert led.alignments(account) == n and len(led.releases(account)) == 1
    out = subprocess.run([sys.executable, "-m", "sqm", "budget", "show", account, "--ledger", guards[2].path],
                         capture_output=True, text=True, timeout=120)
    assert "record alignments: 2" in out.stdout


# ---- issue 43, attack 4b: a party killed at each step; refunded exactly when nothing could be released --------
STEPS = ("client schemas", "agree on job", "input shares", "degree reduction", "open result", "closing barrier")


def _expected(step: str, target: int, client: int):
    """What client ``client``'s ledger holds after ``target`` was killed at ``step`` (every party held before
    ``step``, then the others let go): no entry before the budget verdict; 'refunded' while this client had sent
    no share of any output (its degree-reduction sub-shares: :meth:`PartyTransport.output_shares_next`); 'failed'
    (counted) once it had; 'completed' after the job."""
    if step == "client schemas":
        return []
    if step == "closing barrier":
        return ["completed"]
    sent = step == "open result" or (step == "degree reduction" and client != target)
    return ["failed" if sent else "refunded"]


@pytest.mark.slow
@pytest.mark.parametrize("target", [0, 1], ids=["server", "client1"])
@pytest.mark.parametrize("step", STEPS)
def test_a_party_killed_at_each_step_leaves_each_clients_ledger_charged_only_if_it_sent_output_shares(
        tmp_path, step, target):
    """Real party processes (``python -m sqm.mpc.net.party``, loopback), each party's program wrapped in the
    fault bench's :class:`bench.probe.Probe`, which holds it before its first exchange named ``step``.  Once every
    party is held there, ``target`` is killed (SIGKILL) and the others let go: they send that step's messages
    and then fail on the dead party.  Every client's own ledger (the killed one's too, read after its death) then
    holds what :func:`_expected` says: the old code left every reservation counted, so a server that dies after
    the clients reserve drains their budgets."""
    import pickle
    import secrets
    import signal
    import time

    from bench.probe import Probe
    from sqm.mpc.net.launch import party_command, party_env

    spec = load_job(_job(tmp_path))
    task = PCAJobTask(n_components=1, epsilon=1.0, gamma=1024.0)
    guards = {i: LedgerGuard(str(tmp_path / f"c{i}.sqlite"), (10.0, 1e-5)) for i in (1, 2)}
    go, job_id, procs = str(tmp_path / "go"), secrets.token_hex(16), {}
    env = {**party_env(local_parties=3, blas_threads=1), "PYTHONPATH": str(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))}
    try:
        for i in range(3):
            pf = str(tmp_path / f"party{i}.program")
            with open(pf, "wb") as f:
                pickle.dump(Probe(party_program(spec, i, task, guards.get(i)), str(tmp_path / f"marks{i}"), step,
                                  go), f)
            cmd = party_command(pf, i, ",".join(spec.addresses), str(tmp_path / f"result{i}"), 120, 60,
                                job_id=job_id, insecure_plaintext=True)
            procs[i] = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 240
        marks = [tmp_path / f"marks{i}" for i in range(3)]
        while not all(m.exists() and f"HOLD {step}" in m.read_text() for m in marks):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs.values()), \
                {i: p.poll() for i, p in procs.items()}
            time.sleep(0.02)
        os.kill(procs[target].pid, signal.SIGKILL)
        procs[target].wait(30)
        open(go, "w").close()
        codes = {i: p.wait(120) for i, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    assert codes[target] == -signal.SIGKILL
    if step != "closing barrier":  # the job was cut short: nobody finished
        assert all(c != 0 for i, c in codes.items() if i != target), codes
    for c in (1, 2):
        led = Ledger(guards[c].path)
        got = [e["status"] for d in led.datasets() for e in led.releases(d)]
        assert got == _expected(step, target, c), (c, got)
        spent = [led.status(d).spent for d in led.datasets() if led.budget(d) is not None]
        assert (sum(spent) > 0) == (got in (["failed"], ["completed"])), spent


def _first_output_step(monkeypatch, run) -> dict:
    """{client: the step of its first exchange that carried its shares of an output} (``output_shares_sent`` set
    inside that exchange, just before its frames went), and that it was unset before it."""
    seen = {}
    real = PartyTransport.send_recv

    async def spy(self, outgoing, senders, expect, step="message"):
        before = self.output_shares_sent
        got = await real(self, outgoing, senders, expect, step)
        if self.pid and not before and self.output_shares_sent:
            seen.setdefault(self.pid, step)
        return got

    monkeypatch.setattr(PartyTransport, "send_recv", spy)
    run()
    monkeypatch.undo()
    return seen


def test_the_first_message_that_carries_a_clients_shares_of_an_output(tmp_path, monkeypatch):
    """Where each protocol marks ``output_shares_sent`` (the real BGW exchanges over in-memory mailboxes): a release
    with a degree reduction at the outputs' reduction (not at the input shares); SQM-LR's per-batch kernel, whose
    opened value is masked by a degree M - 1 sharing, at its first opening (not at its own degree reduction);
    PBM-VFL's masked sum at the first masked value."""
    from sqm.apps.logreg.job import LRJobTask

    spec = load_job(_job(tmp_path))
    pca = PCAJobTask(n_components=1, epsilon=1.0, gamma=1024.0)
    assert _first_output_step(monkeypatch, lambda: run_in_process(
        [party_program(spec, i, pca) for i in range(3)], timeout=60, ideal=False)) == {1: "degree reduction",
                                                                                    2: "degree reduction"}
    rng = np.random.default_rng(3)
    X = rng.normal(size=(80, 4)) * 0.3
    lr_spec = load_job(write_party_csvs(np.column_stack([X, X[:, 0] > 0]), str(tmp_path / "lr"), col_counts=[2, 3],
                                        min_intersection=1))
    sgd = LRJobTask(2.0, 1e-5, epochs=1, label_column="x4", solver="sgd")
    assert _first_output_step(monkeypatch, lambda: run_in_process(
        [party_program(lr_spec, i, sgd) for i in range(3)], timeout=120, ideal=False)) == {1: "open result",
                                                                                       2: "open result"}
    torch = pytest.importorskip("torch")  # noqa: F841
    from sqm.apps.pbm_vfl import VFLConfig, load_split, train_vfl

    btr, bte, ytr, yte, nc = load_split("digits", 2)
    cfg = VFLConfig(epochs=1, n_classes=nc, b=16, beta=0.15, batch_size=50, hidden=16)
    assert _first_output_step(monkeypatch, lambda: train_vfl([b[:60] for b in btr], [b[:20] for b in bte], ytr[:60],
                                                             yte[:20], cfg, "plain", seed=1, secure_sum="masked")) == {
        1: "masked sum", 2: "masked sum"}
