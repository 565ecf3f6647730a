"""Parameter domains declared once (issue 26, part 5; sqm.mechanism.validation.DOMAINS): every entry point refuses a
privacy parameter outside its domain with the same UsageError, and no module keeps a hand-written copy of a domain."""
from __future__ import annotations

import math
import pathlib
import re

import numpy as np
import pytest

from sqm.errors import UsageError
from sqm.mechanism.validation import DOMAINS, Interval, check_param

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("value, inside", [(0.5, True), (1e-12, True), (0, False), (1, False), (-0.1, False),
                                           (float("nan"), False), (True, False), ("0.5", False),
                                           (np.float32(0.1), True)])
def test_the_delta_domain(value, inside):
    assert (value in DOMAINS["delta"]) == inside


def test_domains_describe_themselves():
    assert Interval(0, 1, "neither").describe() == "lie in (0, 1)"
    assert Interval(1, math.inf, "left").describe() == "be a finite number >= 1"
    assert Interval(0, math.inf, "right").describe() == "be > 0 (math.inf allowed)"
    with pytest.raises(UsageError, match=r"^a budget delta must lie in \(0, 1\), got 2$"):
        check_param("delta", 2, "a budget delta")


def _entry_points(tmp_path):
    from sqm.apps.hdp_vfl.estimator import HDPLogisticRegression
    from sqm.apps.logreg import SQMLogisticRegression
    from sqm.apps.pca import SQMPCA
    from sqm.mechanism.accounting import calibrate_mu, epsilon
    from sqm.mechanism.calibration import gaussian_sigma
    from sqm.mechanism.ledger import Ledger
    from sqm.mechanism.release import SQM
    from sqm.mechanism.polynomial import covariance

    X, y = np.random.default_rng(0).normal(size=(20, 4)) * 0.1, np.arange(20) % 2
    return {
        "SQM": lambda d: SQM(covariance(2), 64.0, epsilon=1.0, delta=d),
        "calibrate_mu": lambda d: calibrate_mu(1.0, d, 1.0, 1.0),
        "accounting.epsilon": lambda d: epsilon([2.0, 4.0], [0.1, 0.2], d),
        "gaussian_sigma": lambda d: gaussian_sigma(1.0, 1.0, d),
        "Ledger.set_budget": lambda d: Ledger(str(tmp_path / "l.sqlite")).set_budget("census", 1.0, d),
        "SQMPCA": lambda d: SQMPCA(n_components=1, epsilon=1.0, delta=d).fit(X),
        "SQMLogisticRegression": lambda d: SQMLogisticRegression(epsilon=1.0, delta=d, backend="in-process").fit(X, y),
        "HDPLogisticRegression": lambda d: HDPLogisticRegression(epsilon=1.0, delta=d).fit(X, y),
    }


def test_every_entry_point_refuses_delta_outside_its_domain_the_same_way(tmp_path):
    for name, call in _entry_points(tmp_path).items():
        with pytest.raises(UsageError, match=r"delta must lie in \(0, 1\), got 1\.5") as err:
            call(1.5)
        assert isinstance(err.value, ValueError), name


def test_the_command_line_uses_the_same_domain():
    import argparse

    from sqm.cli.options import budget

    with pytest.raises(argparse.ArgumentTypeError, match=r"--budget's delta must lie in \(0, 1\), got 1\.5"):
        budget("1,1.5")
    assert budget("3,1e-5") == (3.0, 1e-5)


def test_no_module_writes_the_delta_domain_by_hand():
    hand = re.compile(r"0\s*<\s*(self\.|m\.)?delta\s*<\s*1")
    found = [f"{p.relative_to(ROOT)}:{i}" for d in ("sqm", "bench") for p in (ROOT / d).rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if hand.search(line)]
    assert not found, found
