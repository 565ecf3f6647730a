"""SQM: the Skellam Quantization Mechanism for polynomial statistics on vertically partitioned data.

The mechanism (quantization, Skellam noise, polynomials, coefficient compensation, sensitivity bounds,
privacy accounting) lives here; the secure computation it runs on lives in :mod:`mpc`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sqm-vfl")  # one version: pyproject.toml's
except PackageNotFoundError:  # pragma: no cover - running from a source tree that was never installed
    __version__ = "0+unknown"
