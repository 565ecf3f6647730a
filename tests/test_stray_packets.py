"""Unauthenticated noise never aborts a job (issue 25): during the connect phase, an HTTP request, two bytes
claiming party 999, a TLS hello on plain TCP, a flood of connections and (over TLS) a handshake without a
certificate reach a client's listening port; each is dropped and noted there, and the job completes with every
party's result (real processes over loopback)."""
from __future__ import annotations

import socket
import ssl

from test_tls import Parties, _keys

from bench.faults import send_stray
from sqm.runtime.launch import new_job_id


def test_stray_packets_on_plain_tcp_are_dropped_and_the_job_completes(tmp_path):
    job, ps = new_job_id(), Parties(tmp_path)
    ps.start(2, job)
    for data in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", (999).to_bytes(2, "little"), b"\x16\x03\x01\x00\x05hello"):
        assert send_stray(ps.addrs[2], data)  # waits until the port listens
    for _ in range(40):  # many in a row (each closed before the next): none is held open, nothing breaks
        assert send_stray(ps.addrs[2], b"\xff\xff")
    ps.start(0, job)
    ps.start(1, job)
    out = ps.finish()
    assert all(code == 0 for code, _, _ in out.values()), out
    assert ps.released() == [0, 1, 2]


def test_a_tls_hello_without_a_certificate_is_dropped_and_the_job_completes(tmp_path):
    keys = _keys(tmp_path, "keys")
    job, ps = new_job_id(), Parties(tmp_path)
    ps.start(2, job, keys)
    assert send_stray(ps.addrs[2], b"")  # waits until the port listens
    host, port = ps.addrs[2].split(":")
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((host, int(port)), timeout=5) as raw:
            with ctx.wrap_socket(raw) as s:  # no client certificate: the party requires one
                s.sendall(b"\x00\x00")
                s.recv(16)
    except (OSError, ssl.SSLError):
        pass  # refused by the party: what matters is that the job goes on
    ps.start(0, job, keys)
    ps.start(1, job, keys)
    out = ps.finish()
    assert all(code == 0 for code, _, _ in out.values()), out
    assert ps.released() == [0, 1, 2]
