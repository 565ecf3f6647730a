"""SQM: the Skellam Quantization Mechanism for polynomial statistics on vertically partitioned data.

The mechanism (quantization, Skellam noise, polynomials, coefficient compensation, sensitivity bounds,
privacy accounting) lives here; the secure computation it runs on lives in :mod:`mpc`.
"""

__version__ = "0.1.0"
