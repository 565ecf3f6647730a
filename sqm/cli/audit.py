"""``sqm audit``: an empirical lower bound on each release's epsilon from a membership test with a canary record.

    sqm audit                                      # every audited release type, epsilon 1, 1000 runs per world
    sqm audit --releases pca,linreg --epsilon 4 --runs 2000 --json audit.json
    sqm audit --attack reconstruction --epsilon 1   # an informed adversary rebuilds a record from the Gram
    sqm audit --attack label-inference              # a PBM-VFL client scores the server's labels

Each release type's real release (:mod:`sqm.cli.audit_runs`: the clients' clipping, rounding and noise, the
calibration and accounting) runs ``--runs`` times on a small synthetic data set with a canary record and
``--runs`` times with the canary's null record (zero-out), in the in-process simulation; the membership test and
its Clopper-Pearson bound are :mod:`sqm.mechanism.audit`'s.  A lower bound above the claimed epsilon would refute
the claim; one below it shows how much of the claim this attack demonstrates, nothing more.
"""
from __future__ import annotations

import argparse

from sqm.cli import options
from sqm.mechanism.params import GAMMA

# the keys of sqm.cli.audit_runs.CASES (not imported here: it imports numpy)
RELEASES = ("pca", "linreg", "logreg-moments", "correlation", "pbm-vfl", "logreg-sgd", "logreg-sgd-sampled",
            "hdp-vfl", "pbm-vfl-sample")
SCORED = ("logreg-sgd", "logreg-sgd-sampled", "hdp-vfl", "pbm-vfl-sample")
ATTACKS = ("reconstruction", "label-inference")  # audited from trained weights or a training's releases


def _releases(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [n for n in names if n not in RELEASES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown release type(s) {unknown or text!r}; audited: {', '.join(RELEASES)}")
    return names


def register(sub) -> None:
    p = sub.add_parser("audit", parents=[options.privacy(), options.output()],
                       help="an empirical lower bound on each release's epsilon (canary membership test)",
                       description="Run each release type's real release (clipping, dependent rounding, Skellam "
                                   "noise, calibration and accounting) many times on a small synthetic data set "
                                   "with a canary record at the clipping bounds and with its null record "
                                   "(zero-out), in the in-process SIMULATION (the same party programs as real "
                                   "processes, bit for bit), and turn a membership test (the released Gram's "
                                   "quadratic form along the canary; for PBM-VFL, one coordinate's decoded sum; "
                                   "thresholded on half of the runs) into a "
                                   "lower bound on epsilon with Clopper-Pearson confidence bounds on its error "
                                   "rates.  A bound above the claimed epsilon refutes the claim; one below shows "
                                   "how much of it this attack demonstrates.")
    p.add_argument("--releases", type=_releases, default=RELEASES, metavar="NAMES",
                   help=f"comma-separated release types to audit (default: all of {','.join(RELEASES)})")
    p.add_argument("--runs", type=int, default=1000,
                   help="releases per world, with the canary and without (default 1000); the threshold is chosen "
                        "on the first half of each, the bound evaluated on the second")
    p.add_argument("--records", type=int, default=50,
                   help="records in the synthetic data set, the canary included (default 50)")
    p.add_argument("--gamma", type=float, default=GAMMA.default,
                   help=f"quantization scale gamma (default {GAMMA.default:g})")
    p.add_argument("--confidence", type=float, default=0.95,
                   help="confidence of the lower bound (default 0.95: each error rate's Clopper-Pearson upper "
                        "bound at 97.5%%)")
    p.add_argument("--attack", choices=ATTACKS, default=None,
                   help="run an attack instead of the audits: reconstruction (an adversary knowing every other "
                        "record rebuilds the target from SQM-PCA's released Gram; --runs targets, with and without "
                        "the noise) or label-inference (a PBM-VFL client scores the server's training labels from "
                        "the gradients it receives; phishing, PBM and NPQ)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the data set and of every run's party seeds, for a reproducible audit "
                        "(default: OS entropy)")
    p.set_defaults(func=run)


def run(args) -> int:
    import time

    from sqm.cli import output
    from sqm.cli.audit_runs import CASES, NOT_AUDITED, run_case
    from sqm.errors import UsageError
    from sqm.mechanism.audit import audit_scores
    from sqm.mechanism.report import relation_phrase
    from sqm.mechanism.rng import make_rng, spawn_seeds

    if args.attack is not None:
        return _attack(args)
    if args.runs < 4:
        raise UsageError(f"--runs must be at least 4 (two per half of each world), got {args.runs}")
    if args.records < 2:
        raise UsageError(f"--records must be at least 2 (the canary and one other record), got {args.records}")
    t0 = time.perf_counter()
    print(f"SIMULATION: every release runs its party programs in this one process (backend plain), bit for bit "
          f"what real party processes release; {args.runs} runs with the canary and {args.runs} without, per "
          f"release type, {args.records} records")
    seeds = spawn_seeds(args.seed, 2 * len(args.releases))
    results: list[dict] = []
    reports: list = []
    for i, name in enumerate(args.releases):
        if name == "pbm-vfl" or name in SCORED:
            results.append(_scored(name, args, make_rng(seeds[2 * i]), seeds[2 * i + 1] if args.seed is not None
                                   else None, reports))
            continue
        case = CASES[name](args.epsilon, args.delta, args.gamma, args.records, make_rng(seeds[2 * i]))
        scores_in, scores_out, report = run_case(case, args.runs, seeds[2 * i + 1] if args.seed is not None else None)
        bound = audit_scores(scores_in, scores_out, args.delta, args.confidence)
        relation = relation_phrase(report.neighbouring, "the server")
        print(f"{name}: claimed epsilon {report.epsilon_server:.4g} at delta {args.delta:g} ({relation}); "
              f"empirical lower bound {bound.epsilon_lower:.4g} at {100 * args.confidence:g}% confidence "
              f"(threshold {bound.threshold:.4g} chosen on {args.runs - bound.positives} + "
              f"{args.runs - bound.negatives} runs; on the other {bound.positives} + {bound.negatives}: "
              f"{bound.false_negatives} missed, {bound.false_positives} false alarms)")
        results.append({"method": name, "epsilon_server": report.epsilon_server, "relation": relation,
                        "runs_per_world": args.runs, **bound.as_dict()})
        reports.append(report)
    if NOT_AUDITED:
        print("not audited yet: " + "; ".join(f"{k} ({v})" for k, v in NOT_AUDITED.items()))
    if args.json:
        doc = output.document(output.command_name(args), "local", parameters=output.parameters(args),
                              results=results, privacy=reports, timings={"total": time.perf_counter() - t0},
                              simulation=True, secure_mode=args.seed is None, dataset="synthetic with a canary",
                              details={"not_audited": NOT_AUDITED})
        output.write(args.json, doc)
    return 0


def _scored(name: str, args, rng, seed, reports: list) -> dict:
    """A release audited from its own statistic (:class:`sqm.cli.audit_runs.ScoredAudit`): its bound, printed and
    as a row; its privacy report appended to ``reports`` when it has one."""
    from sqm.cli import audit_runs
    from sqm.mechanism.audit import audit_scores
    from sqm.mechanism.report import relation_phrase

    if name in audit_runs.SGD_SCHEDULES:
        a = audit_runs.logreg_sgd_scores(args.epsilon, args.delta, args.gamma, args.records, rng, args.runs, seed,
                                         schedule=audit_runs.SGD_SCHEDULES[name])
    elif name == "hdp-vfl":
        a = audit_runs.hdp_scores(args.epsilon, args.delta, args.records, rng, args.runs, seed)
    elif name == "pbm-vfl":  # one coordinate, at PBM-VFL's defaults
        scores_in, scores_out, claimed, setting = audit_runs.pbm_scores(args.delta, args.runs, seed)
        a = audit_runs.ScoredAudit(scores_in, scores_out, claimed, "embedding", "the server",
                                   f"{setting}, PBM-VFL's defaults: --epsilon does not apply")
    else:
        a = audit_runs.pbm_sample_scores(args.delta, args.runs, seed)
    bound = audit_scores(a.scores_in, a.scores_out, args.delta, args.confidence)
    relation = relation_phrase(a.relation, a.against)
    print(f"{name}: claimed epsilon {a.claimed:.4g} at delta {args.delta:g} ({relation}; {a.setting}); empirical "
          f"lower bound {bound.epsilon_lower:.4g} at {100 * args.confidence:g}% confidence "
          f"({bound.false_negatives} missed of {bound.positives}, {bound.false_positives} false alarms of "
          f"{bound.negatives})")
    if a.report is not None:
        reports.append(a.report)
    return {"method": name, "epsilon_server": a.claimed, "relation": relation, "runs_per_world": args.runs,
            **bound.as_dict()}


def _attack(args) -> int:
    """``--attack``: :mod:`sqm.cli.attack_runs`' reconstruction (with and without noise) or label inference (PBM
    and NPQ), printed and written as rows."""
    import time

    from sqm.cli import attack_runs, output
    from sqm.mechanism.report import relation_phrase

    t0 = time.perf_counter()
    print("SIMULATION: the parties' programs run in this one process (backend plain), bit for bit what real party "
          "processes compute")
    rows = []
    if args.attack == "reconstruction":
        for noise in (True, False):
            r = attack_runs.reconstruction(args.epsilon, args.delta, args.gamma, args.records, args.runs,
                                           args.seed, noise=noise)
            what = (f"epsilon {r['epsilon']:.4g} at delta {args.delta:g} ({relation_phrase('zero-out', 'the server')})"
                    if noise else "without noise (no privacy)")
            print(f"reconstruction from SQM-PCA's Gram, {what}: relative error mean {r['relative_error_mean']:.3g}, "
                  f"median {r['relative_error_median']:.3g}; {100 * r['success_rate']:.0f}% of {r['runs']} targets "
                  f"within 1/2 (guessing zero: error 1)")
            rows.append({"method": "reconstruction" + ("" if noise else " (no noise)"), **r})
    else:
        for method in ("pbm", "npq"):
            r = attack_runs.label_inference(method, seed=args.seed or 0)
            print(f"label inference by a PBM-VFL client ({method}, {r['dataset']}, {r['parties']} clients, first "
                  f"epoch): AUC {r['auc']:.4f} over {r['records']:,} training records (0.5: nothing learnt)")
            rows.append({"method": f"label inference ({method})", **r})
        print("  the gradients a client receives carry the server's labels: PBM's noise protects the embeddings, "
              "not the labels")
    if args.json:
        output.write(args.json, output.document(output.command_name(args), "local", parameters=output.parameters(args),
                                                results=rows, timings={"total": time.perf_counter() - t0},
                                                simulation=True, secure_mode=args.seed is None,
                                                dataset="synthetic" if args.attack == "reconstruction" else "phishing"))
    return 0
