"""Party processes: TLS between parties, and bad configurations refused before any share is sent."""
import pickle
import subprocess
import sys

import numpy as np
import pytest

from sqm.mpc.net.certs import make_certificates
from sqm.mpc.protocols.mpyc_backend import MPyCBackend
from sqm.mpc.net.party import EXIT_REFUSED, EXIT_USAGE
from sqm.mpc.protocols.context import EvaluateJob
from sqm.mpc.protocols.secure_sum import SumClient, sum_job


def test_secure_sum_over_mutually_authenticated_tls(tmp_path):
    make_certificates(str(tmp_path / "keys"), 3)
    arrays = [np.array([5, -3, 2 ** 20]), np.array([-5, 4, 1])]
    res = MPyCBackend(ssl_dir=str(tmp_path / "keys")).run(sum_job([SumClient(a) for a in arrays], 3, 2 ** 21))
    assert list(res.values) == [0, 1, 2 ** 20 + 1]


JOB_ID = "0123456789abcdef0123456789abcdef"


def _party(tmp_path, *args, job_id=JOB_ID):
    prog = tmp_path / "p.program"
    prog.write_bytes(pickle.dumps(EvaluateJob(None)))
    return subprocess.run([sys.executable, "-m", "sqm.mpc.net.party", "--program", str(prog), "--job-id", job_id,
                           *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)


@pytest.mark.parametrize("args, message", [
    (["--index", "0", "--parties", "127.0.0.1:9001,127.0.0.1:9001,127.0.0.1:9002"], "duplicate party addresses"),
    (["--index", "3", "--parties", "127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003"], "index 3 out of range"),
    (["--index", "0", "--parties", "127.0.0.1:9001"], "need at least 2 parties"),
])
def test_bad_party_options_are_usage_errors(tmp_path, args, message):
    res = _party(tmp_path, *args)
    assert res.returncode == EXIT_USAGE
    assert message in res.stderr


@pytest.mark.parametrize("args, message", [
    (["--index", "1", "--parties", "127.0.0.1:9001,127.0.0.1:9002", "--ssl", "--ssl-dir", "/nonexistent"],
     "TLS needs mpyc_ca.crt, party_1.crt, party_1.key in /nonexistent"),
    # plain TCP: refused before any socket is opened (no keys in ./.config, no opt-in)
    (["--index", "1", "--parties", "10.0.0.1:9001,10.0.0.2:9002,10.0.0.3:9003"],
     "party addresses 10.0.0.1:9001, 10.0.0.2:9002, 10.0.0.3:9003 are not loopback: parties on other hosts must "
     "use TLS"),
    (["--index", "1", "--parties", "127.0.0.1:9001,10.0.0.2:9002"], "--insecure-plaintext"),
    # one by one over loopback (issue 25): TLS too, or an explicit opt-in; a co-tenant could act as a party
    (["--index", "1", "--parties", "127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003"],
     "parties started one by one authenticate each other with TLS even over loopback"),
])
def test_bad_party_configuration_is_refused(tmp_path, args, message):
    res = _party(tmp_path, *args)
    assert res.returncode == EXIT_REFUSED
    assert message in res.stderr


def test_job_id_must_be_a_fresh_128_bit_hex_id(tmp_path):
    res = _party(tmp_path, "--index", "0", "--parties", "127.0.0.1:9001,127.0.0.1:9002", job_id="job-1")
    assert res.returncode == EXIT_USAGE and "job id 'job-1' is not 32 lowercase hex digits" in res.stderr


def _not_local(candidates=("10.255.255.1", "198.51.100.7", "203.0.113.9", "192.0.2.77")) -> str:
    import socket

    for host in candidates:
        with socket.socket() as sock:
            try:
                sock.bind((host, 0))
            except OSError:
                return host
    pytest.skip("every candidate address belongs to this machine")


def test_plaintext_across_hosts_needs_the_opt_in_and_listens_on_its_own_address_only(tmp_path):
    # with --insecure-plaintext the party warns loudly, then listens on its own job address only: an address
    # that is not this machine's cannot be listened on (the party bound every interface before)
    other = _not_local()
    res = _party(tmp_path, "--index", "1", "--parties", f"127.0.0.1:9001,{other}:9002", "--insecure-plaintext",
                 "--connect-timeout", "5")
    assert "WARNING: party 1 runs WITHOUT TLS across hosts (--insecure-plaintext)" in res.stderr
    assert "rebuild its whole quantized input block" in " ".join(res.stderr.split())  # what a tap learns
    assert res.returncode == EXIT_REFUSED
    assert f"cannot listen on {other}:9002: address not available on this host" in res.stderr


def test_local_port_range_from_the_environment(monkeypatch):
    from sqm.mpc.net.launch import free_ports

    monkeypatch.setenv("SQM_LOCAL_PORTS", "23400-23409")
    ports = free_ports(4)
    assert len(set(ports)) == 4 and all(23400 <= p <= 23409 for p in ports)
    monkeypatch.setenv("SQM_LOCAL_PORTS", "23400")
    with pytest.raises(ValueError, match="LO-HI"):
        free_ports(1)
    monkeypatch.setenv("SQM_LOCAL_PORTS", "23400-23400")
    with pytest.raises(RuntimeError, match="fewer than 2 free loopback ports"):
        free_ports(2)


def test_an_untested_mpyc_is_refused_loudly():
    """The runtime patches MPyC internals: the installed MPyC is one it was tested with, and another is refused
    with a message naming both (a party exits 'bad usage' before connecting)."""
    from sqm.mpc.net import mpyc_version

    assert mpyc_version.check_mpyc_version() in mpyc_version.MPYC_TESTED or any(
        mpyc_version.check_mpyc_version().startswith(v + ".") for v in mpyc_version.MPYC_TESTED)
    with pytest.raises(RuntimeError, match=r"MPyC 0\.12 is installed.*tested only with MPyC 0\.11"):
        mpyc_version.check_mpyc_version("0.12")
    assert mpyc_version.check_mpyc_version("0.11.1") == "0.11.1"


def test_one_version():
    from importlib.metadata import version

    import sqm

    assert sqm.__version__ == version("sqm-vfl")
