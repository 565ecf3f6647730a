"""Figure 3 of the SQM paper: relative L2 sensitivity overhead and normalized noise std against gamma (LR).

    python -m bench lr-gamma --json lr_gamma.json --plot lr_gamma.png

For each gamma: the sensitivity overhead Delta2 / gamma^3 - 3/4 of the post-processed gradient sum, with our
proven bound (sqm.mechanism.sensitivity.logreg_sensitivity) and the paper's Eq. 22; mu calibrated for the target
(epsilon, delta) over R = epochs / q Poisson-subsampled rounds (Eq. 20) and the normalized noise std
sqrt(2 mu) / gamma^3 on the server's side; as reference, the Gaussian std of centralized DPSGD (the noise
multiplier z of Opacus' PRV accountant, the DPSGD baseline's calibration (sqm.apps.logreg.baselines.DPSGD_ACCOUNTANT),
times clip norm 1) and z * 3/4 (a Gaussian on the same Taylor gradient).
Analytic only: no training, finishes in seconds.
"""
from __future__ import annotations

import argparse
import math

from bench.common import finish


def run(gammas=None, epsilon=1.0, delta=1e-5, d=800, q=0.001, epochs=5) -> dict:
    from sqm.apps.logreg.baselines import DPSGD_ACCOUNTANT
    from sqm.mechanism import accounting
    from sqm.mechanism.sensitivity import l1_from_l2, logreg_l2_paper, logreg_sensitivity

    from opacus.accountants.utils import get_noise_multiplier

    gammas = gammas or [64, 256, 1024, 4096, 16384, 65536]
    R = int(epochs) * max(1, int(round(1 / q)))
    z = float(get_noise_multiplier(target_epsilon=epsilon, target_delta=delta, sample_rate=q, steps=R,
                                   accountant=DPSGD_ACCOUNTANT))
    rows = []
    for g in gammas:
        s = logreg_sensitivity(float(g), d)
        cal = accounting.calibrate_mu(epsilon, delta, s.l1, s.l2, q=q, rounds=R)
        l2p = logreg_l2_paper(float(g), d)
        calp = accounting.calibrate_mu(epsilon, delta, l1_from_l2(l2p, d), l2p, q=q, rounds=R)
        rows.append(dict(gamma=g, overhead=s.l2 / g ** 3 - 0.75, overhead_paper=l2p / g ** 3 - 0.75,
                         mu=cal.mu, noise_std=math.sqrt(2 * cal.mu) / g ** 3,
                         noise_std_paper_sensitivity=math.sqrt(2 * calp.mu) / g ** 3,
                         epsilon_server=cal.epsilon_server))
    return dict(epsilon=epsilon, delta=delta, d=d, q=q, epochs=epochs, rounds=R, dpsgd_noise_multiplier=z,
                dpsgd_std=z * 1.0, gaussian_std_taylor=z * 0.75, rows=rows)


def print_table(rep: dict) -> None:
    from bench.common import relation_note, relation_words
    from sqm.cli.tables import render_table

    print(f"LR sensitivity and noise vs gamma: epsilon {rep['epsilon']:g} ({relation_words()}), delta "
          f"{rep['delta']:g}, d {rep['d']}, q {rep['q']:g}, {rep['epochs']} epochs ({rep['rounds']} rounds)")
    print(f"  DPSGD Gaussian std (clip 1): {rep['dpsgd_std']:.4f}; Gaussian on the Taylor gradient (3/4): "
          f"{rep['gaussian_std_taylor']:.4f}")
    print(render_table(rep["rows"], ["gamma", ("overhead", "overhead", ".4g"), ("overhead_paper", "(Eq. 22)", ".4g"),
                                     ("noise_std", "noise std", ".4f"),
                                     ("noise_std_paper_sensitivity", "(Eq. 22)", ".4f"),
                                     ("epsilon_server", "eps", ".4f")]))
    print(relation_note())


def plot(rep: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = [r["gamma"] for r in rep["rows"]]
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    ax[0].loglog(g, [r["overhead"] for r in rep["rows"]], "o-", base=2, label="proven bound")
    ax[0].loglog(g, [r["overhead_paper"] for r in rep["rows"]], "s--", base=2, label="paper Eq. 22")
    ax[0].set(xlabel="gamma", ylabel="relative L2 sensitivity overhead")
    ax[0].legend()
    ax[1].loglog(g, [r["noise_std"] for r in rep["rows"]], "o-", base=2, label="SQM (proven bound)")
    ax[1].axhline(rep["gaussian_std_taylor"], ls="--", c="gray", label="Gaussian, Taylor gradient")
    ax[1].axhline(rep["dpsgd_std"], ls=":", c="k", label="DPSGD (clip 1)")
    ax[1].set(xlabel="gamma", ylabel="normalized noise std")
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--gammas", default="64,256,1024,4096,16384,65536", help="comma list of gamma values")
    ap.add_argument("--epsilon", type=float, default=1.0, help="server-observed epsilon (default 1)")
    ap.add_argument("--delta", type=float, default=1e-5, help="delta (default 1e-5)")
    ap.add_argument("--d", type=int, default=800, help="features d (default 800)")
    ap.add_argument("--q", type=float, default=0.001, help="sampling rate (default 0.001)")
    ap.add_argument("--epochs", type=int, default=5, help="epochs (default 5)")
    ap.add_argument("--json", help="write the figures to this JSON file")
    ap.add_argument("--plot", help="write a PNG plot to this file")


def cli(args) -> int:
    gammas = [int(float(g)) for g in args.gammas.split(",") if g.strip()]
    rep = run(gammas, args.epsilon, args.delta, args.d, args.q, args.epochs)
    return finish(rep, args, print_table, plot)
