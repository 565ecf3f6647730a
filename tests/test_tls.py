"""TLS identities between real party processes: an insider holding one party's valid certificate cannot act
as another party, nor a party of another job; a certificate from another authority fails the handshake,
reported as such.  Every refused party exits 3 (REFUSED) naming the peer, and no party writes a result."""
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from sqm.mpc.net.certs import IdentityError, TLSIdentity, check_peer, file_identity, make_certificates
from sqm.errors import EXIT_REFUSED, EXIT_TIMEOUT
from sqm.mpc.net.launch import free_ports, new_job_id, party_command, party_env

from sqm.mpc.protocols.context import EvaluateJob
from sqm.mpc.protocols.secure_sum import SumClient, sum_job

# an insider's modified party program: its own certificate is another party's, it claims to be party CLAIM,
# and it keeps trying when refused or hung up on (so that every honest party meets it)
IMPOSTOR = ("import sys, sqm.mpc.net.certs as c, sqm.mpc.net.session as s; real = c.file_identity; "
            "c.file_identity = lambda p: (real(p)[0], int(sys.argv[1])); "
            "s._Conn.connection_lost = lambda self, exc: None; s.Session.fail = lambda self, message: None; "
            "from sqm.mpc.net.party import main; sys.exit(main(sys.argv[2:]))")


class Parties:
    """Party processes of one small secure-sum job over loopback, each started on its own (as on separate
    hosts); ``finish`` returns {index: (exit code, last message line, seconds from start to exit)}."""

    def __init__(self, tmp_path, n: int = 3):
        self.tmp, self.n = tmp_path, n
        self.addrs = [f"127.0.0.1:{p}" for p in free_ports(n)]
        job = sum_job([SumClient(np.array([j, 2 * j])) for j in range(1, n)], 2, 1000)
        pub = job.public()
        self.programs = [EvaluateJob(pub)] + [EvaluateJob(pub, c) for c in job.clients]
        self.procs, self.t0, self.t1 = {}, {}, {}

    def start(self, i: int, job_id: str, ssl_dir=None, extra=(), claim: int | None = None,
              connect_timeout: float = 20, addrs=None) -> None:
        import pickle

        pf, rf = self.tmp / f"party{i}.program", self.tmp / f"party{i}.result"
        pf.write_bytes(pickle.dumps(self.programs[i]))
        cmd = party_command(str(pf), i, ",".join(addrs or self.addrs), str(rf), 60, connect_timeout, ssl_dir,
                            job_id, insecure_plaintext=ssl_dir is None) + list(extra)  # no keys: plain TCP
        if claim is not None:
            cmd = [sys.executable, "-c", IMPOSTOR, str(claim)] + cmd[3:]
        self.t0[i] = time.monotonic()
        self.procs[i] = subprocess.Popen(cmd, env=party_env(self.n), stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True, cwd=self.tmp)

    def finish(self, wait=None, timeout: float = 40.0) -> dict:
        """Wait for the parties in ``wait`` (default all), then stop the others."""
        wait = list(self.procs) if wait is None else wait
        end = time.monotonic() + timeout
        while True:
            for i, p in self.procs.items():
                if i not in self.t1 and p.poll() is not None:
                    self.t1[i] = time.monotonic()
            if time.monotonic() > end or all(i in self.t1 for i in wait):
                break
            time.sleep(0.02)
        out = {}
        for i, p in self.procs.items():
            if p.poll() is None:
                p.kill()
            p.wait()
            self.t1.setdefault(i, time.monotonic())
            err = p.stderr.read().strip()
            out[i] = (p.returncode, err.splitlines()[-1] if err else "", self.t1[i] - self.t0[i])
        return out

    def released(self) -> list[int]:
        return [i for i in range(self.n) if (self.tmp / f"party{i}.result").exists()]


def _keys(tmp_path, name, job="alpha", ca_dir=None):
    make_certificates(str(tmp_path / name), 3, job=job, ca_dir=ca_dir)
    return str(tmp_path / name)


def _holding(tmp_path, keys, own: int, as_index: int) -> str:
    """A key folder where party ``as_index``'s files are really party ``own``'s (an insider's copy)."""
    d = tmp_path / f"insider-{own}-as-{as_index}"
    d.mkdir()
    shutil.copy(os.path.join(keys, "mpyc_ca.crt"), d)
    for ext in ("crt", "key"):
        shutil.copy(os.path.join(keys, f"party_{own}.{ext}"), d / f"party_{as_index}.{ext}")
    return str(d)


def test_certificates_name_party_and_job(tmp_path):
    keys = _keys(tmp_path, "keys", job="census-2024")
    assert file_identity(os.path.join(keys, "party_2.crt")) == ("census-2024", 2)
    for name in ("authority/mpyc_ca.key", "party_0.key", "party_2.key"):
        assert os.stat(os.path.join(keys, name)).st_mode & 0o777 == 0o600
    assert not os.path.exists(os.path.join(keys, "mpyc_ca.key"))  # the CA key apart from the party keys
    os.chmod(os.path.join(keys, "party_1.key"), 0o644)  # a key others may read is refused, naming the fix
    with pytest.raises(IdentityError, match=r"party_1.key \(its private key\) is readable or writable by others "
                                            r"\(mode 0644\): refused; run chmod 600 "):
        TLSIdentity(keys, 1)
    os.chmod(os.path.join(keys, "party_1.key"), 0o600)
    assert TLSIdentity(keys, 1).job == "census-2024"
    with pytest.raises(IdentityError, match=r"party_1.crt is the certificate of client 2 \(party 2\)"):
        TLSIdentity(_holding(tmp_path, keys, 2, 1), 1)
    with pytest.raises(IdentityError, match="a certificate of job 'census-2024', but this party runs job 'other'"):
        TLSIdentity(keys, 1, "other")
    peer = {"subjectAltName": (("URI", "sqm://census-2024/party/1"), ("DNS", "party-1.census-2024.sqm"))}
    check_peer(peer, 1, "census-2024")
    with pytest.raises(IdentityError, match=r"client 3 \(party 3\) presented the certificate of client 1"):
        check_peer(peer, 3, "census-2024")
    with pytest.raises(IdentityError, match="presented a certificate of job 'census-2024' \\(this job is 'x'\\)"):
        check_peer(peer, 1, "x")
    with pytest.raises(IdentityError, match="naming no single sqm party"):
        check_peer({"subjectAltName": (("DNS", "MPyC party 1"),)}, 1, "census-2024")  # MPyC's own convention
    with pytest.raises(ValueError, match="not usable in certificates"):
        make_certificates(str(tmp_path / "bad"), 3, job="Bad Name")


def test_an_insider_cannot_act_as_the_server(tmp_path):
    """Client 2's operator runs a modified party holding client 2's valid key and claiming to be party 0: both
    clients refuse it on their listening side (the claimed id against the certificate), nothing released."""
    keys = _keys(tmp_path, "keys")
    job, ps = new_job_id(), Parties(tmp_path)
    ps.start(1, job, keys)
    ps.start(2, job, keys)
    ps.start(0, job, _holding(tmp_path, keys, 2, 0), claim=0)
    out = ps.finish(wait=[1, 2])
    for j in (1, 2):
        code, msg, secs = out[j]
        assert code == EXIT_REFUSED, out
        assert "the server (party 0) presented the certificate of client 2 (party 2)" in msg, msg
    assert ps.released() == []
    print("insider as server refused after", {j: round(out[j][2], 2) for j in (1, 2)}, "s")


def test_an_insider_cannot_act_as_another_client(tmp_path):
    """A modified party holding client 1's key listens as client 2: the server and client 1 refuse it on
    their connecting side (the listener's certificate against the party they dialled)."""
    keys = _keys(tmp_path, "keys")
    job, ps = new_job_id(), Parties(tmp_path)
    ps.start(2, job, _holding(tmp_path, keys, 1, 2), claim=2)
    ps.start(0, job, keys)
    ps.start(1, job, keys)
    out = ps.finish(wait=[0, 1])
    for j in (0, 1):
        code, msg, secs = out[j]
        assert code == EXIT_REFUSED, out
        assert "client 2 (party 2) presented the certificate of client 1 (party 1)" in msg, msg
        assert ps.addrs[2] in msg
    assert ps.released() == []
    print("insider as client refused after", {j: round(out[j][2], 2) for j in (0, 1)}, "s")


def test_a_certificate_of_another_job_is_refused_even_from_the_same_authority(tmp_path):
    """One authority signs two jobs' certificates: the server of job 'beta' (unmodified) reaching the clients
    of job 'alpha' is refused by the client, and refuses it, each naming the other job."""
    alpha = _keys(tmp_path, "alpha")
    beta = _keys(tmp_path, "beta", job="beta", ca_dir=alpha)
    job, ps = new_job_id(), Parties(tmp_path, 2)
    ps.start(1, job, alpha)
    ps.start(0, job, beta)
    out = ps.finish()
    assert out[1][0] == EXIT_REFUSED, out
    assert "the server (party 0) presented a certificate of job 'beta' (this job is 'alpha')" in out[1][1], out[1]
    assert out[0][0] == EXIT_REFUSED and "presented a certificate of job 'alpha' (this job is 'beta')" in out[0][1]
    assert ps.released() == []
    print("another job's certificate refused after", {j: round(out[j][2], 2) for j in out}, "s")


def test_a_foreign_authority_fails_the_tls_handshake_naming_the_peer(tmp_path):
    keys, other = _keys(tmp_path, "keys"), _keys(tmp_path, "other")  # same job name, another authority
    # the server's own certificate comes from another authority (it trusts the job's): the client's listener
    # drops it (an unauthenticated connection never aborts a job: issue 25), the server names the closed
    # connection at once, and the client names the dropped handshake when its connect phase times out
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(os.path.join(keys, "mpyc_ca.crt"), mixed)
    for ext in ("crt", "key"):
        shutil.copy(os.path.join(other, f"party_0.{ext}"), mixed)
    job, ps = new_job_id(), Parties(tmp_path, 2)
    ps.start(1, job, keys, connect_timeout=3)
    ps.start(0, job, str(mixed))
    out = ps.finish()
    assert out[0][0] == EXIT_REFUSED and out[1][0] == EXIT_TIMEOUT, out
    assert (f"client 1 ({ps.addrs[1]}) closed the connection before accepting this party (over TLS: it may "
            f"have rejected this party's certificate)") in out[0][1], out[0]
    assert "a connection from 127.0.0.1:" in out[1][1], out[1]
    assert f"failed the TLS handshake (certificate verify failed: unable to get local issuer certificate; " \
           f"expected: the server (party 0) ({ps.addrs[0]})); dropped" in out[1][1], out[1]
    assert ps.released() == []
    print("foreign authority (server's certificate) refused after", {j: round(out[j][2], 2) for j in out}, "s")
    # every file from another authority: the connecting server refuses the client's certificate and says so;
    # the client cannot tell who hung up during the handshake: it names the party missing when it times out
    job, ps = new_job_id(), Parties(tmp_path, 2)
    ps.start(1, job, str(other), connect_timeout=3)
    ps.start(0, job, keys)
    out = ps.finish()
    assert out[0][0] == EXIT_REFUSED, out
    assert f"TLS handshake with client 1 ({ps.addrs[1]}) failed: certificate verify failed" in out[0][1], out[0]
    assert out[1][0] == EXIT_TIMEOUT, out
    assert f"the server (party 0) ({ps.addrs[0]}) never connected" in out[1][1], out[1]
    assert "ended during the TLS handshake" in out[1][1], out[1]
    assert ps.released() == []
