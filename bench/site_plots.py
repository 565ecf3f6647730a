"""The benchmarks pages' plots, drawn from the stored records into docs/benchmarks/img/ (matplotlib, Agg).

Where a benchmark has its own ``plot(report, path)`` it draws its figure from the stored report; the two figures
no single benchmark draws (epsilon against quality for the four tasks; ours against SecretFlow SPU) are here.
"""
from __future__ import annotations

from pathlib import Path


def _bench_plot(module: str, record: str):
    """A benchmark's own ``plot``, drawn from the stored record ``record``'s report."""
    def draw(data: dict, path: Path) -> None:
        import importlib

        importlib.import_module(module).plot(data[record]["report"], str(path))
    return draw


def epsilon_utility(data: dict, path: Path) -> None:
    """Quality against epsilon, one panel per task, each method as the per-task tables give it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.site_tables import K

    fig, ax = plt.subplots(1, 4, figsize=(16, 3.6))
    rep = data["pca-utility"]["report"]
    r = rep["results"]["digits"]
    ki, es = r["ks"].index(K), rep["epsilons"]
    central = [r["central"][str(float(e))][ki] for e in es]
    for g in rep["gammas"]:
        ax[0].semilogx(es, [r["sqm"][str(float(e))][str(float(g))][ki] / c for e, c in zip(es, central, strict=True)],
                       "o-", base=2, label=f"SQM gamma 2^{int(g).bit_length() - 1}")
    ax[0].semilogx(es, [r["local"][str(float(e))][ki] / c for e, c in zip(es, central, strict=True)], "x-",
                   c="gray", base=2, label="local DP")
    ax[0].set(title=f"PCA, digits, k = {K}", xlabel="epsilon", ylabel="utility / central DP's")
    lr = data["logreg"]["report"]["rows"]
    e = [x["epsilon"] for x in lr]
    ax[1].semilogx(e, [x["sqm_accuracy"] for x in lr], "o-", base=2, label="SQM")
    ax[1].semilogx(e, [x["dpsgd_accuracy"] for x in lr], "s--", base=2, label="DPSGD")
    ax[1].semilogx(e, [x["local_accuracy"] for x in lr], "x-", c="gray", base=2, label="local DP")
    ax[1].axhline(lr[0]["nonprivate_accuracy"], ls=":", c="k", label="non-private")
    ax[1].set(title="logistic regression, breast_cancer", xlabel="epsilon", ylabel="test accuracy")
    li = data["linreg"]["report"]["rows"]
    e = [x["epsilon"] for x in li]
    ax[2].semilogx(e, [x["sqm_r2"] for x in li], "o-", base=2, label="SQM")
    ax[2].semilogx(e, [x["central_r2"] for x in li], "s--", base=2, label="central DP")
    ax[2].axhline(li[0]["nonprivate_r2"], ls=":", c="k", label="non-private")
    ax[2].set(title="ridge regression, diabetes", xlabel="epsilon", ylabel="test R^2")
    pb = data["pbm-vfl"]["report"]["runs"]
    for method, style, label in (("pbm", "o", "PBM-VFL"), ("ldp_eq", "s", "LDP, same epsilon")):
        pts = sorted((x["epsilon"], x["runs"][0]["test_auprc"]) for x in pb if x["method"] == method)
        ax[3].semilogx([p[0] for p in pts], [p[1] for p in pts], style, base=2, label=label)
    npq = next(x for x in pb if x["method"] == "npq")
    ax[3].axhline(npq["runs"][0]["test_auprc"], ls=":", c="k", label="NPQ (no privacy)")
    ax[3].set(title="PBM-VFL, phishing", xlabel="feature epsilon", ylabel="test AUPRC")
    for a in ax:
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def peers(data: dict, path: Path) -> None:
    """End-to-end seconds of the same secure Gram, ours against SecretFlow SPU, per shape."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["peers-spu"]["report"]["rows"]
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    sides = list(dict.fromkeys(r["side"] for r in rows))
    fig, ax = plt.subplots(figsize=(7, 3.4))
    width = 0.8 / len(sides)
    for i, side in enumerate(sides):
        ys = [next(r["seconds"] for r in rows if r["shape"] == s and r["side"] == side) for s in shapes]
        ax.bar([j + i * width for j in range(len(shapes))], ys, width, label=side)
    ax.set_xticks([j + width * (len(sides) - 1) / 2 for j in range(len(shapes))], shapes)
    ax.set(yscale="log", ylabel="end to end s (log)", title="secure Gram X^T X, 2 holders")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# image name -> drawer(stored records by name, path)
PLOTS = {
    "epsilon-utility.png": epsilon_utility,
    "pca-utility.png": _bench_plot("bench.pca_utility", "pca-utility"),
    "lr-gamma.png": _bench_plot("bench.lr_gamma", "lr-gamma"),
    "pbm-vfl.png": _bench_plot("bench.pbm_vfl", "pbm-vfl"),
    "bgw-cost.png": _bench_plot("bench.bgw_cost", "bgw-cost"),
    "scale.png": _bench_plot("bench.scale", "scale"),
    "psi.png": _bench_plot("bench.psi", "psi"),
    "peers.png": peers,
}


def expected_images(img: Path) -> list[Path]:
    """The plots :func:`draw_all` draws into ``img``."""
    return [img / name for name in PLOTS]


def draw_all(data: dict, img: Path) -> list[Path]:
    """Draw every plot of :data:`PLOTS` into ``img``; the paths written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img.mkdir(parents=True, exist_ok=True)
    out = []
    for name, draw in PLOTS.items():
        path = img / name
        draw(data, path)
        plt.close("all")
        out.append(path)
    return out
