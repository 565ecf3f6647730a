"""The MPyC versions this runtime was written and tested against: it replaces MPyC's connect phase and patches its
message exchanger (:mod:`sqm.mpc.net.session`, :mod:`sqm.mpc.net.liveness`), so a party refuses to start on another."""
from __future__ import annotations

# MPyC versions whose internals sqm.mpc.net.session and sqm.mpc.net.liveness were written and tested against
MPYC_TESTED = ("0.11",)


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
