"""``sqm <app> --job``: the job-mode face of every application command (options in, tables and JSON out).

The framework (:mod:`sqm.framework.spec`: job files, the party program, the runners) imports no command-line module;
this one does: it reads a command's parsed options, makes the job file's task block the job
(:func:`apply_task_block`), runs the parties of this machine and prints and writes what they release.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any

from sqm.cli import output
from sqm.cli.command import build_parser, given_options
from sqm.cli.options import job_run_options
from sqm.cli.progress import job_progress
from sqm.cli.tables import conversion_line, relation_line, render_table
from sqm.framework.alignment import check_min_intersection
from sqm.framework.spec import JobSpec, load_job
from sqm.framework.party import clip_warning, seed_policy
from sqm.framework.runners import run_job
from sqm.mechanism.report import ZERO_OUT, relation_phrase
from sqm.errors import RefusedError, UsageError

log = logging.getLogger(__name__)


def apply_task_block(spec: JobSpec, args) -> list[str]:
    """Make the job file's ``task`` block the job: its statistic must be this command's, each of its parameters
    one this command takes (``args.task_params``: option destinations), and an option given on the command line
    (``args.argv``, as :func:`sqm.cli.command.parse` keeps it; re-parsed only here) may only repeat the file's value (a
    difference is a :class:`sqm.errors.UsageError` before anything connects); the file's values then replace the
    options'.  Returns the declared parameters as "name value"
    (none without a block: the command line is the task, as before)."""
    block = spec.task
    if block is None:
        return []
    where = f"job file {spec.path or '(unnamed)'}"
    if block["statistic"] != args.command:
        raise UsageError(f"{where} declares the task {block['statistic']!r}: run it with sqm {block['statistic']} "
                         f"--job, not sqm {args.command} (one job file is one statistic)")
    params = getattr(args, "task_params", {})
    unknown = sorted(set(block) - {"statistic"} - set(params))
    if unknown:
        raise UsageError(f"{where}: the task block's {unknown} are not parameters of sqm {args.command} --job "
                         f"(it takes {sorted(params)})")
    argv = getattr(args, "argv", None)
    given = set() if argv is None else given_options(build_parser(), argv)
    out = []
    for key in sorted(set(block) - {"statistic"}):
        value, convert = block[key], params[key]
        if convert is not None and not isinstance(value, bool) and value is not None:
            try:  # a list (a range [lo, hi]): each of its values, as its option reads them
                value = [convert(str(v)) for v in value] if isinstance(value, list) else convert(str(value))
            except (TypeError, ValueError) as e:
                raise UsageError(f"{where}: task parameter {key} = {block[key]!r}: {e}") from None
        if key in given and getattr(args, key) != value:
            flag = "--" + key.replace("_", "-")
            raise UsageError(f"{flag} {getattr(args, key)!r} differs from the task in {where} ({key} = {value!r}): "
                             f"every party runs the file's task; leave the option out or make it the same")
        setattr(args, key, value)
        out.append(f"{key} {value!r}")
    return out


def job_command(args, make_task, server_summary) -> int:
    """``sqm <app> --job``: the one job-mode driver of every application command.

    Checks the seed policy and the job file, builds the task (``make_task()``), runs the parties of this
    machine (:func:`run_job` with :func:`sqm.cli.options.job_run_options`: processes, or ``--backend plain`` in
    process; an :class:`sqm.mpc.net.launch.MPCError` makes ``sqm`` exit with the job's exit code), prints the server's
    privacy report as a table, its ledger entry and ``server_summary(result)`` (the app's lines; returns its
    JSON fields), and each client's own scalar results (its clipped rows...: known to that party only), and
    writes ``--json`` (:mod:`sqm.cli.output`, mode "job"; ``server_summary``'s keys go under "released", but
    for the optional top-level keys it names: "columns", "released", "warnings"...)."""
    secure_mode = seed_policy(args.seed, args.insecure_reproducible)  # a seed without the opt-in: refused
    spec = load_job(args.job)
    if getattr(args, "drop_columns", None):
        spec = dataclasses.replace(spec, drop_columns=tuple(args.drop_columns))
    if getattr(args, "min_intersection", None) is not None:
        spec = dataclasses.replace(spec, min_intersection=check_min_intersection(args.min_intersection))
    if getattr(args, "party_model", None) is not None:  # this party's own model code (sqm pbm-vfl --model)
        spec = spec.with_model(args.index, args.party_model)
    declared = apply_task_block(spec, args)
    if declared:
        print(f"task (from the job file {spec.path}): sqm {args.command} " + ", ".join(declared))
    try:
        task = make_task()
    except UsageError as bad:  # the task's parameters, the job file's block among them: refused before any party starts
        raise UsageError(f"job file {spec.path}: {bad}") from None
    with job_progress(args, task):  # bars on stderr (none with -q): stdout and the release are unchanged
        recs = run_job(spec, task, args.index, **job_run_options(args))
    if not secure_mode:
        print("secure_mode: false (--insecure-reproducible: every party's noise can be regenerated from the seed)")
    simulation = getattr(args, "backend", "mpyc") == "plain"  # no bytes are measured in the simulation
    out: dict[str, Any] = {"clients": {}, "privacy": [], "results": [], "released": {}, "extra": {}, "timings": {},
                           "bytes": [None] * len(spec.parties)}
    warnings: list[str] = []  # this machine's clients' own clipping warnings
    alignment = next((rec["result"].get("alignment") for rec in recs if rec is not None), None)
    if alignment is not None:  # every party learns the same counts
        counts = dict(alignment["records"])
        labels = counts.pop("0", None)  # the server's own table (a PBM-VFL job's labels), if it holds one
        held = ", ".join(f"{v:,}" for _, v in sorted(counts.items(), key=lambda kv: int(kv[0])))
        if alignment.get("membership") == "hidden" and "intersection" in alignment:  # the server's own counts
            print(f"record alignment hiding membership: the clients hold {held} records, {alignment['union']:,} "
                  f"in their union, placed over {alignment['positions']:,} positions; {alignment['intersection']:,} "
                  f"are at every client: the release counts them only, and no client learns which of its records "
                  f"they are, nor how many")
        elif alignment.get("membership") == "hidden":  # a client: told neither the union nor the intersection size
            print(f"record alignment hiding membership: the clients hold {held} records, placed over "
                  f"{alignment['positions']:,} positions (the sum of the set sizes); only the server knows how "
                  f"many are at every client, and no client learns which of its records they are")
        else:
            print(f"record alignment (private set intersection): the clients hold {held} records"
                  + ("" if labels is None else f", the server's label table {labels:,}")
                  + f"; {alignment['intersection']:,} are at every {'client' if labels is None else 'party'}: the "
                    f"job ran on them")
        out["extra"]["alignment"] = alignment
    if recs[0] is not None and "withheld" in recs[0]["result"]:  # membership hidden, below --min-intersection
        raise RefusedError(f"the server withholds the release: {recs[0]['result']['withheld']}")
    for i, rec in enumerate(recs):
        if rec is None:
            continue
        res = rec["result"]
        if i == 0:
            rep = res["report"]
            rep = rep.as_dict() if hasattr(rep, "as_dict") else dict(rep)
            summary = dict(server_summary(res))
            out["extra"] = {**out["extra"], **{k: summary.pop(k) for k in list(summary) if k in output.OPTIONAL}}
            out["released"] = {**summary, **out["extra"].pop("released", {})}
            print(render_table([{**rep, "seconds": rec.get("seconds"),
                                 "bytes": None if simulation else rec.get("bytes_sent")}],
                               ["epsilon_server", "epsilon_client", "delta", "gamma", "mu", "seconds", "bytes"]))
            relation = rep.get("neighbouring", ZERO_OUT)
            print(f"  {relation_line([rep])}")
            line = conversion_line(rep.get("conversion", ""))
            if line:
                print(f"  {line}")
            if res.get("ledger") is not None:
                e = res["ledger"]
                print(f"ledger {e['ledger']}: dataset {e['dataset']!r}, this release epsilon {e['epsilon']:.4g} at "
                      f"delta {e['delta']:g} ({relation_phrase(relation, 'the server')}); spent {e['spent']:.4g}, "
                      f"left {e['left']:.4g}")
            out["privacy"] = [rep]
            out["results"] = [{"method": rep.get("method", "SQM"), "epsilon_server": rep["epsilon_server"],
                               "epsilon_client": rep.get("epsilon_client"), "delta": rep["delta"],
                               "records": res.get("n_records"), "seconds": rec.get("seconds"),
                               "bytes": None if simulation else rec.get("bytes_sent")}]
            out["extra"]["ledger"] = res.get("ledger")
        else:  # a client's own counts (clipped rows, truncated batches...): data-dependent, known to it only
            mine = {k: v for k, v in res.items() if k not in ("file", "col_counts", "n_records")
                    and isinstance(v, (int, float, str)) and not isinstance(v, bool)}
            print(f"client {i} ({res.get('file')}): "
                  + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in mine.items())
                  + " (known to this party only)")
            out["clients"][str(i)] = mine
            warning = clip_warning(i, mine)
            if warning:
                log.warning(warning)
                warnings.append(warning)
        out["timings"][f"party {i}"] = rec.get("seconds")
        out["bytes"][i] = None if simulation else rec.get("bytes_sent")
    if warnings:
        out["extra"]["warnings"] = warnings
    if args.json:
        output.write(args.json, output.document(
            output.command_name(args), "job", parameters=output.parameters(args), results=out["results"],
            privacy=out["privacy"], timings=out["timings"], secure_mode=secure_mode, simulation=simulation,
            bytes=output.byte_counts(out["bytes"]),
            dataset=spec.dataset_id, job=spec.path, clients=out["clients"], released=out["released"] or None,
            **out["extra"]))
    return 0
