"""The ``sqm linreg`` command: the comparison of SQM, central DP and non-private ridge on a held-out split
(:func:`compare`, R^2 and RMSE, printed as a table), and one real multi-party job from a job file (``--job``,
:class:`LinRegJobTask`, the party program of a job, in :mod:`.job`), like ``sqm pca``.

numpy, scikit-learn and the runtime are imported inside the functions that use them: ``sqm --help`` imports this
module to register the command (:mod:`sqm.cli.command`)."""
from __future__ import annotations

import argparse
import math

from sqm.cli import options, output
from sqm.cli.options import JOB_ONLY, check_mode, declare_task
from sqm.apps.linreg.params import LinRegJobParams
from sqm.errors import UsageError
from sqm.apps.linreg.experiment import own_regression_data, TARGETS, compare, regression_data


def __getattr__(name: str):
    if name == "LinRegJobTask":  # its home is .job (a party imports that module, not this one)
        from sqm.apps.linreg.job import LinRegJobTask

        return LinRegJobTask
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----- data and the comparison (the `sqm linreg` table) -------------------------------------------------------


# ----- the `sqm linreg` command -------------------------------------------------------------------------------


def output_document(r: dict, args) -> dict:
    """``sqm linreg``'s output document (:mod:`sqm.cli.output`) of :func:`compare`'s result ``r``: SQM's privacy
    report, central DP's (the Gaussian mechanism at the same (epsilon, delta), its sigma) and non-private's."""
    from sqm.mechanism.report import PrivacyReport


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
        dataset=r.get("dataset"), columns=r.get("columns"),
        details={k: r[k] for k in ("shape", "train", "test", "runs", "quality")})


def quality_line(q: dict) -> str:
    """The released model's training R^2 with its standard error and interval, and the shrinkage toward the mean
    (:func:`sqm.apps.linreg.statistic.guarded_solve`'s keys), as one printed line."""
    from sqm.apps.linreg.statistic import R2_Z_HIGH, R2_Z_LOW

    return (f"training R^2 from the released statistics {q['r2_released']:.3f}, standard error {q['r2_std']:.3f}, "
            f"interval [{q['r2_lower']:.3f}, {q['r2_upper']:.3f}] ({R2_Z_LOW:g} below, {R2_Z_HIGH:g} above), "
            f"model shrunk toward the mean by {q['shrinkage']:.2f} (post-processing of the release: no privacy cost)")


JOB_TASK = ("label_range", "max_label_clipped")  # the job's label range and its refusal share: --job only
LOCAL_ONLY = ("dataset", "data", "id_column", "parties", "test_size", "runs")
_PARSER: list[argparse.ArgumentParser] = []  # the `sqm linreg` parser (its defaults decide which options were given)


def run(args) -> int:
    from sqm.cli.tables import relation_line, render_table


    check_mode(args, _PARSER[-1], "job" if args.job else "local", {"job": JOB_ONLY + JOB_TASK, "local": LOCAL_ONLY})
    if args.job:
        return _run_job(args)
    import os

    columns = None
    if args.data is not None and os.path.isfile(args.data):  # the user's own table
        X, y, y_scale, columns = own_regression_data(args.data, args.label_column, args.id_column,
                                                     args.feature_bound, args.label_bound)
        args.dataset = os.path.basename(args.data)
    else:
        if args.label_column != "label" or args.id_column is not None:
            raise UsageError("--label-column and --id-column name columns of your own table: give --data FILE "
                             "(or --job)")
        X, y, y_scale = regression_data(args.dataset, args.data, args.feature_bound, args.label_bound)
    r = compare(X, y, args.parties, args.alpha, args.epsilon, args.delta, args.gamma, args.feature_bound,
                args.label_bound, args.backend, args.runs, args.seed, args.test_size, y_scale,
                verify_inputs=args.verify_inputs)
    r["dataset"] = args.dataset
    if columns is not None:
        r["columns"] = columns
    alpha = "from public quantities" if args.alpha is None else f"{args.alpha:g}"
    print(f"ridge regression on {args.dataset} {r['shape'][0]} x {r['shape'][1]} ({r['train']} train, {r['test']} "
          f"held out), {args.parties} clients, alpha {alpha}, delta {args.delta:g}, gamma {args.gamma:g}, "
          f"{r['runs']} run(s)")
    print(render_table(r["rows"], [("epsilon", "eps server", ".4f"), ("r2", "R^2", ".4f"), ("rmse", "RMSE", ".4g"),
                                   ("seconds", "seconds", ".3f"), ("bytes", "bytes", ",.0f")]))
    print(f"  SQM, last run: {quality_line(r['quality'])}")
    print(f"  {relation_line(output_document(r, args)['privacy'])}")
    if args.backend == "plain":
        print("(plain backend: the in-process SIMULATION of the parties' programs; bytes are not measured)")
    if args.json:
        output.write(args.json, output_document(r, args))
    return 0


def _run_job(args) -> int:
    import numpy as np

    from sqm.cli.job_cli import job_command
    from sqm.apps.linreg.estimator import SQMLinearRegression
    from sqm.apps.linreg.job import LinRegJobTask

    def task():
        params = LinRegJobParams.from_options(args).as_dict()
        label = {k: params.pop(k) for k in ("label_column", "label_range", "max_label_clipped")}
        return LinRegJobTask(SQMLinearRegression(**params, seed=args.seed),
                             insecure_reproducible=args.insecure_reproducible, **label)

    def server(res) -> dict:
        from sqm.framework.units import RAW_UNITS_NOTE, feature_columns, is_scaled, raw_linear_model
        from sqm.apps.linreg.statistic import MEAN_NOTE
        from sqm.cli.tables import render_table

        n = len(res["col_counts"])
        print(f"server: ridge coefficients over {len(res['coef'])} features of {res['n_records']} records "
              f"(clients' columns {res['col_counts']}, label '{args.label_column}' at client {n})")
        cols = feature_columns(res.get("columns") or [], res["col_counts"], n - 1, args.label_column)
        cols = cols if len(cols) == len(res["coef"]) else [f"x{j}" for j in range(len(res["coef"]))]
        scales = res.get("column_scales") or {}
        label_scale = float(scales.get(args.label_column, 1.0))
        raw, intercept = raw_linear_model(res["coef"], cols, scales, res["intercept"], label_scale)
        scaled = is_scaled(scales)
        rows = [{"column": c, "weight": raw[c], **({"weight (scaled)": float(w)} if scaled else {})}
                for c, w in zip(cols, np.asarray(res["coef"]).ravel(), strict=False)]
        rows.append({"column": "(intercept)", "weight": intercept,
                     **({"weight (scaled)": float(res["intercept"])} if scaled else {})})
        print(render_table(rows, ["column", "weight"] + (["weight (scaled)"] if scaled else [])))
        if scaled:
            print(f"  {RAW_UNITS_NOTE}; the label '{args.label_column}' too")
        print(f"  {quality_line(res)}" + (f"; {MEAN_NOTE}" if res["mean_returned"] else ""))
        quality = {k: res[k] for k in ("r2_released", "r2_std", "r2_lower", "r2_upper", "shrinkage",
                                       "mean_returned", "alpha")}
        return {**quality, "columns": cols, "coef": raw, "intercept": intercept, "label_column": args.label_column,
                "coef_scaled": {c: float(v) for c, v in zip(cols, np.asarray(res["coef"]).ravel(), strict=False)},
                "intercept_scaled": float(res["intercept"]), "column_scales": scales}

    return job_command(args, task, server)


def register(sub) -> None:
    p = sub.add_parser(
        "linreg", parents=[options.privacy(), options.runtime(), options.job(), options.output()],
        help="differentially private ridge regression over vertically partitioned data (SQM vs central DP)",
        description="Private ridge regression with SQM: one release of the joint Gram [X 1 y]^T [X 1 y] computed by "
                    "MPyC party processes, solved by the server.  Without --job: split a dataset's columns among "
                    "--parties clients and compare SQM, central DP and non-private ridge on a held-out split "
                    "(R^2, RMSE).  With --job: a real multi-party job, the last client's CSV holding the label.",
        epilog=options.OWN_DATA_EPILOG)
    p.add_argument("--dataset", default="diabetes", choices=sorted(TARGETS),
                   help="diabetes (default; its target), breast_cancer (target: mean radius), adult (target: "
                        "hours-per-week, read from the data home, see `sqm data`)")
    p.add_argument("--data", default=None, metavar="PATH",
                   help="your own table (a CSV or Parquet file: --label-column the target, every other column "
                        "but --id-column a feature; features scaled to row norm --feature-bound and the target to "
                        "--label-bound from the data: a local comparison), or a file-based dataset's folder (adult)")
    p.add_argument("--id-column", default=None,
                   help="with --data FILE: the column holding record ids, left out of the features (default: a "
                        "column named 'id', if any)")
    p.add_argument("--parties", type=int, default=3, help="clients holding column blocks of [X 1 y] (default 3)")
    LinRegJobParams.add_options(p, only=("alpha", "gamma", "feature_bound", "label_bound", "verify_inputs"))
    p.add_argument("--test-size", type=float, default=0.25, help="held-out fraction (default 0.25)")
    p.add_argument("--runs", type=int, default=1, help="average over this many runs (default 1)")
    LinRegJobParams.add_options(p)  # --label-column
    p.set_defaults(func=run)
    declare_task(p, LinRegJobParams.options())
    _PARSER[:] = [p]
