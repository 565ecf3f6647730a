"""The experiment behind ``sqm linreg``: the regression data sets and SQM against central DP and non-private ridge."""
from __future__ import annotations

import math
from sqm.errors import UsageError


def scores(coef, intercept, X, y, y_scale: float = 1.0) -> dict:
    """R^2 and RMSE (in the label's original units: times ``y_scale``) of a linear model on (X, y)."""
    import numpy as np

    pred = np.asarray(X) @ coef + intercept
    resid = np.asarray(y) - pred
    r2 = 1.0 - float(resid @ resid) / float(np.sum((y - np.mean(y)) ** 2))
    return {"r2": r2, "rmse": float(np.sqrt(np.mean(resid ** 2))) * y_scale}


TARGETS = {"diabetes": None, "breast_cancer": "mean radius", "adult": "hours-per-week"}


def regression_data(name: str, path=None, feature_bound: float = 1.0, label_bound: float = 1.0):
    """(X, y, y_scale): ``name``'s features scaled so the largest row norm is c_x and its target (the dataset's
    own for diabetes; a column moved out of the features otherwise: :data:`TARGETS`) so max |y| = c_y (the
    experiments' preprocessing, as ``sqm pca``'s); y_scale maps y back to the original units."""
    import numpy as np

    from sqm.data.datasets import load_dataset, scale_rows

    if name not in TARGETS:
        raise UsageError(f"no regression target known for {name!r}; choose one of {', '.join(TARGETS)}")
    ds = load_dataset(name, path)
    X, y = ds.X, np.asarray(ds.y, np.float64)
    target = TARGETS[name]
    if target is not None:
        k = list(ds.feature_names).index(target)
        X, y = np.delete(X, k, axis=1), X[:, k]
    y_scale = float(np.max(np.abs(y))) / label_bound
    return scale_rows(X, feature_bound), y / y_scale, y_scale


def own_regression_data(path, label_column: str = "label", id_column: str | None = None,
                        feature_bound: float = 1.0, label_bound: float = 1.0):
    """(X, y, y_scale, feature columns) of a user's own table (:func:`sqm.framework.tables.read_table`): every
    column but ``label_column`` and the id column a feature, scaled as :func:`regression_data` scales a data set
    (from the data: a local comparison, outside the accounting)."""
    import numpy as np

    from sqm.data.datasets import scale_rows
    from sqm.framework.tables import read_table

    t = read_table(path, id_column or "id", require_id=id_column is not None, what="data file")
    if label_column not in t.columns:
        raise UsageError(f"data file {path} has no column {label_column!r} (--label-column); its columns: "
                         f"{list(t.columns)}")
    k = list(t.columns).index(label_column)
    X, y = np.delete(t.block, k, axis=1), np.asarray(t.block[:, k], np.float64)
    if X.shape[1] < 1 or len(y) < 4:
        raise UsageError(f"data file {path}: a regression needs a feature column and at least 4 records")
    y_scale = float(np.max(np.abs(y))) / label_bound or 1.0
    columns = [c for j, c in enumerate(t.columns) if j != k]
    return scale_rows(X, feature_bound), y / y_scale, y_scale, columns


def compare(X, y, n_parties: int, alpha: float | None, epsilon: float, delta: float, gamma: float,
            feature_bound: float = 1.0, label_bound: float = 1.0, backend: str = "mpyc", runs: int = 1, seed=None,
            test_size: float = 0.25, y_scale: float = 1.0, split_seed: int = 0, verify_inputs: bool = False) -> dict:
    """SQM, central DP and non-private ridge on a held-out split, averaged over ``runs`` (``verify_inputs``: SQM's
    clients prove their inputs and noise, :class:`sqm.apps.linreg.estimator.SQMLinearRegression`'s)."""
    import numpy as np
    from sklearn.model_selection import train_test_split

    from sqm.mechanism.rng import spawn_seeds

    from sqm.apps.linreg.baselines import central_dp_linreg, nonprivate_linreg
    from sqm.apps.linreg.estimator import SQMLinearRegression

    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=test_size, random_state=split_seed)
    rows: dict[str, list[dict]] = {"SQM": [], "central DP": []}
    rep = None
    for s in spawn_seeds(seed, int(runs)):
        s_sqm, s_c = s.spawn(2)
        m = SQMLinearRegression(alpha, epsilon, delta, gamma, feature_bound, label_bound, True, n_parties, backend,
                                s_sqm, verify_inputs=verify_inputs).fit(Xtr, ytr)
        rep = m.report_
        rows["SQM"].append({**scores(m.coef_, m.intercept_, Xte, yte, y_scale), "seconds": m.seconds_,
                            "bytes": float(sum(m.bytes_sent_)) if backend != "plain" else None})  # not measured
        c = central_dp_linreg(Xtr, ytr, alpha, epsilon, delta, feature_bound, label_bound, True, s_c)
        rows["central DP"].append({**scores(c["coef"], c["intercept"], Xte, yte, y_scale), "seconds": c["seconds"],
                                   "sigma": c["sigma"]})
    assert rep is not None  # runs >= 1: the loop set it
    quality = {"r2_released": m.r2_released_, "r2_std": m.r2_std_, "r2_lower": m.r2_lower_,
               "r2_upper": m.r2_upper_, "shrinkage": m.shrinkage_, "mean_returned": bool(m.mean_returned_)}
    ridge = nonprivate_linreg(Xtr, ytr, alpha)
    nonpriv = {"method": "non-private (Ridge)", **scores(ridge["coef"], ridge["intercept"], Xte, yte, y_scale),
               "epsilon": math.inf, "seconds": ridge["seconds"]}
    table = [{"method": f"SQM ({backend})", "epsilon": rep.epsilon_server,
              **{k: None if rows["SQM"][0][k] is None else float(np.mean([r[k] for r in rows["SQM"]]))
                 for k in rows["SQM"][0]}},
             {"method": "central DP (Gauss)", "epsilon": epsilon,
              **{k: float(np.mean([r[k] for r in rows["central DP"]])) for k in rows["central DP"][0]}}, nonpriv]
    return {"rows": table, "report": rep.as_dict(), "shape": list(X.shape), "train": len(ytr), "test": len(yte),
            "parties": n_parties, "alpha": alpha, "gamma": gamma, "delta": delta, "runs": int(runs), "quality": quality,
            "secure_mode": seed is None}
