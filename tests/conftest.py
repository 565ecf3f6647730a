"""Test-session setup: parallel workers (pytest-xdist) get disjoint loopback port ranges for their party
processes (``$SQM_LOCAL_PORTS``, see :func:`mpc.launch.local_port_range`), below the operating system's
ephemeral range, so two workers' jobs never pick the same port between choosing it and listening on it."""
import os

_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw"):
    _k = int(_worker[2:])
    os.environ["SQM_LOCAL_PORTS"] = f"{20000 + 1000 * _k}-{20999 + 1000 * _k}"
