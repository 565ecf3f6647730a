"""``sqm logreg``: SQM-LR against its baselines on a data set (the comparison driver and its table), or, with
``--job``, a real multi-party run from a job file (:class:`sqm.apps.logreg.job.LRJobTask`).

    sqm logreg --dataset breast_cancer --parties 3 --epsilon 1 --delta 1e-5 --gamma 8192

numpy, scikit-learn, SciPy, Opacus and the runtime are imported inside the functions that use them: ``sqm --help``
imports this module to register the command (:mod:`sqm.cli.command`).
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sqm.cli import options
from sqm.cli.options import JOB_ONLY, check_mode, declare_task, read_user_table
from sqm.framework.extras import missing
from sqm.framework.progress import follow_progress
from sqm.apps.logreg import texts
from sqm.apps.logreg.params import LogRegJobParams
from sqm.apps.logreg.experiment import (
    CLIENT_VIEW,
    DATASETS,
    UTILITY_COLUMNS,
    _mean,
    compare,
    standardized_unit_rows,
    unit_ball_split,
    utility_rows,
)
from sqm.errors import UsageError

if TYPE_CHECKING:
    pass



def _run_job(args) -> int:
    import numpy as np

    from sqm.cli.job_cli import job_command
    from sqm.cli.tables import render_table
    from sqm.apps.logreg.estimator import _progress
    from sqm.apps.logreg.job import LRJobTask

    from sqm.mpc.net.launch import private_folder

    with private_folder("sqm-lr-job-") as tmp:
        # moments: one release; auto: one release or one round
        path = None if args.quiet or args.solver != "sgd" else f"{tmp}/progress"

        def make_task():
            return LRJobTask(params=LogRegJobParams.from_options(args), seed=args.seed,
                             insecure_reproducible=args.insecure_reproducible, progress_path=path)

        def server_summary(res) -> dict:
            rep, w = res["report"], np.asarray(res["weights"])
            sch = res["schedule"]
            why = "" if res.get("solver_reason", "given") == "given" else f", auto: {res['solver_reason']}"
            how = (f"one release of the second moments (solver moments{why})" if sch is None else
                   f"solver sgd{why}; q {sch['q']:.4g}, {sch['epochs']} epochs, {rep.rounds} rounds, batch cap "
                   f"{res['b_max']}, "
                   f"lr {sch['learning_rate']:g}, ||w|| = {np.linalg.norm(w):.4f} <= {sch['weight_bound']:g}")
            print(f"server: logistic-regression weights over {len(res['coef'])} features"
                  f"{' and an intercept' if res['fit_intercept'] else ''} of {res['n_records']} records (clients' "
                  f"columns {res['col_counts']}, label included at client "
                  f"{rep.n_parties if args.label_party is None else args.label_party + 1}); {how}")
            from sqm.framework.units import RAW_UNITS_NOTE, feature_columns, is_scaled, raw_linear_model

            label = rep.n_parties - 1 if args.label_party is None else args.label_party
            cols = feature_columns(res.get("columns") or [], res["col_counts"], label, args.label_column)
            cols = cols if len(cols) == len(res["coef"]) else [f"x{j}" for j in range(len(res["coef"]))]
            scales = res.get("column_scales") or {}
            raw, _ = raw_linear_model(res["coef"], cols, scales)
            scaled = is_scaled(scales)
            rows = [{"column": c, "weight": raw[c], **({"weight (scaled)": float(w)} if scaled else {})}
                    for c, w in zip(cols, res["coef"], strict=False)]
            if res["fit_intercept"]:
                rows.append({"column": "(intercept)", "weight": float(res["intercept"]),
                             **({"weight (scaled)": float(res["intercept"])} if scaled else {})})
            print(render_table(rows, ["column", "weight"] + (["weight (scaled)"] if scaled else [])))
            if scaled:
                print(f"  {RAW_UNITS_NOTE}")
            from sqm.mechanism.report import relation_phrase

            print(f"  clients observe {CLIENT_VIEW} during training; the server sends them the final model at the "
                  f"job's end (each records it in its ledger): epsilon_client is its guarantee "
                  f"({relation_phrase(rep.neighbouring, 'a client')})")
            return {"columns": cols, "coef": raw, "intercept": float(res["intercept"]), "schedule": sch,
                    "solver": res.get("solver"), "solver_reason": res.get("solver_reason"),
                    "coef_scaled": {c: float(v) for c, v in zip(cols, res["coef"], strict=False)},
                    "column_scales": scales}

        if path is None:
            return job_command(args, make_task, server_summary)
        bar, cb = _progress(None, "SQM-LR (server)", True, "noisy gradient norm")
        try:
            with follow_progress(path, cb):
                return job_command(args, make_task, server_summary)
        finally:
            bar.close()


LOCAL_ONLY = ("dataset", "data", "id_column", "parties", "runs", "no_baselines")
JOB_MODE_ONLY = ("label_party",)
_PARSER: list[argparse.ArgumentParser] = []  # the `sqm logreg` parser (its defaults decide which options were given)


def _local_data(args):
    """(X_train, y_train, X_test, y_test, groups or None, name, columns, label note): ``--data FILE`` is the
    user's own table (CSV/Parquet: every column but ``--label-column`` and ``--id-column`` a feature; standardized
    with the training split's statistics, clipped to +-3 and divided by 3 sqrt(d), as breast cancer: a local
    comparison, the scaling is data-derived); else ``--dataset``."""
    if args.data is None:
        Xtr, ytr, Xte, yte, groups = unit_ball_split(args.dataset)
        return Xtr, ytr, Xte, yte, groups, args.dataset, None, None
    import os

    from sklearn.model_selection import train_test_split

    from sqm.apps.logreg.estimator import split_label

    t = read_user_table(args.data, args.id_column)
    X, y, columns, labels = split_label(t.block, t.columns, args.label_column, f"data file {args.data}")
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
    Xtr, Xte = standardized_unit_rows(Xtr, Xte)
    return Xtr, ytr, Xte, yte, None, os.path.basename(args.data), columns, labels


def run(args) -> int:
    import numpy as np

    from sqm.cli.tables import conversion_line, relation_line, render_table
    from sqm.apps.logreg.estimator import MODEL_SHARED_NOTE, resolve_schedule

    if _PARSER:
        check_mode(args, _PARSER[-1], "job" if args.job else "local",
                   {"job": JOB_ONLY + JOB_MODE_ONLY, "local": LOCAL_ONLY})
    if args.job:
        return _run_job(args)
    if args.runs < 1:
        raise UsageError(f"--runs must be >= 1, got {args.runs}")
    Xtr, ytr, Xte, yte, groups, name, columns, labels = _local_data(args)
    sched = resolve_schedule(len(Xtr), args.epsilon, args.q, args.epochs, args.learning_rate, args.weight_bound)
    q, epochs, lr, W = sched.q, sched.epochs, sched.learning_rate, sched.weight_bound
    methods: tuple[str, ...] = ("sqm",) if args.no_baselines else ("sqm", "dpsgd", "local", "nonprivate", "taylor")
    not_run = {"dpsgd": why} if "dpsgd" in methods and (why := missing("vfl", "DPSGD (Opacus)")) else {}
    methods = tuple(m for m in methods if m not in not_run)
    runs = []
    for r in range(args.runs):
        seed = None if args.seed is None else args.seed + r
        runs.append(compare(Xtr, ytr, Xte, yte, epsilon=args.epsilon, delta=args.delta, gamma=args.gamma, q=q,
                            epochs=epochs, learning_rate=lr, parties=args.parties, backend=args.backend,
                            seed=seed, weight_bound=W, methods=methods, groups=groups,
                            progress=not args.quiet, timeout=args.timeout, fit_intercept=not args.no_intercept,
                            solver=args.solver, robust_noise=args.robust_noise,
                            verify_sharing=args.verify_sharing, verify_inputs=args.verify_inputs,
                            base_rate=args.base_rate))
    res = _mean(runs)
    s, rep = res["sqm"], res["sqm"]["report"]
    print(f"logistic regression on {name}: {Xtr.shape[0]} train / {Xte.shape[0]} test records, "
          f"{Xtr.shape[1]} features, {args.parties} clients (+ server), backend {s['backend']}, {args.runs} run(s)")
    if labels is not None:
        print(f"  labels {labels}; majority-class rate on the test split {max(np.mean(yte), 1 - np.mean(yte)):.4f}")
    why = "" if s["solver_reason"] == "given" else f" (auto: {s['solver_reason']})"
    if s["solver"] == "sgd":
        sq = s["schedule"]
        print(f"  SQM solver sgd{why}: q {sq['q']:.4g}  epochs {sq['epochs']}  rounds {rep.rounds}  batch cap "
              f"{s['b_max']}  lr {sq['learning_rate']:g}  ||w|| <= {sq['weight_bound']:g}  gamma {args.gamma:g}  "
              f"mu {rep.mu:.4g}  intercept {'no' if args.no_intercept else 'yes'}"
              + ("" if args.base_rate is None else f"  base rate p0 {args.base_rate:g}"))
        print(f"  clipped records per client {s['clipped']}  batches truncated {s['batches_truncated']}")
        if sq != {"q": q, "epochs": epochs, "learning_rate": lr, "weight_bound": W}:
            print(f"  DPSGD and the Taylor reference: q {q:.4g}  epochs {epochs}  lr {lr:g}  ||w|| <= {W:g}")
    else:
        print(f"  SQM solver moments{why}: one release of the second moments, gamma {args.gamma:g}  mu {rep.mu:.4g}  "
              f"intercept {'no' if args.no_intercept else 'yes'}; clipped records per client {s['clipped']}")
        print(f"  DPSGD and the Taylor reference: q {q:.4g}  epochs {epochs}  lr {lr:g}  ||w|| <= {W:g}")
    print(render_table(utility_rows(res) + [{"method": "DPSGD (not run)"}] * bool(not_run), UTILITY_COLUMNS))
    for why in not_run.values():
        print(f"  not run: {why}")
    print(f"  * SQM: {MODEL_SHARED_NOTE}")
    print(f"  {relation_line(r['report'] for r in res.values())}")
    line = conversion_line(rep.conversion)
    if line:
        print(f"  {line}")
    if args.seed is not None:
        print("  --seed: one process derives every party's seed (a local experiment, secure_mode false)")
    if args.json:
        from sqm.cli import output

        plain, rows = args.backend == "plain", utility_rows(res)
        output.write(args.json, output.document(
            output.command_name(args), "local", results=rows, privacy=[r["report"] for r in res.values()],
            parameters=output.parameters(args, q=q, epochs=epochs, learning_rate=lr, weight_bound=W),
            secure_mode=args.seed is None, simulation=plain, timings={r["method"]: r["seconds"] for r in rows},
            bytes=output.byte_counts(total=None if plain else s["bytes_sent"]), dataset=name, columns=columns,
            details={"labels": labels, "per_run": runs, "not_run": not_run}))
    return 0


def register(sub) -> None:
    schedule_help = texts.SCHEDULE_HELP

    p = sub.add_parser("logreg", help="private logistic regression (SQM) with DPSGD, local-DP and "
                                      "non-private baselines",
                       parents=[options.privacy(epsilon_help="server-observed epsilon target"), options.runtime(),
                                options.job("job file (JSON: parties' addresses, party 0 the server, each client's "
                                            "CSV, and the dataset id the ledger charges; see sqm/framework/spec.py): a "
                                            "real multi-party run in which each party reads only its own file; the "
                                            "label party's CSV holds the --label-column"), options.output()],
                       description="Train logistic regression (with an intercept) on vertically partitioned "
                                   "data with SQM (real MPyC party processes by default) and compare with DPSGD "
                                   "(Opacus), VFL local DP and non-private training at the same (epsilon, delta). "
                                   f"Schedule defaults, local and job mode alike: {schedule_help}.",
                              epilog=options.OWN_DATA_EPILOG)
    p.add_argument("--dataset", default="breast_cancer", choices=DATASETS,
                   help="breast_cancer (scikit-learn, default), adult (UCI files), credit_default (UCI file)")
    options.own_table(p, " for the local comparison: --label-column is the label (any two values), every other "
                         "column but --id-column a feature; split 75/25 (stratified), standardized with the "
                         "training split's statistics")
    p.add_argument("--parties", type=int, default=3, help="clients holding column blocks (default 3); the "
                                                          "last holds the label")
    LogRegJobParams.add_options(p, only=("gamma", "solver", "robust_noise", "verify_sharing", "verify_inputs",
                                         "sampling_rate",
                                         "epochs", "learning_rate", "weight_bound", "fit_intercept"))  # in this order
    p.add_argument("--runs", type=int, default=1, help="independent runs to average (default 1)")
    p.add_argument("--no-baselines", action="store_true", help="train SQM only")
    LogRegJobParams.add_options(p)  # --label-column, --label-party
    p.set_defaults(func=run)
    declare_task(p, LogRegJobParams.options())
    _PARSER[:] = [p]
