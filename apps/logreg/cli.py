"""``sqm logreg``: SQM-LR against its baselines on a data set (the comparison driver and its table), or, with
``--job``, a real multi-party run from a job file (:class:`apps.logreg.job.LRJobTask`).

    sqm logreg --dataset breast_cancer --parties 3 --epsilon 1 --delta 1e-5 --gamma 8192

numpy, scikit-learn, SciPy, Opacus and the runtime are imported inside the functions that use them: ``sqm --help``
imports this module to register the command (:mod:`apps.cli`).
"""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

CLIENT_VIEW = "nothing (only Shamir shares)"  # what a client observes during SQM-LR training


# ----- datasets --------------------------------------------------------------------------------------------
DATASETS = ("breast_cancer", "adult", "credit_default")  # the data sets sqm logreg runs on


def unit_ball_split(name: str, data_dir: str | None = None, seed: int = 0):
    """(X_train, y_train, X_test, y_test, attributes) from :func:`apps.datasets.load_dataset` (its split:
    adult's shipped test set, else stratified 75/25 with ``seed``), every row with ||x||_2 <= 1; ``attributes``:
    each column's original attribute (public metadata, :func:`public_split`'s groups).

    adult and credit_default are encoded from public metadata only with ||x|| <= 1 by construction;
    breast_cancer (scikit-learn's bundled copy, a public demo set) is standardized with the training split's
    statistics, clipped to +-3 and divided by 3 sqrt(d)."""
    from ..datasets import load_dataset

    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {DATASETS}")
    ds = load_dataset(name, data_dir)
    Xtr, ytr, Xte, yte = ds.train_test(0.25, seed)
    if name == "breast_cancer":
        Xtr, Xte = standardized_unit_rows(Xtr, Xte)
    return Xtr, ytr, Xte, yte, ds.attributes


def standardized_unit_rows(Xtr, Xte) -> tuple[np.ndarray, np.ndarray]:
    """Both splits standardized with the training split's statistics, clipped to +-3 and divided by 3 sqrt(d),
    so every row has ||x||_2 <= 1 (a local comparison's preprocessing: data-derived, outside the accounting)."""
    import numpy as np

    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd[sd == 0] = 1
    f = lambda A: np.clip((A - mu) / sd, -3, 3) / (3 * math.sqrt(A.shape[1]))  # noqa: E731
    return f(Xtr), f(Xte)


# ----- one comparison --------------------------------------------------------------------------------------
def public_split(groups: list[str], n_parties: int) -> tuple[list[int], np.ndarray]:
    """Column counts that cut only between attributes (as equal as possible) and the per-party norm bounds
    c_j = sqrt(attributes of party j / all attributes).  With rows encoded as sum over attributes of at most
    1 / (number of attributes) in squared norm (apps.datasets' encoders, breast_cancer's scaling), no
    sub-row ever exceeds its bound: nothing is clipped, and the bounds come from public metadata only."""
    import numpy as np

    d = len(groups)
    starts = [j for j in range(d) if j == 0 or groups[j] != groups[j - 1]] + [d]
    if n_parties > len(starts) - 1:
        raise ValueError(f"cannot split {len(starts) - 1} attributes among {n_parties} parties")
    cuts = [0]
    for k in range(1, n_parties):
        target = k * d / n_parties
        options = [b for b in starts[1:-1] if b > cuts[-1] and len([x for x in starts if x > b]) >= n_parties - k]
        cuts.append(min(options, key=lambda b: abs(b - target)))
    cuts.append(d)
    counts = [b - a for a, b in zip(cuts[:-1], cuts[1:])]
    n_attr = [len({groups[j] for j in range(a, b)}) for a, b in zip(cuts[:-1], cuts[1:])]
    return counts, np.sqrt(np.asarray(n_attr, np.float64) / sum(n_attr))


def compare(Xtr, ytr, Xte, yte, *, epsilon, delta, gamma, parties, backend, seed, q=None, epochs=None,
            learning_rate=None, weight_bound=None, methods=("sqm", "dpsgd", "local", "nonprivate", "taylor"),
            progress=False, groups=None, timeout: float = 3600.0, fit_intercept: bool = True,
            solver: str = "moments", robust_noise: int = 0, verify_sharing: bool = False) -> dict:
    """Test accuracy and privacy of SQM and each baseline for one seed (an int or None): method -> a row
    ``{"method", "accuracy", "seconds", "bytes_sent", "report": PrivacyReport, ...}``.  ``groups`` (the
    attribute of each column) makes the parties' split and norm bounds follow attributes (:func:`public_split`).
    The schedule (q, epochs, learning rate, ||w|| bound) left None is :func:`apps.logreg.estimator.default_schedule`'s
    for the training records, the same for SQM, DPSGD and the Taylor reference; with ``fit_intercept`` every
    method fits an intercept (DPSGD and Taylor on the rows with SQM's constant column, clipped at their norm
    bound sqrt(1 + 1))."""
    import numpy as np

    from sqm.report import PrivacyReport
    from sqm.vertical import VerticalData

    from .baselines import dpsgd_fit, local_dp_fit, nonprivate_fit, roc_auc, taylor_fit, with_intercept_column
    from .estimator import SQMLogisticRegression, resolve_schedule
    from .party import logistic_loss

    sched = resolve_schedule(len(Xtr), epsilon, q, epochs, learning_rate, weight_bound)
    q, epochs, learning_rate, weight_bound = sched.q, sched.epochs, sched.learning_rate, sched.weight_bound
    c = 1.0 if fit_intercept else 0.0
    Xtr_c, Xte_c = with_intercept_column(Xtr, c), with_intercept_column(Xte, c)
    rng = np.random.default_rng(seed)
    sub = [int(s) for s in rng.integers(0, 2 ** 62, size=4)] if seed is not None else [None] * 4
    out = {}

    def row(name, scores, t0, report, **extra):
        """``scores``: the method's decision values on the test split (positive: class 1)."""
        scores = np.asarray(scores, np.float64)
        out[name] = dict(method=report.method, accuracy=float(np.mean((scores > 0) == (np.asarray(yte) == 1))),
                         auc=roc_auc(yte, scores), seconds=time.perf_counter() - t0, bytes_sent=0, report=report,
                         **extra)
    if "sqm" in methods:
        bounds, data = None, Xtr
        if groups is not None:
            counts, bounds = public_split(groups, parties)
            data = VerticalData(np.split(np.asarray(Xtr, np.float64), np.cumsum(counts)[:-1], axis=1))
        sgd = solver == "sgd"  # the schedule is the sgd solver's (and the baselines'); moments has none
        m = SQMLogisticRegression(epsilon, delta, gamma, q if sgd else None, epochs if sgd else None,
                                  learning_rate if sgd else None, backend, parties,
                                  weight_bound=weight_bound if sgd else None, party_bounds=bounds, seed=sub[0],
                                  progress=progress, timeout=timeout, fit_intercept=fit_intercept,
                                  intercept_scaling=1.0, solver=solver, robust_noise=robust_noise,
                                  verify_sharing=verify_sharing)
        t0 = time.perf_counter()
        m.fit(data, ytr, eval_set=(Xte, yte) if progress and sgd else None)
        row("sqm", m.decision_function(Xte), t0, m.report_,
            test_loss=logistic_loss(np.r_[m.coef_[0], m.intercept_ / c] if c else m.coef_[0], Xte_c, yte),
            training_seconds=m.seconds_, clipped=m.clipped_, batches_truncated=m.batches_truncated_,
            b_max=m.plan_.b_max if sgd else None, backend=m.backend_, solver=solver)
        out["sqm"]["bytes_sent"] = int(sum(m.bytes_sent_))
    if "dpsgd" in methods:
        t0 = time.perf_counter()
        w, rep = dpsgd_fit(Xtr_c, ytr, epsilon, delta, q, epochs, learning_rate, weight_bound,
                           max_grad_norm=math.sqrt(1.0 + c * c), seed=sub[1])
        row("dpsgd", Xte_c @ w, t0, rep)
    if "local" in methods:
        t0 = time.perf_counter()
        mdl, rep = local_dp_fit(Xtr, ytr, epsilon, delta, seed=sub[2], fit_intercept=fit_intercept)
        row("local", mdl.decision_function(Xte), t0, rep)
    if "nonprivate" in methods:
        t0 = time.perf_counter()
        mdl = nonprivate_fit(Xtr, ytr, fit_intercept=fit_intercept)
        row("nonprivate", mdl.decision_function(Xte), t0, PrivacyReport(method="non-private", epsilon_server=math.inf,
                                                                 epsilon_client=math.inf, delta=0.0,
                                                                 neighbouring="none"))
    if "taylor" in methods:
        t0 = time.perf_counter()
        w = taylor_fit(Xtr_c, ytr, q, epochs, learning_rate, weight_bound, seed=sub[3])
        row("taylor", Xte_c @ w, t0, PrivacyReport(
            method="Taylor (noiseless)", epsilon_server=math.inf, epsilon_client=math.inf, delta=0.0,
            neighbouring="none",
            notes="SQM's Taylor gradient, sampling and projection in float64, without noise or quantization"))
    return out


def _mean(runs: list[dict]) -> dict:
    import numpy as np

    out = {}
    for key in runs[0]:
        vals = [r[key] for r in runs]
        out[key] = dict(runs[0][key])
        out[key]["accuracy"] = float(np.mean([v["accuracy"] for v in vals]))
        out[key]["accuracy_std"] = float(np.std([v["accuracy"] for v in vals]))
        out[key]["auc"] = float(np.mean([v["auc"] for v in vals]))
        out[key]["auc_std"] = float(np.std([v["auc"] for v in vals]))
        out[key]["seconds"] = float(np.mean([v["seconds"] for v in vals]))
        out[key]["runs"] = len(vals)
    return out


UTILITY_COLUMNS = [("accuracy", "accuracy", ".4f"), ("auc", "AUC", ".4f"), ("epsilon_server", "eps server"),
                   ("epsilon_client", "eps client*"), ("delta", "delta", ".3g"), ("seconds", "seconds", ".2f"),
                   ("bytes_sent", "bytes", ",")]


def utility_rows(res: dict) -> list[dict]:
    """The utility table's rows: each method's metrics with its privacy report's epsilons and delta."""
    return [{**{k: v for k, v in r.items() if k != "report"}, "epsilon_server": r["report"].epsilon_server,
             "epsilon_client": r["report"].epsilon_client, "delta": r["report"].delta} for r in res.values()]


def _run_job(args) -> int:
    import numpy as np

    from mpc.launch import private_folder
    from sqm.report import render_table

    from ..job_cli import job_command
    from .estimator import _progress
    from .job import LRJobTask
    from ..progress import follow_progress

    with private_folder("sqm-lr-job-") as tmp:
        path = None if args.quiet or args.solver == "moments" else f"{tmp}/progress"  # moments: one release

        def make_task():
            return LRJobTask(args.epsilon, args.delta, args.gamma, args.q, args.epochs, args.learning_rate,
                             args.weight_bound, args.label_column, args.label_party, seed=args.seed,
                             insecure_reproducible=args.insecure_reproducible,
                             fit_intercept=not args.no_intercept, progress_path=path, solver=args.solver,
                             robust_noise=args.robust_noise, verify_sharing=args.verify_sharing)

        def server_summary(res) -> dict:
            rep, w = res["report"], np.asarray(res["weights"])
            sch = res["schedule"]
            how = ("one release of the second moments (solver moments)" if sch is None else
                   f"q {sch['q']:.4g}, {sch['epochs']} epochs, {rep.rounds} rounds, batch cap {res['b_max']}, "
                   f"lr {sch['learning_rate']:g}, ||w|| = {np.linalg.norm(w):.4f} <= {sch['weight_bound']:g}")
            print(f"server: logistic-regression weights over {len(res['coef'])} features"
                  f"{' and an intercept' if res['fit_intercept'] else ''} of {res['n_records']} records (clients' "
                  f"columns {res['col_counts']}, label included at client "
                  f"{rep.n_parties if args.label_party is None else args.label_party + 1}); {how}")
            label = rep.n_parties - 1 if args.label_party is None else args.label_party
            cols = list(res.get("columns") or [])
            if cols:  # the public schema: drop the label column from the label party's slice
                start = sum(res["col_counts"][:label])
                own = cols[start:start + res["col_counts"][label]]
                cols = cols[:start] + [c for c in own if c != args.label_column] + cols[start + len(own):]
            cols = cols if len(cols) == len(res["coef"]) else [f"x{j}" for j in range(len(res["coef"]))]
            rows = [{"column": c, "weight": float(w)} for c, w in zip(cols, res["coef"])]
            if res["fit_intercept"]:
                rows.append({"column": "(intercept)", "weight": float(res["intercept"])})
            print(render_table(rows, ["column", "weight"]))
            print(f"  clients observe {CLIENT_VIEW} during training; epsilon_client is the guarantee of the final "
                  f"model only if the server shares it with them")
            return {"columns": cols, "coef": {c: float(v) for c, v in zip(cols, res["coef"])},
                    "intercept": float(res["intercept"]), "schedule": sch}

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
_PARSER = []  # the `sqm logreg` parser (its defaults decide which options were given)


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

    from apps.tables import read_user_table

    from .estimator import split_label

    t = read_user_table(args.data, args.id_column)
    X, y, columns, labels = split_label(t.block, t.columns, args.label_column, f"data file {args.data}")
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
    Xtr, Xte = standardized_unit_rows(Xtr, Xte)
    return Xtr, ytr, Xte, yte, None, os.path.basename(args.data), columns, labels


def run(args) -> int:
    import numpy as np

    from sqm.report import NEIGHBOURING_LINE, render_table

    from ..options import JOB_ONLY, check_mode
    from .estimator import MODEL_SHARED_NOTE, resolve_schedule

    if _PARSER:
        check_mode(args, _PARSER[-1], "job" if args.job else "local",
                   {"job": JOB_ONLY + JOB_MODE_ONLY, "local": LOCAL_ONLY})
    if args.job:
        return _run_job(args)
    if args.runs < 1:
        raise ValueError(f"--runs must be >= 1, got {args.runs}")
    Xtr, ytr, Xte, yte, groups, name, columns, labels = _local_data(args)
    sched = resolve_schedule(len(Xtr), args.epsilon, args.q, args.epochs, args.learning_rate, args.weight_bound)
    q, epochs, lr, W = sched.q, sched.epochs, sched.learning_rate, sched.weight_bound
    methods = ("sqm",) if args.no_baselines else ("sqm", "dpsgd", "local", "nonprivate", "taylor")
    from ..extras import missing

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
                            verify_sharing=args.verify_sharing))
    res = _mean(runs)
    s, rep = res["sqm"], res["sqm"]["report"]
    print(f"logistic regression on {name}: {Xtr.shape[0]} train / {Xte.shape[0]} test records, "
          f"{Xtr.shape[1]} features, {args.parties} clients (+ server), backend {s['backend']}, {args.runs} run(s)")
    if labels is not None:
        print(f"  labels {labels}; majority-class rate on the test split {max(np.mean(yte), 1 - np.mean(yte)):.4f}")
    if args.solver == "sgd":
        print(f"  SQM solver sgd: q {q:.4g}  epochs {epochs}  rounds {rep.rounds}  batch cap {s['b_max']}  lr {lr:g}  "
              f"||w|| <= {W:g}  gamma {args.gamma:g}  mu {rep.mu:.4g}  intercept {'no' if args.no_intercept else 'yes'}")
        print(f"  clipped records per client {s['clipped']}  batches truncated {s['batches_truncated']}")
    else:
        print(f"  SQM solver moments: one release of the second moments, gamma {args.gamma:g}  mu {rep.mu:.4g}  "
              f"intercept {'no' if args.no_intercept else 'yes'}; clipped records per client {s['clipped']}")
        print(f"  DPSGD and the Taylor reference: q {q:.4g}  epochs {epochs}  lr {lr:g}  ||w|| <= {W:g}")
    print(render_table(utility_rows(res) + [{"method": "DPSGD (not run)"}] * bool(not_run), UTILITY_COLUMNS))
    for why in not_run.values():
        print(f"  not run: {why}")
    print(f"  * SQM: {MODEL_SHARED_NOTE}")
    print(f"  {NEIGHBOURING_LINE}")
    if args.seed is not None:
        print("  --seed: one process derives every party's seed (a local experiment, secure_mode false)")
    if args.json:
        from .. import output

        plain, rows = args.backend == "plain", utility_rows(res)
        output.write(args.json, output.document(
            output.command_name(args), "local", results=rows, privacy=[r["report"] for r in res.values()],
            parameters=output.parameters(args, q=q, epochs=epochs, learning_rate=lr, weight_bound=W),
            secure_mode=args.seed is None, simulation=plain, timings={r["method"]: r["seconds"] for r in rows},
            bytes=output.byte_counts(total=None if plain else s["bytes_sent"]), dataset=name, columns=columns,
            details={"labels": labels, "per_run": runs, "not_run": not_run}))
    return 0


def register(sub) -> None:
    from .. import options

    schedule_help = options.module_constant("apps.logreg.estimator", "SCHEDULE_HELP")  # without scikit-learn

    p = sub.add_parser("logreg", help="private logistic regression (SQM) with DPSGD, local-DP and "
                                      "non-private baselines",
                       parents=[options.privacy(epsilon_help="server-observed epsilon target"), options.runtime(),
                                options.job("job file (JSON: parties' addresses, party 0 the server, each client's "
                                            "CSV, and the dataset id the ledger charges; see apps/jobfile.py): a "
                                            "real multi-party run in which each party reads only its own file; the "
                                            "label party's CSV holds the --label-column"), options.output()],
                       description="Train logistic regression (with an intercept) on vertically partitioned "
                                   "data with SQM (real MPyC party processes by default) and compare with DPSGD "
                                   "(Opacus), VFL local DP and non-private training at the same (epsilon, delta). "
                                   f"Schedule defaults, local and job mode alike: {schedule_help}.", epilog=options.OWN_DATA_EPILOG)
    p.add_argument("--dataset", default="breast_cancer", choices=DATASETS,
                   help="breast_cancer (scikit-learn, default), adult (UCI files), credit_default (UCI file)")
    options.own_table(p, " for the local comparison: --label-column is the label (any two values), every other "
                         "column but --id-column a feature; split 75/25 (stratified), standardized with the "
                         "training split's statistics")
    p.add_argument("--parties", type=int, default=3, help="clients holding column blocks (default 3); the "
                                                          "last holds the label")
    p.add_argument("--gamma", type=float, default=8192.0, help="quantization scale gamma (default 8192 = 2^13)")
    p.add_argument("--solver", default="moments", choices=("moments", "sgd"),
                   help=options.module_constant("apps.logreg.estimator", "SOLVER_HELP"))
    options.deviating_clients(p, "solver moments")
    p.add_argument("--q", type=float, default=None,
                   help="Poisson sampling rate (default: chosen from the record count n: max(64, sqrt n) / n)")
    p.add_argument("--epochs", type=int, default=None,
                   help="epochs (default: the paper's 2, 5, 8, 10, 10 for epsilon 0.5, 1, 2, 4, 8)")
    p.add_argument("--learning-rate", type=float, default=None,
                   help="learning rate for SQM, DPSGD and the Taylor reference (default 2)")
    p.add_argument("--weight-bound", type=float, default=None,
                   help="project ||w||_2 <= W (the intercept's weight included) after each step, SQM and DPSGD "
                        "alike; W enters SQM's sensitivity (default 8)")
    p.add_argument("--no-intercept", action="store_true",
                   help="fit no intercept (default: an intercept, as scikit-learn: the label party appends a "
                        "public constant column 1, counted in the sensitivity; every baseline fits one too)")
    p.add_argument("--runs", type=int, default=1, help="independent runs to average (default 1)")
    p.add_argument("--no-baselines", action="store_true", help="train SQM only")
    p.add_argument("--label-column", default="label",
                   help="with --job or --data FILE: the label column's name (default label); any two values, the "
                        "smaller mapped to 0 and the larger to 1 (said in the output)")
    p.add_argument("--label-party", type=int, default=None,
                   help="with --job: 0-based client index holding the label (default the last client)")
    p.set_defaults(func=run)
    from apps.options import declare_task

    declare_task(p, ("epsilon", "delta", "gamma", "q", "epochs", "learning_rate", "weight_bound", "label_column",
                     "label_party", "no_intercept", "solver", "robust_noise", "verify_sharing"))
    _PARSER[:] = [p]
