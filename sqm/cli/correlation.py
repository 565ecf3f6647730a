"""``sqm correlation``: a private correlation matrix over vertically partitioned data: locally, a bundled
dataset's columns split among ``--parties`` clients against the exact correlations; with ``--job``, a real
multi-party job from a job file (:class:`sqm.apps.correlation.job.CorrelationJobTask`).

numpy and the runtime are imported inside the functions that use them: ``sqm --help`` imports this module to
register the command (:mod:`sqm.cli.command`)."""
from __future__ import annotations

import argparse

from sqm.cli import options, output
from sqm.cli.options import JOB_ONLY, check_mode, declare_task, runtime_options
from sqm.apps.correlation.params import CorrelationParams

LOCAL_ONLY = ("dataset", "parties")
_PARSER: list[argparse.ArgumentParser] = []  # the `sqm correlation` parser (its defaults: which options were given)


def _matrix_rows(corr, columns) -> list[dict]:
    return [{"column": c, **{k: float(v) for k, v in zip(columns, row, strict=False)}}
            for c, row in zip(columns, corr, strict=False)]


def run(args) -> int:
    check_mode(args, _PARSER[-1], "job" if args.job else "local", {"job": JOB_ONLY, "local": LOCAL_ONLY})
    if args.job:
        return _run_job(args)
    import numpy as np

    from sqm.data.datasets import BUNDLED, load_dataset
    from sqm.cli.tables import relation_line, render_table
    from sqm.apps.correlation.estimator import SQMCorrelation
    from sqm.errors import UsageError

    if args.dataset not in BUNDLED:
        raise UsageError(f"sqm correlation uses a bundled dataset: choose one of {', '.join(BUNDLED)}")
    params = CorrelationParams.from_options(args)
    X = load_dataset(args.dataset).X
    # correlations do not change when a column is scaled: each column to |x_j| <= c / sqrt(d), so that no
    # record is clipped (a data-derived scaling: the local comparison only)
    X = X / (np.maximum(np.abs(X).max(axis=0), 1e-300) * np.sqrt(X.shape[1])) * params.row_norm_bound
    m = SQMCorrelation(**params.as_dict(), n_parties=args.parties, backend=args.backend, seed=args.seed,
                       backend_options=runtime_options(args)).fit(X)
    exact = np.corrcoef(X.T)
    err = float(np.nanmax(np.abs(m.correlation_ - exact)))
    print(f"correlations of {args.dataset} ({X.shape[0]} x {X.shape[1]}), {args.parties} clients, backend "
          f"{args.backend}: largest difference from the exact correlations {err:.3g}")
    print(render_table([m.report_.as_dict()], ["epsilon_server", "epsilon_client", "delta", "gamma", "mu"]))
    print(f"  {relation_line([m.report_])}")
    if args.json:
        output.write(args.json, output.document(
            output.command_name(args), "local", parameters=output.parameters(args),
            results=[{"method": f"SQM ({args.backend})", "epsilon_server": m.report_.epsilon_server,
                      "max_abs_error": err}], privacy=[m.report_], simulation=args.backend == "plain",
            secure_mode=args.seed is None, dataset=args.dataset,
            released={"correlation": m.correlation_.tolist(), "mean": m.mean_.tolist()}))
    return 0


def _run_job(args) -> int:
    from sqm.cli.job_cli import job_command
    from sqm.apps.correlation.job import CorrelationJobTask

    def task():
        return CorrelationJobTask(CorrelationParams.from_options(args), seed=args.seed,
                                  insecure_reproducible=args.insecure_reproducible)

    def server(res) -> dict:
        from sqm.cli.tables import render_table

        cols = res.get("columns") or [f"x{j}" for j in range(sum(res["col_counts"]))]
        print(f"server: correlations of {len(cols)} columns over {res['n_records']} records (clients' columns "
              f"{res['col_counts']})")
        print(render_table(_matrix_rows(res["correlation"], cols), ["column"] + cols))
        return {"columns": cols, "correlation": [[float(v) for v in row] for row in res["correlation"]],
                "mean": [float(v) for v in res["mean"]]}

    return job_command(args, task, server)


def register(sub) -> None:
    p = sub.add_parser(
        "correlation", parents=[options.privacy(), options.runtime(), options.job(), options.output()],
        help="differentially private correlation matrix over vertically partitioned data (SQM)",
        description="A private correlation matrix with SQM: one release of the Gram of [X 1] computed by the "
                    "parties, from which the server computes the correlations.  Without --job: split a bundled "
                    "dataset's columns among --parties clients and compare with the exact correlations.  With "
                    "--job: a real multi-party job, the last client also holding the constant column.")
    p.add_argument("--dataset", default="wine", help="scikit-learn bundled dataset (default wine)")
    p.add_argument("--parties", type=int, default=2, help="clients holding column blocks (default 2)")
    CorrelationParams.add_options(p, only=("robust_noise", "verify_sharing", "verify_inputs"))
    CorrelationParams.add_options(p)  # --gamma, --row-norm-bound
    p.set_defaults(func=run)
    declare_task(p, CorrelationParams.options())
    _PARSER[:] = [p]
