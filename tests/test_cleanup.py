"""Nothing left behind (sqm.mpc.net.launch.Launch): a launcher killed or interrupted mid-job takes its party processes
and its private folder with it; a killed ``--index`` wrapper takes its party; files are owner-only.

Each test gives the launcher a private TMPDIR and looks for leftovers there and in /proc."""
import asyncio
import os
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

from sqm.mpc.net import wire
from sqm.mpc.net.launch import Launch, party_env
from sqm.mpc.net.party import PartyProgram

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)


class WaitAll(PartyProgram):
    """Every party sends to every party; client 2 first writes ``marker`` and waits ``hold_s`` (the job runs)."""

    def __init__(self, marker: str, hold_s: float = 120.0):
        self.marker, self.hold_s = marker, hold_s

    async def run(self, ctx):
        if ctx.pid == 2:
            open(self.marker, "w").close()
            await asyncio.sleep(self.hold_s)
        return await ctx.send_recv({p: ctx.pid for p in range(ctx.M)}, range(ctx.M), wire.value(int, "an index"),
                                   "everyone")


LAUNCHER = """
import faulthandler, signal, sys
faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for a traceback if the launcher hangs
# Ctrl-C as in a foreground terminal: a test run started in the background by a non-interactive shell inherits
# SIGINT ignored, and so would this launcher (then it rightly ignores the test's SIGINT)
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path[:0] = [{tests!r}, {root!r}]
from test_cleanup import WaitAll
from sqm.mpc.net.launch import run_parties
run_parties([WaitAll({marker!r}) for _ in range(3)], timeout=300)
"""

WRAPPER = """
import sys
sys.path[:0] = [{root!r}]
from sqm.framework.spec import load_job
from sqm.framework.runners import run_one
from sqm.apps.pca import PCAJobTask
run_one(load_job({job!r}), 1, PCAJobTask(n_components=1, epsilon=1.0, delta=1e-5, gamma=1024.0), timeout=300,
        connect_timeout=120)
"""


def live_processes_naming(text: str) -> list[int]:
    """Processes (not zombies) whose command line holds ``text``."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text.encode() in cmd and state != "Z":
            pids.append(int(d))
    return pids


def wait_until(cond, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def private_tmp(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    return str(tmpdir), dict(os.environ, TMPDIR=str(tmpdir))


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["KILL", "TERM", "INT"])
def test_stopped_launcher_leaves_no_party_and_no_file(tmp_path, sig):
    tmpdir, env = private_tmp(tmp_path)
    marker = str(tmp_path / "holding")
    with open(tmp_path / "launcher.err", "w") as err:  # the launcher writes to its own copy of the descriptor
        launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER.format(tests=TESTS, root=ROOT, marker=marker)],
                                    env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        assert wait_until(lambda: os.path.exists(marker), 60), "the job did not start"
        parties = live_processes_naming(os.path.join(tmpdir, "sqm-job-"))
        assert len(parties) == 3
        (job,) = os.listdir(tmpdir)
        folder = os.path.join(tmpdir, job)
        assert job.startswith("sqm-job-") and mode(folder) == 0o700
        files = os.listdir(folder)
        assert sorted(f for f in files if f.endswith(".program")) == [f"party{i}.program" for i in range(3)]
        plain = [f for f in files if os.path.isfile(os.path.join(folder, f))]
        assert all(mode(os.path.join(folder, f)) == 0o600 for f in plain)  # programs hold client data
        keys = os.path.join(folder, "keys")  # the job's own TLS keys (sqm.mpc.net.launch.run_parties): owner-only
        assert mode(keys) == 0o700 and mode(os.path.join(keys, "party_0.key")) == 0o600
        launcher.send_signal(sig)
        try:
            launcher.wait(10)
        except subprocess.TimeoutExpired:  # show where it hangs
            launcher.send_signal(signal.SIGUSR1)
            time.sleep(1)
            pytest.fail(f"the launcher did not exit within 10 s of {sig.name}; its stack:\n"
                        f"{(tmp_path / 'launcher.err').read_text()}")
        assert wait_until(lambda: not any(live_processes_naming(os.path.join(tmpdir, "sqm-job-"))), 5), \
            "party processes outlived the launcher"
        assert wait_until(lambda: not os.listdir(tmpdir), 5), f"left behind: {os.listdir(tmpdir)}"
    finally:
        launcher.kill()
        for pid in live_processes_naming(tmpdir):
            os.kill(pid, signal.SIGKILL)


def test_killed_index_wrapper_takes_its_party_with_it(tmp_path):
    from sqm.framework.spec import write_party_csvs

    tmpdir, env = private_tmp(tmp_path)
    X = np.random.default_rng(0).normal(size=(20, 4)) / 5
    job = write_party_csvs(X, tmp_path / "job", 2, min_intersection=1)
    wrapper = subprocess.Popen([sys.executable, "-c", WRAPPER.format(root=ROOT, job=job)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # client 1 alone: its party process waits for the others to connect
        tag = os.path.join(tmpdir, "sqm-party-")
        assert wait_until(lambda: len(live_processes_naming(tag)) == 1, 60), "the party did not start"
        (folder,) = os.listdir(tmpdir)
        assert mode(os.path.join(tmpdir, folder)) == 0o700
        assert mode(os.path.join(tmpdir, folder, "program")) == 0o600
        wrapper.kill()
        wrapper.wait(10)
        assert wait_until(lambda: not live_processes_naming(tag), 5), "the party outlived its wrapper"
        assert wait_until(lambda: not os.listdir(tmpdir), 5), f"left behind: {os.listdir(tmpdir)}"
    finally:
        wrapper.kill()
        for pid in live_processes_naming(tmpdir):
            os.kill(pid, signal.SIGKILL)


def test_files_a_party_writes_are_owner_only_and_removed(tmp_path):
    write = "import sys; open(sys.argv[1], 'w').write('result')"
    with Launch("sqm-test-") as job:
        assert mode(job.dir) == 0o700
        path = job.path("result")
        assert job.start([sys.executable, "-c", write, path], party_env()).wait() == 0
        assert mode(path) == 0o600  # the party's umask is 077
        folder = job.dir
    assert not os.path.exists(folder)
