"""``sqm demo``: the noisy covariance of a bundled dataset through SQM, with its error."""
from __future__ import annotations

from sqm.cli import options
from sqm.cli.options import runtime_options
from sqm.mechanism.params import GAMMA, add_option
from sqm.errors import UsageError


def run(args) -> int:
    import numpy as np

    from sqm.data.datasets import BUNDLED, load_dataset, scale_rows
    from sqm.mechanism.polynomial import covariance
    from sqm.mechanism.release import SQM
    from sqm.cli.tables import relation_line, render_table
    from sqm.mechanism.vertical import VerticalData

    if args.dataset not in BUNDLED:
        raise UsageError(f"sqm demo uses a bundled dataset: choose one of {', '.join(BUNDLED)}")
    X = scale_rows(load_dataset(args.dataset).X, 1.0)
    data = VerticalData.split(X, args.parties)
    mech = SQM(covariance(X.shape[1]), args.gamma, epsilon=args.epsilon, delta=args.delta,
               backend=args.backend, seed=args.seed, backend_options=runtime_options(args))
    res = mech.run(data)
    exact = X.T @ X
    noisy = res.estimate.reshape(exact.shape)
    rel = np.linalg.norm(noisy - exact) / np.linalg.norm(exact)
    print(f"SQM covariance of {args.dataset} ({X.shape[0]} x {X.shape[1]}), {args.parties} clients, "
          f"backend {res.backend}")
    print(render_table([{**res.report.as_dict(), "relative error": rel, "seconds": res.seconds,
                         "bytes": sum(res.bytes_sent)}],
                       ["gamma", "mu", "l2_sensitivity", "epsilon_server", "epsilon_client", "delta",
                        ("relative error", "rel. Frobenius error vs exact X^T X", ".3e"), "seconds", "bytes"]))
    print(f"  {relation_line([res.report])}")
    return 0


def register(sub) -> None:
    d = sub.add_parser("demo", help="noisy covariance of a bundled dataset through SQM, with its error",
                       parents=[options.privacy(), options.runtime()],
                       description="Split a bundled dataset's columns among clients, compute the noisy "
                                   "covariance X^T X through SQM and print its error against the exact one.")
    d.add_argument("--dataset", default="digits", help="scikit-learn bundled dataset (default: digits)")
    d.add_argument("--parties", type=int, default=3, help="number of clients holding column blocks (default: 3)")
    add_option(d, "gamma", GAMMA)
    d.set_defaults(func=run)
