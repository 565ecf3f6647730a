"""``sqm budget``: the privacy-budget ledger (:mod:`sqm.mechanism.ledger`) on the command line.

    sqm budget set DATASET --budget EPS,DELTA [--replace]   the dataset's total budget, set once
    sqm budget bind DATASET FILE                             the file (its content digest) charges DATASET too
    sqm budget show DATASET                                  budget, spent, left, releases, files, alignments
    sqm budget list                                          every dataset in the ledger

Each takes ``--ledger PATH`` (default: the ledger in the sqm data folder, $SQM_DATA or ~/sqm_data).
"""
from __future__ import annotations

import argparse

from sqm.cli import options, output

LEDGER_HELP = ("the privacy-budget ledger (SQLite file); default: ledger.sqlite in the sqm data folder "
               "($SQM_DATA, else ~/sqm_data)")


def _ledger_parent() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--ledger", default=None, metavar="PATH", help=LEDGER_HELP)
    return p


def register(sub) -> None:
    b = sub.add_parser("budget", help="the privacy-budget ledger: set, bind, show and list datasets",
                       description="A party's privacy-budget ledger: every release per dataset, composed in "
                                   "Renyi DP; a job that would exceed its dataset's budget is refused before any "
                                   "share is sent.  Each client (data owner) keeps its own, by default when it "
                                   "runs alone (--job --index I); the server, or a whole job on one host, keeps "
                                   "one only when given --ledger, --budget or --ledger-dataset.  A data owner names "
                                   "the dataset its file charges (sqm <command> --job --ledger-dataset NAME); the "
                                   "ledger binds the name to the file's content digest, so the same file always "
                                   "charges the same dataset whatever a job file says.  A client's entry is "
                                   "'refunded' (not counted) when its job ended before the client sent its shares "
                                   "of any output, else it counts, failed or not.  Each job's record alignment "
                                   "is counted too, up to the owner's --max-alignments.")
    bsub = b.add_subparsers(dest="budget_command", metavar="ACTION")
    s = bsub.add_parser("set", parents=[_ledger_parent()], help="set a dataset's total budget (once)",
                        description="Set a dataset's total (epsilon, delta) budget.  Setting the same budget "
                                    "again does nothing; a different one needs --replace.")
    s.add_argument("dataset", metavar="DATASET", help="the dataset (a data owner's own name for its records, "
                                                      "--ledger-dataset; at the server, the job file's \"dataset\")")
    s.add_argument("--budget", type=options.budget, required=True, metavar="EPS,DELTA",
                   help="the dataset's total epsilon and delta, e.g. 4,1e-5")
    s.add_argument("--replace", action="store_true", help="change a budget the dataset already has")
    s.set_defaults(func=run_set)
    bd = bsub.add_parser("bind", parents=[_ledger_parent()], help="bind a file to a dataset (a new version)",
                         description="Bind FILE (its content: SHA-256 of its bytes) to DATASET, so that jobs over "
                                     "it charge DATASET: for a new version of the same records (a changed file "
                                     "gets a new digest, and a dataset bound to another file refuses it until "
                                     "its owner binds it).  A file bound to another dataset is refused: a file "
                                     "always charges one dataset.")
    bd.add_argument("dataset", metavar="DATASET", help="the dataset (your own name for these records)")
    bd.add_argument("file", metavar="FILE", help="the party file")
    bd.set_defaults(func=run_bind)
    sh = bsub.add_parser("show", parents=[_ledger_parent()],
                         help="a dataset's budget, spending, releases, files, alignments",
                         description="Print a dataset's budget, the epsilon spent (every counted release composed "
                                     "in RDP, at the budget's delta: refunded entries do not count) and left, its "
                                     "releases, the files bound to it and its record alignments.")
    sh.add_argument("dataset", metavar="DATASET", help="the dataset id")
    sh.add_argument("--json", default=None, metavar="FILE", help="also write the ledger's rows to this JSON file")
    sh.set_defaults(func=run_show)
    ls = bsub.add_parser("list", parents=[_ledger_parent()], help="every dataset in the ledger",
                         description="Every dataset with a budget or a release: budget, spent, left, releases.")
    ls.add_argument("--json", default=None, metavar="FILE", help="also write the table to this JSON file")
    ls.set_defaults(func=run_list)
    b.set_defaults(func=lambda a: (b.print_help(), 0)[1])


def _relation(led, dataset: str) -> tuple[str, str]:
    """(the neighbouring relation of a dataset's budget, in words): that of its releases (one per dataset, the
    ledger refuses another), or, before any, record-level zero-out unless its first release is PBM-VFL's."""
    from sqm.mechanism.report import ZERO_OUT, relation_phrase

    units = [r.get("unit") or ZERO_OUT for r in led.releases(dataset)]
    if units:
        return units[0], relation_phrase(units[0], "the server")
    return ZERO_OUT, (f"{relation_phrase(ZERO_OUT, 'the server')} (until a release fixes it: a PBM-VFL one "
                      f"makes it {relation_phrase('embedding')})")


def run_set(args) -> int:
    from sqm.mechanism.ledger import Ledger

    led = Ledger(args.ledger)
    epsilon, delta = args.budget
    bud = led.set_budget(args.dataset, epsilon, delta, replace=args.replace)
    print(f"dataset {args.dataset!r}: budget epsilon {bud.epsilon:g}, delta {bud.delta:g} "
          f"({_relation(led, args.dataset)[1]}; ledger {led.path})")
    return 0


def run_bind(args) -> int:
    from sqm.mechanism.ledger import Ledger, file_digest

    led = Ledger(args.ledger)
    digest = file_digest(args.file)
    name = led.bind(args.dataset, digest, add=True)
    print(f"file {args.file} (SHA-256 {digest}) charges dataset {name!r} (ledger {led.path})")
    return 0


def _summary(led, dataset) -> dict:
    from sqm.mechanism.ledger import NoBudget

    row = {"dataset": dataset, "budget epsilon": None, "budget delta": None, "spent": None, "left": None,
           "releases": sum(r["status"] != "refunded" for r in led.releases(dataset)),
           "alignments": led.alignments(dataset)}
    try:
        st = led.status(dataset)
    except NoBudget:
        return row
    row.update({"budget epsilon": st.budget.epsilon, "budget delta": st.budget.delta, "spent": st.spent,
                "left": st.left})
    return row


def run_show(args) -> int:
    from sqm.mechanism import events as ev
    from sqm.mechanism.ledger import Ledger, spent_epsilon
    from sqm.cli.tables import relation_line, render_table

    led = Ledger(args.ledger)
    summary = _summary(led, args.dataset)
    rel = led.releases(args.dataset)
    bud = led.budget(args.dataset)
    counted = summary["releases"]
    refunded = len(rel) - counted
    more = f" ({refunded} refunded, not counted)" if refunded else ""
    if bud is None:
        print(f"dataset {args.dataset!r}: no budget set (sqm budget set {args.dataset} --budget EPS,DELTA); "
              f"{counted} release(s){more} in {led.path}")
    else:
        print(f"dataset {args.dataset!r}: budget epsilon {bud.epsilon:g} at delta {bud.delta:g} "
              f"({_relation(led, args.dataset)[1]}); spent "
              f"{summary['spent']:.4g}, left {summary['left']:.4g} over {counted} release(s){more} (RDP "
              f"composition of every counted entry, failed and unfinished ones included); ledger {led.path}")
    files = led.files(args.dataset)
    print(f"record alignments: {summary['alignments']}; files bound: "
          + (", ".join(f"SHA-256 {f['digest'][:16]}... (since {f['bound']})" for f in files) or "none"))
    rows, events, eta = [], [], 0.0
    for r in rel:
        if r["status"] != "refunded":
            events += r["events"]
            eta += r["eta"]
        rows.append({"id": r["id"], "time": r["time"], "statistic": r["statistic"], "job id": r["job_id"],
                     "status": r["status"], "epsilon": r["epsilon"], "at delta": r["delta"],
                     "eta": r["eta"] or None,
                     "spent so far": spent_epsilon(events, bud, eta) if bud is not None else None,
                     "model": (r.get("model") or "")[:16] or None})
    if rows:
        print(render_table(rows, ["id", "time", "statistic", "job id", "status", ("epsilon", "epsilon", ".4g"),
                                  ("at delta", "at delta", ".3g"), ("eta", "eta", ".3g"),
                                  ("spent so far", "spent so far", ".4g"), "model"]))
        print(f"  {relation_line([(args.dataset, _relation(led, args.dataset)[0])])}")
    if args.json:
        _write(args, rows, dataset=args.dataset, details={"summary": summary, "files": files, "releases": [
            {**r, "events": ev.events_to_json(r["events"])} for r in rel]})
    return 0


def run_list(args) -> int:
    from sqm.mechanism.ledger import Ledger
    from sqm.cli.tables import relation_line, render_table

    led = Ledger(args.ledger)
    rows = [_summary(led, d) for d in led.datasets()]
    if not rows:
        print(f"no datasets in the ledger {led.path}")
    else:
        print(render_table(rows, ["dataset", "budget epsilon", ("budget delta", "budget delta", ".3g"),
                                  "spent", "left", "releases", "alignments"]))
        print(f"  {relation_line((r['dataset'], _relation(led, r['dataset'])[0]) for r in rows)}")
    if args.json:
        _write(args, rows)
    return 0


def _write(args, rows: list[dict], **extra) -> None:
    """``--json``: the ledger's rows as the results of an :mod:`sqm.cli.output` document (mode "ledger")."""
    output.write(args.json, output.document(output.command_name(args), "ledger", results=rows,
                                            parameters=output.parameters(args), **extra))
