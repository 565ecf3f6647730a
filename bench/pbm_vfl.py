"""PBM-VFL on phishing: test AUPRC/accuracy by epoch vs NPQ and LDP, epochs and bits to train AUPRC 0.9 (Table 3).

    python -m bench pbm-vfl                          # reduced grid (a few minutes on 2 cores, plain backend)
    python -m bench pbm-vfl --full --json pbm.json   # the paper's grid: b in {8,16,32,64}, beta in {.1,.15,.2,.25},
                                                     # 5 and 10 parties, 100 epochs, 3 runs

The sweep runs the plain backend (the same party programs in one process, a SIMULATION; a test proves it
releases the same sums, metrics and parameters as the MPyC party processes, bit for bit).  Two LDP baselines:
the paper's (sigma^2 = 2 M / (b beta^2), matched variance: it has a much SMALLER epsilon than PBM, so "PBM above
LDP" compares unequal privacy) and LDP at PBM's accounted feature-level (epsilon, delta) over the same epochs
(``ldp_eq``, :func:`sqm.apps.pbm_vfl.privacy.ldp_sigma_equal_epsilon`); each row records its epsilon.
``--mpyc-epochs`` adds two short runs with one real MPyC process per party (BGW secure sum, and the paper's Protocol 0
pairwise-masked sum) to record the time per iteration, the share spent in the secure sum and the bytes the runtime sent,
next to the paper's cost model T B M P (log2(b M) + 32) bits.

Train AUPRC is the AUPRC of the server's predictions on each epoch's mini-batches (post-processing of
released sums: no extra privacy cost); test metrics go through each method's release mechanism.
Table 3's communication column is in units of 1e9 bits (its 'GB' matches T B M P (log2(b M) + F) bits).
"""
from __future__ import annotations

from bench.common import finish

# Table 3 (5 clients): epochs to train AUPRC 0.9; None = never (inf)
TABLE3_EPOCHS = {(8, 0.1): None, (8, 0.15): 86, (8, 0.2): 41, (8, 0.25): 23,
                 (16, 0.1): 98, (16, 0.15): 34, (16, 0.2): 15, (16, 0.25): 8,
                 (32, 0.1): 35, (32, 0.15): 12, (32, 0.2): 5, (32, 0.25): 3,
                 (64, 0.1): 15, (64, 0.15): 4, (64, 0.2): 3, (64, 0.25): 2, "npq": 2}
TARGET = 0.9
METHOD_IDS = {"npq": 0, "pbm": 1, "ldp": 2, "ldp_eq": 3}


def _epochs_to(history, key="train_running_auprc", target=TARGET):
    for h in history:
        if h.get(key, 0.0) >= target:
            return h["epoch"]
    return None


def _summary(r, M, P, b) -> dict:
    hist = r.history
    e = _epochs_to(hist)
    per_epoch_bits = r.bits_model / max(len(hist), 1)
    return dict(test_auprc=r.auprc, test_accuracy=r.accuracy, best_test_auprc=max(h["test_auprc"] for h in hist),
                epochs_to_target=e, gbits_to_target=None if e is None else per_epoch_bits * e / 1e9,
                auprc_by_epoch=[h["test_auprc"] for h in hist], accuracy_by_epoch=[h["test_accuracy"] for h in hist],
                train_auprc_by_epoch=[h["train_running_auprc"] for h in hist],
                ms_per_iteration=1e3 * r.iter_seconds / max(r.iterations, 1),
                sum_share=r.sum_seconds / max(r.iter_seconds, 1e-12), bits_model=r.bits_model)


def run(parties=(5, 10), bs=(16, 64), betas=(0.1, 0.25), epochs=6, repeats=1, hidden=256, lr=0.01,
        optimizer="sgd", data=None, seed=0, mpyc_epochs=1, progress=True) -> dict:
    import numpy as np
    from tqdm import tqdm

    from sqm.apps.pbm_vfl import VFLConfig, load_split, train_vfl
    from sqm.apps.pbm_vfl.privacy import method_privacy

    out = {"config": dict(parties=list(parties), b=list(bs), beta=list(betas), epochs=epochs, repeats=repeats,
                          hidden=hidden, lr=lr, optimizer=optimizer, batch_size=100, embedding_size=16,
                          backend="plain (simulation)", target_train_auprc=TARGET), "runs": []}
    jobs = []
    for M in parties:
        jobs.append((M, "npq", None, None))
        for b in bs:
            for beta in betas:
                jobs += [(M, "pbm", b, beta), (M, "ldp", b, beta), (M, "ldp_eq", b, beta)]
    bar = tqdm(total=len(jobs) * repeats, desc="pbm-vfl bench", disable=not progress)
    splits = {}
    for M, method, b, beta in jobs:
        if M not in splits:
            splits[M] = load_split("phishing", M, data)
        btr, bte, ytr, yte, nc = splits[M]
        cfg = VFLConfig(method=method, b=b or 64, beta=beta or 0.25, epochs=epochs, batch_size=100, lr=lr,
                        embedding_size=16, hidden=hidden, optimizer=optimizer, n_classes=nc)
        reps = []
        for rep in range(repeats):
            r = train_vfl(btr, bte, ytr, yte, cfg, "plain", seed=[seed, M, rep, METHOD_IDS[method], b or 0,
                                                                   int(1000 * (beta or 0))])
            reps.append(_summary(r, M, 16, cfg.b))
            bar.update(1)
        agg = {k: float(np.mean([x[k] for x in reps])) for k in ("test_auprc", "test_accuracy", "best_test_auprc",
                                                                   "ms_per_iteration", "sum_share", "bits_model")}
        ep = [x["epochs_to_target"] for x in reps]
        agg["epochs_to_target"] = None if any(e is None for e in ep) else float(np.mean(ep))
        agg["auprc_by_epoch"] = np.mean([x["auprc_by_epoch"] for x in reps], 0).tolist()
        agg["train_auprc_by_epoch"] = np.mean([x["train_auprc_by_epoch"] for x in reps], 0).tolist()
        if agg["epochs_to_target"] is not None:
            agg["gbits_to_target"] = agg["bits_model"] / epochs * agg["epochs_to_target"] / 1e9
        else:
            agg["gbits_to_target"] = None
        paper = TABLE3_EPOCHS.get("npq" if method == "npq" else (b, beta), "n/a") \
            if M == 5 and method in ("npq", "pbm") else "n/a"
        eps = method_privacy(cfg, M).epsilon_server
        out["runs"].append(dict(parties=M, method=method, b=b, beta=beta, paper_epochs=paper, epsilon=eps,
                                sigma=r.sigma, runs=reps, **agg))
    bar.close()
    out["checks"] = _checks(out["runs"], epochs)
    if mpyc_epochs:
        split5 = splits.get(5) or load_split("phishing", 5, data)
        out["mpyc"] = [_mpyc_timing(split5, mpyc_epochs, hidden, lr, optimizer, seed, mode)
                       for mode in ("bgw", "masked")]
    return out


def _checks(runs, epochs) -> dict:
    by = {(r["parties"], r["method"], r["b"], r["beta"]): r for r in runs}
    checks = {"pbm_above_ldp": [], "pbm_above_ldp_eq": [], "near_npq_b64_beta025": [], "epochs_vs_table3": []}
    for (M, method, b, beta), r in by.items():
        if method != "pbm":
            continue
        for base in ("ldp", "ldp_eq"):
            ldp = by[(M, base, b, beta)]
            checks[f"pbm_above_{base}"].append(dict(parties=M, b=b, beta=beta, pbm=r["test_auprc"],
                                                    ldp=ldp["test_auprc"], epsilon_pbm=r["epsilon"],
                                                    epsilon_ldp=ldp["epsilon"], ok=r["test_auprc"] > ldp["test_auprc"]))
        if b == 64 and beta == 0.25:
            npq = by[(M, "npq", None, None)]
            checks["near_npq_b64_beta025"].append(dict(parties=M, pbm=r["test_auprc"], npq=npq["test_auprc"],
                                                       gap_points=100 * (npq["test_auprc"] - r["test_auprc"]),
                                                       ok=npq["test_auprc"] - r["test_auprc"] <= 0.02))
    for (M, method, b, beta), r in by.items():
        if M != 5 or method not in ("npq", "pbm"):
            continue
        paper, ours = r["paper_epochs"], r["epochs_to_target"]
        if paper == "n/a":
            continue
        if paper is None:
            ok = ours is None
        elif ours is None:
            ok = None if epochs < 2 * paper else False  # undecided when the run is shorter than 2x the paper's
        else:
            ok = paper / 2 <= ours <= 2 * paper
        checks["epochs_vs_table3"].append(dict(method=method, b=b, beta=beta, paper=paper, ours=ours, ok=ok))
    return checks


def _mpyc_timing(split, epochs, hidden, lr, optimizer, seed, secure_sum="bgw") -> dict:
    from sqm.apps.pbm_vfl import VFLConfig, train_vfl

    btr, bte, ytr, yte, nc = split
    cfg = VFLConfig(method="pbm", b=64, beta=0.25, epochs=epochs, batch_size=100, lr=lr, embedding_size=16,
                    hidden=hidden, optimizer=optimizer, n_classes=nc)
    r = train_vfl(btr, bte, ytr, yte, cfg, "mpyc", seed=[seed, 99], secure_sum=secure_sum)
    train_bytes = r.bytes_detail["sum"] + r.bytes_detail["grad"]
    return dict(secure_sum=secure_sum, parties=len(btr), b=64, beta=0.25, epochs=epochs, iterations=r.iterations,
                test_auprc=r.auprc,
                ms_per_iteration=1e3 * r.iter_seconds / r.iterations,
                secure_sum_share=r.sum_seconds / r.iter_seconds, seconds_total=r.seconds,
                bytes_sent=r.bytes_sent, bytes_detail=r.bytes_detail, bits_model=r.bits_model,
                measured_over_model=8 * train_bytes / r.bits_model if r.bits_model else None,
                note="bytes_detail['sum'] includes the test-set evaluation sums; measured_over_model compares "
                     "all secure-sum and gradient bytes with the model's training bits")


def _fmt(v, spec=".4f"):
    if v is None:
        return "inf"
    if isinstance(v, str):
        return v
    return format(v, spec)


def print_report(out) -> None:
    c = out["config"]
    print(f"PBM-VFL on phishing ({c['backend']}), {c['epochs']} epochs, {c['repeats']} run(s), "
          f"{c['optimizer']} lr {c['lr']}, hidden {c['hidden']}, B 100, P 16; target train AUPRC {TARGET}")
    from sqm.apps.pbm_vfl.config import METHOD_LABELS
    from sqm.cli.tables import relation_line, render_table

    rows = [{"method": METHOD_LABELS[r["method"]], "M": r["parties"], "b": r["b"] or "-",
             "beta": r["beta"] or "-", "epsilon": _fmt(r["epsilon"], ".4g"), "sigma": _fmt(r["sigma"], ".3f"),
             "test AUPRC": _fmt(r["test_auprc"]), "test acc": _fmt(r["test_accuracy"]),
             "best AUPRC": _fmt(r["best_test_auprc"]),
             "ep->0.9": _fmt(r["epochs_to_target"], "g") if r["epochs_to_target"] else f">{c['epochs']}",
             "paper": _fmt(r["paper_epochs"], "g"), "Gbit->0.9": _fmt(r["gbits_to_target"], ".3f"),
             "ms/iter": f"{r['ms_per_iteration']:.1f}"} for r in out["runs"]]
    print(render_table(rows, list(rows[0])))
    print("  " + relation_line([(METHOD_LABELS[r["method"]], "none" if r["method"] == "npq" else "embedding")
                                for r in out["runs"]]))
    ch = out["checks"]
    for x in ch["near_npq_b64_beta025"]:
        print(f"target b=64 beta=0.25 within 2 points of NPQ ({x['parties']} parties): PBM {x['pbm']:.4f} vs NPQ "
              f"{x['npq']:.4f} (gap {x['gap_points']:.2f} points) -> {'met' if x['ok'] else 'NOT met'}")
    for base, what in (("ldp", "the paper's LDP (matched variance, smaller epsilon)"),
                       ("ldp_eq", "LDP at PBM's epsilon")):
        xs = ch[f"pbm_above_{base}"]
        bad = [x for x in xs if not x["ok"]]
        print(f"PBM-VFL above {what} (final test AUPRC): {len(xs) - len(bad)}/{len(xs)}"
              + ("" if not bad else f"; not for {[(x['parties'], x['b'], x['beta']) for x in bad]}"))
    ev = ch["epochs_vs_table3"]
    print(f"epochs to 0.9 within a factor 2 of Table 3 (5 parties): {sum(1 for x in ev if x['ok'])} yes, "
          f"{sum(1 for x in ev if x['ok'] is False)} no, {sum(1 for x in ev if x['ok'] is None)} undecided "
          f"(run shorter than twice the paper's epochs)")
    for m in out.get("mpyc", []):
        print(f"mpyc, {m['secure_sum']} sum ({m['parties']} clients + server, b=64, beta=0.25, {m['epochs']} "
              f"epoch(s), {m['iterations']} "
              f"iterations): {m['ms_per_iteration']:.1f} ms per iteration, {100 * m['secure_sum_share']:.1f}% in the "
              f"secure sum; bytes sent {m['bytes_sent']} (secure sums {m['bytes_detail']['sum']}, gradients "
              f"{m['bytes_detail']['grad']}); model {m['bits_model'] / 8:.4g} bytes -> measured/model "
              f"{m['measured_over_model']:.2f}")


def add_arguments(p) -> None:
    p.add_argument("--full", action="store_true",
                   help="the paper's grid: b 8,16,32,64; beta .1,.15,.2,.25; 5 and 10 parties; 100 epochs; 3 runs")
    p.add_argument("--parties", default=None, help="comma-separated client counts (default: 5,10)")
    p.add_argument("--b", default=None, help="comma-separated b values (default: 16,64; --full: 8,16,32,64)")
    p.add_argument("--beta", default=None, help="comma-separated beta values (default: 0.1,0.25; --full: all four)")
    p.add_argument("--epochs", type=int, default=None, help="epochs per run (default: 6; --full: 100)")
    p.add_argument("--repeats", type=int, default=None, help="runs averaged per setting (default: 1; --full: 3)")
    p.add_argument("--hidden", type=int, default=256, help="hidden width of the party MLPs (default: 256)")
    p.add_argument("--learning-rate", type=float, default=0.01, help="learning rate (default: 0.01, the paper's)")
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"], help="optimizer (default: sgd)")
    p.add_argument("--mpyc-epochs", type=int, default=1,
                   help="epochs of two real MPyC runs (5 clients, b=64, beta=0.25; BGW sum and Protocol 0 masked "
                        "sum) for time per iteration, secure-sum share and bytes; 0 skips (default: 1)")
    p.add_argument("--data", default=None, help="phishing CSV/ARFF or its folder (default: the data home's)")
    p.add_argument("--seed", type=int, default=0, help="seed (default: 0)")
    p.add_argument("--json", default=None, help="write the figures as JSON to FILE")
    p.add_argument("--plot", default=None, help="write test AUPRC by epoch (PNG) to FILE")


def _floats(s, default):
    return default if s is None else tuple(float(x) for x in s.split(",") if x.strip())


def _ints(s, default):
    return default if s is None else tuple(int(x) for x in s.split(",") if x.strip())


def cli(args) -> int:
    full = args.full
    out = run(parties=_ints(args.parties, (5, 10)), bs=_ints(args.b, (8, 16, 32, 64) if full else (16, 64)),
              betas=_floats(args.beta, (0.1, 0.15, 0.2, 0.25) if full else (0.1, 0.25)),
              epochs=args.epochs or (100 if full else 6), repeats=args.repeats or (3 if full else 1),
              hidden=args.hidden, lr=args.learning_rate, optimizer=args.optimizer, data=args.data, seed=args.seed,
              mpyc_epochs=args.mpyc_epochs)
    return finish(out, args, print_report, plot, indent=1)


def plot(out: dict, path: str) -> None:
    """Test AUPRC by epoch, one panel per party count."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sqm.apps.pbm_vfl.config import METHOD_LABELS

    parties = sorted({r["parties"] for r in out["runs"]})
    fig, axes = plt.subplots(1, len(parties), figsize=(6 * len(parties), 4), squeeze=False)
    for ax, M in zip(axes[0], parties, strict=False):
        for r in out["runs"]:
            if r["parties"] != M:
                continue
            lab = "NPQ" if r["method"] == "npq" else f"{METHOD_LABELS[r['method']]} b={r['b']} beta={r['beta']}"
            ax.plot(range(1, len(r["auprc_by_epoch"]) + 1), r["auprc_by_epoch"], label=lab,
                    linestyle={"ldp": "--", "ldp_eq": ":"}.get(r["method"], "-"))
        ax.set_title(f"phishing, {M} parties")
        ax.set_xlabel("epoch")
        ax.set_ylabel("test AUPRC")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
