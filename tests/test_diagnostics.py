"""Diagnostics and exit codes (issue 12, item 5).

- the exit-code table and the root cause of a failed job (:mod:`sqm.errors`);
- a record-id mismatch names the odd client to the clients only: the server learns that the clients
  disagree, never which (``PartyTransport.check_clients`` over an in-memory network, and through
  ``sqm pca --job``);
- a party's own input error reaches the others as "client j refused: <reason without data>" and that party
  exits BAD_DATA (a logistic-regression label error, a value too large for float64);
- ``clip_rows`` clips rows holding 1e300 (its norm used to overflow to inf and zero the row);
- ``sqm pca --job`` exits with the class of each failure: bad data, refused, timed out, bad usage; a killed
  client makes the job's exit code LOST.

Exit codes and messages are classified by one function for real and in-process parties
(:func:`sqm.mpc.net.party.failure`), so these run the job's party programs in process (``--backend plain``), except
a killed client, which only a real process can be.
"""
from __future__ import annotations

import asyncio
import contextvars
import os
import re
import signal
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from sqm.framework.tables import MAX_ABS_VALUE, PartyFileError

from sqm.framework.jobtask import JobTask

from sqm.framework.spec import read_party_csv, write_party_csvs
from sqm import errors as exitcodes
from sqm.mpc.net import transport as protocol
from sqm.mpc.net import wire
from sqm.errors import (EXIT_BAD_DATA, EXIT_ERROR, EXIT_LOST, EXIT_OK, EXIT_REFUSED, EXIT_TIMEOUT, EXIT_USAGE,
                           job_exit_code)
from sqm.mpc.net.transport import PartyTransport
from sqm.mpc.net.abort import InputRefused, ProtocolError
from sqm.mechanism.vertical import clip_rows, row_norms

# ----- the table ---------------------------------------------------------------------------------------------


def test_exit_codes_are_distinct_and_documented():
    import re

    table = {EXIT_OK: "OK", EXIT_ERROR: "ERROR", EXIT_USAGE: "USAGE", EXIT_REFUSED: "REFUSED", EXIT_LOST: "LOST",
             EXIT_TIMEOUT: "TIMEOUT", EXIT_BAD_DATA: "BAD_DATA"}
    assert len(set(table)) == len(table) and EXIT_USAGE == 2 and EXIT_OK == 0 and EXIT_ERROR == 1
    for c, name in table.items():  # every code has its row in the docstring's table
        assert re.search(rf"^{c}\s+{name}\s+\w", exitcodes.__doc__, re.M), (c, name)


def test_job_exit_code_is_the_root_cause():
    assert job_exit_code({0: 0, 1: 0, 2: 0}) == EXIT_OK
    assert job_exit_code({0: 3, 1: 3, 2: 6}) == EXIT_BAD_DATA  # one client's bad file, the others refuse
    assert job_exit_code({0: 4, 1: 4, 2: -9}) == EXIT_LOST  # a client killed (signal 9), the others lost it
    assert job_exit_code({0: 5, 1: 4, 2: -9}) == EXIT_TIMEOUT  # a silent party, killed by the launcher
    assert job_exit_code({0: 3, 1: 1, 2: 3}) == EXIT_ERROR  # a crash explains the others' refusals
    assert job_exit_code({0: 3, 1: 3}) == EXIT_REFUSED
    assert job_exit_code([0, 77]) == EXIT_ERROR  # outside the table


def test_mpc_error_carries_the_parties_codes():
    from sqm.mpc.net.launch import MPCError

    e = MPCError("x", codes={0: 3, 1: 6, 2: 3})
    assert e.codes == {0: 3, 1: 6, 2: 3} and e.exit_code == EXIT_BAD_DATA
    assert MPCError("no codes").exit_code == EXIT_ERROR


# ----- check_clients over an in-memory network -----------------------------------------------------------------

_ME = contextvars.ContextVar("party")


class _Net:
    """Parties of one event loop exchanging encoded frames by exchange number (as MPyC's program counter)."""

    def __init__(self):
        self.boxes = {}
        self.count = Counter()
        self.received = defaultdict(list)  # party -> [(sender, decoded frame)]

    def _box(self, key):
        if key not in self.boxes:
            self.boxes[key] = asyncio.get_running_loop().create_future()
        return self.boxes[key]

    async def exchange(self, outgoing, senders, *args, **kwargs):
        me = _ME.get()
        k = self.count[me]
        self.count[me] += 1
        for q, data in outgoing.items():
            if q != me:
                self._box((me, q, k)).set_result(data)
        out = []
        for s in senders:
            data = outgoing[me] if s == me else await self._box((s, me, k))
            if s != me:
                self.received[me].append((s, wire.decode(data)))
            out.append(data)
        return out


class _RT:
    def __init__(self, pid, M):
        self.pid, self.parties, self.threshold = pid, [None] * M, (M - 1) // 2


def _check_clients(monkeypatch, values, what="record ids", problems=None):
    """Run check_clients at a server and len(values) clients; returns (outcomes, received frames) where an
    outcome is None (passed), an exception, or 'waiting' (the server, still waiting when the clients were done:
    in a real job it then gets their abort notices, whose text is each exception's ``public`` or message)."""
    net = _Net()
    monkeypatch.setattr(protocol, "_exchange", net.exchange)
    M = len(values) + 1
    problems = problems or {}

    async def party(pid):
        _ME.set(pid)
        ctx = PartyTransport(_RT(pid, M))
        if pid == 0:
            return await ctx.check_clients(None, "record ids", None)
        return await ctx.check_clients(values[pid - 1], what, wire.digest(32), problem=problems.get(pid))

    async def main():
        server = asyncio.ensure_future(party(0))
        clients = await asyncio.gather(*(party(c) for c in range(1, M)), return_exceptions=True)
        await asyncio.sleep(0.01)
        if not server.done():
            server.cancel()
            return ["waiting"] + clients
        return [server.exception() or server.result()] + clients

    return asyncio.run(main()), net.received


def _notice(e) -> str:
    """What sqm.mpc.net.party's abort notice says about exception ``e`` (the text every peer, the server too, gets)."""
    return str(getattr(e, "public", None) or e)


def test_id_mismatch_names_the_client_to_clients_only(monkeypatch):
    a, b = b"a" * 32, b"b" * 32
    out, received = _check_clients(monkeypatch, [a, a, b], "record ids (different ids or a different order)")
    assert out[0] == "waiting"  # the server gets only the clients' abort notices
    for c in (1, 2, 3):
        assert isinstance(out[c], ProtocolError) and not isinstance(out[c], InputRefused)
        assert "client 3 differs from clients 1, 2" in str(out[c])
        assert "clients disagree on record ids" in _notice(out[c])
        assert "differs" not in _notice(out[c]) and "client 3" not in _notice(out[c])
    assert received[0] == []  # nothing reached the server but the notices
    # a client whose ids match nobody's among three different ones; ties go to the lowest client
    out, _ = _check_clients(monkeypatch, [a, b, b * 1])
    assert "client 1 differs from clients 2, 3" in str(out[2])
    out, _ = _check_clients(monkeypatch, [a, b])
    assert "client 2 differs from client 1" in str(out[1])


def test_agreeing_clients_tell_the_server_ok_only(monkeypatch):
    a = b"a" * 32
    out, received = _check_clients(monkeypatch, [a, a, a])
    assert out == [None, None, None, None]
    assert received[0] == [(1, "ok"), (2, "ok"), (3, "ok")]  # the server's pass, no value
    assert sorted(s for s, x in received[1] if x == a) == [2, 3]  # the clients compared the values


def test_a_clients_own_refusal_reaches_every_party_naming_it(monkeypatch):
    a = b"a" * 32
    reason = "its addend has shape (3,), the job expects (4,)"
    out, _ = _check_clients(monkeypatch, [a, a, a], problems={2: reason})
    assert isinstance(out[2], InputRefused) and str(out[2]) == reason  # sqm.mpc.net.party: "client 2 refused: <reason>"
    for c in (1, 3):
        assert not isinstance(out[c], InputRefused) and f"client 2 refused: {reason}" in _notice(out[c])


# ----- values too large for float64 squares ----------------------------------------------------------------------


def test_clip_rows_clips_huge_values_instead_of_zeroing_them():
    block = np.array([[1e300, 1.0], [1.5e308, -1.5e308], [3.0, 4.0], [0.3, 0.4], [-1e300, 0.0]])
    out, count = clip_rows(block, 1.0)
    assert count == 4
    assert out[0, 0] == pytest.approx(1.0, rel=1e-15) and 0 < out[0, 1] < 1e-299  # the row's direction kept
    assert np.allclose(out[1], [np.sqrt(0.5), -np.sqrt(0.5)], rtol=1e-15)
    assert out[4, 0] == pytest.approx(-1.0, rel=1e-15) and out[4, 1] == 0
    assert np.array_equal(out[3], block[3])  # under the bound: untouched
    norms = row_norms(out)
    assert np.all(norms <= 1.0) and np.all(np.isfinite(out))
    assert row_norms(block)[0] == 1e300 and np.isinf(row_norms(block)[1])  # no overflow below float64's max
    with pytest.raises(ValueError, match=r"NaN or infinite values \(column\(s\) \[1\]"):
        clip_rows(np.array([[1.0, np.inf]]), 1.0)


def test_clip_rows_on_ordinary_data_is_the_plain_formula_bit_for_bit():
    X = np.random.default_rng(3).normal(size=(2000, 6)) * np.array([1, 10, 0.1, 1e3, 1e-3, 5])
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    assert np.array_equal(row_norms(X), norms)
    out, count = clip_rows(X, 2.0)
    over = norms > 2.0
    expect = X.copy()
    expect[over] *= (2.0 / norms[over])[:, None]
    assert count == int(over.sum()) > 0
    assert np.allclose(out, expect, rtol=1e-15, atol=0) and np.all(row_norms(out) <= 2.0)  # never above c


def test_party_file_refuses_values_above_the_limit_naming_the_column(tmp_path):
    f = tmp_path / "p.csv"
    f.write_text(f"id,a,big\n1,0.5,{MAX_ABS_VALUE:.17g}\n2,0.5,1e300\n")
    with pytest.raises(PartyFileError, match=r"magnitude above 1e\+150 \(columns \['big'\]\)") as err:
        read_party_csv(f)
    assert err.value.public == "its file holds values of magnitude above 1e+150"  # no column, path or value
    f.write_text(f"id,a,big\n1,0.5,{MAX_ABS_VALUE:.17g}\n2,0.5,-1e150\n")
    assert read_party_csv(f).block[0, 1] == MAX_ABS_VALUE  # the limit itself is accepted


# ----- the sqm command: the job's party programs in process (--backend plain), a killed client in real processes ---


def _job(tmp_path, m=40, col_counts=(2, 2), ids=None, edit=None):
    X = np.random.default_rng(5).normal(size=(m, sum(col_counts))) * 0.3
    job = write_party_csvs(X, tmp_path, col_counts=list(col_counts), ids=ids, min_intersection=1)
    if edit is not None:
        edit(tmp_path)
    return job


def _sqm(argv, capsys):
    from sqm.cli.command import main

    code = main(argv)
    return code, capsys.readouterr().err


def _first(err: str) -> str:
    """The first line of sqm's error message (a party in process logs its own detail before it)."""
    return next(line for line in err.splitlines() if line.startswith("sqm: "))


def _party_lines(err: str) -> dict:
    """Each party's line of sqm's MPCError message: 'server (party 0) exited 3 (refused): ...' -> {0: (3, '...')}
    (a party echoing another's failure: "on client 2's notice"; a party stopped by the launcher: code None)."""
    out: dict = {}
    for line in err.splitlines():
        m = re.search(r"^  (?:server|client \d+) \(party (\d+)\)(?: exited (-?\d+)(?: \([a-z ]+\))?)?: (.*)", line)
        if m:
            out[int(m.group(1))] = (None if m.group(2) is None else int(m.group(2)), m.group(3))
    return out


def test_sqm_exit_codes_bad_data_and_a_value_too_large(tmp_path, capsys):
    def poison(d):
        p = d / "party2.csv"
        lines = p.read_text().splitlines()
        lines[5] = lines[5].rsplit(",", 1)[0] + ",1e300"
        p.write_text("\n".join(lines) + "\n")

    job = _job(tmp_path, edit=poison)
    code, err = _sqm(["pca", "--job", job, "--components", "2", "--quiet", "--backend", "plain"], capsys)
    assert code == EXIT_BAD_DATA, err
    lines = _party_lines(err)
    assert lines[2][0] == EXIT_BAD_DATA and "magnitude above 1e+150" in lines[2][1]
    assert _first(err).startswith("sqm: client 2 refused: its file holds values of magnitude above 1e+150")
    for i in (0, 1):  # the others refused on client 2's notice (its public reason: no column, no value, no path)
        assert lines[i] == (EXIT_REFUSED, "on client 2's notice"), lines[i]


def test_sqm_exit_code_refused_when_the_intersection_is_below_the_minimum(tmp_path, capsys):
    ids = list(range(40))

    def swap(d):  # client 2 holds another id in place of one: 39 records in common
        p = d / "party2.csv"
        lines = p.read_text().splitlines()
        lines[1] = "1000," + lines[1].split(",", 1)[1]
        p.write_text("\n".join(lines) + "\n")

    job = _job(tmp_path, ids=ids, edit=swap)
    code, err = _sqm(["pca", "--job", job, "--components", "2", "--quiet", "--backend", "plain",
                      "--min-intersection", "40"], capsys)
    assert code == EXIT_REFUSED, err
    lines = _party_lines(err)
    assert {i: c for i, (c, _) in lines.items()} == {0: EXIT_REFUSED, 1: EXIT_REFUSED, 2: EXIT_REFUSED}
    # every party the same words (counts only, never an id), said once
    assert ("the clients' record sets have 39 records in common (client 1 40, client 2 40), fewer than the "
            "job's minimum 40 (--min-intersection)") in lines[0][1], lines[0]
    assert lines[1][1] == lines[2][1] == "the same cause" and "1000" not in err
    assert _sqm(["pca", "--job", job, "--components", "2", "--quiet", "--backend", "plain",
                 "--min-intersection", "39"], capsys)[0] == 0


def test_logreg_label_error_reaches_the_others_as_a_refusal(tmp_path, capsys):
    rng = np.random.default_rng(12)
    X = rng.normal(size=(40, 4)) * 0.25
    y = (X[:, 0] > 0).astype(float)
    y[7] = 2.0
    job = write_party_csvs(np.hstack([X, y[:, None]]), tmp_path, col_counts=[2, 3], min_intersection=1)
    code, err = _sqm(["logreg", "--job", job, "--label-column", "x4", "--epsilon", "4", "--gamma", "256",
                      "--q", "0.25", "--epochs", "1", "--learning-rate", "1", "--backend", "plain", "--solver", "sgd"],
                     capsys)
    assert code == EXIT_BAD_DATA, err
    lines = _party_lines(err)
    # three label values (0, 1, 2): the detail with the fix stays at the label party, the others get a refusal
    assert lines[2][0] == EXIT_BAD_DATA and "holds 3 distinct value(s) (0, 1, 2)" in lines[2][1]
    assert "recode it to two values" in lines[2][1]
    assert _first(err).startswith("sqm: client 2 refused: its label column does not hold exactly two classes")
    for i in (0, 1):
        assert lines[i] == (EXIT_REFUSED, "on client 2's notice"), lines[i]


class StallTask(JobTask):
    """A job-file task whose client 2 writes its process id to ``marker`` and then waits, while the others wait
    for its message: a party inside the job, connected, about to be killed."""

    seed = None

    def __init__(self, marker: str):
        self.marker = marker

    def public(self):
        return ("stall-test",)

    def release(self, meta):  # no ledger in this test
        raise NotImplementedError

    async def run(self, ctx, table, meta):
        if ctx.pid == 2:
            with open(self.marker + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(self.marker + ".tmp", self.marker)
            await asyncio.sleep(120)
        await ctx.send_recv({}, [2], wire.nothing, "client 2's message")
        return {}


def test_exit_code_lost_when_a_client_is_killed(tmp_path):
    """Real processes (a lost connection is the transport's): client 2 is killed (SIGKILL) inside the job; the
    others name it as lost at once and the job's exit code is LOST."""
    from sqm.framework.spec import load_job
    from sqm.framework.runners import run_local
    from sqm.mpc.net.launch import MPCError

    spec = load_job(_job(tmp_path))
    marker = str(tmp_path / "client2.pid")
    found, stop = {}, threading.Event()

    def killer():
        while not stop.is_set():
            if os.path.exists(marker):
                os.kill(int(Path(marker).read_text()), signal.SIGKILL)
                found["at"] = time.monotonic()
                return
            time.sleep(0.01)

    k = threading.Thread(target=killer)
    k.start()
    try:
        with pytest.raises(MPCError) as err:
            run_local(spec, StallTask(marker), timeout=120)
    finally:
        stop.set()
        k.join()
    assert "at" in found, err.value
    assert err.value.exit_code == EXIT_LOST and err.value.codes[2] == -signal.SIGKILL, err.value
    lines = _party_lines(str(err.value))
    assert err.value.headline == "client 2: killed by signal 9", err.value
    for i in (0, 1):
        assert lines[i][0] == EXIT_LOST and "lost party 2" in err.value.messages[i], lines[i]
    assert time.monotonic() - found["at"] < 30


def test_sqm_exit_codes_timeout_and_bad_usage(tmp_path, capsys):
    job = _job(tmp_path)
    code, err = _sqm(["pca", "--job", job, "--components", "2", "--quiet", "--timeout", "0.001", "--backend",
                      "plain"], capsys)
    assert code == EXIT_TIMEOUT, err
    assert "timeout: " in err and "timeout: ;" not in err
    code, err = _sqm(["pca", "--job", str(tmp_path / "missing.json")], capsys)
    assert code == EXIT_USAGE and "does not exist" in err
    with pytest.raises(SystemExit) as e:  # argparse: bad options exit 2 as well
        _sqm(["pca", "--components", "many"], capsys)
    assert e.value.code == EXIT_USAGE
