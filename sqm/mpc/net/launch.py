"""Start all parties of a job as separate OS processes on this machine (loopback TCP) and collect results."""
from __future__ import annotations

import contextlib
import logging
import os
import pickle
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import typing
from pathlib import Path

from sqm.mpc.net import failures, logs
from sqm.errors import SQMError, UsageError
from sqm.errors import EXIT_BAD_DATA, EXIT_ERROR, job_exit_code
from sqm.mpc.net.liveness import IDLE_TIMEOUT_S

log = logging.getLogger(__name__)

_ROOT = str(Path(__file__).resolve().parent.parent)


class MPCError(SQMError, RuntimeError):
    """A party failed or refused; no result was released.  ``codes``: each party's exit code (party index ->
    code, :mod:`sqm.errors`; a negative code: killed by that signal); ``exit_code``: the job's root cause;
    ``headline``: the first line (who failed and why, :mod:`sqm.mpc.net.failures`), ``details``: one line per
    party, each cause once; ``messages``: each failed party's own last words, in full.  ``str(e)``: the headline,
    then the details indented, one a line."""

    def __init__(self, message: str, codes: dict | None = None, details: list[str] | None = None,
                 messages: dict[int, str] | None = None):
        self.headline, self.details = message, list(details or [])
        super().__init__("\n  ".join([message, *self.details]))
        self.codes = dict(codes or {})
        self.messages = dict(messages or {})
        self.exit_code = job_exit_code(self.codes) or EXIT_ERROR

    @classmethod
    def of(cls, outcomes: dict, codes: dict | None = None) -> MPCError:
        """The error of a job whose parties ended as ``outcomes`` (:class:`sqm.mpc.net.failures.Outcome` by party)."""
        first, details = failures.report(outcomes)
        codes = codes if codes is not None else {i: o.code for i, o in outcomes.items()}
        messages = {i: " / ".join(o.lines) for i, o in outcomes.items() if o.code not in (None, 0)}
        return cls(first, codes, details + ["no result released"], messages)


LOCAL_PORTS_ENV = "SQM_LOCAL_PORTS"


def local_port_range() -> tuple[int, int] | None:
    """The loopback port range for local jobs from ``$SQM_LOCAL_PORTS`` ("LO-HI", e.g. "20000-20999": ports a
    firewall allows, or disjoint ranges for concurrent launchers such as parallel test workers); None: any
    free port the operating system picks."""
    spec = os.environ.get(LOCAL_PORTS_ENV, "").strip()
    if not spec:
        return None
    try:
        lo, hi = (int(x) for x in spec.split("-"))
    except ValueError:
        raise UsageError(f"${LOCAL_PORTS_ENV} must be LO-HI (e.g. 20000-20999), got {spec!r}") from None
    if not 1024 <= lo <= hi <= 65535:
        raise UsageError(f"${LOCAL_PORTS_ENV}: need 1024 <= LO <= HI <= 65535, got {spec!r}")
    return lo, hi


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports free right now (from ``$SQM_LOCAL_PORTS`` if set, see
    :func:`local_port_range`)."""
    span = local_port_range()
    candidates = [0] * n if span is None else secrets.SystemRandom().sample(range(span[0], span[1] + 1),
                                                                            span[1] - span[0] + 1)
    socks = []
    try:
        for port in candidates:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            socks.append(s)
            if len(socks) == n:
                return [s.getsockname()[1] for s in socks]
        raise RuntimeError(f"fewer than {n} free loopback ports in ${LOCAL_PORTS_ENV}={os.environ[LOCAL_PORTS_ENV]}")
    finally:
        for s in socks:
            s.close()


def check_listen_addresses(addresses: list[str]) -> None:
    """Refuse at once a job whose parties this launcher starts where one cannot listen on its address (another
    process holds the port, or the host is not this machine's), naming the party and the port: its peers would
    otherwise dial the other program until their handshake or connect timeout.  Parties 1.. listen (the server
    only dials, :mod:`sqm.mpc.net.session`); a port taken between this probe and the party's start is still
    refused by the party itself."""
    import errno

    from sqm.errors import EXIT_REFUSED

    for i, a in enumerate(addresses):
        host, _, port = a.rpartition(":")
        if i == 0 or not port.isdigit():
            continue  # a malformed address is the party's own refusal
        with socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's listener: TIME_WAIT is no owner
            try:
                s.bind((host.strip("[]"), int(port)))
            except OSError as e:
                why = (f"port {port} on {host} is in use" if e.errno == errno.EADDRINUSE else
                       f"cannot listen on {a}: {e.strerror or e}")
                raise MPCError(f"{failures.who(i)}: {why}", codes={i: EXIT_REFUSED},
                               details=[f"{party_name(i)}: {why} (another program holds it: stop it, or give the "
                                        f"party another port); no party was started", "no result released"],
                               messages={i: why}) from None


def party_name(i: int) -> str:
    return "server (party 0)" if i == 0 else f"client {i} (party {i})"


def require_two_clients(n_clients: int, where: str = "") -> None:
    """Refuse a secret-sharing job with fewer than two clients, before any party process starts.

    With M = n + 1 parties the Shamir threshold is t = (M - 1) // 2; one client gives t = 0, a degree-0
    "sharing" in which every party's share, the server's included, is the client's data itself."""
    if n_clients < 2:
        raise UsageError(f"{where}a secret-sharing job needs at least two clients, got {n_clients}: with one "
                         f"client the threshold is t = 0 and the server's share would be the client's data "
                         f"in the clear; refused")


def party_env(local_parties: int = 1, blas_threads: int | None = None) -> dict:
    """Environment for a ``python -m sqm.mpc.net.party`` child: it imports what this process can (programs are
    pickled by reference to their classes), and ``local_parties`` parties sharing this machine's cores get
    an equal share of BLAS threads each (unless the environment sets them), or ``blas_threads`` if given."""
    env = dict(os.environ)
    path = [_ROOT] + [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path + [env.get("PYTHONPATH", "")]))
    threads = str(max(1, (os.cpu_count() or 1) // max(1, local_parties)))
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if blas_threads is not None:
            env[var] = str(int(blas_threads))
        else:
            env.setdefault(var, threads)
    env.update({k: v for k, v in MALLOC_ENV.items() if k not in os.environ})
    return env


# glibc's malloc serves arrays above its (adaptive) mmap threshold with fresh pages and returns them on free, so
# every chunk's share arrays would page-fault anew: an 8962 x 39 modular addition took 6-7 ms that way and
# 0.6-0.7 ms with these settings, a Shamir sharing 38 vs 10 ms (busy 2-core machine).  Arrays up to 256 MiB
# come from the heap and are reused; freed memory stays with the process (its peak is what counts).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(256 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def new_job_id() -> str:
    """A fresh job id: 128 random bits in hex (every party of one job gets the same)."""
    return secrets.token_hex(16)


def party_command(program_file: str, index: int, addresses: str, result_file: str, timeout: float,
                  connect_timeout: float, ssl_dir: str | None = None, job_id: str | None = None,
                  job_name: str | None = None, insecure_plaintext: bool = False,
                  pins: dict[int, str] | str | None = None) -> list[str]:
    """The command line starting party ``index`` of job ``job_id`` (``addresses``: comma-separated host:port
    of all parties).  ``ssl_dir``: TLS with this party's keys (``sqm keys``; certificates naming the job
    ``job_name``, if given); ``insecure_plaintext``: the operator's opt-in to plain TCP (no peer
    authentication, on loopback too); ``pins``: the job's pinned key fingerprints (``{party: "sha256:..."}``, or
    the party's ``--pins`` text).  The party logs at this process's level
    (:func:`sqm.mpc.net.logs.party_level_args`)."""
    if job_id is None:
        raise UsageError("a party needs its job's id (the same fresh id at every party of the job)")
    cmd = [sys.executable, "-m", "sqm.mpc.net.party", "--program", program_file, "--index", str(index),
           "--parties", addresses, "--result", result_file, "--timeout", str(timeout),
           "--connect-timeout", str(connect_timeout), "--job-id", job_id, *logs.party_level_args()]
    if ssl_dir is not None:
        cmd += ["--ssl", "--ssl-dir", os.path.abspath(ssl_dir)]
    if job_name is not None:
        cmd += ["--job-name", job_name]
    if insecure_plaintext:
        cmd.append("--insecure-plaintext")
    if pins:
        from sqm.mpc.net.certs import format_pins

        cmd += ["--pins", pins if isinstance(pins, str) else format_pins(pins)]
    return cmd


_RECORDERS: list[list] = []  # the lists of open record_jobs() blocks


@contextlib.contextmanager
def record_jobs():
    """Within this block every :func:`run_parties` call of this process appends its records (the list it returns)
    to the list yielded: how a benchmark or a test reads the parties' timelines and statistics of a job it ran
    through a higher-level API (e.g. :meth:`sqm.mechanism.release.SQM.run`, which returns the release only)."""
    jobs: list = []
    _RECORDERS.append(jobs)
    try:
        yield jobs
    finally:
        _RECORDERS.remove(jobs)


def run_parties(programs: list, timeout: float = 3600.0, connect_timeout: float = 60.0,
                extra_args: list[str] | None = None, on_start=None, addresses=None,
                ssl_dir: str | None = None, blas_threads: int | None = None, min_clients: int = 1,
                idle_timeout: float = IDLE_TIMEOUT_S, job_id: str | None = None, job_name: str | None = None,
                insecure_plaintext: bool = False, pins: dict[int, str] | None = None) -> list[dict]:
    """Run ``programs[i]`` as party ``i`` in its own process; return each party's result record.

    ``ssl_dir``: a folder holding every party's keys (``party_i.crt``, ``party_i.key`` and ``mpyc_ca.crt``):
    every connection runs over mutually authenticated TLS (its certificates naming job ``job_name``, if given);
    ``pins``: the job's pinned key fingerprints by party (:func:`party_command`).  Without one (and unless
    ``insecure_plaintext``), this launcher makes a fresh authority and one key per party for
    this job alone, in its private folder (0700, keys 0600, removed with it), and every connection runs over TLS
    with them: on a shared host, loopback has no peer check, and another local user who reads the command lines
    (the job id and addresses are public there) could otherwise connect as a party; without the keys its
    handshake fails and it is dropped (:mod:`sqm.mpc.net.session`).  ``job_id``: the job's id (a job
    file's; default a fresh random one), agreed by all parties before anything else.  ``blas_threads``: BLAS threads per
    party (default: this machine's cores / M).  ``min_clients``: 2 for a job that Shamir-shares client data (refused
    before any process starts, see :func:`require_two_clients`); 1 only for protocols without shares (two parties).
    ``timeout``: seconds for the whole job; ``idle_timeout``: seconds without any bytes from a peer whose
    message is awaited before every party aborts naming it (a stopped or partitioned party, see
    :mod:`sqm.mpc.net.liveness`).

    If any party fails, the others are stopped (they also stop by themselves on losing the connection)
    and :class:`MPCError` names the failed party and its message.  Nothing outlives this call: the party
    processes and the private job folder (programs, results, messages) go away however it ends, a SIGKILL
    of this process included (see :class:`Launch`).

    Each record's ``timeline`` (the party's own wall-clock stamps, :func:`sqm.mpc.net.party.main`) gets this process's:
    ``spawned`` (just before the party's process was started), ``exited`` (its exit seen, within 20 ms) and
    ``collected`` (its result file read back).
    """
    M = len(programs)
    if M < 2:
        raise UsageError(f"a job needs a server and at least one client; got {M} parties")
    if min_clients >= 2:
        require_two_clients(M - 1)
    if addresses is not None:  # e.g. from a job file; default: free loopback ports
        if len(addresses) != M:
            raise UsageError(f"{len(addresses)} party addresses for {M} parties")
        addrs = ",".join(str(a).strip() for a in addresses)
        check_listen_addresses([str(a).strip() for a in addresses])
    else:
        addrs = ",".join(f"127.0.0.1:{p}" for p in free_ports(M))
    job_id = job_id or new_job_id()
    # the M parties share this machine's cores: BLAS threads beyond a party's share only spin against each
    # other (a 20,000 x 120 Gram product took 0.43 s with 2 threads per party, 0.023 s with 1)
    env = party_env(local_parties=M, blas_threads=blas_threads)
    log.info(f"starting {M} party processes (server and {M - 1} clients) at {addrs}")
    with Launch("sqm-job-") as job:
        if ssl_dir is None and not insecure_plaintext:
            from sqm.mpc.net.certs import check_job_name, make_certificates

            try:
                cert_job = check_job_name(job_name) if job_name is not None else "sqm-local"
            except ValueError:  # a job name certificates cannot hold: the parties agree on the default instead
                cert_job, job_name = "sqm-local", None
            make_certificates(job.path("keys"), M, days=2, job=cert_job)
            ssl_dir = job.path("keys")
        files = [job.write(f"party{i}.program", prog) for i, prog in enumerate(programs)]
        results = [job.path(f"party{i}.result") for i in range(M)]
        for i in range(M):
            cmd = party_command(files[i], i, addrs, results[i], timeout, connect_timeout, ssl_dir, job_id,
                                job_name, insecure_plaintext, pins)
            job.start(cmd + ["--idle-timeout", f"{idle_timeout:g}"] + (extra_args or []), env,
                      messages=job.path(f"party{i}.err"))
        procs = job.procs
        if on_start is not None:
            on_start(procs)
        stopped: set[int] = set()
        failed = _wait(procs, timeout + connect_timeout + 30, job.reaped, stopped=stopped)
        errors = {i: job.read_text(f"party{i}.err").strip() for i in range(M)}
        if log.isEnabledFor(logging.INFO):  # each party logged at this process's level: show its lines
            for i in range(M):
                for line in errors[i].splitlines():
                    log.info(line)
        if failed:
            raise MPCError.of({i: failures.Outcome(procs[i].returncode, _words(errors[i]), i in stopped)
                               for i in range(M)}) from None
        records = [job.load(rf) for rf in results]
        for i, rec in enumerate(records):
            if isinstance(rec, dict):
                rec.setdefault("timeline", {}).update(spawned=job.spawned_at[i], exited=job.exited_at.get(i),
                                                      collected=time.time())
        for jobs in _RECORDERS:
            jobs.append(records)
        return records


def _words(stderr: str) -> list[str]:
    """A party's logged lines, its role prefix taken off (its last words last: the launcher's error quotes them;
    a party whose own input is unusable logged its detail, the column, the line, the path, before them)."""
    return [logs.strip_role(ln) for ln in stderr.strip().splitlines() if ln.strip()]


def _last_words(stderr: str, code: int) -> str:
    """A failed process's message in one line (a shard worker's, for its party's operator): its last line; for one
    whose own input is unusable (BAD_DATA) every line it logged, the detail it kept from its peers included."""
    lines = _words(stderr)
    if not lines:
        return "(no message)"
    return " / ".join(lines) if code == EXIT_BAD_DATA else lines[-1]


# after a party fails, the seconds the others get to notice and say why before they are stopped (a lone survivor,
# whose peers have all exited: LONE_S)
STOP_GRACE_S = 30.0
LONE_S = 5.0


def _wait(procs, deadline_s: float, on_exit=None, grace_s: float | None = None, lone_s: float | None = None,
          stopped: set | None = None) -> list[int]:
    """Wait for all; on the first failure give the others ``grace_s`` to notice (a lone survivor, whose peers
    have all exited, ``lone_s``), then kill them, adding their indices to ``stopped``.  ``on_exit(p)`` is called
    once for each process reaped."""
    grace_s = STOP_GRACE_S if grace_s is None else grace_s
    lone_s = LONE_S if lone_s is None else lone_s
    start = time.monotonic()
    failed_at: float | None = None
    last_exit: float | None = None
    seen = set()
    while True:
        codes = [p.poll() for p in procs]
        now = time.monotonic()
        for i, c in enumerate(codes):
            if c is not None and i not in seen:
                seen.add(i)
                last_exit = now
                if on_exit is not None:
                    on_exit(procs[i])
        bad = [i for i, c in enumerate(codes) if c not in (None, 0)]
        if bad and failed_at is None:
            failed_at = now
        if all(c is not None for c in codes):
            return [i for i, c in enumerate(codes) if c != 0]
        lone = len(procs) - len(seen) == 1 and last_exit is not None and now - last_exit > lone_s
        if (failed_at is not None and (now - failed_at > grace_s or lone)) or now - start > deadline_s:
            for i, p in enumerate(procs):
                if p.poll() is None:
                    p.kill()
                    if stopped is not None:
                        stopped.add(i)
            for p in procs:
                p.wait()
                if on_exit is not None and procs.index(p) not in seen:
                    on_exit(p)
            return [i for i, p in enumerate(procs) if p.returncode != 0]
        time.sleep(0.02)


# ----- nothing left behind ----------------------------------------------------------------------------------
# A janitor process per launch: it reads the launcher's notes on its stdin ("dir PATH", "pid N", "done N",
# "clean") and, when its stdin reaches end of file without "clean" (the launcher died: SIGKILL, SIGTERM, a
# crash), kills the listed party process groups and removes the folder.  A pipe's end of file comes however
# the writer dies, which no signal handler can promise.
_JANITOR = """
import os, shutil, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
folder, pids, clean = None, set(), False
for line in sys.stdin:
    kind, _, arg = line.strip().partition(" ")
    if kind == "dir": folder = arg
    elif kind == "pid": pids.add(int(arg))
    elif kind == "done": pids.discard(int(arg))
    elif kind == "clean": clean = True
if not clean:
    for pid in pids:
        try: os.killpg(pid, signal.SIGKILL)
        except OSError: pass
if folder: shutil.rmtree(folder, ignore_errors=True)
"""

_PR_SET_PDEATHSIG = 1


def _parent_death_signal():
    """A ``preexec_fn`` (Linux): the child gets SIGKILL when the thread that started it dies (the launcher
    blocks in that thread until its children exit), and exits at once if the launcher is already gone."""
    try:
        import ctypes
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the janitor and the launcher's own cleanup remain
        return None
    parent = os.getpid()

    def preexec():
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the launcher died between fork and prctl
            os._exit(1)
    return preexec


class Launch:
    """A private folder (0700; files written 0600) and the party processes started from it, neither of which
    outlives this process however it ends.

    - normal exit or an exception (KeyboardInterrupt included): :meth:`close` kills the parties still
      running and removes the folder;
    - SIGKILL, SIGTERM or a crash of this process: each party dies with it (``PR_SET_PDEATHSIG`` on Linux),
      and a janitor process, which sees its stdin close, kills their process groups and removes the folder.

    Parties run in their own sessions, so a terminal's Ctrl-C reaches this process only, which stops them.
    """

    def __init__(self, prefix: str = "sqm-job-"):
        self.dir = tempfile.mkdtemp(prefix=prefix)  # mode 0700
        self.procs: list[subprocess.Popen] = []
        self.spawned_at: list[float] = []  # time.time() just before each process was started
        self.exited_at: dict[int, float] = {}  # process index -> time.time() when its exit was seen
        self._logs: list[typing.IO[str]] = []
        try:
            self._janitor = subprocess.Popen([sys.executable, "-I", "-S", "-c", _JANITOR], stdin=subprocess.PIPE,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                             start_new_session=True, text=True)
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        self._note(f"dir {self.dir}")

    def _note(self, line: str) -> None:
        stdin = self._janitor.stdin
        assert stdin is not None  # started with stdin=PIPE
        try:
            stdin.write(line + "\n")
            stdin.flush()
        except (OSError, ValueError):  # the janitor is gone: this process's own cleanup remains
            pass

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def write(self, name: str, obj) -> str:
        """Pickle ``obj`` to a new owner-only (0600) file in the folder; return its path."""
        path = self.path(name)
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            pickle.dump(obj, f, protocol=5)
        return path

    def load(self, path: str):
        with open(path, "rb") as f:
            return pickle.load(f)

    def read_text(self, name: str) -> str:
        try:
            with open(self.path(name), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def start(self, cmd: list[str], env: dict, messages: str | None = None) -> subprocess.Popen:
        """Start a party process: its files are owner-only (umask 077), it dies with this process, and its
        stderr goes to ``messages`` (a file in the folder; no pipe to fill up), else to this process's."""
        err = None
        if messages is not None:
            err = os.fdopen(os.open(messages, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w")
            self._logs.append(err)
        spawned = time.time()
        p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL if messages is not None else None, stderr=err,
                             umask=0o077, start_new_session=True, preexec_fn=_parent_death_signal())
        self.procs.append(p)
        self.spawned_at.append(spawned)
        self._note(f"pid {p.pid}")
        return p

    def reaped(self, p: subprocess.Popen) -> None:
        """``p`` has exited and been waited for: its pid may be reused, the janitor must not signal it."""
        i = next((k for k, q in enumerate(self.procs) if q is p), None)
        if i is not None:
            self.exited_at.setdefault(i, time.time())
        self._note(f"done {p.pid}")

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait()
            self.reaped(p)
        for f in self._logs:
            f.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        self._note("clean")
        stdin = self._janitor.stdin
        assert stdin is not None  # started with stdin=PIPE
        with contextlib.suppress(OSError):
            stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._janitor.wait(5)

    def __enter__(self) -> Launch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def private_folder(prefix: str):
    """A private temporary folder (0700) removed however this process ends (see :class:`Launch`)."""
    with Launch(prefix) as job:
        yield job.dir
