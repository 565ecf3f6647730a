"""One MPyC party process: ``python -m sqm.mpc.net.party --program FILE --index I --parties H0:P0,H1:P1,...``.

The program file holds only what this party may see: the public job and, for a client, its own input
program.  Party 0 is the server.  On a lost peer or a refused job the process prints a message naming the
problem and exits non-zero (the table in :mod:`sqm.errors`: 3 refused, 4 lost party, 5 timeout, 6 its own
input unusable, 1 other error); nothing is released.

Every party of a job gets the same ``--job-id`` (a fresh random 128-bit id) and address list.  Connecting
(:mod:`sqm.mpc.net.session`): each party listens on its own job address only; a peer's identity is checked on both
sides of every connection; every connection runs over mutually authenticated TLS (``--ssl-dir``: keys made with
``sqm keys``; ``--pins``: the key fingerprints the job pins), loopback ones too: plain TCP has no peer check, so on
a shared host another user who reads the command lines could connect as a party or listen first at a party's
address.  Plain TCP needs the
operator's ``--insecure-plaintext`` (sqm's local launchers make per-job keys themselves).  The first exchange then
compares every party's job description (job id, job name, addresses, program, pins): a party of another job is refused,
naming it and what differs.

The program file is a pickle read from this party's own disk, never from the network: it must be written by
this party's own operator (``sqm ... --job --index I`` writes it on the party's host).  Everything peers send
is a typed frame (:mod:`sqm.mpc.net.wire`), checked at each step and never unpickled.

A party imports only what its program needs: this module's top imports the standard library alone (the
protocol, numpy and MPyC come when the job runs), the program file's pickle imports its program's modules, and
the party's record says which heavy packages were loaded (``heavy_modules``, :data:`HEAVY_MODULES`) and when
each step of its start happened (``timeline``: wall-clock ``time.time()`` stamps, see :func:`main`).
"""
from __future__ import annotations

import time

STARTED_AT = time.time()  # this process's first statement of ours (python -m sqm.mpc.net.party): before every import

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402

from sqm.mpc.net.mpyc_version import check_mpyc_version  # noqa: E402
from sqm.mpc.net import logs  # noqa: E402
from sqm.errors import BadDataError, RefusedError, SQMError, exit_code, public_text  # noqa: E402
from sqm.errors import (EXIT_BAD_DATA, EXIT_ERROR, EXIT_LOST, EXIT_REFUSED,  # noqa: F401,E402  (re-exported)
                        EXIT_TIMEOUT, EXIT_USAGE)
from sqm.mpc.net.liveness import (IDLE_TIMEOUT_S, PROGRESS_TIMEOUT_S, PartyLost, PeerSilent,  # noqa: E402
                       heartbeat_period, install_loss_detection, start_keep_alive)

log = logging.getLogger(__name__)

# Packages a party process of a secure statistic has no use for (learning, plotting, accounting libraries): a
# party's record lists those that were imported (the party's program pulled them in through its pickle).
HEAVY_MODULES = ("torch", "sklearn", "scipy", "dp_accounting", "opacus", "matplotlib", "pandas")

# The party-program API's names that live in sqm.mpc.net.abort and sqm.mpc.net.wire (numpy), imported on first use
# (PEP 562) so that importing this module, as every party program's module does, costs the standard library alone.
_LAZY = {"InputRefused": "sqm.mpc.net.abort", "ProtocolError": "sqm.mpc.net.abort",
         "public_digest": "sqm.mpc.net.abort", "messages": "sqm.mpc.net.wire"}

__all__ = ["PartyProgram", "describe", "failure", "abort_reason", "main", "HEAVY_MODULES",
           "heavy_modules", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    if name == "messages":  # sqm.mpc.net.wire itself
        return importlib.import_module(_LAZY[name])
    return getattr(importlib.import_module(_LAZY[name]), name)


def heavy_modules() -> list[str]:
    """The packages of :data:`HEAVY_MODULES` this process has imported."""
    return [m for m in HEAVY_MODULES if m in sys.modules]


# The party-program API: an application's party program needs PartyProgram, the errors it raises to refuse
# (ProtocolError; InputRefused for its own unusable input), ``public_digest`` (of public parameters) and ``messages``
# (sqm.mpc.net.wire's validators of what a step expects: messages.value, messages.array, ...); it runs on
# sqm.mpc.net.launch.run_parties or sqm.mpc.protocols.inprocess.run_in_process.  Applications import these from here,
# never the runtime's internals.


class PartyProgram:
    """A picklable program run by a party: ``await program.run(ctx)`` returns this party's result."""

    async def run(self, ctx):  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> str:
        """This program's public description, equal at every party of a job and compared before anything else
        (no seed, no data, no file path): by default the class name (that of the wrapped program for a wrapper
        holding it as ``inner``).  Programs with public options include them."""
        inner = getattr(self, "inner", None)
        if isinstance(inner, PartyProgram):
            return inner.describe()
        return type(self).__name__


def describe(program) -> str:
    d = getattr(program, "describe", None)
    return str(d()) if callable(d) else type(program).__name__


def failure(e: BaseException, who: str, timeout: float) -> tuple[int, str]:
    """The exit code (:mod:`sqm.errors`) and the message line of a party whose program ended with ``e``
    (a peer's lost connection aside): one classification for real party processes and in-process runs."""
    code = exit_code(e)  # one table (sqm.errors): the error's class decides
    if isinstance(e, BadDataError):  # this party's own input is unusable: the others were told the reason only
        detail = f" ({e.detail})" if e.detail else ""
        return code, f"sqm.mpc.net.party {who}: refused its own input: {e}{detail}; job aborted, nothing released"
    if code == EXIT_TIMEOUT:
        return code, f"sqm.mpc.net.party {who}: timeout: {str(e) or f'the job did not finish within {timeout:g} s'}"
    if isinstance(e, SQMError):
        return code, f"sqm.mpc.net.party {who}: {e}"
    return EXIT_ERROR, f"sqm.mpc.net.party {who}: {type(e).__name__}: {e}"


def abort_reason(e: BaseException, who: str) -> str:
    """What every peer is told when this party's program raised ``e`` (:func:`sqm.errors.public_text`'s rule): a
    refusal's public reason, otherwise the exception's type only (its message may hold this party's data)."""
    if isinstance(e, RefusedError):
        return f"{who} refused: {public_text(e)}"
    return f"{who} failed ({public_text(e) if getattr(e, 'shareable', False) else type(e).__name__})"


def peak_rss_bytes(usage=None) -> int:
    """This process's peak resident memory: Linux's ``VmHWM`` (the high-water mark of this process's own memory
    since its exec), else ``ru_maxrss``.  Not ``ru_maxrss`` first: Linux keeps it across exec, so a party started by
    a launcher holding 400 MiB would report at least 400 MiB (noticed by ``python -m bench peers``, which samples
    VmHWM)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    usage = usage or resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_maxrss * 1024  # Linux: KiB


def _parser() -> argparse.ArgumentParser:
    """The party process's options (the launcher writes them; an operator reads them with --help)."""
    ap = argparse.ArgumentParser(prog="python -m sqm.mpc.net.party", description=__doc__.splitlines()[0])
    ap.add_argument("--program", required=True, help="pickled PartyProgram for this party")
    ap.add_argument("--index", type=int, required=True, help="this party's index (0 = server)")
    ap.add_argument("--parties", required=True, help="comma-separated host:port of all parties, in index order")
    ap.add_argument("--result", help="where to write this party's result (pickle)")
    ap.add_argument("--job-id", required=True,
                    help="this job's id (32 hex digits, fresh per job, the same at every party): a party of "
                         "another job is refused")
    ap.add_argument("--job-name", help="the job's name in the parties' certificates (default: the name in this "
                                       "party's own certificate)")
    ap.add_argument("--ssl", action="store_true",
                    help="mutually authenticated TLS (the default unless --insecure-plaintext; with it, TLS anyway); "
                         "keys made with sqm keys")
    ap.add_argument("--ssl-dir", default=".config",
                    help="folder holding mpyc_ca.crt, party_I.crt and party_I.key (default: .config)")
    ap.add_argument("--pins", default=None, metavar="I=sha256:HEX,...",
                    help="the public-key fingerprints the job file pins, by party: a peer whose certificate holds "
                         "another key for a pinned party is refused, and this party refuses to start if its own "
                         "key is not its pin (every party must be given the same pins; needs TLS)")
    ap.add_argument("--insecure-plaintext", action="store_true",
                    help="INSECURE: plain TCP, no peer authentication (across hosts anyone on the path can read "
                         "the shares; on one host another local user can connect as a party); a trusted, isolated "
                         "network or a single-user host only")
    ap.add_argument("--connect-timeout", type=float, default=60.0,
                    help="seconds to wait for every party to connect (default 60)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds before the whole job is abandoned")
    ap.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT_S,
                    help=f"seconds without any bytes from a peer whose message is awaited before the job is "
                         f"aborted naming it (a stopped or partitioned party; default {IDLE_TIMEOUT_S:g}; 0: off)")
    ap.add_argument("--progress-timeout", type=float, default=PROGRESS_TIMEOUT_S,
                    help=f"seconds a peer whose message is awaited may keep sending heartbeats without sending "
                         f"what the step expects (no message, its step unchanged, waiting on no party) before the "
                         f"job is aborted naming it (default {PROGRESS_TIMEOUT_S:g}; a frame in transit gets its "
                         f"size at 1 MiB/s more; 0: off)")
    ap.add_argument("--insecure-pcg64-shares", action="store_true",
                    help="BENCHMARK ONLY (python -m bench bgw-cost --compare-rng): draw Shamir coefficients from "
                         "numpy's PCG64, a statistical generator whose outputs reveal its state, instead of AES-CTR "
                         "keyed from OS entropy; never use it between parties that do not trust each other")
    ap.add_argument("--log-level", default="NOTICE", choices=logs.LEVELS,
                    help="messages shown on stderr, each prefixed by this party's role (default NOTICE: the job it "
                         "is about to run, warnings and errors; the sqm command passes its own: -v INFO, -vv DEBUG, "
                         "-q WARNING, -qq ERROR)")
    return ap


def _addresses(args) -> list[str] | None:
    """Every party's address in index order, or None (the reason logged) when they are too few, repeated or the
    index is out of range."""
    addrs = [a.strip() for a in args.parties.split(",") if a.strip()]
    if len(addrs) < 2:
        log.error("sqm.mpc.net.party: error: need at least 2 parties (a server and a client)")
        return None
    if len(set(addrs)) != len(addrs):
        log.error(f"sqm.mpc.net.party: error: duplicate party addresses in {addrs}")
        return None
    if not 0 <= args.index < len(addrs):
        log.error(f"sqm.mpc.net.party: error: index {args.index} out of range for {len(addrs)} parties")
        return None
    return addrs


def _identity(args, addrs: list[str]):
    """(exit code or None, this party's TLS identity or None for plain TCP, the pinned fingerprints): the job id,
    the pins and the keys checked before anything connects; plain TCP warned about."""
    from sqm.mpc.net.certs import IdentityError, parse_pins
    from sqm.mpc.net.session import check_job_id, is_loopback, plaintext_refusal, split_address

    try:
        check_job_id(args.job_id)
    except ValueError as e:
        log.error(f"sqm.mpc.net.party: error: --job-id: {e}")
        return EXIT_USAGE, None, None
    try:
        pins = parse_pins(args.pins)
    except ValueError as e:
        log.error(f"sqm.mpc.net.party: error: {e}")
        return EXIT_USAGE, None, None
    if pins and args.insecure_plaintext and not args.ssl:
        log.error("sqm.mpc.net.party: error: --pins needs TLS (a pinned key is checked in the TLS handshake): leave "
                  "out --insecure-plaintext")
        return EXIT_USAGE, None, None
    remote = any(not is_loopback(split_address(a)[0]) for a in addrs)
    if args.ssl or not args.insecure_plaintext:
        from sqm.mpc.net.certs import TLSIdentity

        try:
            return None, TLSIdentity(args.ssl_dir, args.index, args.job_name, pins), pins
        except (IdentityError, ValueError, OSError) as e:
            why = "" if args.ssl else f"{plaintext_refusal(addrs)}.  "
            log.error(f"sqm.mpc.net.party: error: {why}{e}")
            return EXIT_REFUSED, None, None
    if remote:
        log.warning(f"sqm.mpc.net.party: WARNING: party {args.index} runs WITHOUT TLS across hosts "
                    f"(--insecure-plaintext): anyone on the path between the parties can read and alter every "
                    f"message; a tap on one client's link alone sees enough of its shares (those it sends and "
                    f"receives) to rebuild its whole quantized input block, and can forge or alter shares undetected")
    else:
        log.warning(f"sqm.mpc.net.party: WARNING: party {args.index} runs plain TCP over loopback "
                    f"(--insecure-plaintext): unauthenticated, so another user of this host could connect as a "
                    f"party or listen first at a party's address and act as it")
    return None, None, pins


def _record(ctx, state: dict, stats: dict, t0: float) -> None:
    """This party's measured costs into ``stats`` once its program has returned."""
    stats["seconds"] = time.perf_counter() - t0
    stats["timeline"]["finished"] = time.time()
    stats["phases"] = dict(ctx.phases)
    stats["exchanges"], stats["waits"] = ctx.exchanges, ctx.waits
    stats["max_loop_stall_s"] = state["max_stall_s"]  # longest blocked stretch of this party's loop
    usage = resource.getrusage(resource.RUSAGE_SELF)
    stats["max_rss_bytes"] = peak_rss_bytes(usage)
    stats["cpu_seconds"] = usage.ru_utime + usage.ru_stime  # this process's, since it started
    stats["heavy_modules"] = heavy_modules()  # what the program's modules pulled in (HEAVY_MODULES)
    stats["bytes_sent"] = ctx.bytes_sent()
    keys = ("seconds", "max_rss_bytes", "bytes_sent", "phases", "timeline", "connect_seconds", "cpu_seconds")
    if ctx.worker_records is not None:  # each shard worker's own record: seconds, peak memory, bytes, phases
        stats["shard_workers"] = [{k: r.get(k) for k in keys} for r in ctx.worker_records]
    if getattr(ctx, "alignment_worker_records", None) is not None:  # the same, of its alignment's buckets
        stats["alignment_workers"] = [{k: r.get(k) for k in keys} for r in ctx.alignment_worker_records]


async def _run(mpc, args, addrs: list[str], tls, pins, program, state: dict, stats: dict):
    """Connect, agree on the job, run the program (telling every peer why if it fails), record, close."""
    from sqm.mpc.net.abort import PartyAborted, ProtocolError
    from sqm.mpc.net.session import SessionSettings, agree_job, job_description, start
    from sqm.mpc.net.transport import PartyTransport

    timeline = stats["timeline"]
    who = "server" if args.index == 0 else f"client {args.index}"
    # with the idle timeout on, "still connecting" heartbeats to the peers reached (sqm.mpc.net.session)
    beat = heartbeat_period(args.idle_timeout) if args.idle_timeout and args.idle_timeout > 0 else None
    session = await start(mpc, addrs, tls, args.connect_timeout, beat)
    timeline["connected"] = time.time()
    log.info(f"connected to {len(addrs) - 1} parties in {session.seconds:.2f} s ({'TLS' if tls else 'plain TCP'})")
    start_keep_alive(mpc, state, args.idle_timeout, args.progress_timeout,  # a silent or stalling peer aborts;
                     args.connect_timeout)  # one still connecting is waited for up to the connect timeout
    t0 = time.perf_counter()
    share_rng = None  # default: AES-CTR keyed from OS entropy (sqm.mpc.shares.randomness)
    if args.insecure_pcg64_shares:
        import numpy as np
        share_rng = np.random.default_rng()
    ctx = PartyTransport(mpc, rng=share_rng)
    job_name = tls.job if tls is not None else args.job_name
    stats["job_digest"] = await agree_job(ctx, job_description(args.job_id, addrs, job_name, describe(program),
                                                               pins))
    ctx.job_digest = stats["job_digest"]
    ctx.session = SessionSettings(args.job_id, job_name, args.ssl_dir if tls is not None else None,
                                  tls is None, args.connect_timeout, args.timeout, args.idle_timeout,
                                  args.progress_timeout, args.pins)  # a shard worker's session starts the same way
    timeline["agreed"] = time.time()
    stats["connect_seconds"] = session.seconds
    log.debug(f"job {args.job_id} agreed: {describe(program)}")
    try:
        result = await asyncio.wait_for(program.run(ctx), args.timeout)
    except (PartyLost, PartyAborted, PeerSilent):
        raise
    except Exception as e:  # noqa: BLE001  tell the others why, so every party names the cause
        await ctx.abort(abort_reason(e, who))
        raise
    _record(ctx, state, stats, t0)
    state["done"] = True
    log.info(f"finished in {stats['seconds']:.2f} s, sent {stats['bytes_sent']:,} bytes; phases "
             + ", ".join(f"{k} {v:.2f} s" for k, v in stats["phases"].items()))
    # the result is complete: a peer that leaves during the closing barrier cannot spoil it
    with contextlib.suppress(TimeoutError, PartyLost, ProtocolError):
        await asyncio.wait_for(ctx.close(), 10.0)
    timeline["closed"] = time.time()
    return result


def _lost_code(mpc, state: dict, who: str, e: Exception) -> int:
    """The exit code of a party whose peer left: an abort notice still in flight names the cause (REFUSED or
    TIMEOUT), else LOST."""
    from sqm.mpc.net.abort import ProtocolError

    # A peer that left may have left because another party aborted the job, whose notice is still in
    # flight on another connection: the first abort notice is the cause, so give it a moment to arrive.
    with contextlib.suppress(Exception):
        mpc._loop.run_until_complete(asyncio.sleep(0.5))
    if state["aborted"] is not None:
        log.error(f"sqm.mpc.net.party {who}: {state['aborted']}")
        return EXIT_TIMEOUT if issubclass(state.get("abort_exc", ProtocolError), TimeoutError) else EXIT_REFUSED
    log.error(f"sqm.mpc.net.party {who}: {e}; job aborted, nothing released")
    return EXIT_LOST


def main(argv=None, warm: bool = False) -> int:
    """Run one party (see the module's docstring); its result file holds ``{"result": ..., **stats}``.

    ``stats["timeline"]``: wall-clock stamps (``time.time()``, comparable between the processes of one machine)
    of this party's start: ``started`` (this module's first statement, interpreter start-up before it),
    ``main`` (the standard library imported), ``unpickled`` (the program file read: its modules imported),
    ``ready`` (MPyC and the protocol imported: about to connect), ``connected`` (every peer connected),
    ``agreed`` (the job description agreed), ``finished`` (the program returned), ``closed`` (the closing
    barrier passed) and ``writing`` (the result about to be pickled); :func:`sqm.mpc.net.launch.run_parties` adds
    ``spawned``, ``exited`` and ``collected`` to each record.  ``connect_seconds``: the connect phase as
    :mod:`sqm.mpc.net.session` timed it.  ``warm``: a warm process (:mod:`sqm.mpc.net.warm`) given its job now: its
    ``started`` and ``main`` are this moment, and its record says ``warm``."""
    timeline = {"started": time.time() if warm else STARTED_AT, "main": time.time()}
    args = _parser().parse_args(argv)
    logs.configure(args.log_level, logs.role(args.index))
    if args.insecure_pcg64_shares:
        log.warning(f"sqm.mpc.net.party: WARNING: party {args.index} draws its share randomness from PCG64 "
                    f"(--insecure-pcg64-shares, benchmark only): its shares are not cryptographically hidden")
    addrs = _addresses(args)
    if addrs is None:
        return EXIT_USAGE
    with open(args.program, "rb") as f:
        program = pickle.load(f)
    timeline["unpickled"] = time.time()
    if args.result:
        args.result = os.path.abspath(args.result)
    refused, tls, pins = _identity(args, addrs)
    if refused is not None:
        return refused

    mpyc_argv = [sys.argv[0]]
    for a in addrs:
        mpyc_argv += ["-P", a]
    mpyc_argv += ["-I", str(args.index), "--no-log", "--no-prss"]
    sys.argv = mpyc_argv
    try:
        check_mpyc_version()
    except RuntimeError as e:
        log.error(f"sqm.mpc.net.party: error: {e}")
        return EXIT_USAGE
    from mpyc.runtime import mpc  # noqa: E402  (MPyC reads sys.argv at import)

    state = {"done": False, "lost": set(), "aborted": None}
    install_loss_detection(state)
    who = "server" if args.index == 0 else f"client {args.index}"
    stats = {"timeline": timeline, "warm": bool(warm)}
    code = 0
    try:
        timeline["ready"] = time.time()
        result = mpc.run(_run(mpc, args, addrs, tls, pins, program, state, stats))
        if args.result:
            timeline["writing"] = time.time()
            with open(args.result + ".tmp", "wb") as f:
                pickle.dump({"result": result, **stats}, f, protocol=5)
            os.replace(args.result + ".tmp", args.result)
    except PartyLost as e:
        code = _lost_code(mpc, state, who, e)
    except Exception as e:  # noqa: BLE001
        code, line = failure(e, who, args.timeout)
        log.error(line)
    logging.shutdown()
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(code)  # do not wait on sockets of lost peers

if __name__ == "__main__":
    if sys.argv[1:2] == ["--warm"]:  # a warm party (sqm.mpc.net.warm): imports first, then one job from stdin
        from sqm.mpc.net.warm import wait_for_job

        job = wait_for_job(sys.argv[3].split(",") if sys.argv[2:3] == ["--preload"] else [])
        sys.exit(0 if job is None else main(job, warm=True))
    sys.exit(main())
