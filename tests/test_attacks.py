"""Issue 43's trust attacks through real party processes (the quick cases of ``python -m bench faults``,
:mod:`bench.attacks`): each must end in a named refusal or an unaffected job, nothing released over wrong data."""
from __future__ import annotations

import pytest

from bench import attacks

QUICK = ["jobfile-engine", "score-solve", "score-identity", "ledger-names", "ledger-drain", "psi-label-server",
         "hiding-rerun"]


@pytest.mark.slow
@pytest.mark.parametrize("case", QUICK)
def test_attack_case(case):
    rec = attacks.run_attack(case)
    failed = [k for k, v in rec["criteria"].items() if not v]
    assert not failed and rec["passed"], f"{case}: failed {failed}: {rec}"


def test_every_quick_case_is_a_bench_case():
    assert set(QUICK) <= set(attacks.ATTACKS)
