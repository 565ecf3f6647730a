"""Each data owner enforces its own budget (issue 27, part 3): a client started alone (``--index I > 0``) keeps a
privacy-budget ledger by default and charges each release of its records (their events against the server) to
its own dataset; a client over its own budget refuses the job before ANY party sends a share (one verdict
exchange), naming itself and the budget to everyone and its figures to its own operator only; nobody's ledger is
charged for a job that never ran; ``sqm budget show`` on each side lists what was charged."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from sqm.framework.ledger_guard import LedgerGuard

from sqm.framework.spec import load_job, write_party_csvs

from sqm.framework.party import party_program
from sqm.mechanism.ledger import Ledger
from sqm.methods.pca.job import PCAJobTask
from sqm.runtime.certs import DEFAULT_JOB, make_certificates
from sqm.runtime.inprocess import run_in_process
from sqm.runtime.launch import MPCError

from conftest import one_by_one
from sqm.runtime.protocol import PartyContext

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
        assert f"the job would exceed its own privacy budget for dataset '{DATASET}'" in text
        assert "budget epsilon 0.5" not in text  # another owner's figures stay with it
    for path in (l0, l1, l2):  # nobody was charged for a job that never ran
        assert Ledger(path).releases(DATASET) == []


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
                                   2: ["--ledger", c2, "--budget", "4,1e-5"]},
                   {"SQM_DATA": str(homes[1])})
    assert {i: code for i, (code, _) in out.items()} == {0: 0, 1: 0, 2: 0}, out
    released = json.loads((tmp_path / "pca.json").read_text())["privacy"][0]["epsilon_server"]
    for path, who in ((server_ledger, "server"), (str(homes[1] / "ledger.sqlite"), "client"), (c2, "client")):
        (entry,) = Ledger(path).releases(DATASET)
        assert entry["status"] == "completed" and entry["epsilon"] == pytest.approx(released, rel=1e-9)
        assert ("this client's records, released to the server" in entry["statistic"]) == (who == "client")
    show = subprocess.run([sys.executable, "-m", "sqm", "budget", "show", DATASET, "--ledger", c2],
                          capture_output=True, text=True, timeout=120)
    assert show.returncode == 0 and "budget epsilon 4" in show.stdout and "released to the server" in show.stdout


def test_after_a_refusal_no_party_sends_anything(tmp_path, monkeypatch):
    """Every exchange every party makes, recorded (in process, the same party programs): the budget verdict is
    the last; no share of data follows it, from any party."""
    spec = load_job(_job(tmp_path))
    task = PCAJobTask(n_components=1, epsilon=1.0, gamma=1024.0)
    guards = {0: LedgerGuard(str(tmp_path / "s.sqlite"), (10.0, 1e-5)),
              1: LedgerGuard(str(tmp_path / "c1.sqlite"), (10.0, 1e-5)),
              2: LedgerGuard(str(tmp_path / "c2.sqlite"), (0.5, 1e-5))}
    sent = []
    real = PartyContext.send_recv

    async def spy(self, outgoing, senders, expect, step="message"):
        sent.append((self.pid, step, sorted(outgoing)))
        return await real(self, outgoing, senders, expect, step)

    monkeypatch.setattr(PartyContext, "send_recv", spy)
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
