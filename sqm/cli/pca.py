"""``sqm pca``: SQM-PCA against central DP, local DP and non-private PCA on a dataset split among clients,
or a real multi-party job from a job file (``--job``, through :func:`sqm.cli.job_cli.job_command`).

numpy, SciPy, scikit-learn and the runtime are imported inside the functions that use them: ``sqm --help``
imports this module to register the command (:mod:`sqm.cli.command`)."""
from __future__ import annotations

import argparse

from sqm.cli import options, output
from sqm.cli.options import JOB_ONLY, check_mode, declare_task, runtime_options
from sqm.apps.pca.experiment import TABLE_COLUMNS, compare, table_rows
from sqm.apps.pca.params import PCAParams


def print_table(r: dict, dataset: str = "") -> None:
    from sqm.cli.tables import conversion_line, relation_line, render_table
    from sqm.mechanism.report import relation_phrase

    reports = [r[k]["report"] for k in ("sqm", "central", "local", "nonprivate")]
    print(f"PCA of {dataset} {r['shape'][0]} x {r['shape'][1]}, {r['parties']} clients, k = {r['components']}, "
          f"epsilon {r['sqm']['epsilon_server']:.4g} ({relation_phrase(reports[0].neighbouring, 'the server')}), "
          f"delta {r['delta']:g}, gamma {r['gamma']:g}, {r['runs']} run(s)")
    print(render_table(table_rows(r), TABLE_COLUMNS))
    print(f"  {relation_line(reports)}")
    line = conversion_line(getattr(r["sqm"]["report"], "conversion", ""))
    if line:
        print(f"  {line}")
    if r["backend"] == "plain":
        print("(plain backend: in-process SIMULATION of the parties' programs; bytes are not measured)")


# ----- the `sqm pca` command --------------------------------------------------------------------------------


LOCAL_ONLY = ("dataset", "data", "parties", "runs", "id_column")
PROPOSE = ("propose_bounds", "id_column")
RELEASE = ("epsilon", "delta", "components", "gamma", "row_norm_bound", "backend", "timeout", "seed", "json")
PROPOSE_NOTE = ("NOTE: these ranges are computed from this party's OWN DATA and are NOT private (a minimum or a "
                "maximum can be one person's value).  Review them, replace them by public knowledge where you can "
                "(units, legal or physical limits) and round them before declaring them in the job file.")
_PARSER: list[argparse.ArgumentParser] = []  # the `sqm pca` parser (its defaults decide which options were given)


def released_components(V, columns) -> list[dict]:
    """Components (k x d, one per row) in the columns' terms: one {column: loading} per component."""
    import numpy as np

    return [{c: float(v) for c, v in zip(columns, row, strict=False)} for row in np.asarray(V)]


def propose_bounds(path, id_column: str | None = None) -> int:
    """``sqm pca --propose-bounds FILE``: print a job-file entry ``"bounds": {column: [lo, hi]}`` proposed from
    a party's own table, with the note that data-derived bounds are not private."""
    import json
    import sys

    from sqm.framework.tables import propose_ranges, read_table

    t = read_table(path, id_column or "id", require_id=False, what="party file")
    print(PROPOSE_NOTE, file=sys.stderr)
    ranges = propose_ranges(t)
    lines = [f"    {json.dumps(c)}: [{lo:.15g}, {hi:.15g}]" for c, (lo, hi) in ranges.items()]  # one column a line
    print('"bounds": {\n' + ",\n".join(lines) + "\n}")
    return 0


def _local_data(args):
    """(X, its column names, what to call it): ``--data FILE`` alone is the user's own table (CSV/Parquet;
    features: every column except the optional ``--id-column``); else ``--dataset`` (digits by default),
    read from ``--data`` when the dataset comes from files."""
    from sqm.data.datasets import load_dataset

    if args.data is not None and args.dataset is None:
        import os

        from sqm.cli.options import read_user_table

        t = read_user_table(args.data, args.id_column)
        return t.block, t.columns, os.path.basename(args.data)
    name = args.dataset or "digits"
    ds = load_dataset(name, args.data)
    cols = getattr(ds, "feature_names", None)
    return ds.X, (list(cols) if cols is not None else [f"x{j}" for j in range(ds.X.shape[1])]), name


def output_document(r: dict, args) -> dict:
    """``sqm pca``'s output document (:mod:`sqm.cli.output`) of :func:`compare`'s result ``r``."""
    rows = table_rows(r)
    plain = r["backend"] == "plain"
    return output.document(
        output.command_name(args), "local", parameters=output.parameters(args), results=rows,
        privacy=[r[k]["report"] for k in ("sqm", "central", "local", "nonprivate")],
        timings={row["method"]: row["seconds"] for row in rows}, simulation=plain, secure_mode=r["secure_mode"],
        bytes=output.byte_counts(None if plain else r["bytes_sent_per_party"]), dataset=r.get("dataset"),
        columns=r.get("columns"), released=r.get("released"),
        details={"shape": r["shape"], "runs": r["runs"], "clipped": r["sqm"]["clipped"],
                 "utilities": {row["method"]: r[k].get("utilities") for row, k in
                               zip(rows, ("sqm", "central", "local", "nonprivate"), strict=False)}})


def _run_cli(args) -> int:
    mode = "job" if args.job else "propose" if args.propose_bounds else "local"
    check_mode(args, _PARSER[-1], mode, {"job": JOB_ONLY + RELEASE + ("chunk_rows",), "local": LOCAL_ONLY + RELEASE,
                                         "propose": PROPOSE})
    if args.job:
        return _run_job(args)
    if args.propose_bounds:
        return propose_bounds(args.propose_bounds, args.id_column)
    from sqm.data.datasets import scale_rows

    X, columns, name = _local_data(args)
    X = scale_rows(X, args.row_norm_bound)
    release = PCAParams.from_options(args).as_dict()
    k, epsilon, delta, gamma, row_norm_bound = (
        release.pop(key) for key in ("n_components", "epsilon", "delta", "gamma", "row_norm_bound"))
    r = compare(X, args.parties, k, epsilon, delta, gamma, row_norm_bound, args.backend, args.runs, args.seed,
                progress=not args.quiet, backend_options=runtime_options(args), **release)
    r["dataset"] = name
    r["columns"] = columns
    r["released"] = {"components": released_components(r["sqm"].pop("components"), columns)}
    print_table(r, name)
    if not r["secure_mode"]:
        print(f"secure_mode: false (--seed {args.seed}: a reproducible local experiment; whoever knows the seed "
              f"can regenerate every party's noise)")
    if args.json:
        output.write(args.json, output_document(r, args))
    return 0


def _run_job(args) -> int:
    """The job (its progress bars: :func:`sqm.cli.job_cli.job_command`'s)."""
    from sqm.cli.job_cli import job_command
    from sqm.apps.pca.job import PCAJobTask

    def task():
        return PCAJobTask(params=PCAParams.from_options(args), seed=args.seed,
                          insecure_reproducible=args.insecure_reproducible)

    def server(res) -> dict:
        print(f"server: {len(res['components'])} components of {res['n_records']} records x "
              f"{sum(res['col_counts'])} columns (clients' columns {res['col_counts']})")
        print("  explained variance (per record): " + ", ".join(f"{v:.4g}" for v in res["explained_variance"]))
        cols = res.get("columns") or [f"x{j}" for j in range(sum(res["col_counts"]))]
        from sqm.cli.tables import render_table

        rows = [{"column": c, **{f"PC{k + 1}": float(v[j]) for k, v in enumerate(res["components"])}}
                for j, c in enumerate(cols)]
        print(render_table(rows, ["column"] + [f"PC{k + 1}" for k in range(len(res["components"]))]))
        from sqm.framework.units import is_scaled, raw_projection

        released = {"components": released_components(res["components"], cols),
                    "explained_variance": res["explained_variance"]}
        scales = res.get("column_scales") or {}
        if is_scaled(scales):  # what projects a raw record (inside the declared ranges) on each component
            released["projection_raw"] = raw_projection(res["components"], cols, scales)
            released["column_scales"] = scales
            print("  components: on the columns as the clients released them (declared ranges scaled); to project "
                  "a raw record, use --json's released.projection_raw (one weight per raw column)")
        return {"columns": cols, "released": released, "gamma": args.gamma, "delta": args.delta}

    return job_command(args, task, server)


def register(sub) -> None:
    p = sub.add_parser(
        "pca", help="differentially private PCA over vertically partitioned data (SQM vs central/local DP)",
        parents=[options.privacy(), options.runtime(),
                 options.job("job file (JSON: parties' addresses, party 0 the server, each client's CSV, and the "
                             "dataset id the ledger charges); see sqm/framework/spec.py"), options.output()],
        description="Private PCA with SQM: the clients' noisy X^T X is computed by real MPyC party processes and "
                    "the server takes its top-k eigenvectors.  Without --job: split a dataset's columns among "
                    "--parties clients on this machine and compare SQM with central DP (Analyze Gauss), the "
                    "local-DP VFL baseline and non-private PCA.  With --job: a real multi-party job in which "
                    "each party reads only its own CSV file.", epilog=options.OWN_DATA_EPILOG)
    p.add_argument("--dataset", default=None,
                   help="digits (the default without --data), breast_cancer, iris, wine, diabetes (scikit-learn "
                        "bundled) or citeseer")
    options.own_table(p, ": the comparison runs on all its columns except --id-column, split among --parties "
                         "clients.  With --dataset: that dataset's file or folder", " or --propose-bounds FILE")
    p.add_argument("--propose-bounds", default=None, metavar="FILE",
                   help="print public column ranges (the job file's \"bounds\" entry) proposed from this party's "
                        "own table, for its operator to review: data-derived bounds are NOT private")
    p.add_argument("--parties", type=int, default=3, help="clients holding column blocks (default 3)")
    PCAParams.add_options(p, only=("robust_noise", "verify_sharing", "verify_inputs"))
    PCAParams.add_options(p)  # --components, --gamma, --row-norm-bound, --chunk-rows, --row-norm-check
    p.add_argument("--runs", type=int, default=1, help="average utilities over this many runs (default 1)")
    p.set_defaults(func=_run_cli)
    declare_task(p, PCAParams.options())
    _PARSER[:] = [p]
