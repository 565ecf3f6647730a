"""The latency bench's pieces (issue 15, items 4 and 5): the critical-path count, the loopback delay proxy and
its hook, and SQM-LR's 2 one-way delays per iteration.  Timings are the bench's (``python -m bench latency``); here
only what holds on any machine: the proxy never forwards a chunk before it is due (a lower bound), keeps the
order, forwards to loopback only and leaves nothing behind."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from bench import latency, netsim


def tr(*exchanges):
    """A party's trace from (to, awaits) pairs."""
    return [("x", list(to), list(aw), 0.0, 0.0) for to, aw in exchanges]


def test_critical_path_counts_one_way_delays():
    # a request/response between the server and two clients: 2
    server = tr(([1, 2], []), ([], [1, 2]))
    clients = [tr(([], [0]), ([0], [])) for _ in range(2)]
    assert latency.rounds([server] + clients) == 2
    # one all-to-all exchange: 1; three in a row: 3
    a2a = [tr(*[([j for j in range(3) if j != p], [j for j in range(3) if j != p])] * 3) for p in range(3)]
    assert latency.rounds(a2a) == 3
    # a sender that awaits nothing runs ahead: clients send, then send again, the server awaits both: 1
    server = tr(([], [1, 2]), ([], [1, 2]))
    clients = [tr(([0], []), ([0], [])) for _ in range(2)]
    assert latency.rounds([server] + clients) == 1
    # with measured starts: a party starting late delays those awaiting it (its own message is already there)
    assert latency.critical_path([tr(([1], [1])), tr(([0], [0]))], 1.0, [0.0, 3.0]) == [4.0, 3.0]
    with pytest.raises(ValueError, match="different numbers of exchanges"):
        latency.critical_path([tr(([1], [])), tr()])
    with pytest.raises(ValueError, match="sends it nothing"):
        latency.critical_path([tr(([], [1])), tr(([], []))])


def timed(*exchanges):
    """A party's trace from (to, awaits, entered, left)."""
    return [("x", list(to), list(aw), float(t_in), float(t_out)) for to, aw, t_in, t_out in exchanges]


def test_replay_keeps_the_measured_compute_and_delays_each_message():
    # 0 ms run: the server sends a request (0), trains for 3 while the client answers after 1 of its own
    # compute; the answer (sent at 2) has arrived when the server awaits it at 3, which then takes 0.5
    server = timed(([1], [], 0, 0), ([], [1], 3, 3.5))
    client = timed(([], [0], 0, 1), ([0], [], 2, 2))  # the request took 1 to arrive and decode at 0 ms
    traces = [server, client]
    assert latency.replay(traces, 0.0) == [3.5, 2.0]  # the 0 ms run itself, exactly
    # delay 2: the client gets the request at 2 (+1 as at 0 ms), computes 1, answers at 4, which reaches the
    # server at 6, + 0.5: 6.5; its 3 of training hides under the delay (compute + L x d says 3.5 + 2 x 2 = 7.5)
    assert latency.replay(traces, 2.0) == [6.5, 4.0]
    assert latency.replay_span(traces, 2.0) == 6.5
    assert latency.rounds(traces) == 2
    # a client that enters 2.5 late: its answer leaves at 4.5 and arrives at 6.5; span from its entry at 2.5
    assert latency.replay(traces, 2.0, [0.0, 2.5]) == [7.0, 4.5]
    assert latency.replay_span(traces, 2.0, [0.0, 2.5]) == 4.5
    # an all-to-all exchange that party 1 enters 4 late (0 ms: both leave at 4.25, after 0.25 of exchange
    # cost); at delay 1 party 1's message reaches party 0 at 5, which leaves at 5.25; party 1 still at 4.25
    a2a = [timed(([1], [1], 0, 4.25)), timed(([0], [0], 4, 4.25))]
    assert latency.replay(a2a, 0.0, [0.0, 4.0]) == [4.25, 4.25]
    assert latency.replay(a2a, 1.0, [0.0, 4.0]) == [5.25, 4.25]
    with pytest.raises(ValueError, match="sends it nothing"):
        latency.replay([timed(([], [1], 0, 1)), timed(([], [], 0, 0))], 1.0)


def test_delivered_delay_adds_the_proxys_lateness_beyond_the_0_ms_runs():
    base, run = {"delay_ms": 0.0, "proxy_late_s": 0.25e-3}, {"delay_ms": 5.0, "proxy_late_s": 1.25e-3}
    assert latency.delivered(base, run) == pytest.approx(6e-3, rel=1e-12)
    assert latency.delivered(base, dict(run, proxy_late_s=0.0)) == pytest.approx(5e-3, rel=1e-12)  # never less
    # the replay model of a run: the 0 ms run's traces, the run's own first entries, d or the delivered delay
    traces0 = [timed(([1], [], 0, 0), ([], [1], 3, 3.5)), timed(([], [0], 0, 1), ([0], [], 2, 2))]
    base, run = {"delay_ms": 0.0, "proxy_late_s": 0.0, "traces": traces0}, {
        "delay_ms": 2000.0, "proxy_late_s": 0.5, "traces": [timed(([1], [], 10, 10)), timed(([], [0], 12.5, 15))]}
    assert latency.replay_model(base, run, nominal=True) == latency.replay_span(traces0, 2.0, [10, 12.5]) == 4.5
    assert latency.replay_model(base, run) == latency.replay_span(traces0, 2.5, [10, 12.5]) == 5.0


def _echo_server():
    srv = socket.create_server(("127.0.0.1", 0))

    def serve():
        try:
            conn, _ = srv.accept()
        except OSError:
            return
        with conn:
            while data := conn.recv(1 << 16):
                conn.sendall(data)
    threading.Thread(target=serve, daemon=True).start()
    return srv


def test_delay_proxy_holds_each_direction_and_keeps_order():
    srv = _echo_server()
    with netsim.DelayProxy(srv.getsockname(), delay_ms=40) as proxy:
        c = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
        t0 = time.monotonic()
        c.sendall(b"ping")
        assert c.recv(16) == b"ping"
        assert time.monotonic() - t0 >= 0.080  # 40 ms there and 40 ms back, never less
        payload = b"".join(i.to_bytes(4, "little") for i in range(50000))  # many chunks, in order
        for k in range(0, len(payload), 7919):
            c.sendall(payload[k:k + 7919])
        got = b""
        while len(got) < len(payload):
            got += c.recv(1 << 16)
        assert got == payload
        assert proxy.late and min(proxy.late) > -1e-6  # its own record: no chunk forwarded before it was due
        c.close()
    srv.close()


def test_preamble_mode_forwards_loopback_only_and_the_hook_routes_a_child_through_it(tmp_path):
    srv = _echo_server()
    host, port = srv.getsockname()
    with netsim.DelayProxy(None, delay_ms=0) as proxy:
        bad = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
        bad.sendall(b"SQM-NETSIM 192.0.2.1 80\n")  # not loopback: closed, never dialled
        bad.settimeout(10)
        assert bad.recv(16) == b""
        bad.close()
        child = ("import asyncio\n"
                 "async def main():\n"
                 f"    r, w = await asyncio.open_connection('127.0.0.1', {port})\n"
                 "    w.write(b'hello'); await w.drain()\n"
                 "    print((await r.readexactly(5)).decode()); w.close()\n"
                 "asyncio.run(main())\n")
        with netsim.hook_dir() as folder:
            env = dict(os.environ, PYTHONPATH=folder, **{netsim.PROXY_ENV: proxy.address})
            out = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "hello"
        assert proxy.connections == 1 and proxy.forwarded == 10  # through the proxy, both ways
        assert not os.path.exists(folder)
    srv.close()


def test_delayed_parties_restores_the_environment():
    before = {k: os.environ.get(k) for k in ("PYTHONPATH", netsim.PROXY_ENV, netsim.REDIRECT_ENV)}
    with netsim.delayed_parties(5) as proxy:
        folder = os.environ["PYTHONPATH"].split(os.pathsep)[0]
        assert os.path.exists(os.path.join(folder, "sitecustomize.py"))
        assert os.environ[netsim.PROXY_ENV] == proxy.address
    assert {k: os.environ.get(k) for k in before} == before
    assert not os.path.exists(folder)
    assert not proxy._thread.is_alive()


@pytest.mark.parametrize("clients", [2, 3])
def test_lr_iteration_is_two_one_way_delays(clients):
    """SQM-LR's exchanges (in process, the real protocol over the mailboxes): each iteration adds 2 one-way
    delays to the critical path (2 exchanges with 3 clients, M > 3t; 3 with 2 clients), and the weights are
    those of the ideal functionality, bit for bit."""
    from sqm.mpc.protocols.inprocess import run_in_process

    def traced(R):
        progs = latency.lr_programs(8, 16, clients, 400, R, seed=3)
        recs = run_in_process([latency.Traced(p) for p in progs], timeout=120, ideal=False)
        ideal = run_in_process(progs, timeout=120)
        assert np.array_equal(recs[0]["result"]["result"]["weights"], ideal[0]["result"]["weights"])
        return [r["result"]["trace"] for r in recs]

    one, many = traced(1), traced(4)
    assert (latency.rounds(many) - latency.rounds(one)) == 2 * 3
    per_iteration = (len(many[0]) - len(one[0])) // 3
    assert per_iteration == (2 if clients == 3 else 3)
    assert [x[0] for x in many[0][-per_iteration:]][-1] == "open result"


@pytest.mark.parametrize("rows", [300, 9000])  # a 34-bit and a 39-bit field: 25 and 24 rounds
def test_row_norm_check_adds_the_rounds_its_protocol_names(rows):
    """The covariance release with the secure row norm check (in process, the real protocol over the mailboxes):
    one chunk's critical path is that of the release without it plus compare.row_check_rounds(p, t) one-way
    delays (the bench's covariance-check job), and the integers are those of the ideal functionality."""
    from sqm.mpc.protocols import compare
    from sqm.mpc.shares.field import prime_below
    from sqm.mpc.protocols.inprocess import run_in_process

    def traced(check):
        progs = latency.covariance_programs(rows, 4, 3, 3, row_norm_check=check)
        recs = run_in_process([latency.Traced(p) for p in progs], timeout=120, ideal=False)
        ideal = run_in_process(progs, timeout=120)
        out = recs[0]["result"]["result"]
        assert np.array_equal(out.raw, ideal[0]["result"].raw)
        return latency.rounds([r["result"]["trace"] for r in recs]), out.field_bits

    (plain, _), (checked, bits) = traced(False), traced(True)
    assert checked - plain == compare.row_check_rounds(prime_below(bits), 1) >= 20
    assert bits == {300: 34, 9000: 39}[rows]
