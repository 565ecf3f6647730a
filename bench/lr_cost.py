"""SQM logistic-regression cost per iteration through real MPyC party processes (milliseconds and bytes).

    python -m bench lr-cost --features 100 --batch 64 --parties 3 --rounds 100 --json lr_cost.json

One long-running set of party processes trains for ``--rounds`` iterations; each iteration is one secure
evaluation of the d-dimensional gradient sum over a padded batch of ``--batch`` rows (the public batch cap
b_max; the sampling rate q is the largest whose batches exceed it with total probability <= 2^-40) with the
server's coefficients secret-shared (the weights never leave the server).  Target: under 30 ms per iteration
on a 2-core machine (d = 100, batch 64, 3 clients).  ``rounds_per_iteration`` counts the message exchanges
of one iteration (each party sends at most one message to each other party per exchange), recorded by a
bench-only wrapper around each party's ``send_recv``.

For reference, the earlier protocol (commit 45cf688, the server broadcast its rounded coefficients, hence w,
to every client in the clear) took 4 exchanges and 298,660 bytes per iteration at the default shape (7.3 ms
per iteration on an idle 2-core machine); see docs/benchmarks.md for the figures of the current protocol.

numpy, scikit-learn and the mechanism are imported inside the functions that run the benchmark: ``python -m bench
--help`` imports this module to register ``python -m bench lr-cost`` (:mod:`bench.command`), and each party process
unpickling its :class:`CountExchanges` imports it too.
"""
from __future__ import annotations

import argparse
import dataclasses

from sqm.mpc.net.party import PartyProgram  # the standard library only
from bench.common import finish


def rate_for_cap(n_records: int, cap: int, epochs: int) -> float:
    """The largest q (to 0.1%) whose batch cap over epochs * round(1/q) rounds is <= ``cap``."""
    from sqm.apps.logreg.estimator import steps
    from sqm.apps.logreg.party import batch_cap

    lo, hi = 1e-6, 1.0
    while hi / lo > 1.001:
        mid = (lo * hi) ** 0.5
        if batch_cap(n_records, mid, steps(mid, epochs))[0] <= cap:
            lo = mid
        else:
            hi = mid
    return lo


class CountExchanges(PartyProgram):
    """Bench-only wrapper: runs a party program and adds to its result the step name of every exchange it
    made (``ctx.send_recv`` calls, including those inside the context's sharing primitives)."""

    def __init__(self, inner: PartyProgram):
        self.inner = inner

    async def run(self, ctx):
        steps, send_recv = [], ctx.send_recv

        async def counted(outgoing, senders, expect, step="message"):
            steps.append(step)
            return await send_recv(outgoing, senders, expect, step)

        ctx.send_recv = counted
        result = await self.inner.run(ctx)
        return {**result, "exchanges": list(steps)}  # a copy: the closing barrier comes after


def per_iteration(steps: list[str], rounds: int) -> list[str]:
    """The exchanges of one training iteration: those after the plan agreement, divided evenly by round."""
    loop = steps[steps.index("agree on logistic-regression plan") + 1:]
    if len(loop) % rounds:
        raise RuntimeError(f"{len(loop)} exchanges over {rounds} iterations: not the same each iteration")
    return loop[:len(loop) // rounds]


def setup(features: int, batch: int, parties: int, records: int, rounds: int, gamma: float = 8192.0,
          epsilon: float = 1.0, seed: int = 0):
    """A synthetic SQM-LR job: unit-norm normal rows, label x_0 > 0, the sampling rate whose padded batch is
    ``batch`` (:func:`rate_for_cap`), the plan cut to ``rounds`` iterations.  (blocks, plan, party seeds, q)."""
    import numpy as np

    from sqm.apps.logreg.estimator import SQMLogisticRegression
    from sqm.mechanism.rng import spawn_seeds
    from sqm.mechanism.vertical import VerticalData

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(records, features))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = (X[:, 0] > 0).astype(int)
    q = rate_for_cap(records, batch, 5)
    m = SQMLogisticRegression(epsilon, 1e-5, gamma, q, 5, 1.0, "mpyc", parties, seed=seed, solver="sgd")
    blocks, counts, label = m._data(VerticalData.split(X, parties), y)
    plan, _ = m.plan(records, counts, label)
    plan = dataclasses.replace(plan, rounds=int(rounds))  # time a prefix of the run
    return blocks, plan, spawn_seeds(seed, parties + 1), q


def run(features=100, batch=64, parties=3, rounds=100, records=20000, gamma=8192.0, epsilon=1.0, seed=0,
        plain=True) -> dict:
    import numpy as np

    from sqm.apps.logreg import party

    blocks, plan, seeds, q = setup(features, batch, parties, records, rounds, gamma, epsilon, seed)
    res = party.train(blocks, plan, seeds, backend="mpyc", wrap=CountExchanges)
    one = per_iteration(res.party_results[0]["exchanges"], int(rounds))
    out = dict(features=features, batch_cap=plan.b_max, expected_batch=q * records, sampling_rate=q,
               parties=parties + 1, clients=parties, rounds=rounds, gamma=gamma, mu=plan.mu,
               ms_per_iteration=1e3 * res.seconds / rounds,
               bytes_per_iteration=sum(res.bytes_sent) / rounds,
               bytes_per_iteration_per_party=[b / rounds for b in res.bytes_sent],
               rounds_per_iteration=len(one), exchanges_per_iteration=one,
               target_ms=30.0)
    out["meets_target"] = out["ms_per_iteration"] < 30.0
    if plain:  # the same party programs in one process (the simulation)
        sim = party.train(blocks, plan, seeds, backend="in-process")
        out["plain_ms_per_iteration"] = 1e3 * sim.seconds / rounds
        out["plain_identical"] = bool(np.array_equal(sim.weights, res.weights))
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--features", type=int, default=100, help="features d (default 100)")
    ap.add_argument("--batch", type=int, default=64, help="public padded batch size b_max (default 64)")
    ap.add_argument("--parties", type=int, default=3, help="clients; MPyC parties = clients + 1 (default 3)")
    ap.add_argument("--rounds", type=int, default=100, help="iterations timed (default 100)")
    ap.add_argument("--records", type=int, default=20000, help="synthetic records (default 20000)")
    ap.add_argument("--gamma", type=float, default=8192.0, help="gamma (default 8192)")
    ap.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    ap.add_argument("--json", help="write the figures to this JSON file")


def cli(args) -> int:
    rep = run(args.features, args.batch, args.parties, args.rounds, args.records, args.gamma, seed=args.seed)
    print(f"SQM-LR per iteration, d={rep['features']}, padded batch {rep['batch_cap']} (expected "
          f"{rep['expected_batch']:.1f}, q={rep['sampling_rate']:.5f}), {rep['parties']} MPyC processes "
          f"({rep['clients']} clients), gamma {rep['gamma']:g}, {rep['rounds']} iterations")
    print(f"  mpyc : {rep['ms_per_iteration']:.1f} ms/iteration (target < 30: "
          f"{'met' if rep['meets_target'] else 'NOT met'}), {rep['bytes_per_iteration']:,.0f} bytes/iteration "
          f"(per party {[round(b) for b in rep['bytes_per_iteration_per_party']]}), "
          f"{rep['rounds_per_iteration']} exchanges/iteration ({', '.join(rep['exchanges_per_iteration'])})")
    if "plain_ms_per_iteration" in rep:
        print(f"  in-process simulation: {rep['plain_ms_per_iteration']:.2f} ms/iteration; identical weights: "
              f"{rep['plain_identical']}")
    return finish(rep, args)
