"""The Poisson Binomial Mechanism (PBM; Chen, Ozgur & Kairouz 2022) for sums of bounded values, and its accounting.

Mechanism (PBM-VFL, Algorithm 1).  A value x in [-C, C] becomes q ~ Binom(b, p) with p = 1/2 + beta x / C,
beta in (0, 1/4], so q is an integer in [0, b].  The server learns only the sum of M parties' q (secure sum)
and decodes h = C / (beta b) (q_sum - b M / 2): unbiased for sum x, with variance
C^2 / (beta b)^2 * sum_m b p_m (1 - p_m) <= C^2 M / (4 beta^2 b) per coordinate (Theorem 2.3).

Accounting, with no unknown constant.  Write hi = 1/2 + beta, lo = 1/2 - beta, lam = 1 - 2 beta, and
E_a(P, Q) = sum_x P(x)^a Q(x)^(1-a) = exp((a - 1) D_a(P || Q)).  Three facts carry everything:

(J) for a > 1, (P, Q) -> E_a(P, Q) is jointly convex (perspective of t -> t^a), so for ANY coupling pi of two
    mixtures P = sum_i u_i P_i, Q = sum_j v_j Q_j:  E_a(P, Q) <= sum_ij pi_ij E_a(P_i, Q_j) <= max_ij E_a(P_i, Q_j);
(K) post-processing: applying the same Markov kernel to P and Q (e.g. adding an independent variable, or
    a shift by a constant, which is a bijection) does not increase D_a;
(S) the count of n i.i.d. Bernoulli(p) is sufficient for p, so D_a(Binom(n, hi) || Binom(n, lo)) =
    n D_a(Bern(hi) || Bern(lo)) =: n r_a, with r_a = log(hi^a lo^(1-a) + lo^a hi^(1-a)) / (a - 1).

Feature privacy of one released coordinate (one party m changes x -> x'; the other M - 1 parties keep
arbitrary values in [-C, C]; the server sees q_m + T, T = the others' (M - 1) b coins).
 1. Each of the others' coins is Bern(p), p in [lo, hi], i.e. the mixture lam * Bern(1/2) + (1 - lam) *
    Bern(r), r = (p - lo) / (2 beta) in [0, 1], and Bern(r) is a mixture of the constants 0 and 1.  The
    latent choice (fair coin or constant) has the same law under both hypotheses, so by (J) with the
    identity coupling and (K) (the constants are a shift), E_a <= sum_k w_k G(k), where
    k ~ Binom((M - 1) b, lam) counts fair coins, w_k its pmf, and G(k) = worst E_a(q_m + F_k, q'_m + F_k),
    F_k ~ Binom(k, 1/2) independent.
 2. Party m's Binom(b, p) is the sum of b coins, each the mixture w Bern(hi) + (1 - w) Bern(lo): a mixture
    over i (coins at hi) of mu_i = Binom(i, hi) + Binom(b - i, lo).  By (J) with the product coupling,
    G(k) <= max_{i, i'} E_a(mu_i * F_k, mu_i' * F_k); the coins at the same level on both sides are common
    (K), leaving d = |i - i'| coins at hi on one side and at lo on the other; the reflection x -> d + k - x
    (a bijection, F_k is symmetric) maps the two orientations onto each other, so
    G(k) <= max_{1 <= d <= b} E_a(Binom(d, hi) * F_k, Binom(d, lo) * F_k)  (d = 0 gives 1).
 3. Adding one more fair coin is post-processing (K), so G is non-increasing in k: on a grid
    0 = k_0 < k_1 < ... the bound sum_j W_j G(k_j), W_j = P(k_j <= k < k_{j+1}), is still an upper bound.
    The divergences are computed exactly on the finite support (log space for the mixture weights; the
    grid stops where float64 would underflow, which only loosens the bound).
 4. The result is capped by b r_a (the case k = 0 of the same argument, exact by (S)).
The tests check this bound against brute-force Renyi divergences of exact Poisson-binomial sums.

Sample privacy of one released coordinate (one record changes: all M parties' values change).  By (J)
over the corners (E_a(Bern(p), Bern(p')) is jointly convex in (p, p'), so its maximum over the box is at a
corner), independence (composition of the parties' coins, whose sum is post-processing) and (S), the
worst case is EXACTLY M b r_a: all parties moving from +C to -C attain it.  This replaces Theorem 6.2's
S_M(alpha) and its unspecified constant C0 by the exact worst case; :func:`theorem62_sample_rdp` follows the
paper's induction (weak triangle inequality) with the sound per-party bound, for comparison (never smaller).

An embedding of P coordinates adds P times the per-coordinate RDP (independent coordinates).  Over
training, each record is released ``uses`` times (one per epoch with per-epoch shuffling, i.e. the paper's
expected T B / N); as the paper argues (Theorem 6.1: the server and parties know which records are in a
batch, so no amplification; parallel composition across a batch's disjoint records), the RDP composes over
these uses.  RDP is converted to (epsilon, delta) with dp-accounting (:func:`sqm.mechanism.rdp.epsilon`).
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.special import logsumexp

from .rng import make_rng
from sqm.errors import UsageError



def __getattr__(name):
    """``PBM_ORDERS``: the RDP orders of :func:`privacy_report`, built on first use (:mod:`sqm.mechanism.rdp` imports
    dp-accounting, whose import time a party process that only encodes and sums never needs)."""
    if name == "PBM_ORDERS":
        from .rdp import DEFAULT_ORDERS

        return tuple([1.25, 1.5, 1.75] + list(DEFAULT_ORDERS))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_params(b, beta, C: float = 1.0) -> None:
    """b an integer >= 1, beta in (0, 1/4], C > 0 (ValueError otherwise)."""
    if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1:
        raise UsageError(f"PBM needs an integer number of trials b >= 1, got {b!r}")
    if not (isinstance(beta, (int, float, np.integer, np.floating)) and math.isfinite(beta) and 0 < beta <= 0.25):
        raise UsageError(f"PBM needs beta in (0, 1/4], got {beta!r}")
    if not (math.isfinite(C) and C > 0):
        raise UsageError(f"PBM needs a clipping bound C > 0, got {C!r}")


def _check_parties(M) -> None:
    if isinstance(M, bool) or not isinstance(M, (int, np.integer)) or M < 1:
        raise UsageError(f"the number of parties M must be an integer >= 1, got {M!r}")


@dataclass
class PBMEncoding:
    q: np.ndarray  # int64 entries in [0, b]: a numpy array, or a torch tensor on the input's device
    clipped: int  # entries of the input outside [-C, C], clipped before encoding


# Coins drawn per block: at most this many uniforms are held at once (32 MiB of float64).
COIN_BLOCK_ELEMENTS = 1 << 22


def _is_tensor(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "device")


def encode(x, b: int, beta: float, C: float = 1.0, rng=None) -> PBMEncoding:
    """Algorithm 1, elementwise: q ~ Binom(b, p), p = 1/2 + beta clip(x, -C, C) / C, as the count of b coins
    u_k < p with u_k uniform from the AES-CTR stream (:func:`sqm.mechanism.rng.make_rng`; ``rng`` a seed or Generator,
    OS entropy when None).

    ``x``: a numpy array, or a torch tensor: then the probabilities, the comparisons and q stay on the tensor's
    device (a GPU included) and only the uniforms travel there from the host.  Written by hand rather than with
    ``numpy.random.Generator.binomial`` or ``torch.binomial`` so that both kinds of array share one sampler, and
    because torch's generators (MT19937 on the CPU, Philox on CUDA) are not cryptographic while the coins are
    the party's secret noise.  Coin k of every entry comes before coin k + 1 in the stream, so the integers do not
    depend on how many coins are drawn at once.  Each coin is Bernoulli(p) up to the 2^-53 grid of a float64 uniform (an
    error below 1.2e-16 per coin in probability).  Entries outside [-C, C] are clipped and counted; NaN or infinite
    entries raise UsageError."""
    check_params(b, beta, C)
    p: Any  # these: numpy arrays, or torch tensors (one code path serves both)
    q: Any
    u: Any
    if _is_tensor(x):
        import torch

        x = x.detach().to(torch.float64)
        finite = int(torch.isfinite(x).sum())
        over = int((x.abs() > C).sum()) if finite == x.numel() else 0
        p = 0.5 + beta * x.clamp(-C, C) / C
        q = torch.zeros(x.shape, dtype=torch.int64, device=x.device)
    else:
        x = np.asarray(x, dtype=np.float64)
        finite = int(np.count_nonzero(np.isfinite(x)))
        over = int(np.count_nonzero(np.abs(x) > C)) if finite == x.size else 0
        p = 0.5 + beta * np.clip(x, -C, C) / C
        q = np.zeros(x.shape, dtype=np.int64)
    n = int(np.prod(q.shape))
    if finite != n:
        raise UsageError(f"PBM input contains {n - finite} NaN or infinite value(s)")
    gen = make_rng(rng)
    per_block = max(1, min(int(b), COIN_BLOCK_ELEMENTS // max(n, 1)))
    for start in range(0, int(b), per_block):
        u = gen.random((min(per_block, int(b) - start),) + tuple(q.shape))  # coin-major: blocks keep the stream
        if _is_tensor(q):
            u = torch.from_numpy(u).to(q.device)
        q += (u < p).sum(0)
    return PBMEncoding(q=q, clipped=over)


def decode(q_sum, b: int, beta: float, M: int, C: float = 1.0):
    """Estimate of the sum of M parties' values from the sum of their PBM outputs: C/(beta b) (q - b M / 2).
    ``q_sum``: integers (a numpy array, or a torch tensor: decoded on its device, as float64)."""
    check_params(b, beta, C)
    _check_parties(M)
    if _is_tensor(q_sum):
        q = q_sum.double()
    else:
        q = np.asarray(q_sum)
        q = (q.astype(np.int64) if q.dtype == object else q).astype(np.float64)
    if bool((q < 0).any()) or bool((q > b * M).any()):
        raise UsageError(f"a sum of {M} PBM outputs lies in [0, {b * M}], got values outside")
    return (C / (beta * b)) * (q - b * M / 2.0)


def variance_bound(b: int, beta: float, M: int, C: float = 1.0) -> float:
    """Theorem 2.3: per-coordinate variance of the decoded sum is at most C^2 M / (4 beta^2 b)."""
    check_params(b, beta, C)
    _check_parties(M)
    return C * C * M / (4.0 * beta * beta * b)


def _orders(alpha) -> np.ndarray:
    a = np.atleast_1d(np.asarray(alpha, dtype=np.float64))
    if np.any(~np.isfinite(a)) or np.any(a <= 1):
        raise UsageError(f"RDP orders must be finite and > 1, got {alpha!r}")
    return a


def bernoulli_rdp(alpha, beta: float):
    """r_a = D_a(Bern(1/2 + beta) || Bern(1/2 - beta)), vectorized over alpha."""
    check_params(1, beta)
    a = _orders(alpha)
    hi, lo = math.log(0.5 + beta), math.log(0.5 - beta)
    val = np.logaddexp(a * hi + (1 - a) * lo, a * lo + (1 - a) * hi) / (a - 1)
    return float(val[0]) if np.ndim(alpha) == 0 else val


def sample_rdp(alpha, b: int, beta: float, M: int):
    """Per-coordinate RDP of one release against a changed record (all M parties change): exactly M b r_a."""
    check_params(b, beta)
    _check_parties(M)
    return M * b * bernoulli_rdp(alpha, beta)


def theorem62_sample_rdp(alpha, b: int, beta: float, M: int):
    """The paper's route to sample privacy (Theorem 6.2's induction with Mironov's weak triangle inequality,
    D_a(P, Q) <= (a - 1/2)/(a - 1) D_2a(P, R) + D_(2a-1)(R, Q)), fed with the sound per-party bound
    :func:`feature_rdp` instead of C0 P b beta^2 a / M.  Per coordinate.  Never below :func:`sample_rdp`,
    which is the exact worst case; kept for comparison with the paper."""
    check_params(b, beta)
    _check_parties(M)
    a = _orders(alpha)

    def S(order, m):
        if m == 1:
            return feature_rdp(order, b, beta, M)
        return (order - 0.5) / (order - 1) * feature_rdp(2 * order, b, beta, M) + S(2 * order - 1, m - 1)

    val = S(a, M)
    return float(val[0]) if np.ndim(alpha) == 0 else val


def _k_grid(n: int, kmax: int) -> list[int]:
    """0..16 densely, then geometric (ratio ~1.06), capped at kmax (the bound is non-increasing in k)."""
    top = min(n, kmax)
    ks = set(range(0, min(top, 16) + 1))
    k = 16.0
    while k < top:
        k *= 1.06
        ks.add(min(top, int(k)))
    return sorted(ks)


@functools.lru_cache(maxsize=256)
def _feature_rdp_cached(orders: tuple, b: int, beta: float, M: int) -> tuple:
    from scipy.stats import binom  # here: scipy.stats takes ~1 s to import in every party process

    a = np.asarray(orders, dtype=np.float64)
    hi, lo = 0.5 + beta, 0.5 - beta
    cap = b * bernoulli_rdp(a, beta)
    n_other = (M - 1) * b
    if n_other == 0:
        return tuple(cap)
    # float64 convolution is safe while lo^b / max_binom(k) stays above ~1e-290
    kmax = int((290.0 - b * math.log10(1.0 / lo)) / math.log10(2.0))
    if kmax < 0:
        return tuple(cap)
    grid = _k_grid(n_other, kmax)
    lam = 1.0 - 2.0 * beta
    logw_all = binom.logpmf(np.arange(n_other + 1), n_other, lam)  # lam >= 1/2 for beta <= 1/4
    pd_hi = [binom.pmf(np.arange(d + 1), d, hi) for d in range(b + 1)]
    pd_lo = [binom.pmf(np.arange(d + 1), d, lo) for d in range(b + 1)]
    terms = []  # per grid point: log W_j + log G(k_j), for every order
    last_logG: np.ndarray | None = None
    for j, k in enumerate(grid):
        upper = grid[j + 1] if j + 1 < len(grid) else n_other + 1
        logW = logsumexp(logw_all[k:upper])
        fk = binom.pmf(np.arange(k + 1), k, 0.5)
        fk = fk / fk.max()
        logc = math.log(fk.sum())
        best = np.full(a.shape, -np.inf)
        ok = True
        for d in range(1, b + 1):
            P = np.convolve(pd_hi[d], fk)
            Q = np.convolve(pd_lo[d], fk)
            if np.any(P <= 0) or np.any(Q <= 0) or not (np.all(np.isfinite(P)) and np.all(np.isfinite(Q))):
                ok = False
                break
            lp, lq = np.log(P) - logc, np.log(Q) - logc
            logE = logsumexp(a[:, None] * lp[None, :] + (1 - a)[:, None] * lq[None, :], axis=1)
            best = np.maximum(best, logE)
        if not ok:  # underflow: use the previous grid point's G (G is non-increasing in k): still an upper bound
            # the first point, k = 0, convolves nothing: its binomials do not underflow (kmax >= 0)
            assert last_logG is not None
            best = last_logG
        last_logG = best
        terms.append(logW + best)
    logE_total = logsumexp(np.stack(terms), axis=0)
    rdp = np.maximum(logE_total, 0.0) / (a - 1)
    return tuple(np.minimum(rdp, cap))


def feature_rdp(alpha, b: int, beta: float, M: int):
    """Per-coordinate RDP of one release of the sum of M parties' PBM outputs against one party's value
    changing arbitrarily in [-C, C] (the others fixed, arbitrary): the upper bound of the module docstring."""
    check_params(b, beta)
    _check_parties(M)
    a = _orders(alpha)
    val = np.asarray(_feature_rdp_cached(tuple(float(v) for v in a), int(b), float(beta), int(M)))
    return float(val[0]) if np.ndim(alpha) == 0 else val


@dataclass
class PBMPrivacy:
    epsilon_feature: float
    epsilon_sample: float
    delta: float
    uses: int  # releases of each record over training (epochs)
    embedding_size: int
    parties: int
    b: int
    beta: float
    order_feature: float
    order_sample: float
    epsilon_feature_per_release: float
    epsilon_sample_per_release: float
    note: str = ("feature and sample privacy per record: RDP composed over the record's uses "
                 "(T B / N, the paper's Theorem 6.1 argument), no subsampling amplification")

    def as_dict(self) -> dict:
        return asdict(self)


def _check_count(v, name: str) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise UsageError(f"{name} must be an integer >= 1, got {v!r}")


PBM_LEVELS = ("feature", "sample")


def pbm_rdp(orders, b: int, beta: float, M: int, embedding_size: int = 1, uses: int = 1,
            level: str = "feature"):
    """RDP at ``orders`` of ``uses`` releases of the sum of M parties' PBM-encoded ``embedding_size``-vectors.

    ``level`` 'feature': one party's vector changes anywhere in [-C, C]^P (:func:`feature_rdp` per coordinate);
    'sample': one record changes, i.e. every party's vector (:func:`sample_rdp`, the exact worst case).  The P
    independent coordinates and the ``uses`` releases (no subsampling amplification: every party knows the
    batch) compose additively.  A float for a scalar order, else an array like ``orders``."""
    if level not in PBM_LEVELS:
        raise UsageError(f"PBM privacy level must be one of {PBM_LEVELS}, got {level!r}")
    _check_count(embedding_size, "embedding_size")
    _check_count(uses, "uses (releases per record)")
    per = feature_rdp if level == "feature" else sample_rdp
    return int(uses) * int(embedding_size) * per(orders, b, beta, M)


def privacy_report(b: int, beta: float, M: int, embedding_size: int, uses: int, delta: float,
                   orders=None) -> PBMPrivacy:
    """(epsilon, delta) for feature and sample privacy after ``uses`` releases of each record's P-dim sum
    (RDP at ``orders``, default ``PBM_ORDERS``, converted with dp-accounting)."""
    from .rdp import epsilon_and_order

    check_params(b, beta)
    _check_parties(M)
    _check_count(uses, "uses (releases per record)")
    orders = np.asarray(__getattr__("PBM_ORDERS") if orders is None else orders, dtype=np.float64)
    f1 = pbm_rdp(orders, b, beta, M, embedding_size)
    s1 = pbm_rdp(orders, b, beta, M, embedding_size, level="sample")
    ef, of = epsilon_and_order(orders, uses * f1, delta)
    es, os_ = epsilon_and_order(orders, uses * s1, delta)
    ef1, _ = epsilon_and_order(orders, f1, delta)
    es1, _ = epsilon_and_order(orders, s1, delta)
    return PBMPrivacy(epsilon_feature=ef, epsilon_sample=es, delta=delta, uses=int(uses),
                      embedding_size=int(embedding_size), parties=int(M), b=int(b), beta=float(beta),
                      order_feature=of, order_sample=os_, epsilon_feature_per_release=ef1,
                      epsilon_sample_per_release=es1)


# ----------------------------------------------------------------------------------------------------
# PBM-VFL's exchanges on a party's transport (sqm.mpc.net.transport.PartyTransport, real or in process)
# ----------------------------------------------------------------------------------------------------
