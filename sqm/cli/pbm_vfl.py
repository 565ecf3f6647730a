"""``sqm pbm-vfl``: PBM-VFL compared with its baselines (NPQ, the paper's LDP, LDP at equal epsilon): the
subcommand's options, the comparison run, its table, JSON and plot.

numpy, torch and the runtime are imported inside :func:`run`: ``sqm --help`` imports this module to register the
command (:mod:`sqm.cli.command`)."""
from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING, cast

from sqm.cli import options
from sqm.cli.options import JOB_ONLY, check_mode, declare_task
from sqm.framework.extras import require
from sqm.apps.pbm_vfl.config import PBMJobParams, VFLConfig
from sqm.apps.pbm_vfl.experiment import method_seed

if TYPE_CHECKING:
    from sqm.apps.pbm_vfl.trainer import PBMVFL


def _run_job(args) -> int:
    """``sqm pbm-vfl --job``: one PBM-VFL job (training, or with --predict prediction) from a job file
    (:class:`sqm.apps.pbm_vfl.job.PBMVFLJobTask`)."""
    from sqm.cli.job_cli import job_command
    from sqm.framework.progress import progress_bar
    from sqm.framework.spec import load_job
    from sqm.cli.tables import render_table
    from sqm.apps.pbm_vfl.job import PBMVFLJobTask, job_batch_seed
    from sqm.apps.pbm_vfl.runs import show_iteration
    from sqm.errors import UsageError
    from sqm.mpc.net.launch import private_folder

    require("vfl", "sqm pbm-vfl --job", ("torch",))
    from sqm.apps.pbm_vfl.trainer import check_device, default_device

    spec = load_job(args.job)
    if args.party_model is not None and args.index is None:
        raise UsageError("--model names ONE party's own model code: give its --index too (for every party on this "
                         "machine, put \"model\" in each party's entry of the job file)")
    if spec.job_id is None and args.batch_seed is None:
        raise UsageError(f"job file {spec.path} has no job_id, from which the public mini-batch order is derived: "
                         f"add one (every job file written by sqm has one) or give --batch-seed")
    device = check_device(args.device or default_device())  # this party's own: not a public parameter

    def make_task(path=None):
        cfg = VFLConfig.from_options(args, method="pbm", n_classes=args.n_classes, device=device)
        if args.batch_seed is not None:
            batch_seed = args.batch_seed
        else:
            assert spec.job_id is not None  # a job file without one is refused above unless --batch-seed is given
            batch_seed = job_batch_seed(spec.job_id)
        return PBMVFLJobTask(cfg, args.secure_sum, args.test_fraction, args.split_seed, batch_seed,
                             args.label_column, seed=args.seed, insecure_reproducible=args.insecure_reproducible,
                             checkpoint_dir=args.checkpoints, predict=args.predict, requester=args.requester,
                             device=device, progress_path=path, scores_path=args.scores)

    def server_summary(res) -> dict:
        if args.predict:
            print(f"server: class probabilities of {res['scored']:,} records (the records every client holds), "
                  f"from the embedding sums released once through PBM; sent to client {res['requester']}")
            return {"records": res["scored"], "requester": res["requester"]}
        rows = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in h.items()} for h in res["history"]]
        if rows:
            print(render_table(rows, list(rows[0])))
        print(f"server: PBM-VFL trained on {res['n_train']:,} records ({res['n_test']:,} held out for the test "
              f"metrics, a public split), {res['n_classes']} classes; the server holds the fusion model"
              + (f", written to {res['checkpoint']}" if res.get("checkpoint") else "")
              + "; each client holds its own model")
        return {"history": res["history"], "n_train": res["n_train"], "n_test": res["n_test"],
                "n_classes": res["n_classes"], "sum_digest": res["sum_digest"]}

    if args.predict or args.quiet or args.index not in (None, 0):
        return job_command(args, make_task, server_summary)
    with private_folder("sqm-pbm-job-") as tmp:
        path = f"{tmp}/progress"
        with progress_bar(path, show_iteration, total=None, desc="PBM-VFL iterations (server)", unit="it"):
            return job_command(args, lambda: make_task(path), server_summary)


def run(args) -> int:
    if _PARSER:
        check_mode(args, _PARSER[-1], "job" if args.job else "local",
                   {"job": JOB_ONLY + JOB_MODE_ONLY, "local": LOCAL_ONLY})
    if args.job:
        return _run_job(args)
    return _run_local(args)


LOCAL_ONLY = ("dataset", "data", "parties", "no_baselines", "plot", "save")
JOB_MODE_ONLY = ("party_model", "checkpoints", "predict", "requester", "scores", "test_fraction", "label_column",
                 "n_classes")
_PARSER: list[argparse.ArgumentParser] = []  # the `sqm pbm-vfl` parser (its defaults decide which options were given)


def _run_local(args) -> int:
    from sqm.cli.tables import relation_line, render_table
    from sqm.mechanism.report import relation_phrase
    from sqm.apps.pbm_vfl.config import METHOD_LABELS, METHODS
    from sqm.apps.pbm_vfl.data import load_split
    from sqm.apps.pbm_vfl.privacy import pbm_privacy, privacy_reports
    from sqm.apps.pbm_vfl.training import train_vfl

    require("vfl", "sqm pbm-vfl", ("torch",))
    from sqm.apps.pbm_vfl.trainer import check_device, default_device  # torch: after the extra's check
    if args.plot:
        require("plot", "--plot")

    device = check_device(args.device or default_device())
    btr, bte, ytr, yte, n_classes = load_split(args.dataset, args.parties, args.data, split_seed=args.split_seed)
    base = VFLConfig.from_options(args, method="pbm", n_classes=n_classes, device=device)
    M = len(btr)
    secure_mode = args.seed is None
    print(f"PBM-VFL on {args.dataset}: {len(ytr)} train / {len(yte)} test records, {M} clients "
          f"({', '.join(str(b.shape[1]) for b in btr)} features), P = {args.embedding_size}, b = {args.b}, "
          f"beta = {args.beta}, batch {args.batch_size}, {args.epochs} epochs, {args.optimizer} lr "
          f"{args.learning_rate}, device {device}, PBM-VFL on backend {args.backend} "
          f"({'BGW secure sum' if args.secure_sum == 'bgw' else 'pairwise-masked sum mod 2^k'}"
          f"{'; in-process SIMULATION' if args.backend == 'plain' else ''}); baselines in process")
    if not secure_mode:
        print(SEEDED_WARNING)
    privacy = privacy_reports(base, M)
    results = {}
    for method in METHODS:
        s = None if args.seed is None else method_seed(args.seed, method)
        if method != "pbm" and args.no_baselines:
            continue
        backend = args.backend if method == "pbm" else "plain"  # the baselines are not secure protocols
        results[method] = train_vfl(btr, bte, ytr, yte, replace(base, method=method), backend=backend, seed=s,
                                    secure_sum=args.secure_sum, batch_seed=args.batch_seed, timeout=args.timeout)
        if not args.quiet:
            for m in results[method].history:
                print(f"  {METHOD_LABELS[method]} epoch {m['epoch']}: test accuracy "
                      f"{m.get('test_accuracy', float('nan')):.4f}")
    rows = []
    for method, r in results.items():
        p = privacy[method]
        where = "real processes" if r.backend == "mpyc" else "in process"
        row = {"method": f"{p.method} ({where})", "test accuracy": round(r.accuracy, 4)}
        if n_classes == 2:
            row["test AUPRC"] = None if r.auprc is None else round(r.auprc, 4)  # None: no test records
        row.update({"epsilon (feature)": round(p.epsilon_server, 4), "delta": p.delta,
                    "sigma": None if p.sigma is None else round(p.sigma, 4)})
        rows.append(row)
    print(render_table(rows, list(rows[0])))
    print(f"  {relation_line(privacy[m] for m in results)}")
    rep = pbm_privacy(base, M)
    print(f"privacy: each record released {args.epochs} times ({rep.note}); PBM sample-level epsilon "
          f"{rep.epsilon_sample:.4g} ({relation_phrase('sample', 'the server')})")
    print(f"  the paper's LDP sigma is {privacy['ldp'].sigma / privacy['ldp_eq'].sigma:.2f}x the sigma PBM's epsilon "
          f"needs ({relation_phrase('embedding')})")
    r = results["pbm"]
    print(f"communication of PBM-VFL training ({r.iterations} iterations, {r.records} record-uses): "
          f"model T B M P (log2(bM) + 32) = {r.bits_model:.4g} bits ({r.bits_model / 8e6:.4g} MB)")
    if r.bytes_sent is not None:
        d = r.bytes_detail
        print(f"  measured by the runtime (all parties, incl. test evaluation): {r.bytes_sent} bytes "
              f"(secure sums {d['sum']}, gradients {d['grad']}, batch checks and setup {d['control']}); "
              f"training sums + gradients = {8 * (d['sum'] + d['grad']) / r.bits_model:.2f} x the model")
    else:
        print("  measured bytes: n/a (in-process SIMULATION; use --backend mpyc)")
    print(f"  time {r.seconds:.2f} s, {1e3 * r.iter_seconds / max(r.iterations, 1):.2f} ms per iteration, "
          f"{100 * r.sum_seconds / max(r.iter_seconds, 1e-12):.1f}% in the secure sum; clipped entries {r.clipped}")
    if args.save:
        cast("PBMVFL", r.trainer).save(args.save)  # train_vfl always returns the trainer it used
        print(f"wrote {args.save} (PBM-VFL's trained party models and optimizers, the accountant; "
              f"sqm.apps.pbm_vfl.PBMVFL.load resumes from it)")
    if args.json:
        from sqm.cli import output

        plain = args.backend == "plain"
        output.write(args.json, output.document(
            output.command_name(args), "local", parameters=output.parameters(args, parties=M, device=device),
            results=rows, privacy=[privacy[k] for k in results], secure_mode=secure_mode, simulation=plain,
            timings={row["method"]: v.seconds for row, v in zip(rows, results.values(), strict=False)},
            bytes=output.byte_counts(total=None if plain else r.bytes_sent), dataset=args.dataset,
            details={"methods": {k: v.as_dict() for k, v in results.items()}, "pbm_accounting": rep.as_dict()}))
        print(f"wrote {args.json}")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for k, v in results.items():
            ax.plot([m["epoch"] for m in v.history], [m["test_accuracy"] for m in v.history], marker="o",
                    label=METHOD_LABELS[k])
        ax.set_xlabel("epoch")
        ax.set_ylabel("test accuracy")
        ax.set_title(f"{args.dataset}, {M} parties, b={args.b}, beta={args.beta}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"wrote {args.plot}")
    return 0


SEEDED_WARNING = ("warning: --seed given: this run is an EXPERIMENT (secure_mode false): whoever knows the seed can "
                  "regenerate every party's randomness (model initialisation and noise); omit --seed for a "
                  "private run")


def register(sub) -> None:
    p = sub.add_parser("pbm-vfl", help="PBM-VFL: split neural training with Poisson-Binomial-quantized embeddings",
                       parents=[options.runtime(),
                                options.job("job file (JSON: parties' addresses; party 0 the server with its label "
                                            "file, each client with its own feature file; optionally each party's "
                                            "\"model\": \"file.py:factory\"; see sqm/framework/spec.py): a real "
                                            "multi-party PBM-VFL job in which each party reads only its own files"),
                                options.output()],
                       description="Split neural training with Poisson-Binomial-quantized embeddings "
                                   "(PBM-VFL, Algorithm 2): PBM-VFL through real MPyC party processes (or "
                                   "--backend plain, the in-process simulation of the same programs), compared "
                                   "with NPQ (no privacy, no quantization), the paper's LDP (matched variance) and "
                                   "LDP at PBM's epsilon; prints feature and sample epsilon and communication.")
    p.add_argument("--dataset", default="digits", choices=["digits", "phishing"], help="dataset (default: digits)")
    p.add_argument("--data", default=None, help="phishing: directory or CSV/ARFF file "
                                                "(default: the data home's, see `sqm data`)")
    p.add_argument("--parties", type=int, default=4,
                   help="number of clients; digits with 4 clients uses image quadrants (default: 4)")
    VFLConfig.add_options(p, only=("b", "beta", "epochs", "batch_size", "lr", "optimizer", "embedding_size", "hidden"))
    p.add_argument("--device", default=None,
                   help="torch device for the models (default: cuda when available, else cpu)")
    VFLConfig.add_options(p)  # --delta
    PBMJobParams.add_options(p, only=("secure_sum", "split_seed", "batch_seed"))
    p.add_argument("--no-baselines", action="store_true", help="skip the NPQ and LDP baselines")
    p.add_argument("--plot", default=None, help="write test accuracy by epoch (PNG) to FILE")
    p.add_argument("--save", default=None, metavar="FILE",
                   help="write PBM-VFL's checkpoint (every party's trained model and optimizer, the accountant; "
                        "torch.save format, read back by sqm.apps.pbm_vfl.PBMVFL.load) to FILE")
    g = p.add_argument_group("job mode (--job)")
    g.add_argument("--model", default=None, metavar="FILE:FACTORY", dest="party_model",
                   help="with --job --index I: this party's own model code, a Python file on this machine and the "
                        "function in it that builds the party's torch model (a client's: factory(n_features, "
                        "embedding_size); the server's: factory(embedding_size, n_classes)); it returns an "
                        "nn.Module or {\"module\", \"optimizer\"[, \"loss\"]}.  Loaded here only, never sent "
                        "(default: the job file's \"model\" for this party, else the default MLP / linear layer)")
    g.add_argument("--checkpoints", default=None, metavar="DIR",
                   help="with --job: each party writes its OWN trained model and optimizer to DIR/pbm-vfl-party{I}.pt "
                        "on its own machine (with --predict: reads it from there)")
    g.add_argument("--predict", action="store_true",
                   help="with --job and --checkpoints: a prediction job: the trained models score the records every "
                        "client holds (new records, no labels); the embeddings go once through PBM and the secure "
                        "sum; the server computes the class probabilities and sends them to the --requester")
    g.add_argument("--requester", type=int, default=None, metavar="I",
                   help="with --predict: the client that receives the probabilities (default: the last client)")
    g.add_argument("--scores", default=None, metavar="FILE",
                   help="with --predict, at the requester: write the probabilities as CSV (id, one column per class)")
    PBMJobParams.add_options(g)  # --test-fraction
    g.add_argument("--label-column", default=None,
                   help="with --job: the server's label column (default: its table's only column besides the ids)")
    g.add_argument("--n-classes", type=int, default=None,
                   help="with --job: the number of classes K (default: the largest label + 1)")
    p.set_defaults(func=run)
    declare_task(p, (*VFLConfig.options(), *PBMJobParams.options()))
    _PARSER[:] = [p]
