"""``sqm demo``: the noisy covariance of a bundled dataset through SQM, with its error."""
from __future__ import annotations


def run(args) -> int:
    import numpy as np

    from apps.datasets import load_bundled, scale_rows
    from sqm.mechanism import SQM
    from sqm.polynomial import covariance
    from sqm.vertical import VerticalData

    X, _ = load_bundled(args.dataset)
    X = scale_rows(X, 1.0)
    data = VerticalData.split(X, args.parties)
    mech = SQM(covariance(X.shape[1]), args.gamma, epsilon=args.epsilon, delta=args.delta,
               backend=args.backend, seed=args.seed)
    res = mech.run(data)
    exact = X.T @ X
    noisy = res.estimate.reshape(exact.shape)
    rel = np.linalg.norm(noisy - exact) / np.linalg.norm(exact)
    r = res.report
    print(f"SQM covariance of {args.dataset} ({X.shape[0]} x {X.shape[1]}), {args.parties} clients, "
          f"backend {res.backend}")
    print(f"  gamma {args.gamma:g}  mu {r.mu:.4g}  L2 sensitivity {r.l2_sensitivity:.4g}")
    print(f"  server-observed epsilon {r.epsilon_server:.4f}  client-observed epsilon "
          f"{r.epsilon_client if r.epsilon_client is None else round(r.epsilon_client, 4)}  delta {r.delta:g}")
    print(f"  relative Frobenius error vs exact X^T X: {rel:.3e}")
    print(f"  time {res.seconds:.2f} s, bytes sent {sum(res.bytes_sent)}")
    return 0


def register(sub) -> None:
    d = sub.add_parser("demo", help="noisy covariance of a bundled dataset through SQM, with its error",
                       description="Split a bundled dataset's columns among clients, compute the noisy "
                                   "covariance X^T X through SQM and print its error against the exact one.")
    d.add_argument("--dataset", default="digits", help="scikit-learn bundled dataset (default: digits)")
    d.add_argument("--parties", type=int, default=3, help="number of clients holding column blocks (default: 3)")
    d.add_argument("--gamma", type=float, default=4096.0, help="quantization scale gamma >= 1 (default: 4096)")
    d.add_argument("--epsilon", type=float, default=1.0, help="server-observed epsilon target (default: 1)")
    d.add_argument("--delta", type=float, default=1e-5, help="delta (default: 1e-5)")
    d.add_argument("--backend", default="mpyc", choices=["plain", "mpyc"],
                   help="'mpyc' (default): real MPyC party processes over loopback; "
                        "'plain': exact one-process simulation")
    d.add_argument("--seed", type=int, default=None, help="seed for reproducible runs (default: OS entropy)")
    d.set_defaults(func=run)
