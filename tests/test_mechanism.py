import numpy as np
import pytest

from sqm.mechanism import accounting
from sqm.mechanism.release import SQM
from sqm.mechanism.polynomial import covariance, logreg_gradient
from sqm.mechanism.vertical import VerticalData


def digits_like(m=300, n=8, seed=0):
    X = np.random.default_rng(seed).random((m, n))
    return X / np.linalg.norm(X, axis=1).max()


def test_sqm_covariance_plain_report_and_error():
    X = digits_like()
    data = VerticalData.split(X, 3)
    mech = SQM(covariance(8), 4096.0, epsilon=1.0, delta=1e-5, seed=7)
    res = mech.run(data)
    r = res.report
    assert r.epsilon_server <= 1.0 + 1e-9
    assert r.epsilon_client is not None and r.epsilon_client > r.epsilon_server  # (n-1)/n of the noise, 2x sens.
    assert res.scale == 4096.0 ** 2
    exact = (X.T @ X).ravel()
    # noise std on the rescaled estimate is sqrt(2 mu) / gamma^2 per entry; 6 sigma tolerance
    tol = 6 * np.sqrt(2 * r.mu) / 4096.0 ** 2 + 1e-3
    assert np.max(np.abs(res.estimate - exact)) < tol
    # the raw result is exactly an integer vector
    assert all(isinstance(v, int) for v in res.raw)


def test_sqm_same_seed_same_integers_and_different_without_seed():
    data = VerticalData.split(digits_like(50, 4), 2)
    a = SQM(covariance(4), 256.0, mu=100.0, seed=3).run(data).raw
    b = SQM(covariance(4), 256.0, mu=100.0, seed=3).run(data).raw
    c = SQM(covariance(4), 256.0, mu=100.0).run(data).raw
    assert list(a) == list(b)
    assert list(a) != list(c)


def test_sqm_logreg_gradient_noise_off_large_gamma():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(100, 5))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * 1.01
    y = (rng.random(100) < 0.5).astype(float)
    w = rng.normal(size=5) * 0.3
    g = logreg_gradient(w)
    data = VerticalData([X[:, :2], np.c_[X[:, 2:], y]])
    # mu tiny: essentially noise-free; the label column is part of client 2's block
    res = SQM(g, 2.0 ** 16, mu=1e-12, seed=0, row_norm_bound=2.0).run(data)
    ref = (X * (0.5 + X @ w / 4 - y)[:, None]).sum(0)
    assert np.allclose(res.estimate, ref, atol=5e-3)


def test_per_party_clipping_is_reported():
    X = digits_like(40, 4) * 3  # rows of norm up to 3 > c = 1
    data = VerticalData.split(X, 2)
    res = SQM(covariance(4), 64.0, mu=10.0, seed=0).run(data)
    assert sum(res.clipped) > 0


@pytest.mark.parametrize("kwargs, match", [
    (dict(gamma=0.5, epsilon=1.0), "gamma"),
    (dict(gamma=64.0, epsilon=0.0), "epsilon"),
    (dict(gamma=64.0, epsilon=-1.0), "epsilon"),
    (dict(gamma=64.0, epsilon=1.0, delta=0.0), "delta"),
    (dict(gamma=64.0, epsilon=1.0, delta=1.0), "delta"),
    (dict(gamma=64.0, mu=0.0), "mu"),
    (dict(gamma=64.0, mu=-2.0), "mu"),
    (dict(gamma=64.0), "either mu or a target epsilon"),
])
def test_bad_parameters_raise(kwargs, match):
    gamma = kwargs.pop("gamma")
    with pytest.raises(ValueError, match=match):
        SQM(covariance(4), gamma, **kwargs)


def test_bad_data_raises_before_randomness(monkeypatch):
    import sqm.mechanism.release as mech_mod

    def boom(*a, **k):
        raise AssertionError("randomness drawn before validation")

    monkeypatch.setattr(mech_mod, "spawn_seeds", boom)
    mech = SQM(covariance(4), 64.0, mu=10.0)
    X = digits_like(20, 4)
    with pytest.raises(ValueError, match="has 4 variables but the parties hold 3"):
        mech.run(VerticalData.split(X[:, :3], 3))
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        mech.run(VerticalData.split(bad, 2))
    with pytest.raises(ValueError, match="different record counts"):
        VerticalData([X[:, :2], X[:10, 2:]])
    with pytest.raises(ValueError, match="2-D"):
        VerticalData([X[:, 0], X[:, 1:]])
    with pytest.raises(ValueError, match="holds no columns"):
        VerticalData([X, np.zeros((20, 0))])


def test_calibrated_mu_is_minimal():
    data = VerticalData.split(digits_like(30, 4), 2)
    mech = SQM(covariance(4), 128.0, epsilon=2.0, delta=1e-5)
    sens, report = mech.plan(data)
    eps_s, _ = accounting.privacy_report(report.mu, 1e-5, sens.l1, sens.l2, n_parties=2)
    assert eps_s <= 2.0 + 1e-9
    eps_less, _ = accounting.privacy_report(0.99 * report.mu, 1e-5, sens.l1, sens.l2, n_parties=2)
    assert eps_less > 2.0


# ----- per-column bounds, the structured-polynomial interface, sqm_round in a long-lived program ----------
def test_column_bounds_per_column_and_groups_must_stay_in_one_party():
    from sqm.mechanism.vertical import ColumnBounds

    X = digits_like(30, 4) * 2
    data = VerticalData.split(X, 2)
    res = SQM(covariance(4), 64.0, mu=10.0, column_bounds=[0.5, 0.5, 0.25, 2.0], seed=0).run(data)
    assert res.clipped[1] == int(np.sum(np.abs(X[:, 2]) > 0.25))  # column 3 clipped alone, column 4 within 2
    spans = ColumnBounds(((0, 1, 2), (3,)), (1.0, 1.0))
    with pytest.raises(ValueError, match=r"spans parties \[1, 2\]"):
        SQM(covariance(4), 64.0, mu=10.0, column_bounds=spans).run(data)
    with pytest.raises(ValueError, match="not both"):
        SQM(covariance(4), 64.0, mu=10.0, column_bounds=[1.0] * 4, party_bounds=[0.5, 0.5])
    blocks = ColumnBounds.blocks([3, 1, 2], [1.0, 0.5, 2.0])  # one group per party's block
    assert blocks.groups == ((0, 1, 2), (3,), (4, 5)) and blocks.bounds == (1.0, 0.5, 2.0)
    assert [len(blocks.local([3, 1, 2], p)) for p in range(3)] == [1, 1, 1]


def test_sqm_round_in_a_long_lived_party_program():
    """Two releases awaited by one program per party (in process): the first equals SQM.run's bit for bit."""
    from sqm.mpc.protocols.inprocess import run_in_process
    from sqm.mpc.net.party import PartyProgram
    from sqm.mechanism.release import sqm_round
    from sqm.mechanism.rng import make_rng, spawn_seeds

    data = VerticalData.split(digits_like(40, 4), 2)
    mech = SQM(covariance(4), 256.0, mu=50.0, seed=11)
    plan, _ = mech.round_plan(data.col_counts, data.n_records)

    class TwoRounds(PartyProgram):
        def __init__(self, seed, block=None):
            self.seed, self.block = seed, block

        async def run(self, ctx):
            rng = make_rng(self.seed)
            return [await sqm_round(ctx, mech.polynomial, self.block, plan, rng) for _ in range(2)]

    seeds = spawn_seeds(11, 3)
    recs = run_in_process([TwoRounds(None)] + [TwoRounds(s, b) for s, b in zip(seeds[1:], data.blocks, strict=False)])
    first, second = recs[0]["result"]
    assert list(first.raw) == list(mech.run(data).raw)
    assert list(second.raw) != list(first.raw)  # fresh rounding and noise: the clients' streams go on
    assert recs[1]["result"][0].clipped == mech.run(data).clipped[0] and recs[1]["result"][0].raw is None


def test_clients_refuse_coefficients_that_are_not_roundings():
    """Public coefficients are checked by every client before any share is sent."""
    from sqm.mpc.net.launch import MPCError
    from sqm.mechanism.compensation import CompensatedPolynomial
    from sqm.mechanism.polynomial import Polynomial

    class Cheating(Polynomial):
        def compensate(self, gamma, seed=None, preprocess="auto"):
            good = super().compensate(gamma, seed, preprocess)
            return CompensatedPolynomial(self, gamma, (good.int_coefs[0] + 5,) + good.int_coefs[1:], good.scale, True)

    p = Polynomial.from_exponents([[0.3, 1.0]], [[[1, 0], [1, 1]]])
    cheat = Cheating(p.n_vars, p.n_out, p.term_out, p.term_coef, p.term_vars)
    data = VerticalData.split(digits_like(20, 2), 2)
    assert SQM(p, 64.0, mu=10.0, seed=0).run(data).raw is not None
    with pytest.raises(MPCError, match="not a rounding"):
        SQM(cheat, 64.0, mu=10.0, seed=0).run(data)
