"""mpc: the secret-sharing runtime (Shamir/BGW on MPyC party processes); it knows nothing of differential privacy.

Applications use its party-program API (:mod:`sqm.mpc.net.party`) and its runners
(:func:`sqm.mpc.net.launch.run_parties`, :func:`sqm.mpc.protocols.inprocess.run_in_process`).  The runtime replaces
MPyC's connect phase and patches its message exchanger (:mod:`sqm.mpc.net.session`, :mod:`sqm.mpc.net.liveness`); those
internals are those of the MPyC versions in :data:`sqm.mpc.net.mpyc_version.MPYC_TESTED`, and a party refuses to start
on another.

Three rooms, bottom up: :mod:`sqm.mpc.shares`, :mod:`sqm.mpc.net`, :mod:`sqm.mpc.protocols`.
"""
from sqm.errors import UsageError
BACKENDS = ("mpyc", "plain")  # real MPyC party processes; the same party programs in one process (SIMULATION)
SECURE_SUMS = ("bgw", "masked")  # the secure sums of vectors: Shamir (BGW) shares; pairwise masks
def runner(backend: str):
    """What runs a job's party programs for ``backend``: "mpyc" -> :func:`sqm.mpc.net.launch.run_parties` (real
    processes), "plain" -> :func:`sqm.mpc.protocols.inprocess.run_in_process` (SIMULATION); both return the parties'
    records and raise :class:`sqm.mpc.net.launch.MPCError` alike.  Any other name is a ValueError naming the choices."""
    if backend == "mpyc":
        from sqm.mpc.net.launch import run_parties

        return run_parties
    if backend == "plain":
        from sqm.mpc.protocols.inprocess import run_in_process

        return run_in_process
    raise UsageError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
