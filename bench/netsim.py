"""A simulated network between the real party processes of a job on one machine: a loopback TCP proxy that
delays (or cuts) what crosses it, and the hook that sends a party process's connections through it.

This machine's kernel has no ``sch_netem`` (``tc qdisc ... netem`` fails), so delay is added in user space:

- :class:`DelayProxy` listens on a loopback port (in a thread of the bench process) and forwards each
  connection to its target; each direction holds every chunk it reads for ``delay_ms`` from the moment it was
  read, then writes it (order preserved, each chunk forwarded as soon as it is due: a one-way delay, no
  bandwidth cap).  :meth:`DelayProxy.cut` partitions it: nothing crosses any more, no socket is closed.
  With a fixed ``target`` it forwards to that address; without one each connection names its destination in a
  one-line preamble (``SQM-NETSIM host port``) written by the hook, so one proxy serves every link of a job.
- :data:`HOOK` is a ``sitecustomize`` module for a party process (on its PYTHONPATH, see :func:`hook_dir`):
  its asyncio connections are redirected without changing its job file or command line, either
  ``SQM_NETSIM_REDIRECT="h:p=h2:p2,..."`` (those addresses only, to fixed proxies: ``python -m bench faults``'
  partition), or ``SQM_NETSIM_PROXY="127.0.0.1:P"`` (every loopback destination, through the proxy at P
  with the preamble: ``python -m bench latency``).
- :func:`delayed_parties` is the context manager that does both for every party process started inside it
  (by :func:`sqm.mpc.net.launch.run_parties` or anything else copying this process's environment): every link of the
  job crosses the proxy once, so each message takes ``delay_ms`` one way.

Only loopback addresses are used (the proxy refuses to forward elsewhere); whatever is started is stopped
on exit (the proxy thread, its sockets, the hook folder, the environment variables).
"""
from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import shutil
import tempfile
import threading
import time

PREAMBLE = b"SQM-NETSIM"
REDIRECT_ENV, PROXY_ENV = "SQM_NETSIM_REDIRECT", "SQM_NETSIM_PROXY"

# sitecustomize for a party process: its asyncio connections go through a proxy (see the module docstring)
HOOK = '''\
import os
_spec, _proxy = os.environ.get("SQM_NETSIM_REDIRECT"), os.environ.get("SQM_NETSIM_PROXY")
if _spec or _proxy:
    import asyncio.base_events as _be
    import ipaddress as _ip
    import socket as _socket

    def _addr(a):
        h, p = a.rsplit(":", 1)
        return h, int(p)

    _map = dict(tuple(map(_addr, item.split("="))) for item in _spec.split(",")) if _spec else {}
    _via = _addr(_proxy) if _proxy else None
    _orig = _be.BaseEventLoop.create_connection

    def _loopback(host):
        try:
            return host == "localhost" or _ip.ip_address(host).is_loopback
        except ValueError:
            return False

    async def create_connection(self, protocol_factory, host=None, port=None, *args, **kwargs):
        if (host, port) in _map:
            host, port = _map[(host, port)]
        elif _via is not None and host is not None and _loopback(host) and (host, port) != _via:
            sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await self.sock_connect(sock, _via)
                await self.sock_sendall(sock, b"SQM-NETSIM %s %d\\n" % (host.encode(), int(port)))
            except BaseException:
                sock.close()
                raise
            kwargs.pop("local_addr", None)
            return await _orig(self, protocol_factory, *args, sock=sock, **kwargs)
        return await _orig(self, protocol_factory, host, port, *args, **kwargs)

    _be.BaseEventLoop.create_connection = create_connection
'''


def _is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class DelayProxy:
    """A loopback TCP proxy in a thread of its own (see the module docstring): every chunk waits ``delay_ms``
    each way; ``target`` (host, port), or None to read each connection's destination from its preamble.
    :meth:`cut` stops it forwarding in both directions: what arrives is read and dropped (counted in
    ``dropped``), no socket is closed (a partition)."""

    def __init__(self, target: tuple[str, int] | None = None, delay_ms: float = 0.0, connect_wait_s: float = 120.0):
        if delay_ms < 0:
            raise ValueError(f"delay must be >= 0 ms, got {delay_ms!r}")
        if target is not None and not _is_loopback(target[0]):
            raise ValueError(f"the proxy forwards to loopback addresses only, not {target[0]!r}")
        self.target, self.delay, self.connect_wait_s = target, float(delay_ms) / 1e3, connect_wait_s
        self.is_cut, self.dropped, self.forwarded, self.connections = False, 0, 0, 0
        self.late: list[float] = []  # per chunk forwarded: seconds written after its due time (the thread's lag)
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="sqm-netsim-proxy")
        self._writers: list = []
        self.port = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> int:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the delay proxy did not start")
        return self.port

    def cut(self) -> None:
        self.is_cut = True

    def close(self) -> None:
        if not self._thread.is_alive():
            return

        def stop():
            for w in self._writers:
                w.close()
            self.loop.stop()
        self.loop.call_soon_threadsafe(stop)
        self._thread.join(5)

    def __enter__(self) -> DelayProxy:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()
        server.close()
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.close()

    async def _handle(self, reader, writer):
        # the proxy is closing: end quietly (asyncio would log the cancellation)
        with contextlib.suppress(asyncio.CancelledError):
            await self._forward(reader, writer)

    async def _forward(self, reader, writer):
        self._writers.append(writer)
        target = self.target
        if target is None:  # the hook's preamble names the destination
            try:
                line = await asyncio.wait_for(reader.readline(), 10)
                tag, host, port = line.decode().split()
                if tag.encode() != PREAMBLE or not _is_loopback(host):
                    raise ValueError(line)
                target = (host, int(port))
            except (TimeoutError, ValueError, UnicodeDecodeError, OSError):
                writer.close()
                return
        t0 = time.monotonic()
        while True:  # the target may not listen yet (parties start together): wait for it, as a route would
            try:
                up_reader, up_writer = await asyncio.open_connection(*target)
                break
            except OSError:
                if time.monotonic() - t0 > self.connect_wait_s:
                    writer.close()
                    return
                await asyncio.sleep(0.02)
        self._writers.append(up_writer)
        self.connections += 1
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader, writer):
        """One direction: a reader task stamps each chunk with its due time, a writer task sends it then."""
        queue: asyncio.Queue = asyncio.Queue()

        async def deliver():
            while True:
                due, data = await queue.get()
                wait = due - self.loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    writer.close()
                    return
                writer.write(data)
                self.forwarded += len(data)
                self.late.append(self.loop.time() - due)
                try:
                    await writer.drain()
                except OSError:
                    return
        sender = asyncio.ensure_future(deliver())
        try:
            while True:
                try:
                    data = await reader.read(1 << 16)
                except OSError:
                    data = b""
                if self.is_cut:  # partitioned: nothing crosses, not even the end of a connection
                    self.dropped += len(data)
                    if not data:
                        return
                    continue
                queue.put_nowait((self.loop.time() + self.delay, data))
                if not data:
                    break
            await sender
        finally:
            if not sender.done():
                sender.cancel()


@contextlib.contextmanager
def hook_dir(extra: str = ""):
    """A temporary folder holding :data:`HOOK` (plus ``extra`` code) as ``sitecustomize.py``; removed on exit."""
    folder = tempfile.mkdtemp(prefix="sqm-netsim-")
    try:
        with open(os.path.join(folder, "sitecustomize.py"), "w") as f:
            f.write(HOOK + extra)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def delayed_parties(delay_ms: float):
    """Every party process started inside the block (from this process's environment) reaches every other
    party through one :class:`DelayProxy` adding ``delay_ms`` one way to each link (0: the proxy still runs,
    so the 0 ms baseline pays the same hop).  Yields the proxy; its thread, the hook folder and the
    environment variables are gone afterwards."""
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", PROXY_ENV, REDIRECT_ENV)}
    with hook_dir() as folder, DelayProxy(None, delay_ms) as proxy:
        try:
            os.environ["PYTHONPATH"] = os.pathsep.join([folder] + ([saved["PYTHONPATH"]] if saved["PYTHONPATH"]
                                                                   else []))
            os.environ[PROXY_ENV] = proxy.address
            os.environ.pop(REDIRECT_ENV, None)
            yield proxy
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
