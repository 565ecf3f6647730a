"""The ``sqm hdp-vfl`` command: HDP-VFL on the paper's data sets and column splits, beside the reference
methods (single party, centralized, non-private VFL) and SQM-LR at the same (epsilon, delta).

numpy, scikit-learn and the runtime are imported inside the functions that use them: ``sqm --help`` imports this
module to register the command (:mod:`sqm.cli.command`)."""
from __future__ import annotations

from sqm.cli import options
from sqm.apps.hdp_vfl.experiment import DATASETS, load_split, reference_accuracies, sqm_accuracy
from sqm.apps.hdp_vfl.params import HDPParams
from sqm.apps.hdp_vfl.privacy import GUARANTEE  # the guarantee's text (math only)

SEEDED_WARNING = ("warning: --seed given: this run is an EXPERIMENT (secure_mode false): whoever knows the seed can "
                  "regenerate both parties' noise; omit --seed for a private run")


def run(args) -> int:
    from sqm.cli.tables import relation_line, render_table
    from sqm.mechanism.report import ZERO_OUT, relation_phrase
    from sqm.apps.hdp_vfl.estimator import HDPLogisticRegression

    secure_mode = args.seed is None
    if not secure_mode:
        print(SEEDED_WARNING)
    Xtr, Xte, ytr, yte, a = load_split(args.dataset, args.data, args.test_size, args.split_seed)
    d = Xtr.shape[1]
    a = args.active_features or a
    model = HDPLogisticRegression(epsilon=args.epsilon, delta=args.delta, epochs=args.epochs,
                                  batch_size=args.batch_size, k=args.weight_bound, l2=args.l2,
                                  learning_rate=args.learning_rate,
                                  backend=args.backend, seed=args.seed, active_features=a, intercept=args.intercept,
                                  progress=not args.quiet, timeout=args.timeout)
    model.fit(Xtr, ytr)
    hdp = {"accuracy": model.score(Xte, yte), "backend": args.backend, "seconds": model.seconds_,
           "bytes_sent": model.bytes_sent_, "privacy": [r.as_dict() for r in model.privacy_]}
    refs = reference_accuracies(Xtr, Xte, ytr, yte, a, args.l2, args.epochs, args.batch_size, args.weight_bound,
                                args.learning_rate, args.seed, args.intercept)
    if args.no_sqm:
        sqm_res = {"accuracy": None, "message": "skipped (--no-sqm)"}
    else:
        sqm_res = sqm_accuracy(Xtr, Xte, ytr, yte, a, args.epsilon, args.delta, args.sqm_gamma,
                               args.sqm_sampling_rate, args.sqm_epochs, args.sqm_learning_rate, args.backend,
                               args.seed)
    print(f"{args.dataset}: {Xtr.shape[0]} training / {Xte.shape[0]} test records, {a} active + {d - a} passive "
          f"features; epsilon {args.epsilon:g}, delta {args.delta:g} ({relation_phrase(ZERO_OUT, 'the other party')})")
    cfg = model.config_
    print(f"HDP-VFL ({args.backend}): e={cfg.epochs} b={cfg.batch_size} T={cfg.iterations} k={cfg.k:g} "
          f"lambda={cfg.l2:g} lr={cfg.learning_rate:g} u={cfg.intercept:g}; noise: the tightest Gaussian "
          f"(sqm.mechanism.calibration) for each party's composed sequence")
    print(render_table([r.as_dict() for r in model.privacy_],
                       [("epsilon_server", "epsilon"), "delta", ("l2_sensitivity", "sensitivity"), "sigma"]))
    print(f"  {relation_line(model.privacy_)}; each party's epsilon holds against the other party")
    rows = [{"method": "HDP-VFL", "test accuracy": hdp["accuracy"]},
            {"method": "SQM-LR (same eps, delta)", "test accuracy": sqm_res.get("accuracy"),
             "epsilon_server": sqm_res.get("epsilon_server"), "epsilon_client": sqm_res.get("epsilon_client")},
            {"method": "single party (active only)", "test accuracy": refs["single_party"]},
            {"method": "centralized non-private", "test accuracy": refs["centralized"]},
            {"method": "non-private VFL", "test accuracy": refs["nonprivate_vfl"]},
            {"method": "majority class", "test accuracy": refs["majority_class"]}]
    print(render_table(rows, [("test accuracy", "test accuracy", ".4f"), ("epsilon_server", "server epsilon"),
                              ("epsilon_client", "client epsilon")]))
    print(f"  {relation_line([('SQM-LR', ZERO_OUT)])}")
    if sqm_res.get("accuracy") is None:
        print(f"SQM-LR: {sqm_res.get('message', '')}")
    print(f"Note: {GUARANTEE}  Each is under {relation_phrase(ZERO_OUT)}.")
    if args.json:
        from sqm.cli import output

        details = {"train_records": int(Xtr.shape[0]), "test_records": int(Xte.shape[0]), "active_features": a,
                   "passive_features": d - a, "guarantee_note": GUARANTEE, "sqm_lr": sqm_res, "references": refs}
        output.write(args.json, output.document(
            output.command_name(args), "local", parameters=output.parameters(args, active_features=a),
            results=rows, privacy=model.privacy_, secure_mode=secure_mode, simulation=args.backend == "plain",
            timings={"HDP-VFL": hdp["seconds"], "SQM-LR (same eps, delta)": sqm_res.get("seconds")},
            bytes=output.byte_counts(None if args.backend == "plain" else hdp["bytes_sent"]), dataset=args.dataset,
            details=details))
    return 0


def register(sub) -> None:
    p = sub.add_parser("hdp-vfl", help="HDP-VFL logistic regression (Gaussian-noised intermediate results) "
                                       "beside the reference methods and SQM-LR",
                       parents=[options.privacy(1.0, 0.01, "each party's epsilon (delta 0.01 as in the paper)"),
                                options.runtime(), options.output()],
                       description="Train l2-regularized logistic regression with HDP-VFL (Wang et al., Algorithm "
                                   "1): an active party (labels + its features, runtime party 0) and a passive "
                                   "party (its features, party 1) exchange Gaussian-perturbed intermediate "
                                   "results.  Prints test accuracy beside single-party, centralized and "
                                   "non-private VFL references and SQM-LR at the same (epsilon, delta).  " + GUARANTEE)
    p.add_argument("--dataset", default="breast_cancer", choices=DATASETS, help="dataset (default: breast_cancer)")
    p.add_argument("--data", default=None,
                   help="UCI_Credit_Card.csv for credit_default, the folder of adult.data/adult.test for adult "
                        "(default: the data home's, see `sqm data`)")
    HDPParams.add_options(p, only=("epochs", "batch_size", "k", "l2", "learning_rate"))
    p.add_argument("--active-features", type=int, default=None,
                   help="number of leading columns held by the active party (default: the paper's split: "
                        "breast cancer 10 of 30, credit X1..X13, adult its first 6 attributes)")
    HDPParams.add_options(p, only=("intercept",))
    p.add_argument("--split-seed", type=int, default=0, help="seed of the train/test split (default: 0)")
    p.add_argument("--test-size", type=float, default=0.2, help="test fraction (default: 0.2)")
    p.add_argument("--no-sqm", action="store_true", help="skip the SQM-LR comparison")
    p.add_argument("--sqm-gamma", type=float, default=8192.0, help="SQM-LR quantization scale (default: 8192)")
    p.add_argument("--sqm-sampling-rate", type=float, default=0.1,
                   help="SQM-LR Poisson sampling rate q (default: 0.1)")
    p.add_argument("--sqm-epochs", type=int, default=None,
                   help="SQM-LR epochs (default: the SQM paper's schedule for this epsilon)")
    p.add_argument("--sqm-learning-rate", type=float, default=1.0, help="SQM-LR learning rate (default: 1)")
    p.set_defaults(func=run)
