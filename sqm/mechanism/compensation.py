"""Coefficient compensation (Algorithm 3, lines 1-3 of the SQM paper).

With data quantized at scale gamma, a monomial of degree lambda_l comes out scaled by gamma^lambda_l.  Each
coefficient is therefore scaled by gamma^(1 + lambda - lambda_l) and stochastically rounded, so that every
monomial comes out scaled by the same gamma^(lambda + 1); the server divides the result by that scale.
A polynomial whose coefficients are already integers and whose monomials all have degree lambda (the
covariance) needs no pre-processing: its output scale is gamma^lambda.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from sqm.mpc.protocols.program import SumProgram

from .rng import SeedLike, make_rng
from .validation import check_gamma
from sqm.errors import UsageError

if TYPE_CHECKING:  # annotations only: Polynomial.compensate delegates here
    from .polynomial import Polynomial, StructuredPolynomial


@dataclass(frozen=True)
class CompensatedPolynomial:
    polynomial: StructuredPolynomial  # a Polynomial (compensate's), or a statistic rounding its own coefficients
    gamma: float
    int_coefs: tuple[int, ...] | None  # None: the polynomial's own integer coefficients
    scale: float  # the server divides the integer result by this
    preprocessed: bool

    def program(self) -> SumProgram:
        return self.polynomial.program(self.int_coefs)

    def coefficient_scales(self) -> np.ndarray:
        """gamma^(1 + lambda - lambda_l) for each term (1 where not pre-processed)."""
        if not self.preprocessed:
            return np.ones(len(self.int_coefs or ()))
        poly = cast("Polynomial", self.polynomial)  # term degrees: a Polynomial's (compensate's), no import here
        lam = poly.degree
        return float(self.gamma) ** (1 + lam - poly.term_degrees)


def needs_preprocessing(poly: Polynomial) -> bool:
    return bool(poly.needs_preprocessing())


def check_rounding(poly: Polynomial, gamma: float, int_coefs) -> None:
    """Each received coefficient is floor or ceil of a * gamma^(1 + lambda - lambda_l), the only values
    :func:`compensate` produces and the sensitivity bounds allow (ValueError naming the first that is not)."""
    scales = float(gamma) ** (1 + poly.degree - poly.term_degrees)
    low = np.floor(np.asarray(poly.term_coef, np.float64) * scales)
    ints = list(int_coefs)
    if len(ints) != low.size:
        raise UsageError(f"{len(ints)} coefficients received, the {poly.name} polynomial has {low.size} terms")
    for i, (c, lo) in enumerate(zip(ints, low.tolist(), strict=False)):
        if c - int(lo) not in (0, 1):
            raise UsageError(f"coefficient {i} is {c}, not a rounding of {poly.term_coef[i]!r} x {scales[i]:g}")


def round_scaled(values: np.ndarray, scales: np.ndarray, rng: np.random.Generator) -> tuple[int, ...]:
    """Stochastically round values * scales to Python integers (exact also beyond int64)."""
    scaled = np.asarray(values, np.float64) * np.asarray(scales, np.float64)
    if not np.all(np.isfinite(scaled)):
        raise UsageError("a scaled coefficient overflows float64: gamma or the coefficients are too large")
    low = np.floor(scaled)
    up = rng.random(scaled.shape) < (scaled - low)
    return tuple(int(lo) + int(u) for lo, u in zip(low.tolist(), up.tolist(), strict=False))


def compensate(poly: Polynomial, gamma: float, seed: SeedLike = None,
               preprocess: bool | str = "auto") -> CompensatedPolynomial:
    """Compensated integer coefficients for ``poly`` at scale ``gamma`` (the server's step; coefficients public)."""
    check_gamma(gamma)
    if preprocess == "auto":
        preprocess = needs_preprocessing(poly)
    lam = poly.degree
    if not preprocess:
        if needs_preprocessing(poly):
            raise UsageError("this polynomial has non-integer coefficients or mixed degrees: it must be "
                             "pre-processed (preprocess=True)")
        return CompensatedPolynomial(poly, float(gamma), None, float(gamma) ** lam, False)
    rng = make_rng(seed)
    scales = float(gamma) ** (1 + lam - poly.term_degrees)
    ints = round_scaled(poly.term_coef, scales, rng)
    return CompensatedPolynomial(poly, float(gamma), ints, float(gamma) ** (lam + 1), True)
