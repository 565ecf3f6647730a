"""PCA privacy-utility trade-off (the SQM paper's Figure 1): SQM vs central DP vs the local-DP VFL baseline.

    python -m bench pca-utility                            # digits, full epsilon x gamma grid, 5 runs
    python -m bench pca-utility --runs 20 --datasets digits,citeseer --json pca.json --plot pca.png   # paper grid

Utility ||X V||_F^2 of the top-k subspace for k = 1..10, averaged over runs, at delta = 1e-5 for each
epsilon; SQM for each gamma (plain backend: the in-process simulation of the parties' programs), central DP
(Analyze Gauss) and the local-DP baseline at the same (epsilon, delta), both calibrated by the one policy for
Gaussian baselines (sqm.mechanism.calibration.gaussian_sigma: the smallest sigma for one release).  One noisy
covariance per (epsilon, gamma, run) gives all k (the top-k subspace is the first k eigenvectors).
The target checked: for gamma >= 2^10, SQM's mean utility is at least 99% of central DP's for every
(epsilon, k); the local baseline is clearly below both.
"""
from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from bench.common import finish

if TYPE_CHECKING:  # annotations only
    import numpy as np

PAPER_EPSILONS = [0.5, 1.0, 2.0, 4.0, 8.0]
PAPER_GAMMAS = [2.0 ** e for e in (6, 8, 10, 12, 14)]


def prefix_utilities(X: np.ndarray, V: np.ndarray, ks) -> list[float]:
    """||X V[:, :k]||_F^2 for each k (V's columns are orthonormal, largest eigenvalue first)."""
    P = (X @ V) ** 2
    col = P.sum(axis=0)
    return [float(col[:k].sum()) for k in ks]


def sweep(name: str, X: np.ndarray, parties: int, epsilons, gammas, ks, runs: int, delta: float = 1e-5,
          seed=None, progress: bool = True, robust_noise: int = 0,
          row_norm_check: bool = False) -> dict:
    """Mean (and std) utility per k for SQM (each gamma), central, local and non-private on ``X``."""
    import numpy as np
    from tqdm import tqdm

    from sqm.apps.pca import SQMPCA, central_dp_pca, local_dp_pca, nonprivate_pca, top_eigen
    from sqm.mechanism.rng import spawn_seeds
    from sqm.mechanism.vertical import VerticalData

    kmax = max(ks)
    data = VerticalData.split(X, parties)
    # the rows as SQM's clients clip them (each its sub-row, to its share of the bound): central DP on these, with
    # central's own noise draws, is what a curator would get under SQM's clipping (paired with "central")
    X_party = data.clip(1.0)[0].to_matrix()
    t0 = time.perf_counter()
    w, _ = top_eigen(X.T @ X, kmax)
    opt = [float(w[:k].sum()) for k in ks]
    nonpriv = prefix_utilities(X, nonprivate_pca(X, kmax), ks)
    out = {"shape": list(X.shape), "parties": parties, "ks": list(ks), "optimum": opt, "nonprivate": nonpriv,
           "central": {}, "local": {}, "sqm": {}, "central_std": {}, "local_std": {}, "sqm_std": {},
           "central_party_clip": {}, "epsilon_client": {}, "mu": {},
           "party_clip_energy": float(np.sum(X_party ** 2) / np.sum(X ** 2))}
    total = len(epsilons) * runs * (len(gammas) + 2)
    bar = tqdm(total=total, desc=f"pca-utility {name}", disable=not progress)
    for eps in epsilons:
        e = str(eps)
        cen, loc, cen_party = [], [], []
        sq = {str(g): [] for g in gammas}
        for s in spawn_seeds(seed, runs):
            s_c, s_l, *s_g = s.spawn(2 + len(gammas))
            cen.append(prefix_utilities(X, central_dp_pca(X, kmax, eps, delta, seed=s_c).components, ks))
            cen_party.append(prefix_utilities(X, central_dp_pca(X_party, kmax, eps, delta, seed=s_c).components, ks))
            bar.update()
            loc.append(prefix_utilities(X, local_dp_pca(data, kmax, eps, delta, seed=s_l).components, ks))
            bar.update()
            for g, sg in zip(gammas, s_g, strict=False):
                m = SQMPCA(kmax, eps, delta, g, backend="plain", seed=sg, robust_noise=robust_noise,
                           row_norm_check=row_norm_check).fit(data)
                sq[str(g)].append(prefix_utilities(X, m.components_.T, ks))
                out["epsilon_client"].setdefault(e, {})[str(g)] = m.report_.epsilon_client
                out["mu"].setdefault(e, {})[str(g)] = m.report_.mu
                bar.update()
        out["central"][e] = np.mean(cen, axis=0).tolist()
        out["central_std"][e] = np.std(cen, axis=0).tolist()
        out["central_party_clip"][e] = np.mean(cen_party, axis=0).tolist()
        out["local"][e] = np.mean(loc, axis=0).tolist()
        out["local_std"][e] = np.std(loc, axis=0).tolist()
        out["sqm"][e] = {g: np.mean(v, axis=0).tolist() for g, v in sq.items()}
        out["sqm_std"][e] = {g: np.std(v, axis=0).tolist() for g, v in sq.items()}
    bar.close()
    out["seconds"] = time.perf_counter() - t0
    out["runs"] = int(runs)
    out["row_norm_check"] = bool(row_norm_check)
    out["sqm_over_central_se"] = {e: {g: ratio_se(v, out["sqm_std"][e][g], out["central"][e], out["central_std"][e],
                                                  runs) for g, v in by_g.items()} for e, by_g in out["sqm"].items()}
    out["target"] = check_target(out)
    return out


def ratio_se(sqm_mean, sqm_std, central_mean, central_std, runs: int) -> list[float]:
    """Standard error of SQM's mean utility over central DP's, per k, from independent runs of each (the delta
    method: R sqrt(s_S^2 / (n m_S^2) + s_C^2 / (n m_C^2)), with the population std of each sample; nan for one run).
    It says how far a ratio of two sample means can sit from its expectation by sampling alone."""
    import numpy as np

    if runs < 2:
        return [float("nan")] * len(sqm_mean)
    mS, sS, mC, sC = (np.asarray(a, np.float64) for a in (sqm_mean, sqm_std, central_mean, central_std))
    n = float(runs - 1)  # np.std is the population std: n - 1 makes the variance of each mean unbiased
    return ((mS / mC) * np.sqrt(sS ** 2 / (n * mS ** 2) + sC ** 2 / (n * mC ** 2))).tolist()


def check_target(r: dict, min_gamma: float = 2.0 ** 10, level: float = 0.99) -> dict:
    """Where SQM >= 99% of central (gamma >= 2^10) holds, and how far local DP is below both."""
    import numpy as np

    misses, worst = [], None
    for e, by_g in r["sqm"].items():
        cen = np.array(r["central"][e])
        for g, vals in by_g.items():
            if float(g) < min_gamma:
                continue
            ratio = np.array(vals) / cen
            for k, q in zip(r["ks"], ratio, strict=False):
                if worst is None or q < worst["ratio"]:
                    worst = {"epsilon": float(e), "gamma": float(g), "k": k, "ratio": float(q)}
                if q < level:
                    misses.append({"epsilon": float(e), "gamma": float(g), "k": k, "ratio": float(q)})
    local_vs = max(float(np.max(np.array(r["local"][e]) / np.minimum(
        np.array(r["central"][e]), np.min([v for v in r["sqm"][e].values()], axis=0)))) for e in r["local"])
    return {"level": level, "min_gamma": min_gamma, "holds": not misses, "misses": misses, "worst": worst,
            "max_local_over_min_sqm_central": local_vs}


def print_table(name: str, r: dict) -> None:
    import numpy as np

    from bench.common import relation_note, relation_words

    ks = r["ks"]
    show = [k for k in (1, 2, 5, 10) if k in ks] or ks[:3]
    idx = [ks.index(k) for k in show]
    print(f"\n{name} {r['shape'][0]} x {r['shape'][1]}, {r['parties']} clients: utility ratio to the "
          f"optimum (k = {', '.join(map(str, show))}), {r['seconds']:.0f} s")
    head = "  ".join(f"{'k=' + str(k):>6}" for k in show)
    print(f"{'epsilon':>7} {'method':<16} {head}   SQM/central")
    print(f"{'-' * 7} {'-' * 16} {'  '.join('-' * 6 for _ in show)}   {'-' * 11}")
    opt = np.array(r["optimum"])
    for e in r["central"]:
        cen = np.array(r["central"][e])
        tag = " rc" if r.get("row_norm_check") else ""
        rows = [(f"SQM{tag} g=2^{int(np.log2(float(g)))}", np.array(v), g) for g, v in r["sqm"][e].items()]
        rows += [("central DP", cen, None)]
        if e in r.get("central_party_clip", {}):
            rows += [("central, p-clip", np.array(r["central_party_clip"][e]), None)]
        rows += [("local DP", np.array(r["local"][e]), None)]
        for label, v, g in rows:
            vals = "  ".join(f"{(v / opt)[i]:>6.4f}" for i in idx)
            rel = ""
            if g is not None:  # SQM: its smallest ratio to central over k, with that ratio's standard error
                i_min = int(np.argmin(v / cen))
                se = r.get("sqm_over_central_se", {}).get(e, {}).get(g)
                pm = f" +- {se[i_min]:.4f}" if se is not None and np.isfinite(se[i_min]) else ""
                rel = f"{(v / cen)[i_min]:.4f}{pm} (min over k, at k = {ks[i_min]}; +- one standard error)"
            print(f"{e:>7} {label:<16} {vals}   {rel}")
    print(relation_note())
    if r.get("row_norm_check"):
        print("  SQM with the row norm check: no client clips its sub-row to a share of the bound (whole rows are "
              "bounded inside the secure evaluation); 'central, p-clip' is what per-party clipping would cost")
    if "party_clip_energy" in r:
        cut = [float(np.min(np.array(r["central_party_clip"][e]) / np.array(r["central"][e]))) for e in r["central"]]
        vs = [float(np.min(np.array(v) / np.array(r["central_party_clip"][e]))) for e in r["central"]
              for v in r["sqm"][e].values()]
        print(f"  'central, p-clip': central DP on the rows as SQM's clients clip them (each sub-row to its share of "
              f"the bound; {1 - r['party_clip_energy']:.2%} of the energy cut), same noise draws as central DP: at "
              f"worst {min(cut):.4f} of central over k and epsilon; SQM / it at worst {min(vs):.4f}")
    t = r["target"]
    w = t["worst"]
    print(f"target SQM >= {t['level']:.0%} of central for gamma >= 2^{int(np.log2(t['min_gamma']))}: "
          f"{'HOLDS' if t['holds'] else 'DOES NOT HOLD'} (worst ratio {w['ratio']:.4f} at epsilon {w['epsilon']:g} "
          f"({relation_words()}), "
          f"gamma 2^{int(np.log2(w['gamma']))}, k {w['k']}; {len(t['misses'])} misses); "
          f"local DP at most {t['max_local_over_min_sqm_central']:.3f} x min(SQM, central)")


def plot(rep: dict, path: str) -> None:
    import numpy as np

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(rep["results"])
    eps = list(next(iter(rep["results"].values()))["central"])
    fig, axes = plt.subplots(len(names), len(eps), figsize=(3.2 * len(eps), 3.0 * len(names)), squeeze=False)
    for i, name in enumerate(names):
        r = rep["results"][name]
        ks = r["ks"]
        for j, e in enumerate(eps):
            ax = axes[i][j]
            ax.plot(ks, r["nonprivate"], "k:", label="non-private")
            ax.plot(ks, r["central"][e], "k--", lw=2, label="central DP")
            for g, v in r["sqm"][e].items():
                ax.plot(ks, v, "-", marker=".", label=f"SQM $\\gamma=2^{{{int(np.log2(float(g)))}}}$")
            ax.plot(ks, r["local"][e], "-", c="gray", marker="x", label="VFL local DP")
            ax.set(title=f"{name}, $\\epsilon$={e}", xlabel="k")
            if j == 0:
                ax.set_ylabel("$||XV||_F^2$")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--datasets", default="digits",
                    help="comma list: digits and/or citeseer (or another bundled set); default digits "
                         "(citeseer: ~20 s per SQM run, use few runs/gammas)")
    ap.add_argument("--data", default=None, help="CiteSeer file or folder (default: the data home's)")
    ap.add_argument("--epsilons", default=",".join(map(str, PAPER_EPSILONS)),
                    help="comma list of epsilons (default 0.5,1,2,4,8)")
    ap.add_argument("--gammas", default="64,256,1024,4096,16384",
                    help="comma list of gamma values (default 2^6,2^8,2^10,2^12,2^14)")
    ap.add_argument("--kmax", type=int, default=10, help="k = 1..kmax (default 10)")
    ap.add_argument("--runs", type=int, default=5, help="runs averaged per point (default 5; the paper: 20)")
    ap.add_argument("--parties", type=int, default=3, help="clients the columns are split among (default 3)")
    ap.add_argument("--delta", type=float, default=1e-5, help="delta (default 1e-5)")
    ap.add_argument("--seed", type=int, default=None, help="seed (default: OS entropy)")
    ap.add_argument("--full", action="store_true",
                    help="the paper's grid: digits and citeseer, 20 runs (hours on 2 cores for citeseer)")
    ap.add_argument("--robust-noise", type=int, default=0, metavar="K",
                    help="SQM with robust noise: its epsilon holds even if K clients add no noise (default 0); "
                         "measures the utility this costs")
    ap.add_argument("--row-norm-check", action="store_true",
                    help="SQM with the secure row norm check (whole rows bounded by c inside the evaluation, no "
                         "per-party clipping; sqm.mechanism.release.SQM's row_norm_check)")
    ap.add_argument("--json", help="write the figures to this JSON file")
    ap.add_argument("--plot", help="write a PNG plot (one panel per dataset and epsilon) to this file")
    # -q/--quiet (no progress bar): sqm's, on every command (sqm.cli.options.add_verbosity)


def cli(args) -> int:
    from sqm.data.datasets import load_dataset, scale_rows

    names = ["digits", "citeseer"] if args.full else [n.strip() for n in args.datasets.split(",") if n.strip()]
    runs = 20 if args.full else args.runs
    epsilons = [float(e) for e in args.epsilons.split(",") if e.strip()]
    gammas = [float(g) for g in args.gammas.split(",") if g.strip()]
    if runs < 1 or args.kmax < 1 or not epsilons or not gammas:
        raise ValueError("need runs >= 1, kmax >= 1, and at least one epsilon and one gamma")
    rep = {"delta": args.delta, "epsilons": epsilons, "gammas": gammas, "runs": runs, "backend": "plain",
           "results": {}}
    for name in names:
        X = scale_rows(load_dataset(name, args.data if name == "citeseer" else None).X, 1.0)
        ks = list(range(1, min(args.kmax, X.shape[1]) + 1))
        r = sweep(name, X, args.parties, epsilons, gammas, ks, runs, args.delta, args.seed, not args.quiet,
                  robust_noise=args.robust_noise, row_norm_check=args.row_norm_check)
        rep["results"][name] = r
        print_table(name, r)
        finish(rep, args, indent=1)  # JSON after each dataset, so a long run keeps what it has
    return finish(rep, args, plot=plot, indent=1)
