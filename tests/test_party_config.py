"""Party processes: TLS between parties, and bad configurations refused before any share is sent."""
import pickle
import subprocess
import sys

import numpy as np
import pytest

from mpc.certs import make_certificates
from mpc.mpyc_backend import MPyCBackend
from mpc.party import EXIT_REFUSED, EvaluateJob
from mpc.secure_sum import SumClient, sum_job


def test_secure_sum_over_mutually_authenticated_tls(tmp_path):
    make_certificates(str(tmp_path / "keys"), 3)
    arrays = [np.array([5, -3, 2 ** 20]), np.array([-5, 4, 1])]
    res = MPyCBackend(ssl_dir=str(tmp_path / "keys")).run(sum_job([SumClient(a) for a in arrays], 3, 2 ** 21))
    assert list(res.values) == [0, 1, 2 ** 20 + 1]


def _party(tmp_path, *args):
    prog = tmp_path / "p.program"
    prog.write_bytes(pickle.dumps(EvaluateJob(None)))
    return subprocess.run([sys.executable, "-m", "mpc.party", "--program", str(prog), *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, message", [
    (["--index", "0", "--parties", "127.0.0.1:9001,127.0.0.1:9001,127.0.0.1:9002"], "duplicate party addresses"),
    (["--index", "3", "--parties", "127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003"], "index 3 out of range"),
    (["--index", "0", "--parties", "127.0.0.1:9001"], "need at least 2 parties"),
    (["--index", "1", "--parties", "127.0.0.1:9001,127.0.0.1:9002", "--ssl", "--ssl-dir", "/nonexistent"],
     "--ssl needs mpyc_ca.crt, party_1.crt, party_1.key"),
])
def test_bad_party_configuration_is_refused(tmp_path, args, message):
    res = _party(tmp_path, *args)
    assert res.returncode == EXIT_REFUSED
    assert message in res.stderr


def test_wrong_party_count_is_refused_before_sharing():
    from mpc.backend import FixedClient, Job
    from mpc.launch import MPCError
    from mpc.program import SumProgram

    # the job's columns belong to 3 clients, but only 2 client processes take part
    job = Job(program=SumProgram.gram_program(3), col_bounds=[1, 1, 1], n_records=2, var_owner=[0, 1, 2],
              clients=[FixedClient(np.ones((2, 1), np.int64), 9), FixedClient(np.ones((2, 2), np.int64), 9)])
    with pytest.raises(MPCError, match=r"belong to clients \[1, 2, 3\] but 2 clients joined"):
        MPyCBackend().run(job)
