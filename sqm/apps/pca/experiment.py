"""The experiment behind ``sqm pca`` and ``python -m bench pca-utility``: SQM against its baselines on one data set,
and its table's rows."""
from __future__ import annotations

import math
import time

from sqm.framework.progress import make_bar
from sqm.errors import UsageError


def compare(X, n_parties: int, k: int, epsilon: float, delta: float, gamma: float, row_norm_bound: float = 1.0,
            backend: str = "mpyc", runs: int = 1, seed=None, progress: bool = True, backend_options=None,
            **options) -> dict:
    """Utility of SQM, central DP, local DP and non-private PCA on ``X`` split among ``n_parties``, averaged.
    ``options``: :class:`sqm.apps.pca.estimator.SQMPCA`'s other parameters (``robust_noise``,
    ``verify_sharing``, ``row_norm_check``...: SQM's alone, the baselines have none)."""
    import numpy as np

    from sqm.mechanism.report import PrivacyReport
    from sqm.mechanism.rng import spawn_seeds
    from sqm.mechanism.vertical import VerticalData
    from sqm.apps.pca.baselines import central_dp_pca, local_dp_pca, nonprivate_pca
    from sqm.apps.pca.estimator import SQMPCA
    from sqm.apps.pca.utility import as_matrix, check_components, optimal_utility, pca_utility

    X = as_matrix(X)
    k = check_components(k, X.shape[1])
    if int(runs) != runs or runs < 1:
        raise UsageError(f"runs must be an integer >= 1, got {runs!r}")
    data = VerticalData.split(X, n_parties)
    # Utilities are measured on X itself (the paper's ||X V||_F^2 on the input data).  SQM and the local
    # baseline clip sub-rows per party inside (each party enforces its own bound; on digits and CiteSeer
    # this costs < 1e-4 of the optimum); the central curator clips whole rows only.
    opt = optimal_utility(X, k)
    t0 = time.perf_counter()
    Vn = nonprivate_pca(X, k)
    nonpriv_s = time.perf_counter() - t0
    u: dict[str, list[float]] = {"sqm": [], "central": [], "local": []}
    secs: dict[str, list[float]] = {"sqm": [], "central": [], "local": []}
    bytes_sent, rep, clipped, central, local = [], None, None, None, None
    seeds = spawn_seeds(seed, runs)
    bar = make_bar(total=runs, desc=f"pca runs ({backend})", disable=not progress or runs == 1)
    for s in seeds:
        s_sqm, s_c, s_l = s.spawn(3)
        m = SQMPCA(k, epsilon, delta, gamma, row_norm_bound, backend=backend, seed=s_sqm,
                   backend_options=backend_options, **options).fit(data)
        u["sqm"].append(m.utility(X))
        secs["sqm"].append(m.seconds_)
        V = m.components_
        bytes_sent.append(m.bytes_sent_)
        rep, clipped = m.report_, m.clipped_
        central = central_dp_pca(X, k, epsilon, delta, row_norm_bound, seed=s_c)
        u["central"].append(pca_utility(X, central.components))
        secs["central"].append(central.seconds)
        local = local_dp_pca(data, k, epsilon, delta, row_norm_bound, seed=s_l)
        u["local"].append(pca_utility(X, local.components))
        secs["local"].append(local.seconds)
        bar.update(1)
    bar.close()
    assert rep is not None and central is not None and local is not None  # runs >= 1: the loop set them

    def summary(name, report):
        vals = np.array(u[name])
        return {"utility": float(vals.mean()), "utility_ratio": float(vals.mean() / opt),
                "utility_std": float(vals.std()), "utilities": vals.tolist(),
                "seconds": float(np.mean(secs[name])), "report": report}

    per_party = np.mean(np.array(bytes_sent, dtype=np.float64), axis=0)
    nonpriv = PrivacyReport(method="non-private", epsilon_server=math.inf, delta=0.0, neighbouring="none")
    sqm = summary("sqm", rep)
    sqm.update(epsilon_server=rep.epsilon_server, epsilon_client=rep.epsilon_client, mu=rep.mu,
               l2_sensitivity=rep.l2_sensitivity, clipped=clipped, components=V)
    return {
        "shape": list(X.shape), "parties": n_parties, "components": k, "runs": int(runs), "backend": backend,
        "row_norm_bound": row_norm_bound, "sqm": sqm,
        "central": {**summary("central", central.report), "sigma": central.sigma, "epsilon": central.epsilon},
        "local": {**summary("local", local.report), "sigma": local.sigma, "epsilon": local.epsilon},
        "nonprivate": {"utility": opt, "utility_ratio": 1.0, "seconds": nonpriv_s,
                       "check_utility": pca_utility(X, Vn), "report": nonpriv},
        "epsilon_server": rep.epsilon_server, "epsilon_client": rep.epsilon_client, "delta": delta,
        "gamma": gamma, "seconds": float(np.mean(secs["sqm"])), "bytes_sent": float(per_party.sum()),
        "bytes_sent_per_party": per_party.tolist(),
        "secure_mode": seed is None,  # seeded: every party's noise follows from the seed (experiments only)
    }


TABLE_COLUMNS = [("utility", "utility", ".4f"), ("utility_ratio", "ratio", ".4f"),
                 ("epsilon_server", "eps server", ".4f"), ("epsilon_client", "eps client", ".4f"),
                 ("sigma", "sigma", ".4g"), ("seconds", "seconds", ".3f"), ("bytes", "bytes", ",.0f")]


def table_rows(r: dict) -> list[dict]:
    """One row per method of :func:`compare`'s result: its utility and its :class:`PrivacyReport`'s figures."""
    rows = []
    for key, label in (("sqm", f"SQM ({r['backend']})"), ("central", None), ("local", None), ("nonprivate", None)):
        m = r[key]
        rep = m["report"]
        rows.append({"method": label or rep.method, "utility": m["utility"], "utility_ratio": m["utility_ratio"],
                     "epsilon_server": rep.epsilon_server, "epsilon_client": rep.epsilon_client,
                     "sigma": getattr(rep, "sigma", None), "seconds": m["seconds"],
                     "bytes": r["bytes_sent"] if key == "sqm" and r["backend"] != "plain" else None})
    return rows
