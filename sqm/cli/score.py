"""``sqm score``: a released model's scores of new records held in pieces by the clients (private inference).

    sqm score --job new.json --model lr.json --scores scores.csv          # every party on this machine
    sqm score --job new.json --model lr.json --index 0 --ssl-dir keys/   # the server's host (holds the model)
    sqm score --job new.json --index 2 --ssl-dir keys/ --scores s.csv   # the requester's host (default: last client)

The server sends the model (a training job's ``--json``: differentially private, so any party may hold it) to
every client; each client started alone checks that it is a release its own ledger recorded (at the training
job's end) and that the scores would not let the requester solve for its columns (unless its operator passes
``--allow-revealing-scores``); each client scores its own columns; the partial scores are summed on secret
shares and only the requester learns the scores (:mod:`sqm.apps.inference.job`).  Nothing is charged to a
privacy budget.
"""
from __future__ import annotations

from sqm.cli import options


def _write_scores(path: str, res: dict) -> None:
    import csv

    import numpy as np
    from scipy.special import expit

    scores, outs = np.asarray(res["scores"]), list(res["outputs"])
    header = (["id"] if "ids" in res else ["record"]) + outs + (["probability"] if res["kind"] == "logistic" else [])
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        keys = res.get("ids") or range(len(scores))
        for key, row in zip(keys, scores, strict=False):
            extra = [expit(row[0])] if res["kind"] == "logistic" else []
            w.writerow([key, *[repr(float(v)) for v in row], *[repr(float(v)) for v in extra]])


def run(args) -> int:
    import dataclasses

    from sqm.cli import output
    from sqm.framework.alignment import check_min_intersection
    from sqm.framework.spec import load_job
    from sqm.framework.runners import run_job
    from sqm.apps.inference.job import ScoringJobTask
    from sqm.apps.inference.model import load_model
    from sqm.errors import UsageError

    if args.job is None:
        raise UsageError("sqm score needs --job FILE: the parties and each client's file of new records")
    spec = load_job(args.job)
    if args.drop_columns:
        spec = dataclasses.replace(spec, drop_columns=tuple(args.drop_columns))
    if args.min_intersection is not None:
        spec = dataclasses.replace(spec, min_intersection=check_min_intersection(args.min_intersection))
    holds_server = args.index in (None, 0)
    if holds_server and args.model is None:
        raise UsageError("the server holds the released model: give --model FILE (a training job's --json)")
    if not holds_server and args.model is not None:
        raise UsageError("--model is the server's: a client receives the model from the server")
    model = load_model(args.model) if args.model else None
    task = ScoringJobTask(model, args.requester, args.score_bound, allow_revealing=args.allow_revealing_scores,
                          need_record=args.index is not None and args.index > 0)
    from sqm.cli.progress import job_progress

    with job_progress(args, task):  # the alignment's and the scoring evaluation's bars (none with -q)
        recs = run_job(spec, task, args.index, **options.job_run_options(args))
    print("privacy: nothing is charged to any budget (the model is already released); the requester learns the "
          "scores of the records every client holds (per record, the other clients' columns times their weights), "
          "the other parties only their count")
    results, released = [], None
    for i, rec in enumerate(recs):
        if rec is None:
            continue
        res = rec["result"]
        who = "server" if i == 0 else f"client {i}"
        if "scores" in res:
            print(f"{who} (the requester): {res['scored']:,} records scored, outputs {', '.join(res['outputs'])}")
            if args.scores:
                _write_scores(args.scores, res)
                print(f"  written to {args.scores}")
            released = {"outputs": res["outputs"], "kind": res["kind"], "records": res["scored"],
                        "scores_file": args.scores}
        else:
            print(f"{who}: {res['scored']:,} records scored for party {res['requester']} (it learns no score)")
        results.append({"method": f"{res['kind']} scores (secure sum)", "party": i, "records": res["scored"],
                        "requester": res["requester"],
                        "seconds": rec.get("seconds")})
    if args.json:
        output.write(args.json, output.document(
            "score", "job", parameters=output.parameters(args), results=results, privacy=[],
            simulation=getattr(args, "backend", "mpyc") == "plain", dataset=spec.dataset_id, job=spec.path,
            released=released))
    return 0


# Shared options that do nothing in a scoring job, left off its command line: it has no randomness of its own (no
# noise: no seed), charges no budget (nothing to set), and its task reads whole tables (no shard workers).
UNUSED = {"seed": None, "insecure_reproducible": False, "budget": None, "engine": None, "worker_addresses": None}


def register(sub) -> None:
    p = sub.add_parser(
        "score", parents=[options.omit(options.runtime(), UNUSED), options.omit(options.job(), UNUSED),
                          options.output()],
        help="private inference: a released model's scores of new records split across the clients",
        description="Score new records with a released model (the --json of sqm logreg, linreg or pca --job): "
                    "each client scores its own columns, the partial scores are summed on secret shares, and "
                    "only the requester learns the scores.  Nothing is charged to a privacy budget.  A client "
                    "started alone refuses a model that is not a release its own ledger recorded (the server "
                    "sends every client the model at a training job's end), and refuses scores from which the "
                    "requester could solve for its columns.")
    p.add_argument("--model", default=None, metavar="FILE",
                   help="the server's: the released model, a training job's --json output (weights by raw column)")
    p.add_argument("--requester", type=int, default=None, metavar="I",
                   help="the party that learns the scores (0 = the server; default: the last client, which knows "
                        "its records' ids); every party gives the same")
    p.add_argument("--scores", default=None, metavar="FILE",
                   help="at the requester: write the scores as CSV (id, one column per output; for logistic "
                        "regression also the probability)")
    p.add_argument("--allow-revealing-scores", action="store_true",
                   help="at a client: allow scores from which the requester can solve for some of this client's "
                        "columns (the requester learns, per record, the other clients' columns times their weights; "
                        "as many independent outputs as their columns, e.g. a projection on that many components, "
                        "or one output over a single column of theirs, give every value of those columns away).  "
                        "Default: such a job is refused, naming the columns")
    p.add_argument("--score-bound", type=float, default=1e9,
                   help="public bound on each client's partial score (default 1e9); every party gives the same")
    p.set_defaults(func=run, **UNUSED)
