"""HDP-VFL's privacy: what each party's guarantee covers, the sensitivities of the intermediate results it
sends, and the noise they get.

Guarantee (Theorems 1, 2 of the paper): the sequence of noisy intermediate results each party SENDS is
(epsilon, delta)-DP with respect to that party's records, so each party is protected from the OTHER party's view
(and, by post-processing, the other party's weights are (epsilon, delta)-joint-DP).  This is a different
guarantee from SQM's: SQM protects the records from the server's (and the clients') view of a noisy aggregate
computed under secret sharing; HDP-VFL has no server and no secret sharing, and the final model is not released
under DP to a third party beyond what each party's own weights reveal.

Sensitivities (Lemma 3, the passive party's IR sequence; Lemma 4, the active party's), for T = e r iterations,
batch b, learning rate eta, weight bound k and the logistic loss's L = 1, beta_theta = 0.25, beta_y = 1.1,
k_y = 1 (section 4.2):

    Delta_B = sqrt(4 L^2 e^2 T eta^2 / b + 8 k L e^2 eta / b + 4 k^2 e)
    Delta_A = sqrt(4 bt^2 L^2 e^2 T eta^2 / b + 8 (bt k + by ky) bt L e^2 eta / b + 4 (bt k + by ky)^2 e)

Lemma 3 holds only because the passive party clips the noisy residual it receives to [-1, 1] before using it
(post-processing at that party; see :mod:`sqm.apps.hdp_vfl.party`): Lemma 3's proof assumes |r| <= 1, which the
paper's Algorithm 1, multiplying by the noisy Sec[IR_A], does not ensure (a residual history exists that reaches
several times Delta_B without the clip).

Noise, one calibration policy for every Gaussian baseline (:func:`sqm.mechanism.calibration.gaussian_sigma`): each
party's IR sequence is T Gaussian releases with the same sigma, adaptively composed; per step, given everything
exchanged before, its sensitivity is bounded by a number fixed in advance (the public batch order decides in which
step a record is used), and the squares of these bounds sum to at most Delta^2 (the lemma's proof).  Composing
Gaussian mechanisms is exact in Gaussian DP (mu = sqrt(sum Delta_t^2) / sigma, Dong, Roth & Su 2019, Cor. 3.3):
the whole sequence is exactly as private as ONE Gaussian release of sensitivity Delta, which is how the paper
accounts.  So sigma = gaussian_sigma(Delta, epsilon, delta), the tightest sound single-release calibration, is the
tightest sound calibration of the composition (a test checks it against dp-accounting's PLD composition of the
T steps).  The paper's own sigma = Delta sqrt(2 ln(1.25/delta)) / epsilon (Lemma 1, proven for epsilon < 1 only)
is looser below epsilon = 1 and unsound above it; it is not offered.  ``epsilon=inf`` trains the non-private VFL
reference (no noise).  The lemmas also assume eta <= 2 / (beta + gamma) (Lemma 2), with beta = 0.25 + l2 and
gamma = l2 for the logistic loss on ||x|| <= 1: larger learning rates are refused.
"""
from __future__ import annotations

import math

# logistic loss constants (paper section 4.2)
LOGISTIC = dict(L=1.0, beta_theta=0.25, beta_y=1.1, k_y=1.0)

GUARANTEE = ("HDP-VFL protects each party from the OTHER party's view of the intermediate results it receives "
             "((epsilon, delta)-DP per party, Theorems 1-2 of Wang et al.); this is a different guarantee from "
             "SQM's, which protects records from the server- and client-observed noisy aggregate computed under "
             "secret sharing.  The two epsilons are not interchangeable.")



def passive_sensitivity(epochs: int, iterations: int, learning_rate: float, batch_size: int, k: float,
                        L: float = 1.0) -> float:
    """Lemma 3: the L2 sensitivity of the passive party's sequence [IR_B_t], t = 1..T (its residual clipped)."""
    e, T, eta, b = epochs, iterations, learning_rate, batch_size
    return math.sqrt(4 * L ** 2 * e ** 2 * T * eta ** 2 / b + 8 * k * L * e ** 2 * eta / b + 4 * k ** 2 * e)


def active_sensitivity(epochs: int, iterations: int, learning_rate: float, batch_size: int, k: float,
                       L: float = 1.0, beta_theta: float = 0.25, beta_y: float = 1.1, k_y: float = 1.0) -> float:
    """Lemma 4: the L2 sensitivity of the active party's sequence [IR_A_t], t = 1..T."""
    e, T, eta, b, bt = epochs, iterations, learning_rate, batch_size, beta_theta
    a = bt * k + beta_y * k_y
    return math.sqrt(4 * bt ** 2 * L ** 2 * e ** 2 * T * eta ** 2 / b + 8 * a * bt * L * e ** 2 * eta / b
                     + 4 * a ** 2 * e)


def max_learning_rate(l2: float) -> float:
    """Lemma 2's condition eta <= 2 / (beta + gamma) for the l2-regularized logistic loss on ||x|| <= 1."""
    return 2.0 / (LOGISTIC["beta_theta"] + 2 * l2)
