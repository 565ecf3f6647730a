"""SQM: the Skellam Quantization Mechanism for polynomial statistics on vertically partitioned data.

The mechanism (quantization, Skellam noise, polynomials, coefficient compensation, sensitivity bounds,
privacy accounting) lives here; the secure computation it runs on lives in :mod:`mpc`.
"""


def __getattr__(name: str):
    """``sqm.__version__`` is looked up on first use: :mod:`importlib.metadata` costs tens of milliseconds,
    which every process importing :mod:`sqm` (each party, ``sqm --help``) would pay for nothing."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("sqm-vfl")  # one version: pyproject.toml's
    except PackageNotFoundError:  # pragma: no cover - running from a source tree that was never installed
        v = "0+unknown"
    globals()["__version__"] = v
    return v
