"""Test-session setup: parallel workers (pytest-xdist) get disjoint loopback port ranges for their party
processes (``$SQM_LOCAL_PORTS``, see :func:`sqm.mpc.net.launch.local_port_range`), below the operating system's
ephemeral range, so two workers' jobs never pick the same port between choosing it and listening on it."""
import os

import pytest

_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw"):
    _k = int(_worker[2:])
    os.environ["SQM_LOCAL_PORTS"] = f"{20000 + 1000 * _k}-{20999 + 1000 * _k}"

@pytest.fixture
def real_dataset():
    """``real_dataset("adult")``: the folder of a real dataset in the data home (``$SQM_DATA``, else
    ``~/sqm_data``), every file verified.  Missing there, the test is skipped with a message naming
    ``sqm data fetch NAME``, unless ``$SQM_REQUIRE_DATA=1`` (CI): then it fails."""
    def get(name: str) -> str:
        from sqm.data.datahome import DataMissing, fetch

        try:
            return fetch(name, download_if_missing=False)
        except DataMissing as e:
            if os.environ.get("SQM_REQUIRE_DATA") == "1":
                pytest.fail(f"$SQM_REQUIRE_DATA=1 and {e}")
            pytest.skip(str(e))
    return get


def _same_state(a, b) -> bool:
    import torch

    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same_state(x, y)
                                                                         for x, y in zip(a, b, strict=False))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu())
    return a == b


@pytest.fixture
def same_state():
    """Whether two nested state dicts (a torch module's or optimizer's) are equal: the same keys and
    bit-identical tensors."""
    return _same_state


def one_by_one(job_path) -> tuple[str, dict]:
    """A local job file (every party's file and model in it) as parties started one by one get it: the shared job
    file beside it (``shared.json``: no party's own settings) and, per party, the options its operator gives on
    its own command line instead (``--data-file``, ``--model``)."""
    from sqm.framework.spec import load_job, write_shared_job

    local = load_job(job_path)
    shared = write_shared_job(job_path, os.path.join(os.path.dirname(os.path.abspath(job_path)), "shared.json"))
    extras = {i: ([] if p.file is None else ["--data-file", p.file]) + ([] if p.model is None else ["--model", p.model])
              for i, p in enumerate(local.parties)}
    return shared, extras


def joined(err: str) -> str:
    """``err`` with the face's break of a long usage error undone (:func:`sqm.cli.command.short_first_line` breaks
    a first line of 160 characters or more at a clause boundary; where depends on the length of the paths in it,
    so a test's substring would straddle the break on one machine and not on another)."""
    import re

    return re.sub(r"(?m)^(sqm: error: [^\n]*)\n  ", r"\1 ", err)


class _JoinedCapture:
    """pytest's capsys, its ``readouterr().err`` :func:`joined`; ``readouterr(raw=True)`` as printed."""

    def __init__(self, inner):
        self._inner = inner

    def readouterr(self, raw: bool = False):
        r = self._inner.readouterr()
        return r if raw else type(r)(r.out, joined(r.err))

    def __getattr__(self, name):
        return getattr(self._inner, name)


@pytest.fixture
def capsys(capsys):
    return _JoinedCapture(capsys)
