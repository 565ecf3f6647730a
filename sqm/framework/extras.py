"""The optional parts of the sqm-vfl package (pyproject.toml's extras) and the one error a missing one raises.

A PCA, regression or budget user installs none of them: ``pip install sqm-vfl`` runs ``sqm pca``, ``sqm linreg``,
``sqm logreg`` (whose DPSGD baseline is then shown as not run), ``sqm hdp-vfl`` and ``sqm budget``.

- ``[vfl]``: torch, opacus, cloudpickle (``sqm pbm-vfl`` and the PBM-VFL torch library; the DPSGD baseline of
  ``sqm logreg``);
- ``[plot]``: matplotlib (``--plot``);
- ``[parquet]``: pyarrow (Parquet tables).
- ``[scale]``: Dask distributed (a party's shard workers on its own cluster).
- ``[sql]``: SQLAlchemy, DuckDB and its SQLAlchemy dialect, psycopg, the ADBC PostgreSQL driver, pyarrow (a
  party's table from a database).

Modules of an extra are imported where they are used, never at module level, so a command that does not need
them never imports them.
"""
from __future__ import annotations

import importlib
from sqm.errors import UsageError

EXTRAS = {"vfl": ("torch", "opacus", "cloudpickle"), "plot": ("matplotlib",), "parquet": ("pyarrow",),
          "scale": ("distributed",), "sql": ("sqlalchemy", "duckdb", "duckdb_engine", "psycopg", "pyarrow")}


class MissingExtra(ImportError):
    """A module of an extra is not installed; the message names the extra and how to install it."""


def hint(extra: str) -> str:
    """``needs the [vfl] extra: pip install 'sqm-vfl[vfl]'``."""
    return f"needs the [{extra}] extra: pip install 'sqm-vfl[{extra}]'"


def require(extra: str, what: str, modules: tuple[str, ...] | None = None) -> None:
    """Import the modules of ``extra`` (or the given subset of them); a missing one raises :class:`MissingExtra`
    ``"{what} needs the [extra] extra: pip install 'sqm-vfl[extra]' (no module named ...)"``."""
    if extra not in EXTRAS:
        raise UsageError(f"unknown extra {extra!r}; extras: {sorted(EXTRAS)}")
    for name in modules or EXTRAS[extra]:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is not None and e.name.split(".")[0] != name:  # installed, but broken: not ours to hide
                raise
            raise MissingExtra(f"{what} {hint(extra)} (no module named {name!r})", name=name) from None


def missing(extra: str, what: str, modules: tuple[str, ...] | None = None) -> str | None:
    """None when :func:`require` succeeds, else its message (for a baseline shown as not run)."""
    try:
        require(extra, what, modules)
    except MissingExtra as e:
        return str(e)
    return None
