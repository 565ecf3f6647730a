"""Fault injection on real party processes (a subset of ``python -m bench faults``): issue 12's acceptance.

Each case runs one small job-file SQM-PCA job (1 server + 2 clients, each a ``python -m sqm.mpc.net.party`` process
with the case's own TMPDIR) and injects one fault; every party that was not itself killed or stopped must
exit non-zero within 30 s of the fault, each message naming the culprit, with no result released, nothing
left in the TMPDIR and no process left running.  ``stopped`` runs with a 3 s idle timeout to stay short.
"""
from __future__ import annotations

import re

import pytest

from bench import faults
from sqm.mpc.net.failures import Outcome
from sqm.mpc.net.launch import MPCError

# cases -> extra flags for every party (passed only if python -m sqm.mpc.net.party has them)
# (the suite keeps one case: a foreign party and a squatted port are tests of test_session_binding, a stopped
# party one of test_liveness; `python -m bench faults` runs them all)
CASES = {"kill-compute": {}, "huge-frame": {}, "stray-party-999": {}, "inconsistent-sharing": {},
         "stall": {"--progress-timeout": 5}, "skip": {}, "malformed-deep": {}, "local-impostor": {},
         "out-of-bounds": {}}
# issue 25's quick ones: named refusals (an insider's 4 GiB frame announcement, an inconsistent sharing, an insider
# that heartbeats but never sends or skips a step, a frame nested 100,000 deep, a client sharing values 1000x beyond
# its bounds) and unaffected jobs (two stray
# bytes at a client's port; a co-tenant starting the server's command line with keys of its own)
# mechanisms of issue 12 that did not work yet when this module was written: criterion -> reason.  A case
# listed here is reported as xfail only when that criterion really fails; any other failure fails the test.
PENDING: dict[str, dict[str, str]] = {
    "port-squatted": {"names_culprit": "connect-phase cascade (sqm.mpc.net.session): about 1 run in 3 on a loaded "
                                       "2-core machine client 1 sees the server close its connection after the server "
                                       "found the squatter, and names the server instead of client 2"},
}


@pytest.fixture(scope="module")
def supported():
    return faults.party_flags()


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_fault_case(case, supported):
    flags = []
    for opt, val in CASES[case].items():
        if opt not in supported:
            pytest.xfail(f"python -m sqm.mpc.net.party has no {opt}: the case needs it")
        flags += [opt, str(val)]
    rec = faults.run_case(case, flags=flags, bound=30.0, deadline=35.0, supported=supported)
    assert rec["applied"], f"{case}: the fault did not land at its step: {rec['per_party']}"
    observed = {**rec["criteria"], "nothing_left_in_tmpdir": not rec["tmp_leftovers"],
                "no_process_left": not rec["leftover_processes"]}
    failed = [k for k, v in observed.items() if not v]
    detail = (f"{case}: failed {failed}; exits {[p['exit'] for p in rec['per_party']]}, "
              f"{rec['seconds_to_last_exit']} s, messages {[p['message'] for p in rec['per_party']]}, "
              f"TMPDIR {rec['tmp_leftovers']}")
    pending = PENDING.get(case, {})
    if failed and all(k in pending for k in failed):
        pytest.xfail("; ".join(pending[k] for k in failed) + " -- " + detail)
    assert not failed, detail
    assert rec["passed"]
    # the launcher's message of this job: who failed and why in one short first line, naming a party
    outcomes = {i: Outcome(p["exit"], [p["message"]] if p["message"] else []) for i, p in enumerate(rec["per_party"])
                if p["exit"] is not None}
    if any(o.code for o in outcomes.values()):
        e = MPCError.of(outcomes)
        assert len(f"sqm: {e.headline}") < 160 and re.match(r"(server|client \d+)[ :]", e.headline), e.headline


def test_named_parties_in_messages():
    """The parties a message names, its own prefix and the party itself left out (the bench's naming check)."""
    assert faults.named("sqm.mpc.net.party server: lost party 2 (client 2); job aborted, nothing released", 0) == [2]
    assert faults.named("sqm.mpc.net.party client 1: timeout: The server (party 0) aborted the job: no message from "
                        "client 2 for 30 s", 1) == [0, 2]
    assert faults.named("sqm.mpc.net.party client 1: party 1: parties [0, 2] run a different task configuration",
                        1) == [0, 2]
    assert faults.named("sqm.mpc.net.party client 2: cannot listen on 127.0.0.1:4000: address in use", 2) == []
    assert faults.named("sqm.mpc.net.party server: timeout: not all 3 parties connected within 30 s", 0) == []


def test_proxy_forwards_then_partitions_without_closing():
    """The partition proxy forwards both ways; once cut, nothing crosses and neither socket is closed."""
    import socket
    import threading

    srv = socket.create_server(("127.0.0.1", 0))
    peer = {}
    t = threading.Thread(target=lambda: peer.setdefault("s", srv.accept()[0]))
    t.start()
    proxy = faults.Proxy(srv.getsockname())
    try:
        c = socket.create_connection(("127.0.0.1", proxy.start()), timeout=5)
        t.join(5)
        s = peer["s"]
        s.settimeout(5)
        c.sendall(b"ping")
        assert s.recv(16) == b"ping"
        s.sendall(b"pong")
        assert c.recv(16) == b"pong"
        proxy.cut()
        c.sendall(b"lost")
        s.sendall(b"lost too")
        for sock in (s, c):
            sock.settimeout(0.5)
            with pytest.raises(socket.timeout):  # nothing arrives, and no end of stream either (recv would be b"")
                sock.recv(16)
        assert proxy.dropped == len(b"lost") + len(b"lost too")
    finally:
        proxy.close()
        srv.close()
