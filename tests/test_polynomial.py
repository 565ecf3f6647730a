import numpy as np
import pytest

from sqm.mechanism.compensation import compensate
from sqm.mechanism.polynomial import Polynomial, covariance, logreg_gradient
from sqm.mechanism.quantize import stochastic_round


def rand_poly():
    # f_0 = 2 x0^2 x2 - 0.5 x1 + 3,  f_1 = x0 x1 + 1.25 x2^3
    return Polynomial.from_exponents(
        [[2.0, -0.5, 3.0], [1.0, 1.25]],
        [[[2, 0, 1], [0, 1, 0], [0, 0, 0]], [[1, 1, 0], [0, 0, 3]]])


def test_evaluation_matches_numpy_reference():
    X = np.random.default_rng(0).normal(size=(40, 3))
    p = rand_poly()
    ref = np.array([np.sum(2 * X[:, 0] ** 2 * X[:, 2] - 0.5 * X[:, 1] + 3),
                    np.sum(X[:, 0] * X[:, 1] + 1.25 * X[:, 2] ** 3)])
    assert np.allclose(p.evaluate(X), ref)
    assert np.allclose(p.evaluate_rows(X).sum(0), ref)
    assert p.degree == 3 and p.n_out == 2 and p.n_vars == 3


def test_integer_evaluation_is_exact():
    X = np.random.default_rng(1).integers(-2**20, 2**20, size=(30, 3))
    p = Polynomial.from_exponents([[2, -1, 3], [1, 5]], [[[2, 0, 1], [0, 1, 0], [0, 0, 0]], [[1, 1, 0], [0, 0, 3]]])
    y = p.evaluate_integer(X)
    Xo = X.astype(object)
    ref0 = sum(2 * r[0] ** 2 * r[2] - r[1] + 3 for r in Xo)
    ref1 = sum(r[0] * r[1] + 5 * r[2] ** 3 for r in Xo)
    assert y[0] == ref0 and y[1] == ref1  # beyond int64: 2^60 * 30 terms


def test_covariance_and_logreg_builders():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(25, 4))
    assert np.allclose(covariance(4).evaluate(X), (X.T @ X).ravel())
    Xi = rng.integers(-1000, 1000, size=(25, 4))
    assert np.array_equal(covariance(4).evaluate_integer(Xi).astype(np.int64), (Xi.T @ Xi).ravel())
    w = rng.normal(size=3)
    y = (rng.random(25) < 0.5).astype(float)
    D = np.c_[X[:, :3], y]
    ref = (X[:, :3] * (0.5 + X[:, :3] @ w / 4 - y)[:, None]).sum(0)
    g = logreg_gradient(w)
    assert np.allclose(g.evaluate(D), ref)
    assert g.degree == 2
    # label column placed first
    g0 = logreg_gradient(w, label_index=0)
    assert np.allclose(g0.evaluate(np.c_[y, X[:, :3]]), ref)


@pytest.mark.parametrize("gamma", [16.0, 1000.0, 2.0 ** 12])
def test_compensation_scales_every_degree_to_gamma_lambda_plus_one(gamma):
    p = rand_poly()  # degrees 3, 1, 0 and 2, 3
    comp = compensate(p, gamma, seed=0)
    assert comp.scale == gamma ** 4
    scales = gamma ** (1 + 3 - p.term_degrees)
    assert np.array_equal(scales, comp.coefficient_scales())
    for a, s, ahat in zip(p.term_coef, scales, comp.int_coefs, strict=False):
        assert abs(ahat - a * s) < 1  # stochastic rounding of a * gamma^(1+lambda-lambda_l)
    # with data scaled by gamma (integers here so rounding is exact), every monomial ends up scaled
    # by gamma^(lambda+1): the compensated integer result / scale equals the polynomial
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 2.0]])
    xi = (x * gamma).astype(np.int64)
    y = comp.program().evaluate(xi)
    exact_rounded = np.zeros(2)
    for t, ahat, mono, deg in zip(p.term_out, comp.int_coefs, p.term_vars, p.term_degrees, strict=False):
        exact_rounded[t] += (ahat * np.prod([x[:, j] for j in mono], axis=0).sum() * gamma ** deg if mono
                             else ahat * 2 * 1.0)
    assert np.allclose(np.array([float(v) for v in y]), exact_rounded, rtol=1e-12)
    assert np.allclose(np.array([float(v) for v in y]) / comp.scale, p.evaluate(x), rtol=2 / gamma, atol=8 / gamma)


def test_covariance_is_not_preprocessed():
    comp = compensate(covariance(3), 64.0, seed=0)
    assert not comp.preprocessed and comp.scale == 64.0 ** 2


def test_bad_polynomials_raise():
    with pytest.raises(ValueError, match="negative exponents"):
        Polynomial.from_exponents([[1.0]], [[[1, -1]]])
    with pytest.raises(ValueError, match="columns, expected"):
        Polynomial.from_exponents([[1.0], [1.0]], [[[1, 0]], [[1, 0, 0]]])
    with pytest.raises(ValueError, match="exponents must be integers"):
        Polynomial.from_exponents([[1.0]], [[[0.5, 1]]])
    with pytest.raises(ValueError, match="has 3 variables but the data has 2"):
        rand_poly().evaluate(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="NaN"):
        logreg_gradient([np.nan, 1.0])


def test_quantized_estimate_converges_as_gamma_grows():
    """Lemma 4: with mu = 0 the SQM estimate tends to the exact value as gamma grows."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(200, 3)) / 3
    p = rand_poly()
    exact = p.evaluate(X)
    errs = []
    for gamma in [2.0 ** 4, 2.0 ** 8, 2.0 ** 12, 2.0 ** 16]:
        comp = compensate(p, gamma, seed=1)
        y = comp.program().evaluate(stochastic_round(X, gamma, seed=2))
        errs.append(np.abs(np.array([float(v) for v in y]) / comp.scale - exact).max())
    assert errs[-1] < 1e-2 * errs[0]
    assert errs[-1] < 1e-3
    assert all(b < a for a, b in zip(errs, errs[1:], strict=False))
