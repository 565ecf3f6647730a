"""The ``sqm linreg`` command: the comparison of SQM, central DP and non-private ridge on a held-out split
(:func:`compare`, R^2 and RMSE, printed as a table), and one real multi-party job from a job file (``--job``,
:class:`LinRegJobTask`, the party program of a job, in :mod:`.job`), like ``sqm pca``.

numpy, scikit-learn and the runtime are imported inside the functions that use them: ``sqm --help`` imports this
module to register the command (:mod:`apps.cli`)."""
from __future__ import annotations

import math


def __getattr__(name: str):
    if name == "LinRegJobTask":  # its home is .job (a party imports that module, not this one)
        from .job import LinRegJobTask

        return LinRegJobTask
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----- data and the comparison (the `sqm linreg` table) -------------------------------------------------------


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

    from ..datasets import load_dataset, scale_rows

    if name not in TARGETS:
        raise ValueError(f"no regression target known for {name!r}; choose one of {', '.join(TARGETS)}")
    ds = load_dataset(name, path)
    X, y = ds.X, np.asarray(ds.y, np.float64)
    if TARGETS[name] is not None:
        k = list(ds.feature_names).index(TARGETS[name])
        X, y = np.delete(X, k, axis=1), X[:, k]
    y_scale = float(np.max(np.abs(y))) / label_bound
    return scale_rows(X, feature_bound), y / y_scale, y_scale


def compare(X, y, n_parties: int, alpha: float, epsilon: float, delta: float, gamma: float,
            feature_bound: float = 1.0, label_bound: float = 1.0, backend: str = "mpyc", runs: int = 1, seed=None,
            test_size: float = 0.25, y_scale: float = 1.0, split_seed: int = 0) -> dict:
    """SQM, central DP and non-private ridge on a held-out split, averaged over ``runs``."""
    import numpy as np
    from sklearn.model_selection import train_test_split

    from sqm.rng import spawn_seeds

    from .baselines import central_dp_linreg, nonprivate_linreg
    from .estimator import SQMLinearRegression

    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=test_size, random_state=split_seed)
    rows = {"SQM": [], "central DP": []}
    rep = None
    for s in spawn_seeds(seed, int(runs)):
        s_sqm, s_c = s.spawn(2)
        m = SQMLinearRegression(alpha, epsilon, delta, gamma, feature_bound, label_bound, True, n_parties, backend,
                                s_sqm).fit(Xtr, ytr)
        rep = m.report_
        rows["SQM"].append({**scores(m.coef_, m.intercept_, Xte, yte, y_scale), "seconds": m.seconds_,
                            "bytes": float(sum(m.bytes_sent_)) if backend != "plain" else None})  # not measured
        c = central_dp_linreg(Xtr, ytr, alpha, epsilon, delta, feature_bound, label_bound, True, s_c)
        rows["central DP"].append({**scores(c["coef"], c["intercept"], Xte, yte, y_scale), "seconds": c["seconds"],
                                   "sigma": c["sigma"]})
    ridge = nonprivate_linreg(Xtr, ytr, alpha)
    nonpriv = {"method": "non-private (Ridge)", **scores(ridge["coef"], ridge["intercept"], Xte, yte, y_scale),
               "epsilon": math.inf, "seconds": ridge["seconds"]}
    table = [{"method": f"SQM ({backend})", "epsilon": rep.epsilon_server,
              **{k: None if rows["SQM"][0][k] is None else float(np.mean([r[k] for r in rows["SQM"]]))
                 for k in rows["SQM"][0]}},
             {"method": "central DP (Gauss)", "epsilon": epsilon,
              **{k: float(np.mean([r[k] for r in rows["central DP"]])) for k in rows["central DP"][0]}}, nonpriv]
    return {"rows": table, "report": rep.as_dict(), "shape": list(X.shape), "train": len(ytr), "test": len(yte),
            "parties": n_parties, "alpha": alpha, "gamma": gamma, "delta": delta, "runs": int(runs),
            "secure_mode": seed is None}


# ----- the `sqm linreg` command -------------------------------------------------------------------------------


def output_document(r: dict, args) -> dict:
    """``sqm linreg``'s output document (:mod:`apps.output`) of :func:`compare`'s result ``r``: SQM's privacy
    report, central DP's (the Gaussian mechanism at the same (epsilon, delta), its sigma) and non-private's."""
    from sqm.report import PrivacyReport

    from .. import output

    sqm_row, central, nonpriv = r["rows"]
    plain = args.backend == "plain"
    return output.document(
        output.command_name(args), "local", parameters=output.parameters(args), results=r["rows"],
        privacy=[r["report"], PrivacyReport(method=central["method"], epsilon_server=args.epsilon,
                                            delta=args.delta, sigma=central.get("sigma")),
                 PrivacyReport(method=nonpriv["method"], epsilon_server=math.inf, delta=0.0,
                               neighbouring="none")],
        timings={row["method"]: row["seconds"] for row in r["rows"]}, simulation=plain,
        secure_mode=r["secure_mode"], bytes=output.byte_counts(total=None if plain else round(sqm_row["bytes"])),
        dataset=r.get("dataset"), details={k: r[k] for k in ("shape", "train", "test", "runs")})


LOCAL_ONLY = ("dataset", "data", "parties", "test_size", "runs")
_PARSER = []  # the `sqm linreg` parser (its defaults decide which options were given)


def run(args) -> int:
    from sqm.report import render_table

    from .. import output
    from ..options import JOB_ONLY, check_mode

    check_mode(args, _PARSER[-1], "job" if args.job else "local",
               {"job": JOB_ONLY + ("label_column",), "local": LOCAL_ONLY})
    if args.job:
        return _run_job(args)
    X, y, y_scale = regression_data(args.dataset, args.data, args.feature_bound, args.label_bound)
    r = compare(X, y, args.parties, args.alpha, args.epsilon, args.delta, args.gamma, args.feature_bound,
                args.label_bound, args.backend, args.runs, args.seed, args.test_size, y_scale)
    r["dataset"] = args.dataset
    print(f"ridge regression on {args.dataset} {r['shape'][0]} x {r['shape'][1]} ({r['train']} train, {r['test']} "
          f"held out), {args.parties} clients, alpha {args.alpha:g}, delta {args.delta:g}, gamma {args.gamma:g}, "
          f"{r['runs']} run(s)")
    print(render_table(r["rows"], [("epsilon", "eps server", ".4f"), ("r2", "R^2", ".4f"), ("rmse", "RMSE", ".4g"),
                                   ("seconds", "seconds", ".3f"), ("bytes", "bytes", ",.0f")]))
    if args.backend == "plain":
        print("(plain backend: the in-process SIMULATION of the parties' programs; bytes are not measured)")
    if args.json:
        output.write(args.json, output_document(r, args))
    return 0


def _run_job(args) -> int:
    import numpy as np

    from ..job_cli import job_command
    from .estimator import SQMLinearRegression
    from .job import LinRegJobTask

    def task():
        est = SQMLinearRegression(args.alpha, args.epsilon, args.delta, args.gamma, args.feature_bound,
                                  args.label_bound, seed=args.seed)
        return LinRegJobTask(est, args.label_column, args.insecure_reproducible)

    def server(res) -> dict:
        print(f"server: ridge coefficients over {len(res['coef'])} features of {res['n_records']} records "
              f"(clients' columns {res['col_counts']}, label at client {len(res['col_counts'])}); intercept "
              f"{res['intercept']:.4g}")
        return {"coef": np.asarray(res["coef"]), "intercept": res["intercept"]}

    return job_command(args, task, server)


def register(sub) -> None:
    from .. import options

    p = sub.add_parser(
        "linreg", parents=[options.privacy(), options.runtime(), options.job(), options.output()],
        help="differentially private ridge regression over vertically partitioned data (SQM vs central DP)",
        description="Private ridge regression with SQM: one release of the joint Gram [X 1 y]^T [X 1 y] computed by "
                    "MPyC party processes, solved by the server.  Without --job: split a dataset's columns among "
                    "--parties clients and compare SQM, central DP and non-private ridge on a held-out split "
                    "(R^2, RMSE).  With --job: a real multi-party job, the last client's CSV holding the label.", epilog=options.OWN_DATA_EPILOG)
    p.add_argument("--dataset", default="diabetes", choices=sorted(TARGETS),
                   help="diabetes (default; its target), breast_cancer (target: mean radius), adult (target: "
                        "hours-per-week, read from the data home, see `sqm data`)")
    p.add_argument("--data", default=None, help="path of a file-based dataset's folder (adult)")
    p.add_argument("--parties", type=int, default=3, help="clients holding column blocks of [X 1 y] (default 3)")
    p.add_argument("--alpha", type=float, default=1.0, help="ridge penalty on the record-sum scale (default 1)")
    p.add_argument("--gamma", type=float, default=4096.0, help="quantization scale gamma >= 1 (default 4096)")
    p.add_argument("--feature-bound", type=float, default=1.0, help="c_x: every record's ||x|| (default 1)")
    p.add_argument("--label-bound", type=float, default=1.0, help="c_y: every record's |y| (default 1)")
    p.add_argument("--test-size", type=float, default=0.25, help="held-out fraction (default 0.25)")
    p.add_argument("--runs", type=int, default=1, help="average over this many runs (default 1)")
    p.add_argument("--label-column", default="label", help="with --job: the label column of the last client's CSV")
    p.set_defaults(func=run)
    from apps.options import declare_task

    declare_task(p, ("alpha", "epsilon", "delta", "gamma", "feature_bound", "label_bound", "label_column"))
    _PARSER[:] = [p]
