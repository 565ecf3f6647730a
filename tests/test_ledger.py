"""sqm.mechanism.ledger: releases compose in RDP across jobs; over-budget releases are refused before they run;
concurrent processes never overspend; a killed process's reservation stays counted, unless it was refundable and
its party had sent no share of any output (issue 43); a file's digest charges one owner-named dataset; record
alignments are counted up to the owner's cap."""
import json
import math
import multiprocessing as mp
import os
import signal

import pytest

from sqm.mechanism import events as ev
from sqm.mechanism.ledger import BudgetError, BudgetExceeded, Ledger, NoBudget

E = ev.SkellamDpEvent(10.0, 10.0, 300.0)  # epsilon 1.73 alone at delta 1e-5, 2.55 twice (RDP)


def test_releases_compose_and_the_one_that_would_exceed_is_refused(tmp_path):
    led = Ledger(str(tmp_path / "l.sqlite"))
    led.set_budget("adult", 2.0, 1e-5)
    pca = ev.server_event(10.0, 10.0, 300.0)
    lr = ev.server_event(4.0, 2.0, 50.0, q=0.01, rounds=100)
    a = led.reserve("adult", [pca], "pca", "job-1")
    b = led.reserve("adult", [lr], "linreg", "job-2")
    both = ev.compose([pca, lr], 1e-5)
    assert b["spent"] == both and led.status("adult").spent == both  # composed in RDP, at the budget's delta
    assert both < a["epsilon"] + b["epsilon"]  # tighter than adding epsilons
    assert led.status("adult").left == pytest.approx(2.0 - both)
    with pytest.raises(BudgetExceeded) as err:
        led.check("adult", [pca])
    msg = str(err.value)
    assert "'adult'" in msg and "budget epsilon 2 at delta 1e-05" in msg and f"left {2.0 - both:.4g}" in msg
    assert f"spent epsilon {both:.4g} over 2 release(s)" in msg
    with pytest.raises(BudgetExceeded):
        led.reserve("adult", [pca], "pca", "job-3")
    assert [r["job_id"] for r in led.releases("adult")] == ["job-1", "job-2"]  # the refused one left no entry
    assert led.releases("adult")[0]["events"] == [pca]
    assert led.datasets() == ["adult"]


def test_budget_is_set_once_and_is_required(tmp_path):
    led = Ledger(str(tmp_path / "l.sqlite"))
    with pytest.raises(NoBudget, match="no privacy budget"):
        led.reserve("bc", [E], "pca")
    led.set_budget("bc", 1.0, 1e-6)
    led.set_budget("bc", 1.0, 1e-6)  # the same again: fine
    with pytest.raises(BudgetError, match="replace=True"):
        led.set_budget("bc", 2.0, 1e-6)
    assert led.set_budget("bc", 5.0, 1e-6, replace=True).epsilon == 5.0 and led.budget("bc").epsilon == 5.0
    with pytest.raises(ValueError, match="DpEvents"):
        led.reserve("bc", [], "pca")
    with pytest.raises(ValueError, match="dataset id"):
        led.reserve("", [E], "pca")


def test_a_failed_job_stays_counted_and_eta_enters_delta(tmp_path):
    led = Ledger(str(tmp_path / "l.sqlite"))
    led.set_budget("d", 5.0, 1e-5)
    with pytest.raises(RuntimeError), led.reserve("d", [E], "pca", "j1") as entry:
        raise RuntimeError("lost a party after the shares were sent")
    assert entry["status"] == "failed" and led.releases("d")[0]["status"] == "failed"
    assert led.status("d").spent == ev.compose([E], 1e-5)
    with led.reserve("d", [E], "pca", "j2", eta=1e-9) as entry:
        pass
    assert entry["status"] == "completed"
    assert led.status("d").spent == ev.compose([E, E], 1e-5 - (1 + math.exp(5.0)) * 1e-9)


def _reserve_until_refused(path, start, out):
    start.wait()
    led, n = Ledger(path), 0
    while True:
        try:
            led.reserve("shared", [E], "pca", f"pid-{os.getpid()}")
            n += 1
        except BudgetExceeded:
            out.put(n)
            return


def test_concurrent_processes_never_overspend(tmp_path):
    ref = Ledger(str(tmp_path / "ref.sqlite"))  # how many fit, one at a time
    ref.set_budget("shared", 6.0, 1e-5)
    fit = 0
    while True:
        try:
            ref.reserve("shared", [E])
            fit += 1
        except BudgetExceeded:
            break
    assert fit >= 6
    path = str(tmp_path / "l.sqlite")
    Ledger(path).set_budget("shared", 6.0, 1e-5)
    ctx = mp.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_reserve_until_refused, args=(path, start, out)) for _ in range(3)]
    for p in procs:
        p.start()
    start.set()
    counts = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert sum(counts) == fit == len(Ledger(path).releases("shared"))  # exactly the budget, never more
    assert Ledger(path).status("shared").spent <= 6.0


def _reserve_then_hang(path, ready, refundable=False, sent=False):
    entry = Ledger(path).reserve("k", [E], "pca", "doomed", refundable=refundable)
    if sent:
        entry.shares_sent()
    ready.set()
    signal.pause()


def test_a_process_killed_after_reserving_leaves_the_entry_counted(tmp_path):
    path = str(tmp_path / "l.sqlite")
    Ledger(path).set_budget("k", 2.0, 1e-5)
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    p = ctx.Process(target=_reserve_then_hang, args=(path, ready))
    p.start()
    assert ready.wait(60)
    os.kill(p.pid, signal.SIGKILL)
    p.join(30)
    assert p.exitcode == -signal.SIGKILL
    led = Ledger(path)
    (entry,) = led.releases("k")
    assert entry["job_id"] == "doomed" and entry["status"] == "reserved"
    assert led.status("k").spent == ev.compose([E], 1e-5)
    with pytest.raises(BudgetExceeded):  # a second one does not fit beside it
        led.check("k", [E])


def test_sqm_budget_command(tmp_path, capsys):
    import json

    from sqm.cli.command import main

    path = str(tmp_path / "l.sqlite")
    assert main(["budget", "set", "adult", "--budget", "2,1e-5", "--ledger", path]) == 0
    assert main(["budget", "set", "adult", "--budget", "3,1e-5", "--ledger", path]) == 2  # set once
    assert "--replace" in capsys.readouterr().err
    led = Ledger(path)
    led.record("adult", [E], "pca", "job-1")
    capsys.readouterr()
    assert main(["budget", "show", "adult", "--ledger", path, "--json", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    spent = ev.compose([E], 1e-5)
    assert f"spent {spent:.4g}, left {2 - spent:.4g} over 1 release(s)" in out
    assert out.splitlines()[-2].split()[2:6] == ["pca", "job-1", "completed", f"{spent:.4g}"]
    saved = json.loads((tmp_path / "s.json").read_text())
    assert saved["command"] == "budget show" and saved["mode"] == "ledger"  # sqm.cli.output
    details = saved["details"]
    assert ev.events_from_json(details["releases"][0]["events"]) == [E] and details["summary"]["spent"] == spent
    assert main(["budget", "list", "--ledger", path]) == 0
    assert capsys.readouterr().out.splitlines()[-2].split() == ["adult", "2", "1e-05", f"{spent:.4g}",
                                                               f"{2 - spent:.4g}", "1", "0"]


def test_feature_level_and_record_level_entries_are_kept_apart(tmp_path):
    """Issue 24, part 5: PBM-VFL's feature-level epsilon (embeddings taken as given) and a record-level (zero-out)
    one are different units: a dataset's entries are all in one; another is refused, nothing recorded; a
    ledger written before units reads as record-level."""
    import sqlite3

    from sqm.mechanism.events import PBMDpEvent, server_event
    from sqm.mechanism.ledger import Ledger, release_unit

    path = str(tmp_path / "l.db")
    led = Ledger(path)
    led.set_budget("d", 50.0, 1e-5)
    led.set_budget("emb", 50.0, 1e-5)
    sk = [server_event(10.0, 10.0, 1e4)]
    pb = [PBMDpEvent(8, 0.2, 3, 4, "feature")]
    assert release_unit(sk) == "zero-out" and release_unit(pb) == "embedding"
    with pytest.raises(ValueError, match="feature-level"):
        release_unit(pb, "zero-out")
    assert led.record("d", sk)["unit"] == "zero-out"
    with pytest.raises(ValueError, match="different units"):
        led.record("d", pb)
    assert led.record("emb", pb)["unit"] == "embedding"
    with pytest.raises(ValueError, match="different units"):
        led.record("emb", sk)
    assert [len(led.releases(x)) for x in ("d", "emb")] == [1, 1]
    old = str(tmp_path / "old.db")  # a ledger file without the unit column: migrated, its entries record-level
    con = sqlite3.connect(old)
    con.executescript(SCHEMA_WITHOUT_UNIT)
    con.close()
    assert Ledger(old).releases("x") == [] and "unit" in {
        r[1] for r in sqlite3.connect(old).execute("PRAGMA table_info(releases)")}


SCHEMA_WITHOUT_UNIT = """
CREATE TABLE releases (id INTEGER PRIMARY KEY AUTOINCREMENT, dataset TEXT NOT NULL, statistic TEXT NOT NULL,
    time TEXT NOT NULL, events TEXT NOT NULL, epsilon REAL NOT NULL, delta REAL NOT NULL, eta REAL NOT NULL DEFAULT 0,
    job_id TEXT, status TEXT NOT NULL, finished TEXT);
"""


def test_a_new_ledger_file_is_owner_only(tmp_path):
    import os

    from sqm.mechanism.ledger import Ledger

    path = tmp_path / "new.sqlite"
    Ledger(str(path)).set_budget("d", 1.0, 1e-5)
    assert os.stat(path).st_mode & 0o777 == 0o600


def _kill_after_reserving(path, refundable, sent):
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    p = ctx.Process(target=_reserve_then_hang, args=(path, ready, refundable, sent), daemon=True)
    p.start()
    if not ready.wait(60):
        p.kill()
        raise AssertionError("the child did not reserve")
    return p


def test_a_refundable_reservation_of_a_killed_process_is_refunded_only_if_it_sent_nothing(tmp_path):
    """Issue 43, part 4: the party's process dies (SIGKILL) holding a refundable reservation.  While it lives the
    entry is 'reserved' and counts; once it is dead the next read settles it: 'refunded' (not counted) when its
    shares of an output were not marked sent, 'failed' (counted) when they were."""
    path = str(tmp_path / "l.sqlite")
    Ledger(path).set_budget("k", 5.0, 1e-5)
    quiet = _kill_after_reserving(path, True, False)
    loud = _kill_after_reserving(path, True, True)
    led = Ledger(path)
    assert [e["status"] for e in led.releases("k")] == ["reserved", "reserved"]  # alive: nothing settled
    assert led.status("k").spent == ev.compose([E, E], 1e-5)
    for p in (quiet, loud):
        os.kill(p.pid, signal.SIGKILL)
        p.join(30)
    assert [(e["status"], e["sent"]) for e in led.releases("k")] == [("refunded", 0), ("failed", 1)]
    assert led.status("k").spent == ev.compose([E], 1e-5) and led.status("k").n_releases == 1
    assert os.listdir(path + ".locks") == []  # the dead processes' lock files are gone


def test_a_refund_needs_both_the_party_and_the_ledger_to_say_nothing_was_sent(tmp_path):
    led = Ledger(str(tmp_path / "l.sqlite"))
    led.set_budget("d", 5.0, 1e-5)
    a = led.reserve("d", [E], "pca", "j1", refundable=True)
    a.fail(refund=True)
    b = led.reserve("d", [E], "pca", "j2", refundable=True)
    b.shares_sent()  # marked before any share of an output went
    b.fail(refund=True)
    c = led.reserve("d", [E], "pca", "j3")  # not refundable (the server's): always counted
    c.fail(refund=True)
    d = led.reserve("d", [E], "pca", "j4", refundable=True)
    d.fail()
    assert [e["status"] for e in led.releases("d")] == ["refunded", "failed", "failed", "failed"]
    assert led.status("d").spent == ev.compose([E] * 3, 1e-5)


def test_a_file_charges_one_dataset_whatever_a_job_names(tmp_path):
    """Issue 43, part 4: the dataset is the owner's name, bound to the file's content digest: the same file always
    charges the same account; a name bound to another file, or a file bound to another name, is refused; the
    owner's explicit bind adds a new version of its file to a name."""
    from sqm.mechanism.ledger import BindingError, default_account, file_digest

    led = Ledger(str(tmp_path / "l.sqlite"))
    f1, f2 = tmp_path / "a.csv", tmp_path / "b.csv"
    f1.write_text("id,x\n1,2\n")
    f2.write_text("id,x\n1,3\n")
    d1, d2 = file_digest(f1), file_digest(f2)
    assert d1 == __import__("hashlib").sha256(f1.read_bytes()).hexdigest()
    assert led.bind(None, d1) == default_account(d1) == "sha256:" + d1[:16]  # no name: its digest's account
    assert led.bind(None, d1) == led.bind(default_account(d1), d1) == default_account(d1)  # always the same
    with pytest.raises(BindingError, match=f"bound to dataset '{default_account(d1)}'"):
        led.bind("bank-2", d1)  # another name for the same file
    assert led.bind("bank", d2) == "bank"
    with pytest.raises(BindingError, match="bound to another file.*sqm budget bind bank FILE"):
        led.bind("bank", "0" * 64)  # the name of another file
    assert led.bind("bank", "0" * 64, add=True) == "bank" and led.bind(None, "0" * 64) == "bank"
    assert [f["digest"] for f in led.files("bank")] == [d2, "0" * 64]  # in the order they were bound


def test_record_alignments_are_counted_up_to_the_owners_cap(tmp_path):
    from sqm.mechanism.ledger import AlignmentCapReached

    led = Ledger(str(tmp_path / "l.sqlite"))
    assert [led.count_alignment("bank", 3, f"job-{i}") for i in range(3)] == [1, 2, 3]
    with pytest.raises(AlignmentCapReached, match="3 record alignment.*--max-alignments 3"):
        led.count_alignment("bank", 3)
    assert led.alignments("bank") == 3 and led.count_alignment("bank", None) == 4  # None: no cap
    assert "bank" in led.datasets()


def test_a_ledger_written_before_refunds_is_migrated_and_keeps_counting(tmp_path):
    import sqlite3

    path = str(tmp_path / "old.sqlite")
    con = sqlite3.connect(path)
    con.executescript(SCHEMA_BEFORE_REFUNDS)
    con.execute("INSERT INTO budgets VALUES ('d', 5.0, 1e-5, 'then')")
    con.execute("INSERT INTO releases (dataset, statistic, time, events, epsilon, delta, job_id, status) VALUES "
                "('d', 'pca', 'then', ?, 1.0, 1e-5, 'old', 'failed')", (json.dumps(ev.events_to_json([E])),))
    con.commit()
    con.close()
    led = Ledger(path)
    (old,) = led.releases("d")
    assert old["status"] == "failed" and old["sent"] == 1 and old["unit"] == "zero-out"
    assert led.status("d").spent == ev.compose([E], 1e-5)
    led.reserve("d", [E], "pca", "new", refundable=True).fail(refund=True)
    assert [e["status"] for e in led.releases("d")] == ["failed", "refunded"]


def test_sqm_budget_bind_and_show(tmp_path, capsys):
    from sqm.cli.command import main
    from sqm.mechanism.ledger import file_digest

    path = str(tmp_path / "l.sqlite")
    f = tmp_path / "bank.csv"
    f.write_text("id,x\n1,2\n")
    assert main(["budget", "bind", "bank", str(f), "--ledger", path]) == 0
    assert "charges dataset 'bank'" in capsys.readouterr().out
    led = Ledger(path)
    led.count_alignment("bank", None)
    led.set_budget("bank", 2.0, 1e-5)
    led.reserve("bank", [E], "pca", "j", refundable=True).fail(refund=True)
    assert main(["budget", "show", "bank", "--ledger", path]) == 0
    out = capsys.readouterr().out
    assert "over 0 release(s) (1 refunded, not counted)" in out and "refunded" in out.splitlines()[-2]
    assert f"record alignments: 1; files bound: SHA-256 {file_digest(f)[:16]}..." in out


SCHEMA_BEFORE_REFUNDS = """
CREATE TABLE budgets (dataset TEXT PRIMARY KEY, epsilon REAL NOT NULL CHECK (epsilon > 0),
    delta REAL NOT NULL CHECK (delta > 0 AND delta < 1), set_at TEXT NOT NULL);
CREATE TABLE releases (id INTEGER PRIMARY KEY AUTOINCREMENT, dataset TEXT NOT NULL, statistic TEXT NOT NULL,
    time TEXT NOT NULL, events TEXT NOT NULL, epsilon REAL NOT NULL, delta REAL NOT NULL, eta REAL NOT NULL DEFAULT 0,
    job_id TEXT, status TEXT NOT NULL CHECK (status IN ('reserved', 'completed', 'failed')), finished TEXT,
    unit TEXT NOT NULL DEFAULT 'zero-out');
CREATE INDEX releases_dataset ON releases (dataset);
"""
