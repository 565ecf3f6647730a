"""mpc: the secret-sharing runtime (Shamir/BGW on MPyC party processes); it knows nothing of differential privacy.

Applications use its party-program API (:mod:`sqm.runtime.party`) and its runners (:func:`sqm.runtime.launch.run_parties`,
:func:`sqm.runtime.inprocess.run_in_process`).  The runtime replaces MPyC's connect phase and patches its message
exchanger (:mod:`sqm.runtime.session`, :mod:`sqm.runtime.liveness`); those internals are those of the MPyC versions in
:data:`MPYC_TESTED`, and a party refuses to start on another (:func:`check_mpyc_version`).
"""
from .errors import UsageError
BACKENDS = ("mpyc", "plain")  # real MPyC party processes; the same party programs in one process (SIMULATION)
SECURE_SUMS = ("bgw", "masked")  # the secure sums of sqm.runtime.sum_exchange (Shamir; pairwise masks)
MPYC_TESTED = ("0.11",)  # MPyC versions whose internals sqm.runtime.session and sqm.runtime.liveness were written and tested against


def check_mpyc_version(installed: str | None = None) -> str:
    """The installed MPyC version, or RuntimeError naming it when the runtime was not tested against it (the
    patched internals may differ: failing loudly beats a silent protocol error)."""
    if installed is None:
        from importlib.metadata import version

        installed = version("mpyc")
    if not any(installed == v or installed.startswith(v + ".") for v in MPYC_TESTED):
        raise RuntimeError(f"MPyC {installed} is installed, but this runtime patches MPyC internals and was tested "
                           f"only with MPyC {', '.join(MPYC_TESTED)}; install one of those "
                           f"(pip install 'mpyc=={MPYC_TESTED[-1]}')")
    return installed


def runner(backend: str):
    """What runs a job's party programs for ``backend``: "mpyc" -> :func:`sqm.runtime.launch.run_parties` (real
    processes), "plain" -> :func:`sqm.runtime.inprocess.run_in_process` (SIMULATION); both return the parties' records
    and raise :class:`sqm.runtime.launch.MPCError` alike.  Any other name is a ValueError naming the choices."""
    if backend == "mpyc":
        from .launch import run_parties

        return run_parties
    if backend == "plain":
        from .inprocess import run_in_process

        return run_in_process
    raise UsageError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
