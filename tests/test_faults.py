"""Fault injection on real party processes (a subset of ``sqm bench faults``): issue 12's acceptance.

Each case runs one small job-file SQM-PCA job (1 server + 2 clients, each a ``python -m mpc.party`` process
with the case's own TMPDIR) and injects one fault; every party that was not itself killed or stopped must
exit non-zero within 30 s of the fault, each message naming the culprit, with no result released, nothing
left in the TMPDIR and no process left running.  ``stopped`` runs with a 3 s idle timeout to stay short.
"""
from __future__ import annotations

import pytest

from bench import faults

pytestmark = pytest.mark.slow

# cases -> extra flags for every party (passed only if python -m mpc.party has them)
CASES = {"kill-compute": {}, "foreign-party": {}, "port-squatted": {}, "stopped": {"--idle-timeout": 3}}
# mechanisms of issue 12 that did not work yet when this module was written: criterion -> reason.  A case
# listed here is reported as xfail only when that criterion really fails; any other failure fails the test.
PENDING: dict[str, dict[str, str]] = {}


@pytest.fixture(scope="module")
def supported():
    return faults.party_flags()


@pytest.mark.parametrize("case", list(CASES))
def test_fault_case(case, supported):
    flags = []
    for opt, val in CASES[case].items():
        if opt not in supported:
            pytest.xfail(f"python -m mpc.party has no {opt}: the case needs it")
        flags += [opt, str(val)]
    rec = faults.run_case(case, flags=flags, bound=30.0, deadline=35.0, supported=supported)
    assert rec["applied"], f"{case}: the fault did not land at its step: {rec['per_party']}"
    observed = {**rec["criteria"], "nothing_left_in_tmpdir": not rec["tmp_leftovers"],
                "no_process_left": not rec["leftover_processes"]}
    failed = [k for k, v in observed.items() if not v]
    detail = (f"{case}: failed {failed}; exits {[p['exit'] for p in rec['per_party']]}, "
              f"{rec['seconds_to_last_exit']} s, messages {[p['message'] for p in rec['per_party']]}, "
              f"TMPDIR {rec['tmp_leftovers']}")
    pending = PENDING.get(case, {})
    if failed and all(k in pending for k in failed):
        pytest.xfail("; ".join(pending[k] for k in failed) + " -- " + detail)
    assert not failed, detail
    assert rec["passed"]
